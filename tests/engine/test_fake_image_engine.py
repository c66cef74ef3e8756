"""The fake image engine is held to the same contract as the Docker adapter."""

from __future__ import annotations

import uuid

import pytest

from tests.engine.contract import BASE, ImageEngineContract
from tests.fakes.image_engine import FakeImageEngine


@pytest.fixture
def engine() -> FakeImageEngine:
    fake = FakeImageEngine()
    fake.add_image(BASE, files={"/etc/debian_version": b"13\n"})
    return fake


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:12]


class TestFakeImageEngine(ImageEngineContract):
    pass


def test_an_engine_that_is_down_is_runtime_unavailable(engine: FakeImageEngine) -> None:
    from opencode_sandbox.errors import RuntimeUnavailable

    engine.engine_down = True
    with pytest.raises(RuntimeUnavailable):
        engine.inspect_image(BASE)


def test_doctor_reports_an_engine_that_is_down_with_its_fix(engine: FakeImageEngine) -> None:
    from opencode_sandbox.services.doctor import check_docker

    assert check_docker(engine=engine).ok
    engine.engine_down = True
    check = check_docker(engine=engine)
    assert not check.ok and check.detail == "the Docker engine is not answering" and check.fix
