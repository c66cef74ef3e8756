"""The session's msb image store seeds test homes that msb reads as its own, each independent."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from tests.fixtures.images import DEBIAN_BASE, docker_usable
from tests.fixtures.msb_store import MsbImageStore

pytestmark = [pytest.mark.msb, pytest.mark.docker]


def msb_in(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(locate_msb()), *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "MSB_HOME": str(home)})


def test_seeded_homes_hold_the_loaded_image_and_removing_it_in_one_leaves_the_others(
    msb_image_store: MsbImageStore, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    if reason := docker_usable():
        pytest.skip(reason)
    reference = f"opencode-sandbox/runner-{unique}:seeded"
    assert subprocess.run(["docker", "tag", DEBIAN_BASE, reference], check=False).returncode == 0
    first, second = (Path(tempfile.mkdtemp(prefix="msb-")) for _ in range(2))
    try:
        msb_image_store.load(reference)
        for home in (first, second):
            msb_image_store.seed(home)
        monkeypatch.setenv("MSB_HOME", str(first))
        assert MicrosandboxRuntime().loaded_image(reference) is not None
        assert str(msb_image_store.root) not in "".join(p.read_text() for p in first.glob("cache/vmdk/*.vmdk"))

        MicrosandboxRuntime().remove_image(reference)
        assert MicrosandboxRuntime().loaded_image(reference) is None
        monkeypatch.setenv("MSB_HOME", str(second))
        assert MicrosandboxRuntime().loaded_image(reference) is not None
        assert reference in msb_in(msb_image_store.root, "image", "list").stdout
        assert not msb_image_store.changed_shared_files()
    finally:
        subprocess.run(["docker", "image", "rm", reference], capture_output=True, check=False)
        for home in (first, second):
            shutil.rmtree(home, ignore_errors=True)
