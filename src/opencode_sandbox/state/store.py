"""Per-project state: which home volume is current, what the VM booted from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record
from opencode_sandbox.state.files import (
    UnreadableState,
    ensure_private_dir,
    read_yaml_mapping,
    write_yaml,
)
from opencode_sandbox.state_layout import StateLayout

if TYPE_CHECKING:
    from typing import Any



class ProjectState(Record):
    """What the tool recorded about a project's VM; every field is optional text."""

    home_volume: str | None = None
    image_reference: str | None = None
    image_digest: str | None = None
    """The digest of the image the VM booted from."""
    fingerprint: str | None = None
    """Settings that need a VM recreate when they change."""
    config_fingerprint: str | None = None
    """The provisioned opencode configuration the daemon was started with."""
    project_root: str | None = None
    workspace: str | None = None
    """The mode the project's VM was made in (`core/workspace.py`); None before the mode existed:
    shared."""
    work_volume: str | None = None
    """The isolated mode's work tree, once made."""
    work_seeded: str | None = None
    """The work tree volume whose seeding from the checkout completed: until it does, a start seeds
    it again (a seed cut short leaves no work of the VM's to keep)."""

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ProjectState:
        values = {key: value for key, value in data.items() if key in cls._fields and value is not None}
        for key, value in values.items():
            if not isinstance(value, str):
                raise UnreadableState(f"'{key}' is not a text value")
        return cls(**values)

    def as_mapping(self) -> dict[str, str]:
        """The fields that are set, in declaration order."""
        return {name: value for name, value in self._asdict().items() if value is not None}


class StateStore:
    """The state folder; its root is always passed in."""

    def __init__(self, root: Path, warn: Callable[[str], None] = lambda _message: None) -> None:
        self.root = root
        self._warn = warn

    def project_dir(self, slug: str) -> Path:
        return StateLayout(self.root).project(slug).folder

    def state_path(self, slug: str) -> Path:
        return StateLayout(self.root).project(slug).state

    def load(self, slug: str) -> ProjectState:
        path = self.state_path(slug)
        try:
            data = read_yaml_mapping(path)
            return ProjectState() if data is None else ProjectState.from_mapping(data)
        except UnreadableState as error:
            self._warn(f"{path}: unusable state file ({error}); starting fresh")
            return ProjectState()

    def save(self, slug: str, state: ProjectState) -> None:
        write_yaml(self.state_path(slug), state.as_mapping())

    def remove(self, slug: str) -> None:
        self.state_path(slug).unlink(missing_ok=True)

    def know(self, slug: str) -> None:
        """Record that this user builds or runs the project: pruning judges only such projects."""
        ensure_private_dir(self.project_dir(slug))

    def project_slugs(self) -> list[str]:
        """Every project this user has built or run: a folder named by its slug, with or without
        a state file in it (`stop -f` removes the file, never the folder)."""
        from opencode_sandbox.core.naming import is_slug

        if not self.root.is_dir():
            return []
        return sorted(path.name for path in self.root.iterdir() if is_slug(path.name) and path.is_dir())

    def lock_path(self, slug: str) -> Path:
        return StateLayout(self.root).first_boot_lock(slug)

    @contextmanager
    def first_boot_lock(self, slug: str, timeout_s: float = 900.0) -> Iterator[None]:
        """Serialise setting up one project's VM across processes.

        An `flock` is released by the kernel when its holder dies, so a killed launcher
        never leaves the project locked.
        """
        import fcntl
        import os
        import time

        from opencode_sandbox.errors import SandboxError

        path = self.lock_path(slug)
        ensure_private_dir(path.parent)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SandboxError(
                            f"another opencode-sandbox is still setting up this project (lock {path})",
                            hint="wait for it to finish, or stop it and run again",
                        ) from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(descriptor)
