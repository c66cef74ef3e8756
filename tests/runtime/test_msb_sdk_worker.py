"""The SDK worker: the parent side loads neither the SDK nor `asyncio`; the child runs the operation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opencode_sandbox.errors import SandboxError
from opencode_sandbox.runtime.microsandbox.sdk_worker import call_sdk

PARENT_SIDE = ["opencode_sandbox.runtime.microsandbox.sdk_worker", "opencode_sandbox.runtime.microsandbox.backend"]


def test_the_parent_side_loads_neither_asyncio_nor_the_sdk() -> None:
    probe = (f"import sys\nfor name in {PARENT_SIDE!r}:\n    __import__(name)\n"
             "print(sorted(name for name in ('asyncio', 'microsandbox') if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"


@pytest.mark.msb
def test_the_child_runs_the_operation(unique: str) -> None:
    answer = call_sdk("create-volume", {"name": unique, "labels": {"org.opencode-sandbox.test": "true"}})
    assert answer["name"] == unique
    assert Path(answer["path"]).is_dir()
    assert Path(answer["path"]).is_relative_to(os.environ["MSB_HOME"])  # the test's own, removed after it


def test_a_failing_operation_comes_back_as_an_error() -> None:
    with pytest.raises(SandboxError, match="unknown-operation"):
        call_sdk("unknown-operation", {})
