"""`list`, `volume list`, `image list`: filters, columns, colours and JSON."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from opencode_sandbox.cli.render import render_images, render_sandboxes, render_volumes
from opencode_sandbox.core.agent_activity import AgentReport, AgentState
from opencode_sandbox.core.naming import LABEL_AGENT, LABEL_WORKSPACE, home_volume_name, runner_image, vm_name
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import ImageInfo, RuntimeKind, SandboxStatus, VolumeInfo
from opencode_sandbox.services.listing import (
    RunnerImage,
    agent_sessions,
    list_runner_images,
    runner_images,
    select_sandboxes,
)
from opencode_sandbox.ui.table import STATUS_COLORS, render, status_cell, wants_color
from tests.cli.helpers import run_cli
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app, messages, plant_project

MOMENT = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
RUNNING = "run-0123456789abcd"
STOPPED = "stop-abcdefghijklmn"
CRASHED = "crash-zyxwvutsrqponm"


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    plant_project(runtime, RUNNING, volume_time=MOMENT, status=SandboxStatus.RUNNING)
    plant_project(runtime, STOPPED, volume_time=MOMENT)
    plant_project(runtime, CRASHED, volume_time=MOMENT, status=SandboxStatus.CRASHED)
    for sandbox in runtime.sandboxes.values():
        sandbox.created_at = MOMENT
    runtime.add_foreign_sandbox(vm_name("foreign-0123456789abcd"))
    yield runtime
    runtime.close()


def local(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def test_the_table_has_the_four_columns_aligned(fake: FakeRuntime) -> None:
    fake.sandboxes[vm_name(STOPPED)].labels[LABEL_WORKSPACE] = "isolated"
    text = render_sandboxes(select_sandboxes(fake, False, False), "table", names=False, color=False)
    lines = text.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["NAME", "AGENT", "WORKSPACE", "SESSION", "IMAGE", "STATUS", "CREATED"]
    assert len(lines) == 4  # the foreign look-alike is not listed
    rows = [re.split(r"\s{2,}", line) for line in lines[1:]]
    assert rows == [
        [vm_name(CRASHED), "opencode", "shared", "-", runner_image(CRASHED, "c0ffee"), "crashed", local(MOMENT)],
        [vm_name(RUNNING), "opencode", "shared", "-", runner_image(RUNNING, "c0ffee"), "running", local(MOMENT)],
        [vm_name(STOPPED), "opencode", "isolated", "-", runner_image(STOPPED, "c0ffee"), "stopped", local(MOMENT)],
    ]
    starts = {line.index(local(MOMENT)) for line in lines[1:]} | {lines[0].index("CREATED")}
    assert len(starts) == 1
    assert "\x1b[" not in text


def test_a_terminal_agents_vm_shows_its_agent_and_whether_its_session_runs(fake: FakeRuntime, tmp_path: Path) -> None:
    for name in (RUNNING, STOPPED):
        fake.sandboxes[vm_name(name)].labels[LABEL_AGENT] = "claude-code"
    app = make_app(fake, tmp_path)
    sandboxes = select_sandboxes(fake, False, False)
    assert agent_sessions(app, sandboxes) == {vm_name(RUNNING): False}, "a stopped VM is not asked"
    fake.guests.agent_reports[vm_name(RUNNING)] = AgentReport(True, AgentState.WAITING, 1)
    sessions = agent_sessions(app, sandboxes)
    assert sessions == {vm_name(RUNNING): True}
    rows = [re.split(r"\s{2,}", line) for line in render_sandboxes(sandboxes, "table", False, False,
                                                                    sessions).splitlines()[1:]]
    assert [row[:4] for row in rows] == [[vm_name(CRASHED), "opencode", "shared", "-"],
                                         [vm_name(RUNNING), "claude-code", "shared", "running"],
                                         [vm_name(STOPPED), "claude-code", "shared", "-"]]
    entries = json.loads(render_sandboxes(sandboxes, "json", False, False, sessions))["result"]
    assert [(entry["agent"], entry["session_running"]) for entry in entries] == [
        ("opencode", None), ("claude-code", True), ("claude-code", None)]


def test_running_and_stopped_filters(fake: FakeRuntime) -> None:
    assert [s.name for s in select_sandboxes(fake, True, False)] == [vm_name(RUNNING)]
    assert [s.name for s in select_sandboxes(fake, False, True)] == [vm_name(CRASHED), vm_name(STOPPED)]
    with pytest.raises(UsageError):
        select_sandboxes(fake, True, True)


def test_names_prints_one_name_a_line(fake: FakeRuntime) -> None:
    text = render_sandboxes(select_sandboxes(fake, False, True), "table", names=True, color=True)
    assert text.splitlines() == [vm_name(CRASHED), vm_name(STOPPED)]


def test_json_carries_utc_timestamps_and_the_project(fake: FakeRuntime) -> None:
    shown = render_sandboxes(select_sandboxes(fake, True, False), "json", names=False, color=False)
    entries = json.loads(shown)["result"]
    assert entries == [{
        "name": vm_name(RUNNING), "project": RUNNING, "agent": "opencode", "workspace": "shared",
        "session_running": None,
        "image": runner_image(RUNNING, "c0ffee"),
        "status": "running", "created": "2026-03-04T05:06:07+00:00",
        "last_activity": entries[0]["last_activity"],
    }]
    assert datetime.fromisoformat(entries[0]["last_activity"]).tzinfo is not None


def test_status_colours_follow_microsandbox(fake: FakeRuntime) -> None:
    text = render_sandboxes(select_sandboxes(fake, False, False), "table", names=False, color=True)
    assert "\x1b[32mrunning\x1b[0m" in text
    assert "\x1b[2mstopped\x1b[0m" in text
    assert "\x1b[31mcrashed\x1b[0m" in text
    assert {status: STATUS_COLORS.get(status) for status in ("created", "starting", "paused", "draining")} == {
        "created": "dim", "starting": "yellow", "paused": "yellow", "draining": "yellow"}
    assert status_cell("unknown").color is None
    padded = render(["A", "B"], [[status_cell("running"), "x"], ["much-longer", "y"]], color=True)
    assert padded.splitlines()[1] == "\x1b[32mrunning\x1b[0m" + " " * 4 + "  x"


def test_colour_needs_a_terminal_and_no_no_color(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert wants_color(Terminal())  # type: ignore[arg-type]
    with (tmp_path / "file").open("w") as plain:
        assert not wants_color(plain)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(Terminal())  # type: ignore[arg-type]


def test_volume_list_shows_size_or_a_dash() -> None:
    volumes = [
        VolumeInfo(home_volume_name(RUNNING, MOMENT), "dir", 2 * 1024**3, MOMENT),
        VolumeInfo(home_volume_name(STOPPED, MOMENT), "docker", None, None),
    ]
    rows = [re.split(r"\s{2,}", line) for line in render_volumes(volumes, "table").splitlines()]
    assert rows == [
        ["NAME", "KIND", "SIZE", "CREATED"],
        [volumes[0].name, "dir", "2.0 GiB", local(MOMENT)],
        [volumes[1].name, "docker", "-", "-"],
    ]
    entries = json.loads(render_volumes(volumes, "json"))["result"]
    assert entries[0] == {"name": volumes[0].name, "project": RUNNING, "kind": "dir", "size_bytes": 2 * 1024**3,
                          "created": "2026-03-04T05:06:07+00:00"}
    assert entries[1]["size_bytes"] is None and entries[1]["created"] is None


def test_image_list_shortens_the_digest_and_uses_binary_units() -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    image = ImageInfo(runner_image(RUNNING, "c0ffee"), digest, 1536 * 1024**2, MOMENT - timedelta(hours=1))
    base = ImageInfo("opencode-sandbox/runner-base:latest", "sha256:" + "f" * 64, None, None)
    rows = [re.split(r"\s{2,}", line) for line in render_images([RunnerImage(image, False),
                                                                 RunnerImage(base, True)], "table").splitlines()]
    assert rows == [["REFERENCE", "DIGEST", "SIZE", "CREATED", "LOADED"],
                    [image.reference, "sha256:0123456789ab", "1.5 GiB", local(MOMENT - timedelta(hours=1)), "no"],
                    [base.reference, "sha256:ffffffffffff", "-", "-", "yes"]]
    assert json.loads(render_images([RunnerImage(image, False), RunnerImage(base, True)], "json"))["result"] == [
        {"reference": image.reference, "project": RUNNING, "digest": digest, "size_bytes": 1536 * 1024**2,
         "created": "2026-03-04T04:06:07+00:00", "loaded": False},
        {"reference": base.reference, "project": None, "digest": base.digest, "size_bytes": None, "created": None,
         "loaded": True},
    ]


def _image(tag: str, digit: str) -> ImageInfo:
    return ImageInfo(runner_image(RUNNING, tag), "sha256:" + digit * 64, 1024, MOMENT)


def test_image_rows_say_which_built_images_microsandbox_has_loaded() -> None:
    base = ImageInfo("opencode-sandbox/runner-base:latest", "sha256:" + "e" * 64, 1024, MOMENT)
    built = [_image("new", "2"), _image("loaded", "1"), base]
    held = [_image("loaded", "1")._replace(reference="docker.io/" + runner_image(RUNNING, "loaded")),
            _image("new", "0"),  # loaded before a rebuild under the same tag
            _image("gone", "3")]  # no longer in the Docker engine
    rows = [(row.image.reference.removeprefix("docker.io/"), row.image.digest[7], row.loaded)
            for row in runner_images(built, held)]
    assert rows == [
        (base.reference, "e", False),
        (runner_image(RUNNING, "gone"), "3", True),
        (runner_image(RUNNING, "loaded"), "1", True),
        (runner_image(RUNNING, "new"), "0", True),
        (runner_image(RUNNING, "new"), "2", False),
    ]
    assert all(row.loaded for row in runner_images(built, None))  # the docker runtime runs them as built


def test_image_list_under_microsandbox_lists_what_the_docker_engine_built(tmp_path: Path) -> None:
    runtime, engine = FakeRuntime(RuntimeKind.MICROSANDBOX), FakeRuntime(RuntimeKind.DOCKER)
    built, loaded = runner_image(RUNNING, "built"), runner_image(RUNNING, "loaded")
    for reference in (built, loaded):
        engine.add_docker_image(reference)
        runtime.add_docker_image(reference)
    runtime.load_image(loaded)
    app = make_app(runtime, tmp_path, other=engine)
    assert [(row.image.reference, row.loaded) for row in list_runner_images(app)] == [(built, False), (loaded, True)]
    engine.engine_down = True
    assert [(row.image.reference, row.loaded) for row in list_runner_images(app)] == [(loaded, True)]
    assert "the images built in the Docker engine are left out: the engine is not answering" in messages(app)
    docker_app = make_app(engine, tmp_path)
    engine.engine_down = False
    assert [(row.image.reference, row.loaded) for row in list_runner_images(docker_app)] == [(built, True),
                                                                                             (loaded, True)]


def cli_project(tmp_path: Path) -> Path:
    folder = tmp_path / "checkout"
    folder.mkdir()
    return folder


@pytest.mark.msb
def test_cli_list_on_an_empty_runtime(tmp_path: Path) -> None:
    folder = cli_project(tmp_path)
    table = run_cli("list", cwd=folder)
    assert table.returncode == 0, table.stderr
    assert table.stdout.split() == ["NAME", "AGENT", "WORKSPACE", "SESSION", "IMAGE", "STATUS", "CREATED"]
    assert json.loads(run_cli("ls", "--format", "json", cwd=folder).stdout) == {"command": "list", "result": []}
    assert run_cli("sandbox", "list", "--names", cwd=folder).stdout == ""
    both = run_cli("list", "--running", "--stopped", cwd=folder)
    assert both.returncode == 2 and "exclude each other" in both.stderr
    volumes = run_cli("volume", "list", "--format", "json", cwd=folder).stdout
    assert json.loads(volumes) == {"command": "volume list", "result": []}
    header = run_cli("image", "list", cwd=folder).stdout.splitlines()[0]  # the Docker engine is shared: only the header
    assert header.split() == ["REFERENCE", "DIGEST", "SIZE", "CREATED", "LOADED"]


@pytest.mark.msb
def test_cli_list_does_not_import_heavy_modules(tmp_path: Path) -> None:
    folder = cli_project(tmp_path)
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['opencode-sandbox', 'list']\n"
        "try:\n    runpy.run_module('opencode_sandbox', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "heavy = [m for m in ('rich', 'httpx', 'microsandbox') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", probe], cwd=folder, capture_output=True, text=True,
                            env=dict(os.environ), check=False, timeout=60)
    assert "HEAVY=\n" in result.stderr, result.stderr


@pytest.fixture
def built_images(unique: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Runner images of one project in the real Docker engine, one of them loaded into this
    test's microsandbox, and one left only in microsandbox."""
    from tests.services.engine_artifacts import TEST_LABEL, docker, docker_answers
    from tests.services.test_prune_integration import msb

    if not docker_answers():
        pytest.skip("the Docker engine is not answering")
    slug = f"{unique}-0123456789abcd"
    images = {name: runner_image(slug, name) for name in ("built", "loaded", "gone")}
    try:
        for name, reference in images.items():
            folder = tmp_path / name
            folder.mkdir()
            (folder / "file").write_text(name + "\n")
            (folder / "Dockerfile").write_text(f"FROM scratch\nCOPY file /file\nLABEL {TEST_LABEL}={unique}\n"
                                               "LABEL org.opencode-sandbox.managed=true\n")
            docker("build", "--quiet", "--tag", reference, str(folder), check=True)
        from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

        for name in ("loaded", "gone"):
            MicrosandboxRuntime().load_image(images[name])
        docker("image", "rm", images["gone"], check=True)
        yield images
    finally:
        for reference in images.values():
            docker("image", "rm", "--force", reference)
            msb("image", "remove", "--force", "--quiet", reference)


