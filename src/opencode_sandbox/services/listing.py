"""`list`, `volume list` and `image list`: ask the runtime once (`image list`: the Docker engine
too), render a table or JSON.

Tables show local time; JSON carries UTC timestamps in ISO 8601 and sizes in bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import slug_of_home_volume, slug_of_image, slug_of_task, slug_of_vm
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.units import format_size
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, SandboxStatus, VolumeInfo
from opencode_sandbox.ui.table import Cell, local_time, render, status_cell

if TYPE_CHECKING:
    from opencode_sandbox.app import App


def select_sandboxes(runtime: Runtime, running: bool, stopped: bool) -> list[SandboxInfo]:
    if running and stopped:
        raise UsageError("--running and --stopped exclude each other", hint="use one of them, or neither for all")
    sandboxes = sorted(runtime.list_sandboxes(), key=lambda info: info.name)
    if running:
        return [info for info in sandboxes if info.status is SandboxStatus.RUNNING]
    if stopped:
        return [info for info in sandboxes if info.status is not SandboxStatus.RUNNING]
    return sandboxes


def render_sandboxes(sandboxes: Sequence[SandboxInfo], output_format: str, names: bool, color: bool) -> str:
    if names:
        return "\n".join(info.name for info in sandboxes)
    if output_format == "json":
        return json_list(
            {
                "name": info.name,
                "project": slug_of_vm(info.name) or slug_of_task(info.name),
                "image": info.image,
                "status": info.status.value,
                "created": iso_time(info.created_at),
                "last_activity": iso_time(info.last_activity_at),
            }
            for info in sandboxes
        )
    rows: list[list[str | Cell]] = [
        [info.name, info.image or "-", status_cell(info.status.value), local_time(info.created_at)]
        for info in sandboxes
    ]
    return render(["NAME", "IMAGE", "STATUS", "CREATED"], rows, color)


def render_volumes(volumes: Sequence[VolumeInfo], output_format: str) -> str:
    volumes = sorted(volumes, key=lambda info: info.name)
    if output_format == "json":
        return json_list(
            {
                "name": info.name,
                "project": slug_of_home_volume(info.name),
                "kind": info.kind,
                "size_bytes": info.size_bytes,
                "created": iso_time(info.created_at),
            }
            for info in volumes
        )
    rows = [[info.name, info.kind or "-", _size(info.size_bytes), local_time(info.created_at)] for info in volumes]
    return render(["NAME", "KIND", "SIZE", "CREATED"], rows, color=False)


def short_digest(digest: str) -> str:
    algorithm, _, hexdigits = digest.partition(":")
    return f"{algorithm}:{hexdigits[:12]}" if hexdigits else (digest[:12] or "-")


class RunnerImage(Record):
    image: ImageInfo
    loaded: bool
    """Whether the VM runtime can run this very image (reference and digest) now."""


def list_runner_images(app: App) -> list[RunnerImage]:
    """This tool's images in the Docker engine, where `build` makes them, and those only the
    VM runtime still holds. The docker runtime runs the engine's images as they are."""
    runtime = app.runtime
    if runtime.description.runs_engine_images:
        return runner_images(runtime.list_images(), None)
    loaded = runtime.list_images()
    built: list[ImageInfo] = []
    engine = app.other_runtime
    if engine is not None:
        try:
            built = engine.list_images()
        except SandboxError as error:
            app.console.warn(f"the images built in the Docker engine are left out: {error.message}")
    return runner_images(built, loaded)


def runner_images(built: Sequence[ImageInfo], loaded: Sequence[ImageInfo] | None) -> list[RunnerImage]:
    """One row per image: each one built, loaded or not, then each one only the runtime holds.
    `loaded` is None when the runtime runs the built images themselves."""
    if loaded is None:
        rows = [RunnerImage(info, True) for info in built]
    else:
        held = {_identity(info) for info in loaded}
        in_engine = {_identity(info) for info in built}
        rows = [RunnerImage(info, _identity(info) in held) for info in built]
        rows += [RunnerImage(info, True) for info in loaded if _identity(info) not in in_engine]
    return sorted(rows, key=lambda row: (row.image.reference, row.image.digest))


def _identity(info: ImageInfo) -> tuple[str, str]:
    return info.reference.removeprefix("docker.io/"), info.digest


def render_images(images: Sequence[RunnerImage], output_format: str) -> str:
    if output_format == "json":
        return json_list(
            {
                "reference": row.image.reference,
                "project": slug_of_image(row.image.reference),
                "digest": row.image.digest,
                "size_bytes": row.image.size_bytes,
                "created": iso_time(row.image.created_at),
                "loaded": row.loaded,
            }
            for row in images
        )
    rows = [[row.image.reference, short_digest(row.image.digest), _size(row.image.size_bytes),
             local_time(row.image.created_at), "yes" if row.loaded else "no"] for row in images]
    return render(["REFERENCE", "DIGEST", "SIZE", "CREATED", "LOADED"], rows, color=False)


def _size(size_bytes: int | None) -> str:
    return format_size(size_bytes) if size_bytes is not None else "-"


def iso_time(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment is not None else None


def json_list(items: Any) -> str:
    return json.dumps(list(items), indent=2)
