"""Fifty foreign sandboxes, volumes and images per kind: a full prune at age 0 removes none.

The Docker engine is shared with other projects, so the prune below is the real prune
service over the real runtimes and their complete listings, but a removal of something this
test did not create is recorded instead of carried out; removals of what it created go
through (none may be asked for).

Fifty msb sandbox records: `msb create` has no option to create without booting, and a boot
fails here after about 20 s, leaving a stopped record. So one record is made that way and
forty-nine more are copies of its database rows under other names; `msb list`, `inspect` and
`remove` treat them like any other record.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.core.naming import LABEL_MANAGED, LABEL_SLUG
from opencode_sandbox.core.prune_plan import Scope
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.services.docker_images import DockerEngineImages
from opencode_sandbox.services.prune import prune
from tests.services.app_fakes import make_app, results_into
from tests.services.engine_artifacts import TEST_LABEL, docker, docker_answers
from tests.services.test_prune_integration import msb

pytestmark = [pytest.mark.docker]

COUNT = 50


class Guarded:
    """A runtime or image store that lists everything but removes only what holds `token`."""

    def __init__(self, inner: Any, token: str) -> None:
        self._inner = inner
        self._token = token
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not name.startswith("remove"):
            return attribute

        def remove(target: str, *args: Any, **kwargs: Any) -> Any:
            self.asked.append(target)
            if self._token in target:
                return attribute(target, *args, **kwargs)
            return None

        return remove


def look_alike_names(token: str, count: int) -> list[str]:
    """Plain foreign names and ones shaped like this tool's, none of them ours."""
    shapes = [
        f"foreign-{token}-{{n}}",
        f"opencode-sandbox-vm-{token}x{{n}}-0123456789abcd",
        f"opencode-sandbox-home-{token}x{{n}}-0123456789abcd-20200101T000000",
        f"opencode-sandbox-task-{token}x{{n}}-0123456789abcd-1",
        f"opencode-sandbox-{token}-{{n}}",
    ]
    return [shapes[number % len(shapes)].format(n=number) for number in range(count)]


def foreign_labels(number: int, token: str) -> dict[str, str]:
    """Some carry parts of our labels, never the combination that makes an artifact ours."""
    choices: list[dict[str, str]] = [
        {},
        {LABEL_MANAGED: "false"},
        {LABEL_SLUG: f"{token}x{number}-0123456789abcd"},
        {LABEL_MANAGED: "true", LABEL_SLUG: f"other-{token}-0123456789abcd"},
        {"com.example.owner": token},
    ]
    return choices[number % len(choices)]


def label_args(labels: dict[str, str]) -> list[str]:
    return [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]


@pytest.fixture
def docker_images(unique: str, tmp_path: Path) -> Iterator[list[str]]:
    """Fifty foreign images: tags of small images (some look like runner images) and dangling ones."""
    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    made: list[str] = []
    folder = tmp_path / "image"
    folder.mkdir()
    (folder / "file").write_text(f"foreign {unique}\n")
    try:
        for number in range(6):  # each build takes the tag from the previous one, which dangles
            labels = {TEST_LABEL: unique, **foreign_labels(number, unique)}
            (folder / "Dockerfile").write_text(
                "FROM scratch\nCOPY file /file\n" + "".join(f'LABEL {k}="{v}"\n' for k, v in labels.items())
                + f'LABEL n="{number}"\n'
            )
            docker("build", "--quiet", "--tag", f"foreign-{unique}:dangle", str(folder), check=True)
        made += docker("image", "ls", "--quiet", "--no-trunc", "--filter", f"label={TEST_LABEL}={unique}",
                       "--filter", "dangling=true").stdout.split()
        assert len(made) == 5
        source = f"foreign-{unique}:dangle"
        tags = [f"foreign-{unique}/image:{number}" for number in range(35)]
        tags += [f"opencode-sandbox/runner-{unique}x{number}-0123456789abcd:0123456789abcdef" for number in range(8)]
        tags += [f"opencode-sandbox/runner-base:{unique}", f"opencode-sandbox/runner-base-dind:{unique}"]
        for tag in tags:
            docker("tag", source, tag, check=True)
        made += tags
        assert len(made) == COUNT
        yield made
    finally:
        for name in [*made, source]:
            docker("image", "rm", "--force", name)


@pytest.fixture
def docker_extras(unique: str) -> Iterator[tuple[list[str], list[str]]]:
    """A few foreign Docker volumes and stopped containers with look-alike names."""
    volumes = look_alike_names(unique, 10)
    containers = look_alike_names(unique + "c", 5)
    try:
        for number, name in enumerate(volumes):
            docker("volume", "create", *label_args(foreign_labels(number, unique)), name, check=True)
        for number, name in enumerate(containers):
            docker("create", "--name", name, *label_args(foreign_labels(number, unique)), "debian:trixie-slim", "true",
                   check=True)
        yield volumes, containers
    finally:
        for name in containers:
            docker("rm", "--force", name)
        for name in volumes:
            docker("volume", "rm", "--force", name)


def msb_json(*args: str) -> list[dict[str, Any]]:
    result = msb(*args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout or "[]"))


