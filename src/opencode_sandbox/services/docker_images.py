"""This tool's images in the Docker engine, as pruning sees them: runner tags, dangling images and
the egress proxy's images.

One listing with a label filter answers both, so an image without our managed label is never
even looked at, and the warm path pays for a single call. Removal goes one image at a time (a
tag or an ID, never forced, never a global prune).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import (
    IMAGE_REPOSITORY_PREFIX,
    KIND_PROXY,
    LABEL_KIND,
    LABEL_MANAGED,
    PROXY_REPOSITORY,
)
from opencode_sandbox.core.prune_plan import DockerImageFact

if TYPE_CHECKING:
    from opencode_sandbox.engine.base import ImageEngine


class DockerImageStore(Protocol):
    def list_images(self, include_tagged: bool) -> list[DockerImageFact]:
        """Dangling images with our label, and with `include_tagged` our runner tags too."""

    def list_proxy_images(self) -> list[DockerImageFact]:
        """The egress proxy's images (tags of its repository with our label and its kind)."""

    def remove(self, name: str) -> None:
        """Remove a tag or a dangling image by ID; `NotFound` when it is already gone."""


class DockerEngineImages:
    def __init__(self, engine: ImageEngine | None = None, labels: Mapping[str, str] | None = None) -> None:
        if engine is None:
            from opencode_sandbox.engine.docker import DockerImageEngine

            engine = DockerImageEngine()
        self.engine = engine
        self.labels = dict(labels or {LABEL_MANAGED: "true"})
        """The labels an image must carry to be listed here (all of them)."""

    def list_images(self, include_tagged: bool) -> list[DockerImageFact]:
        return [
            DockerImageFact(image.image_id, image.reference, image.created_at, dict(self.labels))
            for image in self.engine.list_images(self.labels, include_tagged)
            if image.reference is None or image.reference.startswith(IMAGE_REPOSITORY_PREFIX)
        ]

    def list_proxy_images(self) -> list[DockerImageFact]:
        labels = {**self.labels, LABEL_KIND: KIND_PROXY}
        return [
            DockerImageFact(image.image_id, image.reference, image.created_at, labels)
            for image in self.engine.list_images(labels, include_tagged=True)
            if image.reference is not None and image.reference.startswith(PROXY_REPOSITORY + ":")
        ]

    def remove(self, name: str) -> None:
        self.engine.remove_image(name)
