"""End-to-end harness: real git projects, the real CLI on either runtime, tmux for terminals.

A project's VM, home volumes and images are looked at and removed through the tool's own
Runtime objects, so one scenario reads the same on the docker and the microsandbox runtime.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest import MonkeyPatch

from opencode_sandbox.core.naming import LABEL_SLUG, TOOL, runner_repository, vm_name, work_volume_name
from opencode_sandbox.core.slug import slug_for_remote
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.guest.places import SERVER_LOG as DAEMON_LOG
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.docker.identity import forget_mapped_mounts
from opencode_sandbox.runtime.docker.netfilter import network_name
from opencode_sandbox.runtime.docker.network_holder import holder_name
from opencode_sandbox.runtime.docker.proxy import ca_volume_name, proxy_name
from opencode_sandbox.runtime.types import SandboxInfo
from tests.fixtures.host_users import HostUser


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "safe.directory=*", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


def docker(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@dataclass
class Project:
    root: Path
    remote: str
    env: dict[str, str] = field(default_factory=dict)
    """Settings on top of the user's environment, OPENCODE_SANDBOX_* for example."""
    user: HostUser | None = None
    """Runs the tool as this host user, with a fresh home of its own; None: as the test process."""
    home: Path | None = None
    runtime: str = "docker"
    """The runtime the tool runs this project's VM on: "docker" or "microsandbox"."""

    @property
    def slug(self) -> str:
        return slug_for_remote(self.remote)

    @property
    def vm(self) -> str:
        return vm_name(self.slug)

    @property
    def paths(self) -> ToolPaths:
        if self.home is None:
            return ToolPaths.from_environment()
        return ToolPaths(self.home / ".config" / TOOL, self.home / ".local/state" / TOOL, self.home / ".cache" / TOOL)

    @property
    def state_dir(self) -> Path:
        return self.paths.state_dir / self.slug

    @property
    def opencode_config_dir(self) -> Path:
        """Where the user's own opencode configuration lives, which the tool provisions."""
        base = self.home / ".config" if self.home else Path(os.environ["XDG_CONFIG_HOME"])
        return base / "opencode"

    def process_env(self) -> dict[str, str]:
        if self.user is None or self.home is None:
            return {**os.environ, **self.env}
        return self.user.environment(self.home, self.env)

    def process_options(self) -> dict[str, Any]:
        return self.user.process_options() if self.user else {}

    def command(self, *args: str) -> list[str]:
        return [self.user.python if self.user else sys.executable, "-m", "opencode_sandbox", *args]

    def cli(self, *args: str, timeout: float = 600, input_text: str | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), cwd=cwd or self.root, env=self.process_env(), capture_output=True, text=True,
            timeout=timeout, input=input_text, stdin=None if input_text is not None else subprocess.DEVNULL,
            **self.process_options(),
        )

    def terminal_command(self, *args: str) -> list[str]:
        """The tool's command line as a terminal (`Tmux`) runs it: as this project's user, in the
        environment of that user's login, when there is one."""
        if self.user is None or self.home is None:
            return cli_command(*args)
        groups = ",".join(str(group) for group in self.user.groups) or "-"
        environment = {**self.user.environment(self.home, self.env), "TERM": "xterm-256color"}
        return ["setpriv", f"--reuid={self.user.uid}", f"--regid={self.user.gid}",
                f"--groups={groups}" if groups != "-" else "--clear-groups", "env", "-i",
                *(f"{name}={value}" for name, value in environment.items()), *self.command(*args)]

    @property
    def user_home(self) -> Path:
        """The home of the user the tool runs as."""
        return self.home if self.home is not None else Path(os.environ["HOME"])

    def shell(self, script: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.cli(*flags, "shell", "--", "sh", "-c", script)

    def backend(self) -> Runtime:
        """The tool's own backend for this project's runtime, in the test process's environment;
        on docker it acts for the project's host user, whose VM and volumes it then sees."""
        if self.runtime == "docker":
            from opencode_sandbox.runtime.docker.backend import DockerRuntime
            from opencode_sandbox.runtime.docker.owner import DockerOwner
            from opencode_sandbox.state.store import StateStore

            store = StateStore(self.paths.state_dir)
            return DockerRuntime(owner=DockerOwner(self.user.uid if self.user else None,
                                                   lambda slug: store.load(slug).home_volume))
        from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

        return MicrosandboxRuntime()

    def vm_info(self) -> SandboxInfo | None:
        return self.backend().get_sandbox(self.vm)

    def vm_running(self) -> bool:
        info = self.vm_info()
        return info is not None and info.status.is_active

    def vm_stopped(self) -> bool:
        """The VM exists and is not running."""
        info = self.vm_info()
        return info is not None and not info.status.is_active

    def vm_created(self) -> str:
        """When the VM was created: a new value means a new VM."""
        info = self.vm_info()
        return info.created_at.isoformat() if info and info.created_at else ""

    def container_id(self) -> str:
        return docker("inspect", "--format", "{{.Id}}", self.vm).stdout.strip()

    def container_state(self) -> str:
        return docker("inspect", "--format", "{{.State.Status}}", self.vm).stdout.strip()

    def serve_processes(self) -> int:
        """How many `opencode serve` processes run in the VM."""
        found = self.backend().exec(self.vm, ["pgrep", "-f", "opencode serve --hostname"], user="root",
                                    workdir="/")
        return len(found.stdout.split())

    def vm_report(self) -> str:
        """What the VM's processes and opencode's logs show, for a failure message: under emulation
        it tells a step still working (CPU time growing, log lines coming) from one stuck."""
        script = (f"echo '$ ps'; ps -ww -eo pid,etimes,time,args; echo '$ {DAEMON_LOG}'; tail -n 30 {DAEMON_LOG};"
                  " for log in $(ls -t /home/dev/.local/share/opencode/log/*.log | head -n 2); do"
                  " echo \"$ $log\"; tail -n 40 \"$log\"; done;"
                  " for pid in $(pgrep -f 'opencode attach'); do echo \"$ terminal of $pid\";"
                  " tr '\\0' '\\n' < /proc/$pid/environ | grep -E '^(TERM|COLUMNS|LINES|COLORTERM)=';"
                  " ls -l /proc/$pid/fd/0; stty -F /proc/$pid/fd/0 size; done")
        try:
            found = self.backend().exec(self.vm, ["sh", "-c", script], user="root", workdir="/", timeout_s=300)
        except SandboxError as error:
            return f"(the VM could not be asked: {error})"
        return found.stdout + found.stderr

    def end_reaper(self) -> None:
        """Ends the project's idle reaper, and with it the watch that puts the VM's changes back
        within seconds: what the VM changes then waits for the review, as when it lands between
        two rounds. The VM no longer stops by itself; the test stops it."""
        watching = f"opencode_sandbox.services.reaper --state-root {self.paths.state_dir} --slug {self.slug}"
        # Its supervisor first (the oldest of the two): a watching process that dies under it stops the VM.
        subprocess.run(["pkill", "-KILL", "-o", "-f", watching], check=False)
        subprocess.run(["pkill", "-KILL", "-f", watching], check=False)

    def reaper_memory_kib(self) -> list[int]:
        """The most memory (`VmHWM`) each of the project's reaper processes has held, in KiB."""
        found = subprocess.run(["pgrep", "-f", f"opencode_sandbox.services.reaper --state-root {self.paths.state_dir} "
                                f"--slug {self.slug}"], capture_output=True, text=True).stdout.split()
        peaks = []
        for pid in found:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            peaks += [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")]
        return peaks

    def reaper_log(self, characters: int = 4000) -> str:
        """The end of the idle reaper's log, for a failure message."""
        log = self.state_dir / "reaper.log"
        return log.read_text(errors="replace")[-characters:] if log.exists() else "(no reaper.log)"

    def why_still_running(self) -> str:
        """For a VM that did not stop: the clients whose leases are live, the host's processes of
        the tool and the runtime, and the end of the reaper's log."""
        from opencode_sandbox.state.leases import attached_clients

        clients = attached_clients(self.paths.state_dir, self.slug)
        return (f"live leases: {clients}\nthe host's processes:\n"
                f"{host_processes('opencode_sandbox', 'opencode-sandbox', 'docker exec', 'msb')}\n"
                f"the reaper's log:\n{self.reaper_log()}")

    def home_volumes(self) -> list[str]:
        prefix = f"opencode-sandbox-home-{self.slug}-"
        return sorted(volume.name for volume in self.backend().list_volumes() if volume.name.startswith(prefix))

    def vms(self) -> list[str]:
        return [sandbox.name for sandbox in self.backend().list_sandboxes() if sandbox.name == self.vm]

    def root_in_home(self, script: str) -> subprocess.CompletedProcess[str]:
        """`script` as root with Docker's usual capabilities over the project's home volume, in a
        helper container of the VM's image: root in the VM itself holds no capability."""
        [volume] = self.home_volumes()
        image = docker("inspect", "--format", "{{.Config.Image}}", self.vm, check=True).stdout.strip()
        return docker("run", "--rm", "--network", "none", "--user", "root", "--mount",
                      f"type=volume,source={volume},target=/home/dev", "--entrypoint", "sh", image, "-c", script)

    def write_dockerfile(self, text: str) -> None:
        folder = self.root / ".opencode-sandbox"
        folder.mkdir(exist_ok=True)
        (folder / "Dockerfile").write_text(text)

    def cleanup(self) -> None:
        subprocess.run(["pkill", "-KILL", "-f", f"services.reaper .*{self.slug}"], check=False)
        if self.runtime == "microsandbox":
            remove_microsandbox_artifacts(self.slug)
        docker("rm", "-f", self.vm, proxy_name(self.slug), holder_name(self.slug))
        if os.getuid() == 0:
            forget_mapped_mounts(self.vm)
        docker("volume", "rm", "-f", ca_volume_name(self.slug))
        docker("network", "rm", network_name(self.slug))
        for volume in docker("volume", "ls", "--format", "{{.Name}}").stdout.split():
            if volume.startswith(f"opencode-sandbox-home-{self.slug}-") or volume == work_volume_name(self.slug):
                docker("volume", "rm", "-f", volume)
        images = docker("images", "--format", "{{.Repository}}:{{.Tag}}", runner_repository(self.slug)).stdout.split()
        for image in images:
            docker("rmi", "-f", image)
        dangling = docker("images", "-q", "--filter", "dangling=true", "--filter",
                          f"label={LABEL_SLUG}={self.slug}").stdout.split()
        for image in dangling:
            docker("rmi", "-f", image)
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


def remove_microsandbox_artifacts(slug: str) -> None:
    """A project's VM, home volumes and loaded images in this process's MSB_HOME."""
    from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime

    runtime = MicrosandboxRuntime()
    for sandbox in runtime.list_sandboxes():
        if sandbox.labels.get(LABEL_SLUG) == slug:
            with contextlib.suppress(SandboxError):
                runtime.kill_sandbox(sandbox.name)
            with contextlib.suppress(SandboxError):
                runtime.remove_sandbox(sandbox.name)
    for volume in runtime.list_volumes():
        if volume.labels.get(LABEL_SLUG) == slug:
            with contextlib.suppress(SandboxError):
                runtime.remove_volume(volume.name)
    with contextlib.suppress(SandboxError):
        if runtime.get_volume(work_volume_name(slug)) is not None:
            runtime.remove_volume(work_volume_name(slug))
    for image in runtime.list_images():
        if image.reference.startswith(runner_repository(slug) + ":"):
            with contextlib.suppress(SandboxError):
                runtime.remove_image(image.reference)


def make_project(folder: Path, name: str, user: HostUser | None = None) -> Project:
    """A git checkout in `folder`; with `user`, in a fresh home of that host user, all theirs."""
    home = user.make_home() if user else None
    if home is not None:
        folder = home / folder.name
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    (folder / "README.md").write_text("# e2e\n")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "init")
    remote = f"git@example.org:e2e/{name}.git"
    git(folder, "remote", "add", "origin", remote)
    if user is None or home is None:
        return Project(folder, remote)
    user.give(home)
    return Project(folder, remote, user=user, home=home)


def project_on(runtime: str, folder: Path, name: str, opencode_version: str, monkeypatch: MonkeyPatch) -> Project:
    """A fresh git project run on `runtime` by the test's own user, its base image's version recorded."""
    record_baked_version(ToolPaths.from_environment().state_dir, opencode_version)
    monkeypatch.setenv("OPENCODE_SANDBOX_RUNTIME", runtime)
    monkeypatch.setenv("OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT", "1h")
    created = make_project(folder, name)
    created.runtime = runtime
    return created


class Tmux:
    """A detached tmux session on its own server, running one command on a real terminal.

    Its own server socket means the session starts with this process's environment
    (the test's HOME, XDG folders and settings), not that of an older tmux server.
    """

    def __init__(self, name: str, command: list[str], cwd: Path, env: dict[str, str],
                 config: Path | None = None) -> None:
        """`config`: the server's configuration file, read before the command starts."""
        self.name = name
        self._base = ["tmux", "-L", name]
        line = f"{shlex.join(command)}; echo EXIT-CODE=$?; sleep 600"
        subprocess.run(
            [*self._base, *(["-f", str(config)] if config else []), "new-session", "-d", "-s", name, "-x", "160",
             "-y", "48", "-c", str(cwd), line],
            check=True, env={**os.environ, **env},
        )

    def screen(self) -> str:
        return subprocess.run([*self._base, "capture-pane", "-p", "-t", self.name], capture_output=True,
                              text=True).stdout

    def wait_for(self, pattern: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.5)
        raise AssertionError(f"{pattern!r} did not appear; the screen shows:\n{self.screen().rstrip()}")

    def paste_buffer(self) -> str | None:
        """What the terminal's clipboard holds (tmux keeps an OSC 52 write as a paste buffer), None when empty."""
        shown = subprocess.run([*self._base, "show-buffer"], capture_output=True, text=True)
        return shown.stdout if shown.returncode == 0 else None

    def send(self, *keys: str) -> None:
        subprocess.run([*self._base, "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self._base, "kill-server"], capture_output=True)


class ServeOnly:
    """`run --serve-only` in the background: an attached client with the daemon's URL and password."""

    def __init__(self, project: Project, *extra: str) -> None:
        self.process = subprocess.Popen(
            project.command("run", "--serve-only", *extra), cwd=project.root, env=project.process_env(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            start_new_session=True, **project.process_options(),
        )
        assert self.process.stdout is not None
        lines: list[str] = []
        while not any(line.startswith("password:") for line in lines):
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        self.url = next((line.split()[1] for line in lines if line.startswith("URL:")), "")
        self.password = next((line.split()[1] for line in lines if line.startswith("password:")), "")
        if not (self.url and self.password):
            self.process.kill()
            _, errors = self.process.communicate(timeout=30)
            raise AssertionError(f"serve-only did not start: {lines} {errors}")

    def detach(self) -> None:
        """Ctrl-C, as a user detaches."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def host_processes(*words: str) -> str:
    """This host's processes whose command line holds one of `words`, with their CPU time: which
    step a client is in (its `msb exec`, say) when its terminal shows nothing."""
    listed = subprocess.run(["ps", "-ww", "-eo", "pid,etimes,time,args"], capture_output=True, text=True).stdout
    header, *rows = listed.splitlines() or [""]
    return "\n".join([header, *(row for row in rows if any(word in row for word in words))])


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "opencode_sandbox", *args]


def non_loopback_address() -> str | None:
    """One of this host's own addresses that is not loopback, None when it has none."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # a documentation address: nothing is sent
        address: str = probe.getsockname()[0]
        if not address.startswith("127."):
            return address
    return None


def status_of(url: str, password: str | None) -> int:
    """The HTTP status a GET of the daemon's `url` gets, with its password or none."""
    request = urllib.request.Request(url)
    if password is not None:
        token = base64.b64encode(f"opencode:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False
