"""This tool's images in the Docker engine, as pruning sees them: runner tags and dangling images.

One `docker image ls` with a label filter answers both, so an image without our managed label
is never even looked at, and the warm path pays for a single call. Removal goes one image at
a time (`docker image rm` of a tag or an ID, never forced, never a global prune).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from opencode_sandbox.core.naming import IMAGE_REPOSITORY_PREFIX, LABEL_MANAGED
from opencode_sandbox.core.prune_plan import DockerImageFact
from opencode_sandbox.errors import NotFound, SandboxError
from opencode_sandbox.images.docker_cli import DOCTOR_HINT, DockerCli

_MISSING = ("no such image", "no such object", "not found")
_NONE = "<none>"


class DockerImageStore(Protocol):
    def list_images(self, include_tagged: bool) -> list[DockerImageFact]:
        """Dangling images with our label, and with `include_tagged` our runner tags too."""

    def remove(self, name: str) -> None:
        """Remove a tag or a dangling image by ID; `NotFound` when it is already gone."""


class DockerEngineImages:
    def __init__(self, cli: DockerCli | None = None, labels: Mapping[str, str] | None = None) -> None:
        self.cli = cli or DockerCli()
        self.labels = dict(labels or {LABEL_MANAGED: "true"})
        """The labels an image must carry to be listed here (all of them)."""

    def list_images(self, include_tagged: bool) -> list[DockerImageFact]:
        args = ["image", "ls", "--no-trunc", "--format", "{{.ID}}\t{{.Repository}}\t{{.Tag}}\t{{.CreatedAt}}"]
        if not include_tagged:
            args += ["--filter", "dangling=true"]
        for key, value in sorted(self.labels.items()):
            args += ["--filter", f"label={key}={value}"]
        listed = self.cli.run(args)
        if listed.returncode != 0:
            raise SandboxError("cannot list Docker images: " + _last_line(listed.stderr), hint=DOCTOR_HINT)
        facts: list[DockerImageFact] = []
        for line in listed.stdout.splitlines():
            fields = line.split("\t")
            if len(fields) != 4:
                continue
            image_id, repository, tag, created_text = fields
            created = parse_created(created_text)
            if repository == _NONE and tag == _NONE:
                facts.append(DockerImageFact(image_id, None, created, dict(self.labels)))
            elif include_tagged and repository.startswith(IMAGE_REPOSITORY_PREFIX) and tag != _NONE:
                facts.append(DockerImageFact(image_id, f"{repository}:{tag}", created, dict(self.labels)))
        return facts

    def remove(self, name: str) -> None:
        result = self.cli.run(["image", "rm", name])
        if result.returncode == 0:
            return
        message = _last_line(result.stderr)
        if any(marker in message.lower() for marker in _MISSING):
            raise NotFound(f"docker image {name} does not exist", hint="nothing to do")
        raise SandboxError(
            f"cannot remove docker image {name}: {message.removeprefix('Error response from daemon: ')}",
            hint="remove the containers that use it first",
        )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


def parse_created(text: str) -> datetime | None:
    """`docker image ls`'s CreatedAt: `2026-01-02 03:04:05 +0000 UTC`."""
    try:
        return datetime.strptime(" ".join(text.split()[:3]), "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return None
