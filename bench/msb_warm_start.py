"""Starting work in a project's microVM: the launcher against raw `msb`, side by side.

The microsandbox counterpart of `warm_start.py`, in one process with an isolated HOME and
MSB_HOME, on a host where microVMs boot (the KVM lab, `docs/kvm-lab.md`):
- warm: the VM is running; `opencode-sandbox shell -- true` against `msb exec NAME -- true`
  (target: ratio at most 1.5);
- after a stop: the VM was stopped (`msb stop`); the same `shell` (which starts it) against
  `msb start` followed by `msb exec` (target: at most 1.5);
- the interface: the VM running and opencode serve answering; `opencode-sandbox` on a real
  terminal (tmux) until opencode's interface shows, against `msb exec -t NAME -- opencode attach`
  on the same kind of terminal (target: at most 1.2).
One warm `shell -- true` is also traced: every msb, docker and git process it runs, with its
duration. `--without-interface` leaves the third case out and makes the VM with a `shell` instead
of `run --serve-only` (no opencode serve, whose start takes minutes under emulation; a warm
`shell` neither starts nor asks it).

Where the Docker engine is reached over TCP (the lab), a local unix socket is put in front of it,
as users' hosts have one (`common.forward_unix_to_tcp`). Where microVMs cannot boot it prints why
and exits 0. Needs `opencode-sandbox/runner-base:latest` in the Docker engine (any test run
builds it). Run: `bash scripts/kvm-lab.sh --user python bench/msb_warm_start.py [ROUNDS]
[--without-interface]` (default 3 rounds). The last line is the warm ratio.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    forward_unix_to_tcp,
    interleaved_medians,
    isolated_environment,
    launcher,
    serve_once,
    time_command,
    time_to_interface,
)
from bench.warm_start import clean_up as clean_up_docker
from opencode_sandbox.core.naming import BASE_IMAGE, LABEL_OPENCODE_VERSION, vm_name
from opencode_sandbox.core.slug import slug_for_remote
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from opencode_sandbox.runtime.microsandbox.kvm import probe_kvm

WARM_TARGET = 1.5
AFTER_STOP_TARGET = 1.5
INTERFACE_TARGET = 1.2

TRACING = """#!/bin/sh
began=$(date +%s.%N)
"{real}" "$@"
code=$?
echo "$began $(date +%s.%N) {label} $*" >> "{log}"
exit $code
"""


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout.strip()


def msb(*args: str) -> None:
    subprocess.run([str(locate_msb()), *args], stdin=subprocess.DEVNULL, capture_output=True, check=True)


def make_project(root: Path) -> tuple[Path, str]:
    project = root / "project"
    project.mkdir()
    remote = f"git@example.org:bench/msb-warm-{uuid.uuid4().hex[:10]}.git"
    for args in (["init", "-q"], ["remote", "add", "origin", remote]):
        subprocess.run(["git", *args], cwd=project, check=True)
    (project / "README.md").write_text("# bench\n")
    return project, slug_for_remote(remote)


def trace_launcher(tool: list[str], project: Path, env: dict[str, str], root: Path) -> list[tuple[float, str]]:
    """The msb, docker and git processes one warm `shell -- true` runs, with their durations."""
    log = root / "trace.log"
    folder = root / "traced"
    folder.mkdir()
    for label, real in (("msb", str(locate_msb())), ("docker", shutil.which("docker") or "docker"),
                        ("git", shutil.which("git") or "git")):
        wrapper = folder / label
        wrapper.write_text(TRACING.format(real=real, label=label, log=log))
        wrapper.chmod(0o755)
    traced = {**env, "MSB_PATH": str(folder / "msb"), "PATH": f"{folder}{os.pathsep}{env.get('PATH', '')}"}
    total = time_command(tool, project, traced)
    calls: list[tuple[float, str]] = []
    for line in log.read_text().splitlines() if log.exists() else []:
        began, _, rest = line.partition(" ")
        ended, _, args = rest.partition(" ")
        try:
            calls.append((float(ended) - float(began), args))
        except ValueError:  # a line of a multi-line argument (a script) of the call before
            if calls:
                calls[-1] = (calls[-1][0], f"{calls[-1][1]}\\n{line}")
    return [(total, "(the whole launcher)"), *calls]


def measure_interface(project: Path, env: dict[str, str], name: str, password_file: Path,
                      rounds: int) -> dict[str, float]:
    """Seconds to opencode's interface on a terminal: the launcher, and `msb exec -t ... attach`."""
    attach = [str(locate_msb()), "exec", "--quiet", "--user", "dev", "--workdir", "/workspace", "-t",
              "--env", "OPENCODE_SERVER_PASSWORD", name, "--", "opencode", "attach", "http://127.0.0.1:4096"]
    with_password = {**env, "OPENCODE_SERVER_PASSWORD": password_file.read_text().strip()}  # msb passes it on
    interface = interleaved_medians(  # minutes a round under emulation: the first round counts too
        {"launcher": lambda: time_to_interface(launcher(), project, env),
         "msb exec -t attach": lambda: time_to_interface(attach, project, with_password)},
        rounds=rounds, warmup=0,
    )
    print(f"to the interface (s): launcher {interface['launcher']:.1f}, msb exec -t attach "
          f"{interface['msb exec -t attach']:.1f}", flush=True)
    return interface


