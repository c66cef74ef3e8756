"""Which project the current folder belongs to, asked of git once."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import NamedTuple

from opencode_sandbox.core.slug import slug_for_path, slug_for_remote
from opencode_sandbox.errors import SandboxError


class Project(NamedTuple):
    slug: str
    root: Path
    """The checkout's top-level folder (this worktree's), or the working directory."""
    remote: str | None
    is_git: bool

    @property
    def config_dir(self) -> Path:
        return self.root / ".opencode-sandbox"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            # Only metadata is read, so a checkout owned by another user is fine to read.
            ["git", "-c", "safe.directory=*", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=30
        )
    except FileNotFoundError:
        raise SandboxError(
            "git is not installed", hint="install git (for example: apt-get install git)"
        ) from None


def _pick_remote(config_output: str) -> str | None:
    remotes: dict[str, str] = {}
    for line in config_output.splitlines():
        key, _, url = line.partition(" ")
        name = key.removeprefix("remote.").removesuffix(".url")
        if url.strip():
            remotes[name] = url.strip()
    if not remotes:
        return None
    return remotes.get("origin") or remotes[sorted(remotes)[0]]


def resolve_project(cwd: Path) -> Project:
    folder = cwd.resolve()
    probe = _git(folder, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir")
    lines = probe.stdout.splitlines()
    if probe.returncode != 0 or len(lines) < 2:
        return Project(slug=slug_for_path(str(folder)), root=folder, remote=None, is_git=False)
    top_level, common_dir = Path(lines[0]), Path(lines[1])
    remote = _pick_remote(_git(folder, "config", "--get-regexp", r"^remote\..*\.url$").stdout)
    if remote:
        return Project(slug=slug_for_remote(remote), root=top_level, remote=remote, is_git=True)
    main_worktree = common_dir.parent if common_dir.name == ".git" else top_level
    return Project(slug=slug_for_path(str(main_worktree)), root=top_level, remote=None, is_git=True)
