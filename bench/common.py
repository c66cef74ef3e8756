"""Shared helpers for the benchmarks: run commands side by side and compare medians."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path


def let_interrupts_reach_children() -> None:
    """Undo a Ctrl-C or hang-up ignored since this process started, for the programs it starts.

    A script started in the background inherits Ctrl-C ignored (`nohup` ignores hang-ups), and an
    ignored signal stays ignored across exec: the Ctrl-C that detaches a client (`serve_once`)
    would reach none of them. A handler of our own keeps this process as it was, and is reset to
    the default in every program it starts.
    """
    for number in (signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, lambda *_: None)


let_interrupts_reach_children()


def launcher() -> list[str]:
    """The installed console script, run the way a user runs it.

    `pip install .` byte-compiles the package; an editable install under
    PYTHONDONTWRITEBYTECODE never does, and would have every run compile its modules anew,
    a cost no user sees. The package is compiled here as an install would have done.
    """
    import compileall

    import opencode_sandbox

    compileall.compile_dir(str(Path(opencode_sandbox.__file__).parent), quiet=1)
    script = shutil.which("opencode-sandbox", path=str(Path(sys.executable).parent)) or shutil.which(
        "opencode-sandbox"
    )
    if script is None:
        raise SystemExit("opencode-sandbox is not installed in this environment")
    return [script]


INTERFACE = re.compile(r"(?i)ask anything|ctrl\+p|tab\s+agents|esc\s+interrupt")
"""What opencode's interface shows once it is drawn."""
POLL_S = 0.05
GIVE_UP_S = 900.0


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GIVE_UP_S
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {GIVE_UP_S:g} s")
        time.sleep(POLL_S)


ENDED = "osb-bench-command-ended"
"""What the terminal shows once its command has ended."""


class Terminal:
    """A command on a tmux terminal of its own server, 160 by 48."""

    def __init__(self, command: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        name = f"osb-bench-{uuid.uuid4().hex[:8]}"
        self.base = ["tmux", "-L", name]
        self.socket = Path(env.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / name
        subprocess.run([*self.base, "new-session", "-d", "-x", "160", "-y", "48", "-c", str(cwd),
                        shlex.join(command) + f"; echo; echo {ENDED}; sleep 600"], check=True, env=env)

    def screen(self) -> str:
        return subprocess.run([*self.base, "capture-pane", "-p"], capture_output=True, text=True).stdout

    def shows(self, pattern: re.Pattern[str]) -> bool:
        return pattern.search(self.screen()) is not None

    def shows_interface(self) -> bool:
        return self.shows(INTERFACE)

    def ended(self) -> bool:
        """Whether the command has ended (the terminal stays, showing what it left). Read with wrapped
        lines joined, and after a line of its own: a command may leave the cursor in its last column."""
        joined = subprocess.run([*self.base, "capture-pane", "-p", "-J"], capture_output=True, text=True).stdout
        return ENDED in joined

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False)
        self.socket.unlink(missing_ok=True)  # tmux leaves it behind


def time_to_interface(command: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    """From starting `command` on a new terminal until opencode's interface shows there."""
    began = time.perf_counter()
    terminal = Terminal(command, cwd, env)
    try:
        until(terminal.shows_interface, f"opencode's interface from {command[0]}")
        return time.perf_counter() - began
    finally:
        terminal.close()


def serve_once(tool: Sequence[str], project: Path, env: dict[str, str]) -> float:
    """`run --serve-only` until opencode serve answers at the URL it prints, then detached as with
    Ctrl-C: the VM keeps running, its server answering, as a warm start finds it. The seconds it took."""
    from opencode_sandbox.daemon.health import is_serving

    began = time.perf_counter()
    serving = subprocess.Popen([*tool, "run", "--serve-only"], cwd=project, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert serving.stdout is not None
    printed: dict[str, str] = {}
    try:
        while "password:" not in printed:
            line = serving.stdout.readline()
            if not line:
                _, errors = serving.communicate(timeout=60)
                raise SystemExit(f"run --serve-only ended before serving: {printed} {errors}")
            label, _, value = line.strip().partition(" ")
            printed[label] = value.strip()
        seconds = time.perf_counter() - began
        if not is_serving(printed.get("URL:", ""), printed["password:"]):
            raise SystemExit("opencode serve does not answer although run --serve-only printed its URL")
        return seconds
    finally:
        if serving.poll() is None:
            os.killpg(serving.pid, signal.SIGINT)
            serving.wait(300)


def time_command(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    """Seconds `argv` takes, its input /dev/null: what the benchmark ran under must not change what
    is measured (the launcher sends an input that is not /dev/null to the VM, as `docker exec -i`
    does, and the raw `docker exec` it is held against reads none)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def interleaved_medians(
    measures: dict[str, Callable[[], float]], rounds: int, warmup: int = 2
) -> dict[str, float]:
    """Run each measure once per round, in turn, so machine noise hits all of them alike."""
    for _ in range(warmup):
        for measure in measures.values():
            measure()
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(rounds):
        for name, measure in measures.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def isolated_environment(root: Path) -> dict[str, str]:
    """HOME, XDG folders and MSB_HOME inside `root`, so a benchmark never touches real state; no
    setting of the tool comes from the caller's environment (the lab exports variables of its own
    under the tool's prefix)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OPENCODE_SANDBOX_")}
    env["HOME"] = str(root)
    for variable, folder in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_DATA_HOME", ".local/share"),
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
        env[variable] = str(root / folder)
    env["MSB_HOME"] = str(root / ".microsandbox")
    return env


# A local unix socket in front of a TCP Docker engine, as a real host has one: the lab's guest
# reaches the host's engine over TCP, where the launcher would fall back from its socket client
# to the `docker` command.


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            target.sendall(chunk)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _serve(listener: socket.socket, address: tuple[str, int]) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(address)
        except OSError:
            client.close()
            continue
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def forward_unix_to_tcp(path: Path, docker_host: str) -> socket.socket:
    """Listen on `path`, relaying each connection to `docker_host` (`tcp://HOST:PORT`); close
    the returned listener to stop."""
    host, _, port = docker_host.removeprefix("tcp://").rstrip("/").rpartition(":")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, (host, int(port))), daemon=True).start()
    return listener
