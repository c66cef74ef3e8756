"""Fixtures shared by the guard's tests: an application on the fake docker runtime over the
module's own `checkout`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.runtime.types import RuntimeKind
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app


@pytest.fixture
def app(checkout: Path) -> Iterator[App]:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    yield make_app(runtime, checkout)
    runtime.close()
