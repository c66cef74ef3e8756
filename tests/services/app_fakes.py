"""An application context around a fake runtime, and a fake Docker image store."""

from __future__ import annotations

import io
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TextIO

from opencode_sandbox.app import App
from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core.naming import (
    KIND_PROXY,
    LABEL_KIND,
    PROXY_REPOSITORY,
    home_volume_name,
    managed_labels,
    runner_image,
    vm_name,
)
from opencode_sandbox.core.prune_plan import DockerImageFact
from opencode_sandbox.errors import NotFound
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.project import Project
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.types import Mount, MountKind, RuntimeKind, SandboxSpec, SandboxStatus
from opencode_sandbox.state.store import ProjectState, StateStore
from opencode_sandbox.ui.console import Console, LogLevel
from tests.fakes.runtime import FakeRuntime

SLUG = "app-0123456789abcd"


def make_app(runtime: Runtime, root: Path, *, interactive: bool = False, assume_yes: bool = False,
             slug: str = SLUG, other: Runtime | None = None) -> App:
    """`other` is the other runtime installed here; by default an empty fake one. A fake
    runtime's image engine is the context's too; a real runtime's is the Docker engine."""
    console = Console(LogLevel.INFO, stream=io.StringIO())
    project = Project(slug=slug, root=root, remote=None, is_git=(root / ".git").exists())
    if other is None:
        other = FakeRuntime(RuntimeKind.MICROSANDBOX if runtime.kind is RuntimeKind.DOCKER else RuntimeKind.DOCKER)
    fake = isinstance(runtime, FakeRuntime)
    return App(console, ToolPaths.from_environment(), project, load_settings([], {}, {}), assume_yes, interactive,
               runtime, other, runtime.image_engine if fake else None, runtime.guests if fake else None)


class _Lines(io.TextIOBase):
    """A stream that appends each line written to it to a list."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines
        self._partial = ""

    def write(self, text: str) -> int:
        *complete, self._partial = (self._partial + text).split("\n")
        self.lines.extend(complete)
        return len(text)


def results_into(app: App, lines: list[str]) -> App:
    """The app, its results (what a command prints on stdout) appended to `lines`."""
    from typing import cast

    app.console.out = cast("TextIO", _Lines(lines))
    return app


def know_projects(*slugs: str) -> None:
    """Make the projects ones this user knows: a folder each in the state folder."""
    store = StateStore(ToolPaths.from_environment().state_dir)
    for slug in slugs:
        if not store.state_path(slug).is_file():
            store.save(slug, ProjectState())


def messages(app: App) -> str:
    stream = app.console.stream
    assert isinstance(stream, io.StringIO)
    return stream.getvalue()


class FakeDockerImages:
    """The Docker engine's images as pruning sees them, in memory."""

    def __init__(self, images: Iterable[DockerImageFact] = ()) -> None:
        self.images = {image.name: image for image in images}
        self.removed: list[str] = []
        self.listed = 0

    def list_images(self, include_tagged: bool) -> list[DockerImageFact]:
        self.listed += 1
        return [image for image in self.images.values()
                if (include_tagged or image.tag is None) and not _is_proxy(image)]

    def list_proxy_images(self) -> list[DockerImageFact]:
        return [image for image in self.images.values() if _is_proxy(image)]

    def remove(self, name: str) -> None:
        if name not in self.images:
            raise NotFound(f"docker image {name} does not exist", hint="-")
        del self.images[name]
        self.removed.append(name)


def _is_proxy(image: DockerImageFact) -> bool:
    return image.labels.get(LABEL_KIND) == KIND_PROXY and (image.tag or "").startswith(PROXY_REPOSITORY + ":")


def plant_project(runtime: FakeRuntime, slug: str, *, volume_time: datetime, image_tag: str = "c0ffee",
                  status: SandboxStatus = SandboxStatus.STOPPED, activity: datetime | None = None) -> tuple[str, str]:
    """A project of this user's: a VM on a home volume and a runner image; returns (volume, image)."""
    know_projects(slug)
    image = runner_image(slug, image_tag)
    runtime.add_docker_image(image, labels={"org.opencode-sandbox.managed": "true"})
    runtime.load_image(image)
    volume = home_volume_name(slug, volume_time)
    runtime.create_volume(volume, managed_labels(slug))
    runtime.volumes[volume].created_at = volume_time
    spec = SandboxSpec(vm_name(slug), image, 1, 512, labels=managed_labels(slug),
                       mounts=(Mount(MountKind.VOLUME, volume, "/home/dev"),))
    runtime.create_sandbox(spec)
    sandbox = runtime.sandboxes[vm_name(slug)]
    if status is not SandboxStatus.RUNNING:
        runtime.stop_sandbox(vm_name(slug))
        sandbox.status = status
    if activity is not None:
        sandbox.created_at = sandbox.last_activity_at = activity
    return volume, image
