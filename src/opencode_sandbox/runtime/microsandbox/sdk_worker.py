"""The few operations only the microsandbox SDK offers, run in a short-lived child process.

The SDK fixes its runtime home (`MSB_HOME`) the first time it is used in a process, so a
long-lived caller could end up writing into a stale home; a child per call always sees the
current environment, and the parent never pays for importing the SDK or `asyncio`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from opencode_sandbox.errors import RuntimeUnavailable, SandboxError


def call_sdk(operation: str, payload: Mapping[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    """Run one operation in a child interpreter; its failure comes back as `SandboxError`."""
    try:
        completed = subprocess.run(
            [sys.executable, "-m", __name__, operation],
            input=json.dumps(dict(payload)).encode(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise RuntimeUnavailable(
            f"microsandbox did not answer within {timeout_s:.0f} s",
            hint="run `msb doctor` to check the runtime",
        ) from error
    try:
        answer: dict[str, Any] = json.loads(completed.stdout)
    except json.JSONDecodeError as error:
        detail = completed.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeUnavailable(
            f"microsandbox failed: {detail[-1] if detail else 'no answer'}",
            hint="check that the microsandbox package is installed",
        ) from error
    if "error" in answer:
        raise SandboxError(str(answer["error"]), hint=answer.get("hint"))
    return answer


async def _create_volume(payload: Mapping[str, Any]) -> dict[str, Any]:
    from microsandbox import Volume

    volume = await Volume.create(str(payload["name"]), labels=dict(payload.get("labels") or {}))
    return {"name": volume.name, "path": volume.path}


_OPERATIONS = {"create-volume": _create_volume}


def main(argv: list[str]) -> int:
    """The child's side: one operation, its payload on stdin, its answer on stdout."""
    import asyncio

    payload = json.loads(sys.stdin.read() or "{}")
    try:
        answer = asyncio.run(_OPERATIONS[argv[0]](payload))
    except Exception as error:  # every SDK failure goes back to the parent as text
        answer = {"error": str(error) or type(error).__name__}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
