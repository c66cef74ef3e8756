"""Starting work in a project's VM: `opencode-sandbox shell -- true` against the raw Docker CLI.

Two comparisons on the docker runtime, in one process, with an isolated HOME:
- warm: the VM is running; the launcher against `docker exec <container> true`
  (target: ratio at most 2.0);
- after a stop: the VM was stopped; the launcher (which starts it and its opencode server
  again) against `docker start` followed by `docker exec` (target: ratio at most 1.5).

Needs `opencode-sandbox/runner-base:latest` in the Docker engine (any test run builds it).
Run: .venv/bin/python bench/warm_start.py [ROUNDS] [--slowed-by MS] [--warm-rounds N]. The last line
is the warm ratio. `--slowed-by MS` runs the launcher MS milliseconds late every time: a deliberately slowed
start, which the CI check of the ratios must catch (`tests/performance`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import interleaved_medians, isolated_environment, launcher, serve_once, time_command
from opencode_sandbox.core.naming import (
    BASE_IMAGE,
    LABEL_OPENCODE_VERSION,
    LABEL_SLUG,
    vm_name,
)
from opencode_sandbox.core.slug import slug_for_remote
from opencode_sandbox.images.updater import record_baked_version
from opencode_sandbox.runtime.docker.identity import forget_mapped_mounts

WARM_TARGET = 2.0
AFTER_STOP_TARGET = 1.5
DEV_UID = 1000


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout.strip()


def make_project(root: Path, shared: bool = True) -> tuple[Path, str]:
    project = root / "project"
    project.mkdir()
    remote = f"git@example.org:bench/warm-{uuid.uuid4().hex[:10]}.git"
    for args in (["init", "-q"], ["remote", "add", "origin", remote]):
        subprocess.run(["git", *args], cwd=project, check=True)
    (project / "README.md").write_text("# bench\n")
    if os.geteuid() == 0 and shared:  # the VM's user dev has uid 1000 and works in the mounted checkout
        subprocess.run(["chown", "-R", f"{DEV_UID}:{DEV_UID}", str(project)], check=True)
    return project, slug_for_remote(remote)


def clean_up(slug: str) -> None:
    container = vm_name(slug)
    for each in subprocess.run(["docker", "ps", "--all", "--quiet", "--filter", f"label={LABEL_SLUG}={slug}"],
                               capture_output=True, text=True, check=False).stdout.split():
        subprocess.run(["docker", "rm", "--force", each], capture_output=True, check=False)  # the VM, its holder
    if os.geteuid() == 0:  # a root host user's id-mapped mounts of the VM
        forget_mapped_mounts(container)
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if "services.reaper" in args and slug in args:
            subprocess.run(["kill", "-KILL", pid], check=False)
    for kind, extra, remove in (("volume", [], ["--force"]), ("image", ["--all"], ["--force"]), ("network", [], [])):
        names = subprocess.run(["docker", kind, "ls", "--quiet", *extra, "--filter", f"label={LABEL_SLUG}={slug}"],
                               capture_output=True, text=True, check=False).stdout.split()
        for name in dict.fromkeys(names):
            subprocess.run(["docker", kind, "rm", *remove, name], capture_output=True, check=False)


def slowed(command: list[str], milliseconds: int) -> list[str]:
    """`command`, started `milliseconds` late by a shell that then becomes it."""
    return ["sh", "-c", f'sleep {milliseconds / 1000:.3f}; exec "$0" "$@"', *command] if milliseconds else command


def main(rounds: int = 10, slowed_by_ms: int = 0, workspace: str = "shared", warm_rounds: int | None = None) -> float:
    """`warm_rounds`: rounds of the warm case when not `rounds`; a round of it takes a tenth of one after a stop."""
    version = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL_OPENCODE_VERSION}"}}}}',
                     BASE_IMAGE)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = isolated_environment(root)
        env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h",
                   OPENCODE_SANDBOX_WORKSPACE=workspace)
        state_dir = Path(env["XDG_STATE_HOME"]) / "opencode-sandbox"
        record_baked_version(state_dir, version)
        project, slug = make_project(root, shared=workspace == "shared")
        container = vm_name(slug)
        tool = slowed([*launcher(), "shell", "--", "true"], slowed_by_ms)
        raw_exec = ["docker", "exec", "--user", "dev", "--workdir", "/workspace", container, "true"]
        try:
            serve_once(launcher(), project, env)  # first boot: image, home volume, VM, daemon

            warm = interleaved_medians(
                {"launcher": lambda: time_command(tool, project, env), "docker exec": lambda: time_command(raw_exec)},
                rounds=warm_rounds or rounds,
            )

            def after_stop(command: list[list[str]]) -> float:
                docker("stop", "--time", "1", container)
                began = time.perf_counter()
                for argv in command:
                    subprocess.run(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   check=True)
                return time.perf_counter() - began

            stopped = interleaved_medians(
                {"launcher": lambda: after_stop([tool]),
                 "docker start + exec": lambda: after_stop([["docker", "start", container], raw_exec])},
                rounds=rounds, warmup=1,
            )
        finally:
            clean_up(slug)
    warm_ratio = warm["launcher"] / warm["docker exec"]
    stop_ratio = stopped["launcher"] / stopped["docker start + exec"]
    print(f"workspace: {workspace}")
    print(f"{'case':<12}{'launcher ms':>13}{'raw ms':>10}{'ratio':>8}{'target':>8}")
    print(f"{'after stop':<12}{stopped['launcher'] * 1000:>13.1f}{stopped['docker start + exec'] * 1000:>10.1f}"
          f"{stop_ratio:>8.2f}{AFTER_STOP_TARGET:>8.1f}")
    print(f"{'warm':<12}{warm['launcher'] * 1000:>13.1f}{warm['docker exec'] * 1000:>10.1f}"
          f"{warm_ratio:>8.2f}{WARM_TARGET:>8.1f}")
    print(f"after-stop ratio (launcher / docker start + docker exec): {stop_ratio:.2f}")
    print(f"warm ratio (launcher / docker exec): {warm_ratio:.2f}")
    return warm_ratio


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=10)
    parser.add_argument("--slowed-by", type=int, default=0, metavar="MS")
    parser.add_argument("--warm-rounds", type=int, default=None, metavar="N",
                        help="rounds of the warm case (default: ROUNDS)")
    arguments = parser.parse_args()
    main(arguments.rounds, arguments.slowed_by, warm_rounds=arguments.warm_rounds)
