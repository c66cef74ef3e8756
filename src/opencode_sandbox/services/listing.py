"""`list`, `volume list` and `image list`: ask the runtime once, render a table or JSON.

Tables show local time; JSON carries UTC timestamps in ISO 8601 and sizes in bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from opencode_sandbox.core.naming import slug_of_home_volume, slug_of_image, slug_of_task, slug_of_vm
from opencode_sandbox.core.units import format_size
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, SandboxStatus, VolumeInfo
from opencode_sandbox.ui.table import Cell, local_time, render, status_cell


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
        return _json(
            {
                "name": info.name,
                "project": slug_of_vm(info.name) or slug_of_task(info.name),
                "image": info.image,
                "status": info.status.value,
                "created": _iso(info.created_at),
                "last_activity": _iso(info.last_activity_at),
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
        return _json(
            {
                "name": info.name,
                "project": slug_of_home_volume(info.name),
                "kind": info.kind,
                "size_bytes": info.size_bytes,
                "created": _iso(info.created_at),
            }
            for info in volumes
        )
    rows = [[info.name, info.kind or "-", _size(info.size_bytes), local_time(info.created_at)] for info in volumes]
    return render(["NAME", "KIND", "SIZE", "CREATED"], rows, color=False)


def short_digest(digest: str) -> str:
    algorithm, _, hexdigits = digest.partition(":")
    return f"{algorithm}:{hexdigits[:12]}" if hexdigits else (digest[:12] or "-")


def render_images(images: Sequence[ImageInfo], output_format: str) -> str:
    images = sorted(images, key=lambda info: info.reference)
    if output_format == "json":
        return _json(
            {
                "reference": info.reference,
                "project": slug_of_image(info.reference),
                "digest": info.digest,
                "size_bytes": info.size_bytes,
                "created": _iso(info.created_at),
            }
            for info in images
        )
    rows = [[info.reference, short_digest(info.digest), _size(info.size_bytes), local_time(info.created_at)]
            for info in images]
    return render(["REFERENCE", "DIGEST", "SIZE", "CREATED"], rows, color=False)


def _size(size_bytes: int | None) -> str:
    return format_size(size_bytes) if size_bytes is not None else "-"


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment is not None else None


def _json(items: Any) -> str:
    return json.dumps(list(items), indent=2)
