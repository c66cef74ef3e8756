"""The files of a project's `.opencode-sandbox/` folder that go into its image build.

`.dockerignore` in that folder is honoured. The folder's `config.yaml` configures the
launcher, not the image, so it is never part of the build: changing a launcher setting
does not rebuild the image. Nor is `guard/`, where versions before 2026-12 kept what the guard
took from the VM (`core.guard.OLD_REVIEW_FOLDER`; the guard keeps nothing in the checkout now): a
folder an older version left there changes no image.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from opencode_sandbox.core.guard import OLD_REVIEW_FOLDER
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import UsageError
from opencode_sandbox.images.certificates import CONTEXT_FOLDER, CaCertificate
from opencode_sandbox.images.dockerignore import is_ignored, parse_dockerignore

LAUNCHER_FILES = frozenset({"config.yaml"})
OLD_REVIEW_COPIES = OLD_REVIEW_FOLDER.split("/", 1)[1]
DOCKERFILE_NAME = "Dockerfile"


class ContextFile(Record):
    relative: str
    """Posix path inside the build context."""
    path: Path
    executable: bool
    link_target: str | None = None
    """For a symbolic link: where it points (copied as a link, never followed)."""

    def content(self) -> bytes:
        if self.link_target is not None:
            return self.link_target.encode()
        return self.path.read_bytes()


def context_files(folder: Path | None) -> list[ContextFile]:
    """Every file of the folder that a build sees, sorted by path."""
    if folder is None or not folder.is_dir():
        return []
    ignore_file = folder / ".dockerignore"
    patterns = parse_dockerignore(ignore_file.read_text("utf-8")) if ignore_file.is_file() else []
    found: list[ContextFile] = []
    for directory, subdirectories, files in os.walk(folder):
        subdirectories.sort()
        base = Path(directory)
        relative_dir = base.relative_to(folder).as_posix()
        if relative_dir == ".":
            subdirectories[:] = [name for name in subdirectories if name != OLD_REVIEW_COPIES]
        for name in sorted(files) + [d for d in subdirectories if (base / d).is_symlink()]:
            path = base / name
            relative = name if relative_dir == "." else f"{relative_dir}/{name}"
            if relative in LAUNCHER_FILES or relative == DOCKERFILE_NAME:
                continue
            if is_ignored(relative, patterns):
                continue
            found.append(_context_file(path, relative))
    return sorted(found, key=lambda item: item.relative)


def _context_file(path: Path, relative: str) -> ContextFile:
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            return ContextFile(relative, path, False, os.readlink(path))
        return ContextFile(relative, path, bool(info.st_mode & stat.S_IXUSR))
    except OSError as error:
        raise UsageError(
            f"cannot read build context file {path}: {error.strerror or error}",
            hint="Fix its permissions or exclude it in .opencode-sandbox/.dockerignore.",
        ) from None


def write_build_context(
    target: Path,
    dockerfile: str,
    files: Sequence[ContextFile],
    certificates: Sequence[CaCertificate],
    packaged: dict[str, str] | None = None,
) -> None:
    """Lay out a build context: the Dockerfile, the project's files and the CA folder.

    A project file or folder named `ca-certificates` takes the place of the CA folder.
    """
    import shutil

    (target / DOCKERFILE_NAME).write_text(dockerfile, encoding="utf-8")
    for item in files:
        destination = target / item.relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if item.link_target is not None:
            os.symlink(item.link_target, destination)
            continue
        try:
            shutil.copyfile(item.path, destination)
        except OSError as error:
            raise UsageError(
                f"cannot read build context file {item.path}: {error.strerror or error}",
                hint="Fix its permissions or exclude it in .opencode-sandbox/.dockerignore.",
            ) from None
        destination.chmod(0o755 if item.executable else 0o644)
    for name, text in (packaged or {}).items():
        destination = target / name
        destination.write_text(text, encoding="utf-8")
        destination.chmod(0o755)
    ca_folder = target / CONTEXT_FOLDER
    if ca_folder.exists() or ca_folder.is_symlink():
        return
    ca_folder.mkdir()
    for certificate in certificates:
        (ca_folder / certificate.file_name).write_bytes(certificate.pem)
        (ca_folder / certificate.file_name).chmod(0o644)
