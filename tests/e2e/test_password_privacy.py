"""The daemon password never shows in the host's process list, whoever looks at it.

A watcher reads every process's command line (`/proc/*/cmdline`, what `ps -ef` shows every
local user) many times a second while a client attaches, serves and leaves, and keeps every
line it saw; afterwards none may contain the password.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.harness import Project, ServeOnly, Tmux, cli_command, docker, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

ATTACHED_SCREEN = r"(?i)ask anything|ctrl\+p|tab\s+agents|esc\s+interrupt"


def command_lines() -> set[str]:
    lines: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:  # the process ended meanwhile
            continue
        if raw:
            lines.add(raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace"))
    return lines


def _is_docker_exec_of(line: str, command: str) -> bool:
    return line.startswith("docker exec ") and command in line


class ProcessListWatch:
    """Every command line seen on the host while it runs, sampled every 20 ms in a thread."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.seen |= command_lines()
            self._stop.wait(0.02)

    @contextmanager
    def running(self) -> Iterator[ProcessListWatch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(30)
            self.seen |= command_lines()

    def holding(self, secret: str) -> list[str]:
        return sorted(line for line in self.seen if secret in line)


@pytest.fixture
def docker_command_only(project: Project, unique: str) -> Iterator[None]:
    """A Docker context of its own makes every engine call of the tool a `docker` process."""
    context = f"osb-{unique}"
    created = docker("context", "create", context, "--docker", "host=unix:///var/run/docker.sock")
    assert created.returncode == 0, created.stderr
    project.env["DOCKER_CONTEXT"] = context
    try:
        yield
    finally:
        docker("context", "rm", "--force", context)


def test_serve_only_start_and_detach_keep_the_password_off_every_command_line(
    project: Project, docker_command_only: None
) -> None:
    with ProcessListWatch().running() as watch:
        client = ServeOnly(project)
        try:
            assert project.shell("true").returncode == 0
        finally:
            client.detach()
        reaper = f"opencode_sandbox.services.reaper --state-root {project.state_dir.parent} --slug {project.slug}"
        assert wait_until(lambda: any(reaper in line for line in command_lines()), timeout=30)
    assert client.password and watch.holding(client.password) == []
    started = [line for line in watch.seen if _is_docker_exec_of(line, "exec opencode serve")]
    assert started, "the watch saw the `docker exec` that starts opencode serve"
    assert all("-e OPENCODE_SERVER_PASSWORD " in line for line in started)


def test_an_attached_terminal_keeps_the_password_off_every_command_line(project: Project, unique: str) -> None:
    with ProcessListWatch().running() as watch:
        terminal = Tmux(f"osb-secret-{unique}", cli_command(), project.root, project.env)
        try:
            screen = terminal.wait_for(ATTACHED_SCREEN, timeout=600)
            assert "error:" not in screen, screen
            password = (project.state_dir / "daemon-password").read_text().strip()
            attached = [line for line in command_lines() if _is_docker_exec_of(line, "opencode attach")]
            listed = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        finally:
            terminal.close()
    assert password and password not in listed and watch.holding(password) == []
    assert attached, "the attach runs as a `docker exec` for the whole session"
    assert all("-e OPENCODE_SERVER_PASSWORD " in line for line in attached)
