"""Which project the current folder belongs to: read from the repository's files like git
finds them, and asked of git itself whenever the layout is anything but plain."""

from __future__ import annotations

import os
import re
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

from opencode_sandbox.core.git_settings import NOTHING_RUNS
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.slug import slug_for_path, slug_for_remote
from opencode_sandbox.errors import SandboxError


class Project(Record):
    slug: str
    root: Path
    """The checkout's top-level folder (this worktree's), or the working directory."""
    remote: str | None
    is_git: bool

    @property
    def config_dir(self) -> Path:
        return self.root / ".opencode-sandbox"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import subprocess

    try:
        return subprocess.run(
            # Only metadata is read, so a checkout owned by another user is fine to read.
            ["git", "-c", "safe.directory=*", *NOTHING_RUNS, *args], cwd=cwd, capture_output=True, text=True,
            check=False, timeout=30
        )
    except FileNotFoundError:
        raise SandboxError(
            "git is not installed", hint="install git (for example: apt-get install git)"
        ) from None


class GitPaths(Record):
    """Where the checkout's git keeps what it reads, as git itself answers."""

    git_dir: Path
    """This worktree's git directory."""
    common_dir: Path
    object_format: str
    hooks: Path
    """Where the host's git looks for hooks: `core.hooksPath`, resolved as git does, or the
    common git directory's `hooks`."""


class GitPathsQuery:
    """One git process for all four, started at once and read when the answer is needed, so git
    works while the caller goes on; run in the user's configuration but without the variables that
    would point git at another repository. Its answer is None when git does not give one."""

    def __init__(self, root: Path) -> None:
        import subprocess

        environment = {key: value for key, value in os.environ.items()
                       if not key.startswith("GIT_") or key.startswith("GIT_CONFIG")}
        self._process: subprocess.Popen[str] | None
        try:
            self._process = subprocess.Popen(
                ["git", "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir",
                 "--show-object-format", "--git-path", "hooks"],
                cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                env=environment)
        except OSError:
            self._process = None

    def answer(self) -> GitPaths | None:
        import subprocess

        if self._process is None:
            return None
        try:
            output, _ = self._process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            return None
        lines = output.splitlines()
        if self._process.returncode != 0 or len(lines) < 4:
            return None
        return GitPaths(Path(lines[0]), Path(lines[1]), lines[2].strip() or "sha1", Path(lines[3]))


def git_paths(root: Path) -> GitPaths | None:
    """Where git keeps the checkout's files, as `GitPathsQuery` asks; None when git does not answer."""
    return GitPathsQuery(root).answer()


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


_ASK_GIT = "\0ask git"
_SECTION = r'^\s*\[\s*remote\s+"(?P<name>[^"]+)"\s*\]\s*$'
_URL = r"(?i)^\s*url\s*=\s*(?P<url>.*?)\s*$"


def _remote_from_config_file(path: Path) -> str | None:
    """The remote URL read straight from the repository's config, saving a git process on
    every command; anything beyond plain sections and keys (includes, quoting, escapes)
    is left to git itself."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return _ASK_GIT
    lines: list[str] = []
    section: str | None = None
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("["):
            match = re.match(_SECTION, stripped)
            if stripped.lower().startswith(("[include", "[includeif")) or (
                stripped.lower().startswith("[remote") and not match
            ):
                return _ASK_GIT
            section = match.group("name") if match else None
            continue
        if section is None:
            continue
        url = re.match(_URL, stripped)
        if url:
            if any(mark in url.group("url") for mark in ('"', "\\", ";", "#")):
                return _ASK_GIT
            lines.append(f"remote.{section}.url {url.group('url')}")
    return _pick_remote("\n".join(lines))


# Any of these changes where git looks for the repository; git then answers itself.
_DISCOVERY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES",
                        "GIT_DISCOVERY_ACROSS_FILESYSTEM")
_CORE_WORKTREE = r"(?im)^\s*worktree\s*="


def _git_dir_of(candidate: Path) -> Path | None:
    """The repository a `.git` entry stands for: the folder itself, or where a `.git` file
    (linked worktree, submodule) points to; None when it is not a repository."""
    if candidate.is_file():
        try:
            text = candidate.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not text.startswith("gitdir:"):
            return None
        candidate = candidate.parent / text.removeprefix("gitdir:").strip()
    if (candidate / "HEAD").is_file() and ((candidate / "objects").is_dir() or (candidate / "commondir").is_file()):
        return Path(os.path.realpath(candidate))
    return None


def _discover(folder: Path) -> tuple[Path, Path] | str | None:
    """(top level, common git dir) found by walking up like git; None outside any
    repository; `_ASK_GIT` when git's own discovery might come to another answer."""
    if any(variable in os.environ for variable in _DISCOVERY_VARIABLES) or ".git" in folder.parts:
        return _ASK_GIT
    device = folder.stat().st_dev
    for directory in (folder, *folder.parents):
        try:
            if directory.stat().st_dev != device:
                return _ASK_GIT
        except OSError:
            return _ASK_GIT
        entry = directory / ".git"
        if not entry.exists():
            continue
        git_dir = _git_dir_of(entry)
        if git_dir is None:
            return _ASK_GIT
        common = git_dir
        if (git_dir / "commondir").is_file():
            common = Path(os.path.realpath(git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()))
        try:
            if re.search(_CORE_WORKTREE, (common / "config").read_text(encoding="utf-8")):
                return _ASK_GIT
        except (OSError, UnicodeDecodeError):
            return _ASK_GIT
        return directory, common
    return None


def _ask_git_for_layout(folder: Path) -> tuple[Path, Path] | None:
    probe = _git(folder, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir")
    lines = probe.stdout.splitlines()
    if probe.returncode != 0 or len(lines) < 2:
        return None
    return Path(lines[0]), Path(lines[1])


def resolve_project(cwd: Path) -> Project:
    folder = cwd.resolve()
    layout = _discover(folder)
    if layout == _ASK_GIT:
        layout = _ask_git_for_layout(folder)
    if not isinstance(layout, tuple):
        return Project(slug=slug_for_path(str(folder)), root=folder, remote=None, is_git=False)
    top_level, common_dir = layout
    remote = _remote_from_config_file(common_dir / "config")
    if remote == _ASK_GIT:
        remote = _pick_remote(_git(folder, "config", "--get-regexp", r"^remote\..*\.url$").stdout)
    if remote:
        return Project(slug=slug_for_remote(remote), root=top_level, remote=remote, is_git=True)
    main_worktree = common_dir.parent if common_dir.name == ".git" else top_level
    return Project(slug=slug_for_path(str(main_worktree)), root=top_level, remote=None, is_git=True)
