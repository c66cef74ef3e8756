"""The `mounts` setting made concrete on this host: each source resolved, checked, before anything starts."""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox.config.settings import Settings
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import Mount, MountKind


def resolved_mounts(settings: Settings, checkout: Path) -> tuple[Mount, ...]:
    """The mounts as the runtime takes them: a symlink's target, a folder or a file; a source
    that is missing, or is neither, or whose path passes through a folder the VM may write (the
    checkout, another mount with `:rw`), stops the start with the entry named."""
    where = settings.sources.get("mounts", "the setting 'mounts'")
    mounts: list[Mount] = []
    for mount in settings.mounts:
        entry = f"mount '{mount.written}' ({where})"
        try:
            source = mount.source.resolve(strict=True)
        except FileNotFoundError:
            raise UsageError(f"{entry}: {mount.source} does not exist on this host",
                             hint="create it, correct the path, or remove the entry") from None
        except OSError as error:
            raise UsageError(f"{entry}: {mount.source} cannot be read: {error.strerror}",
                             hint="correct the path or its permissions, or remove the entry") from None
        if not source.is_dir() and not source.is_file():
            raise UsageError(f"{entry}: {source} is neither a folder nor a file",
                             hint="mount a folder or a regular file")
        if "," in str(source):
            raise UsageError(f"{entry}: {source} has a comma in its path, which a mount cannot carry",
                             hint="mount a folder above it, or one whose path has no comma")
        mounts.append(Mount(MountKind.BIND, str(source), mount.target, mount.readonly))
    writable = [checkout.resolve(), *(Path(m.source) for m in mounts if not m.readonly)]
    for made, configured in zip(mounts, settings.mounts, strict=True):
        through = _passes_through(configured.source, [folder for folder in writable if str(folder) != made.source])
        if through is not None:
            raise UsageError(f"mount '{configured.written}' ({where}): its path passes through {through}, which "
                             "the VM may write: it could put a link there to any folder of this host",
                             hint="mount a folder outside the checkout and outside every mount with :rw")
    return tuple(mounts)


def _passes_through(path: Path, folders: list[Path]) -> Path | None:
    """The first of `folders` that `path` lies in, or that a folder on its way leads into."""
    current = Path(path.anchor or "/")
    for part in path.parts[1:]:
        current = current / part
        for candidate in (current, current.resolve()):
            for folder in folders:
                if candidate == folder or folder in candidate.parents:
                    return folder
        current = current.resolve()
    return None
