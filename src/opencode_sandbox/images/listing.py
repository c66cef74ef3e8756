"""This tool's runner images in the Docker engine, for `image list`."""

from __future__ import annotations

import json
from datetime import datetime

from opencode_sandbox.core.naming import IMAGE_REPOSITORY_PREFIX
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.images.docker_cli import DOCTOR_HINT, DockerCli
from opencode_sandbox.runtime.types import ImageInfo

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def list_runner_images(docker: DockerCli | None = None) -> list[ImageInfo]:
    """Tagged images of the `opencode-sandbox/runner-*` repositories, newest first."""
    cli = docker or DockerCli()
    result = cli.run(["image", "ls", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}}\t{{.ID}}"])
    if result.returncode != 0:
        raise SandboxError("cannot list Docker images: " + result.stderr.strip(), hint=DOCTOR_HINT)
    references: dict[str, str] = {}
    for line in result.stdout.splitlines():
        reference, _, image_id = line.partition("\t")
        if reference.startswith(IMAGE_REPOSITORY_PREFIX) and not reference.endswith(":<none>"):
            references[reference] = image_id
    if not references:
        return []
    inspected = cli.run(["image", "inspect", *sorted(set(references.values()))])
    documents = {document["Id"]: document for document in json.loads(inspected.stdout or "[]")}
    images = []
    for reference, image_id in references.items():
        document = documents.get(image_id, {})
        images.append(
            ImageInfo(
                reference=reference,
                digest=image_id,
                size_bytes=document.get("Size"),
                created_at=_created(document.get("Created")),
                labels=dict((document.get("Config") or {}).get("Labels") or {}),
            )
        )
    epoch = datetime.min.replace(tzinfo=None)
    return sorted(
        images,
        key=lambda image: (image.created_at.replace(tzinfo=None) if image.created_at else epoch, image.reference),
        reverse=True,
    )


def _created(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    # Docker writes nanoseconds; Python keeps microseconds.
    text = value.replace("Z", "+00:00")
    if "." in text:
        head, _, rest = text.partition(".")
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def short_digest(digest: str) -> str:
    """`sha256:` and the first 12 hex digits, as `image list` shows it."""
    algorithm, _, hexdigits = digest.partition(":")
    return f"{algorithm}:{hexdigits[:12]}" if hexdigits else digest[:12]


def format_size(size_bytes: int | None) -> str:
    """Binary units: `512 B`, `1.4 GiB`."""
    if size_bytes is None:
        return "-"
    value = float(size_bytes)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
