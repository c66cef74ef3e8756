"""Helpers for tests against the real Docker engine and msb: images, scoping, clean-up."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opencode_sandbox.core.naming import LABEL_MANAGED
from opencode_sandbox.runtime.types import ImageInfo, SandboxInfo, VolumeInfo

TEST_LABEL = "org.opencode-sandbox-tests.run"


def docker(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {result.stderr}{result.stdout}")
    return result


def docker_answers() -> bool:
    try:
        return docker("version", "--format", "{{.Server.Version}}").returncode == 0
    except FileNotFoundError:
        return False


def new_slug(token: str) -> str:
    return f"{token}-{uuid.uuid4().hex[:14]}"


def build_image(tag: str, folder: Path, run_token: str, *, ours: bool = True, home_text: str = "from the image",
                extra: str = "") -> str:
    """A small Debian image with a `dev` home; returns its ID."""
    folder.mkdir(parents=True, exist_ok=True)
    labels = f"LABEL {TEST_LABEL}={run_token}\n" + (f"LABEL {LABEL_MANAGED}=true\n" if ours else "")
    (folder / "Dockerfile").write_text(
        "FROM debian:trixie-slim\n"
        + labels
        + f"RUN useradd -m -u 1000 -s /bin/bash dev && echo '{home_text}' > /home/dev/.from-image"
        + " && chown dev:dev /home/dev/.from-image\n"
        + extra
        + "USER dev\n"
    )
    docker("build", "--quiet", "--tag", tag, str(folder), check=True)
    return docker("image", "inspect", "--format", "{{.Id}}", tag, check=True).stdout.strip()


def image_exists(name: str) -> bool:
    return docker("image", "inspect", name).returncode == 0


def volume_exists(name: str) -> bool:
    return docker("volume", "inspect", name).returncode == 0


def container_exists(name: str) -> bool:
    return docker("container", "inspect", name).returncode == 0


def clean_docker(token: str, image_ids: Sequence[str] = ()) -> None:
    """Remove every container, volume and image whose name holds `token` or that carries it as
    the test label."""
    containers = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    for name in containers:
        if token in name:
            docker("rm", "--force", name)
    for name in docker("volume", "ls", "--quiet").stdout.split():
        if token in name:
            docker("volume", "rm", "--force", name)
    labelled = docker("image", "ls", "--quiet", "--no-trunc", "--filter", f"label={TEST_LABEL}={token}").stdout.split()
    tags = [line for line in docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
            if token in line]
    for name in [*tags, *labelled, *image_ids]:
        docker("image", "rm", "--force", name)


class ScopedRuntime:
    """A real runtime that lists only names holding one token: the engine is shared, and a
    test must never judge, let alone remove, what other tests or users keep there."""

    def __init__(self, runtime: Any, token: str) -> None:
        self._runtime = runtime
        self._token = token
        self.kind = runtime.kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    def list_sandboxes(self) -> list[SandboxInfo]:
        return [info for info in self._runtime.list_sandboxes() if self._token in info.name]

    def list_volumes(self) -> list[VolumeInfo]:
        return [info for info in self._runtime.list_volumes() if self._token in info.name]

    def list_images(self) -> list[ImageInfo]:
        return [info for info in self._runtime.list_images() if self._token in info.reference]


def run_labels(token: str) -> Mapping[str, str]:
    return {LABEL_MANAGED: "true", TEST_LABEL: token}