@pytest.mark.msb
@pytest.mark.docker
def test_cli_image_list_shows_what_was_built_and_whether_microsandbox_has_it(
    built_images: dict[str, str], tmp_path: Path
) -> None:
    folder = cli_project(tmp_path)
    listed = run_cli("image", "list", "--format", "json", cwd=folder)
    assert listed.returncode == 0, listed.stderr
    ours = {entry["reference"]: entry for entry in json.loads(listed.stdout)["result"]
            if entry["reference"] in built_images.values()}
    assert {reference: entry["loaded"] for reference, entry in ours.items()} == {
        built_images["built"]: False, built_images["loaded"]: True, built_images["gone"]: True}
    entry = ours[built_images["built"]]
    assert set(entry) == {"reference", "project", "digest", "size_bytes", "created", "loaded"}
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", entry["digest"]) and entry["size_bytes"] > 0

    table = run_cli("image", "list", cwd=folder).stdout.splitlines()
    assert table[0].split() == ["REFERENCE", "DIGEST", "SIZE", "CREATED", "LOADED"]
    rows = {cells[0]: cells for line in table[1:] if (cells := re.split(r"\s{2,}", line))[0] in ours}
    assert rows[built_images["built"]][1] == entry["digest"][:19]
    assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB)", rows[built_images["built"]][2])
    assert [rows[reference][4] for reference in sorted(ours)] == ["no", "yes", "yes"]  # built, gone, loaded

    on_docker = run_cli("--runtime", "docker", "image", "list", "--format", "json", cwd=folder)
    assert on_docker.returncode == 0, on_docker.stderr
    assert {entry["reference"]: entry["loaded"] for entry in json.loads(on_docker.stdout)["result"]
            if entry["reference"] in built_images.values()} == {built_images["built"]: True,
                                                                 built_images["loaded"]: True}


def test_a_vm_of_an_agent_no_profile_knows_runs_a_terminal_agent(fake: FakeRuntime, tmp_path: Path) -> None:
    """An agent of a user's own, defined in a configuration this command need not have read."""
    fake.sandboxes[vm_name(RUNNING)].labels[LABEL_AGENT] = "grok-of-mine"
    fake.guests.agent_reports[vm_name(RUNNING)] = AgentReport(True)
    sandboxes = select_sandboxes(fake, False, False)
    assert agent_sessions(make_app(fake, tmp_path), sandboxes) == {vm_name(RUNNING): True}