def clone_sandbox_records(source: str, names: list[str], token: str) -> None:
    database = sqlite3.connect(Path(os.environ["MSB_HOME"]) / "db" / "msb.db")
    try:
        columns = "config, status, created_at, updated_at, ephemeral, active_config, caller_config_overrides"
        source_id, *row = database.execute(f"SELECT id, {columns} FROM sandbox WHERE name = ?", (source,)).fetchone()
        rootfs = database.execute(
            "SELECT manifest_id, mode, upper_fstype, created_at, root_disk_kind, root_disk_path "
            "FROM sandbox_rootfs WHERE sandbox_id = ?", (source_id,)).fetchone()
        for number, name in enumerate(names):
            config = json.loads(row[0])
            config["name"] = name
            config["labels"] = foreign_labels(number, token)
            inserted = database.execute(
                f"INSERT INTO sandbox (name, {columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (name, json.dumps(config), *row[1:]))
            database.execute(
                "INSERT INTO sandbox_rootfs (sandbox_id, manifest_id, mode, upper_fstype, created_at, root_disk_kind, "
                "root_disk_path) VALUES (?, ?, ?, ?, ?, ?, ?)", (inserted.lastrowid, *rootfs))
            for key, value in config["labels"].items():
                database.execute("INSERT INTO sandbox_labels VALUES (?, ?, ?)", (inserted.lastrowid, key, value))
        database.commit()
    finally:
        database.close()


@pytest.fixture
def msb_artifacts(unique: str, tmp_path: Path) -> Iterator[dict[str, list[str]]]:
    """Fifty foreign msb images, volumes and sandbox records in this test's own MSB_HOME."""
    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    folder = tmp_path / "msb-image"
    folder.mkdir()
    # Content of its own: the legacy builder can fail when two suites register one layer at once.
    (folder / "file").write_text(f"foreign {unique}\n")
    (folder / "Dockerfile").write_text(f"FROM scratch\nCOPY file /file\nLABEL {TEST_LABEL}={unique}\n")
    source = f"foreign-{unique}:msb"
    docker("build", "--quiet", "--tag", source, str(folder), check=True)
    try:
        archive = tmp_path / "image.tar"
        docker("save", "--output", str(archive), source, check=True)
        images = [f"foreign-{unique}/image-{number}:1" for number in range(COUNT - 10)]
        images += [f"opencode-sandbox/runner-{unique}x{number}-0123456789abcd:0123456789abcdef" for number in range(10)]
        for image in images:
            loaded = msb("load", "--quiet", "--tag", image, "--input", str(archive))
            assert loaded.returncode == 0, loaded.stderr
        volumes = look_alike_names(unique + "v", COUNT)
        for volume in volumes:
            assert msb("volume", "create", "--quiet", volume).returncode == 0
        sandboxes = look_alike_names(unique + "s", COUNT)
        msb("create", images[0], "--name", sandboxes[0], "--pull", "never", "--quiet")  # fails to boot here
        if not any(entry["name"] == sandboxes[0] for entry in msb_json("list")):
            pytest.skip("msb left no sandbox record behind to copy")
        clone_sandbox_records(sandboxes[0], sandboxes[1:], unique)
        yield {"images": images, "volumes": volumes, "sandboxes": sandboxes}
    finally:
        for entry in msb_json("list"):
            msb("remove", "--force", "--quiet", str(entry["name"]))
        for entry in msb_json("volume", "list"):
            msb("volume", "remove", "--quiet", str(entry["name"]))
        for entry in msb_json("image", "list"):
            msb("image", "remove", "--force", "--quiet", str(entry["reference"]))
        docker("image", "rm", "--force", source)


def docker_names(*args: str) -> set[str]:
    return set(docker(*args).stdout.split())


def full_prune(runtime: Any, other: Any, token: str, tmp_path: Path) -> tuple[list[str], list[str]]:
    """Prune everything at age 0, seeing the other runtime too; what was asked to be removed,
    and the printed lines."""
    guarded_runtime = Guarded(runtime, token)
    guarded_other = Guarded(other, token)
    guarded_images = Guarded(DockerEngineImages(), token)
    lines: list[str] = []
    app = make_app(guarded_runtime, tmp_path, other=guarded_other)  # type: ignore[arg-type]
    prune(results_into(app, lines), "0", Scope.ALL, dry_run=False, force=True, docker=guarded_images)
    return guarded_runtime.asked + guarded_other.asked + guarded_images.asked, lines


def test_docker_runtime_prune_leaves_foreign_artifacts(
    docker_images: list[str], docker_extras: tuple[list[str], list[str]], unique: str, tmp_path: Path,
) -> None:
    volumes, containers = docker_extras
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    asked, lines = full_prune(DockerRuntime(), MicrosandboxRuntime(), unique, tmp_path)
    assert lines and lines[-1].startswith("Pruned ")
    assert not [name for name in asked if unique in name]
    present = docker_names("image", "ls", "--all", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    assert set(docker_images) <= present
    assert set(volumes) <= docker_names("volume", "ls", "--quiet")
    assert set(containers) <= docker_names("ps", "--all", "--format", "{{.Names}}")


@pytest.mark.msb
def test_microsandbox_runtime_prune_leaves_foreign_artifacts(
    msb_artifacts: dict[str, list[str]], docker_images: list[str], unique: str, tmp_path: Path,
) -> None:
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    assert len(msb_json("list")) == COUNT
    asked, lines = full_prune(MicrosandboxRuntime(), DockerRuntime(), unique, tmp_path)
    assert lines and lines[-1].startswith("Pruned ")
    assert not [name for name in asked if unique in name]
    assert {entry["name"] for entry in msb_json("list")} == set(msb_artifacts["sandboxes"])
    assert {entry["name"] for entry in msb_json("volume", "list")} == set(msb_artifacts["volumes"])
    assert set(msb_artifacts["images"]) <= {entry["reference"] for entry in msb_json("image", "list")}
    present = docker_names("image", "ls", "--all", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    assert set(docker_images) <= present