def clean_up(slug: str, env: dict[str, str]) -> None:
    name = vm_name(slug)
    for args in (["stop", "--force", "--quiet", name], ["remove", "--force", "--quiet", name]):
        subprocess.run([str(locate_msb()), *args], env=env, capture_output=True, check=False)
    clean_up_docker(slug)  # the reaper, and the project's image in the Docker engine


def main(rounds: int = 3, interface_too: bool = True) -> float | None:
    check = probe_kvm()
    if not check.ok:
        print(f"skipped: microVMs cannot boot here: {check.cause}")
        return None
    version = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL_OPENCODE_VERSION}"}}}}',
                     BASE_IMAGE)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = isolated_environment(root)
        env.update(OPENCODE_SANDBOX_RUNTIME="microsandbox", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h")
        if env.get("DOCKER_HOST", "").startswith("tcp://"):  # the lab: give the launcher a local socket
            forward_unix_to_tcp(root / "docker.sock", env["DOCKER_HOST"])
            env["DOCKER_HOST"] = f"unix://{root / 'docker.sock'}"
        os.environ.update(env)  # msb and the SDK of this process use the isolated MSB_HOME too
        state_dir = Path(env["XDG_STATE_HOME"]) / "opencode-sandbox"
        record_baked_version(state_dir, version)
        project, slug = make_project(root)
        name = vm_name(slug)
        tool = [*launcher(), "shell", "--", "true"]
        raw_exec = [str(locate_msb()), "exec", "--quiet", "--user", "dev", "--workdir", "/workspace", "--no-tty",
                    name, "--", "true"]
        interface: dict[str, float] = {}
        try:
            began = time.perf_counter()
            if interface_too:
                serve_once(launcher(), project, env)  # image, load, home, VM, serve
            else:
                subprocess.run(tool, cwd=project, env=env, stdin=subprocess.DEVNULL, check=True)
            print(f"first start (build, load, boot{', serve' if interface_too else ''}): "
                  f"{time.perf_counter() - began:.1f} s", flush=True)
            if interface_too:
                interface = measure_interface(project, env, name, state_dir / slug / "daemon-password", rounds)
            warm = interleaved_medians(
                {"launcher": lambda: time_command(tool, project, env), "msb exec": lambda: time_command(raw_exec)},
                rounds=rounds, warmup=1,
            )
            print(f"warm (s): launcher {warm['launcher']:.2f}, msb exec {warm['msb exec']:.2f}", flush=True)
            trace = trace_launcher(tool, project, env, root)

            def after_stop(commands: list[list[str]]) -> float:
                msb("stop", "--quiet", name)
                began = time.perf_counter()
                for argv in commands:
                    subprocess.run(argv, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, check=True)
                return time.perf_counter() - began

            stopped = interleaved_medians(
                {"launcher": lambda: after_stop([tool]),
                 "msb start + exec": lambda: after_stop([[str(locate_msb()), "start", "--quiet", name], raw_exec])},
                rounds=max(2, rounds - 1), warmup=1,
            )
        finally:
            clean_up(slug, env)
    print("\none warm `opencode-sandbox shell -- true`, traced (s):")
    for seconds, args in trace:
        print(f"  {seconds:>7.3f}  {args}")
    warm_ratio = warm["launcher"] / warm["msb exec"]
    stop_ratio = stopped["launcher"] / stopped["msb start + exec"]
    print(f"\n{'case':<12}{'launcher ms':>13}{'raw ms':>10}{'ratio':>8}{'target':>8}")
    print(f"{'after stop':<12}{stopped['launcher'] * 1000:>13.1f}{stopped['msb start + exec'] * 1000:>10.1f}"
          f"{stop_ratio:>8.2f}{AFTER_STOP_TARGET:>8.1f}")
    print(f"{'warm':<12}{warm['launcher'] * 1000:>13.1f}{warm['msb exec'] * 1000:>10.1f}{warm_ratio:>8.2f}"
          f"{WARM_TARGET:>8.1f}")
    if interface:
        interface_ratio = interface["launcher"] / interface["msb exec -t attach"]
        print(f"{'interface':<12}{interface['launcher'] * 1000:>13.1f}"
              f"{interface['msb exec -t attach'] * 1000:>10.1f}{interface_ratio:>8.2f}{INTERFACE_TARGET:>8.1f}")
        print(f"interface ratio (launcher / msb exec -t attach): {interface_ratio:.2f}")
    print(f"after-stop ratio (launcher / msb start + msb exec): {stop_ratio:.2f}")
    print(f"warm ratio (launcher / msb exec): {warm_ratio:.2f}")
    return warm_ratio


if __name__ == "__main__":
    arguments = [argument for argument in sys.argv[1:] if argument != "--without-interface"]
    main(int(arguments[0]) if arguments else 3, interface_too="--without-interface" not in sys.argv[1:])
