"""`build` on the microsandbox runtime loads the image, so the first `shell` boots without a load."""

from __future__ import annotations

import re

import pytest

from opencode_sandbox.images.updater import baked_version
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e, *MICROVMS_ONLY]


def test_build_loads_the_image_and_the_first_shell_does_not_load_it_again(msb_project: Project) -> None:
    version = baked_version(msb_project.state_dir.parent)
    assert version, "no baked version recorded"
    built = msb_project.cli("build", "--opencode-version", version)
    assert built.returncode == 0, built.stderr
    found = re.search(r"(opencode-sandbox/runner-\S+) built, loaded into microsandbox \(opencode ", built.stdout)
    assert found is not None, built.stdout
    assert MicrosandboxRuntime().loaded_image(found.group(1)) is not None

    first = msb_project.cli("shell", "--", "true")
    assert first.returncode == 0, first.stderr
    assert "Loading" not in first.stderr  # every load of a run is announced (`load_into_runtime`)
