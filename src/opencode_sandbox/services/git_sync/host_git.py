"""The one way the tool runs git on the host, over a repository whose work tree the VM writes.

Git reads configuration from more places than the repository's own `.git`: a gitlink's folder
(whose repository's `core.fsmonitor` runs when git looks whether that submodule changed), hooks
from `core.hooksPath` (often a folder of the checkout, such as `.husky`, and `update-ref` runs the
`reference-transaction` hook), and the user's own fsmonitor. Every git the tool runs turns those
off, so what the VM wrote is only ever read as data."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from opencode_sandbox.core.git_settings import NOTHING_RUNS

SYNC_TIMEOUT_S = 120.0
_QUIET_GIT = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
class GitSyncError(Exception):
    pass


class TooMuch(GitSyncError):
    """Git's answer passed the bound the caller set: the VM made more than the host reads."""


def environment() -> dict[str, str]:
    """The user's environment without the variables that would point git elsewhere."""
    return {**{key: value for key, value in os.environ.items() if not key.startswith("GIT_")}, **_QUIET_GIT}


def argv(*args: str) -> list[str]:
    return ["git", *NOTHING_RUNS, *args]


def run(root: Path, *args: str, stdin: bytes | None = None, check: bool = True, index_file: Path | None = None,
        ) -> subprocess.CompletedProcess[bytes]:
    """`git ARGS` in `root`, hardened as `NOTHING_RUNS` says; a failure raises `GitSyncError` when `check`.
    `index_file`: a private index in place of the checkout's own."""
    env = environment() if index_file is None else {**environment(), "GIT_INDEX_FILE": str(index_file)}
    try:
        done = subprocess.run(argv(*args), cwd=root, input=stdin, capture_output=True, env=env,
                              check=False, timeout=SYNC_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise GitSyncError(f"git {args[0]}: {error}") from None
    if check and done.returncode != 0:
        raise GitSyncError(f"git {args[0]}: {done.stderr.decode(errors='replace').strip()}")
    return done


def bounded(root: Path, *args: str, stdin: bytes | None = None, limit: int) -> bytes:
    """What `git ARGS` printed, read up to `limit` bytes: past it git is killed and `TooMuch` raised."""
    from opencode_sandbox.bounded_output import OutputOverLimit, run_bounded

    try:
        done = run_bounded(argv("-C", str(root), *args), stdin=stdin, timeout_s=SYNC_TIMEOUT_S, env=environment(),
                           limit=limit)
    except OutputOverLimit:
        raise TooMuch(f"git {args[0]} printed more than {limit} bytes") from None
    except (OSError, subprocess.TimeoutExpired) as error:
        raise GitSyncError(f"git {args[0]}: {error}") from None
    if done.returncode != 0:
        raise GitSyncError(f"git {args[0]}: {done.stderr.decode(errors='replace').strip()[-300:]}")
    return done.stdout


def text(root: Path, *args: str) -> str:
    """What `git ARGS` printed, stripped; empty when it failed."""
    done = run(root, *args, check=False)
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


def succeeds(root: Path, *args: str) -> bool:
    return run(root, *args, check=False).returncode == 0
