"""One naming scheme for every artifact this tool creates."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

TOOL = "opencode-sandbox"
VM_PREFIX = f"{TOOL}-vm-"
HOME_PREFIX = f"{TOOL}-home-"
TASK_PREFIX = f"{TOOL}-task-"
WORK_PREFIX = f"{TOOL}-work-"
IMAGE_REPOSITORY_PREFIX = f"{TOOL}/runner-"
BASE_IMAGE = f"{TOOL}/runner-base:latest"
BASE_IMAGE_DIND = f"{TOOL}/runner-base-dind:latest"
BASE_IMAGES = (BASE_IMAGE, BASE_IMAGE_DIND)
PROXY_REPOSITORY = f"{TOOL}/egress-proxy"
KIND_PROXY = "proxy"

LABEL_PREFIX = "org.opencode-sandbox."
LABEL_MANAGED = LABEL_PREFIX + "managed"
LABEL_SLUG = LABEL_PREFIX + "slug"
LABEL_IMAGE = LABEL_PREFIX + "image"
LABEL_IMAGE_DIGEST = LABEL_PREFIX + "image-digest"
LABEL_FINGERPRINT = LABEL_PREFIX + "fingerprint"
LABEL_CONTENT_HASH = LABEL_PREFIX + "content-hash"
LABEL_OPENCODE_VERSION = LABEL_PREFIX + "opencode-version"
LABEL_AGENT = LABEL_PREFIX + "agent"
LABEL_AGENT_VERSION = LABEL_PREFIX + "agent-version"
LABEL_ENV = LABEL_PREFIX + "env"
LABEL_KIND = LABEL_PREFIX + "kind"
LABEL_GIT = LABEL_PREFIX + "git"
"""`own`: the VM works on a git directory of its own (docs/git.md), kept in step with the host."""
GIT_OWN = "own"
LABEL_WORKSPACE = LABEL_PREFIX + "workspace"
"""`isolated`: the VM works on a work tree of its own, in a volume (`core/workspace.py`)."""
LABEL_DIND = LABEL_PREFIX + "dind"
LABEL_OWNER_UID = LABEL_PREFIX + "owner-uid"
"""The uid of the host user whose run made a docker object (docs/runtimes.md): on a shared engine,
the clones of one remote by two host users share its names, never its objects."""

HOME_TIMESTAMP_FORMAT = "%Y%m%dT%H%M%S"
_SLUG_RE = r"[a-z0-9-]+-[0-9a-z]{14}"
_HOME_RE = r"^opencode-sandbox-home-(?P<slug>[a-z0-9-]+-[0-9a-z]{14})-(?P<ts>\d{8}T\d{6})$"
_WORK_RE = r"^opencode-sandbox-work-(?P<slug>[a-z0-9-]+-[0-9a-z]{14})$"
_VM_RE = r"^opencode-sandbox-vm-(?P<slug>[a-z0-9-]+-[0-9a-z]{14})$"
_TASK_RE = r"^opencode-sandbox-task-(?P<slug>[a-z0-9-]+-[0-9a-z]{14})-(?P<n>\d+)$"

# msb keeps each name as a file name (at most 255 bytes); Docker allows more. The slug's
# name part is capped at 20 characters, so every name stays below this bound.
MAX_NAME_LENGTH = 128


def managed_labels(slug: str) -> dict[str, str]:
    return {LABEL_MANAGED: "true", LABEL_SLUG: slug}


def owner_labels(uid: int) -> dict[str, str]:
    return {LABEL_OWNER_UID: str(uid)}


def vm_name(slug: str) -> str:
    return VM_PREFIX + slug


def task_name(slug: str, number: int) -> str:
    return f"{TASK_PREFIX}{slug}-{number}"


def home_volume_name(slug: str, when: datetime | None = None) -> str:
    moment = (when or datetime.now(UTC)).astimezone(UTC)
    return f"{HOME_PREFIX}{slug}-{moment.strftime(HOME_TIMESTAMP_FORMAT)}"


def work_volume_name(slug: str) -> str:
    """The isolated mode's work tree: one per project, kept until the user removes it."""
    return WORK_PREFIX + slug


def runner_repository(slug: str) -> str:
    return IMAGE_REPOSITORY_PREFIX + slug


def runner_image(slug: str, content_hash: str) -> str:
    return f"{runner_repository(slug)}:{content_hash}"


def slug_of_vm(name: str) -> str | None:
    match = re.match(_VM_RE, name)
    return match.group("slug") if match else None


def slug_of_task(name: str) -> str | None:
    match = re.match(_TASK_RE, name)
    return match.group("slug") if match else None


def slug_of_home_volume(name: str) -> str | None:
    match = re.match(_HOME_RE, name)
    return match.group("slug") if match else None


def slug_of_work_volume(name: str) -> str | None:
    match = re.match(_WORK_RE, name)
    return match.group("slug") if match else None


def slug_of_volume(name: str) -> str | None:
    """The project of a home volume or of an isolated work tree's volume."""
    return slug_of_home_volume(name) or slug_of_work_volume(name)


def home_volume_time(name: str) -> datetime | None:
    match = re.match(_HOME_RE, name)
    if not match:
        return None
    return datetime.strptime(match.group("ts"), HOME_TIMESTAMP_FORMAT).replace(tzinfo=UTC)


def slug_of_image(reference: str) -> str | None:
    """The slug of a project runner image reference, None for base images and others."""
    repository = reference.rsplit(":", 1)[0] if ":" in reference.split("/")[-1] else reference
    if not repository.startswith(IMAGE_REPOSITORY_PREFIX):
        return None
    slug = repository[len(IMAGE_REPOSITORY_PREFIX) :]
    if slug in ("base", "base-dind"):
        return None
    return slug if is_slug(slug) else None


def is_slug(text: str) -> bool:
    return re.fullmatch(_SLUG_RE, text) is not None


def is_ours(name: str, labels: Mapping[str, str] | None) -> bool:
    """Our prefix alone is not enough: another tool may use a look-alike name."""
    if labels is None or labels.get(LABEL_MANAGED) != "true":
        return False
    slug = slug_of_vm(name) or slug_of_task(name) or slug_of_volume(name)
    # A sandbox inherits its image's labels, so `managed` alone can come from our image;
    # the slug label must also name the same project as the name does.
    return slug is not None and labels.get(LABEL_SLUG) == slug
