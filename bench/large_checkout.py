"""What a checkout's size costs: a warm `opencode-sandbox shell -- true` on a checkout of 200,000
files in 2,000 folders against the same on a checkout of one file, on the docker runtime, in one
process with an isolated HOME (target: ratio at most 1.3). Also, on the large checkout: the idle
reaper's share of a core over `IDLE_S` seconds (target: at most 1 %), and how long a guarded file
the VM changes stays changed before the reaper puts it back (target: at most 1 s).

With `--isolated`, the same in the isolated workspace (the VM's own work tree, seeded from the
checkout): no guard runs there, so nothing is put back and that line is left out.

Needs `opencode-sandbox/runner-base:latest` in the Docker engine (any test run builds it).
Run: .venv/bin/python bench/large_checkout.py [ROUNDS] [--files N] [--isolated]. The last line is the ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import interleaved_medians, isolated_environment, launcher, serve_once, time_command
from bench.warm_start import clean_up, docker, make_project
from opencode_sandbox.core.naming import BASE_IMAGE, LABEL_OPENCODE_VERSION, vm_name
from opencode_sandbox.images.updater import record_baked_version

RATIO_TARGET = 1.3
IDLE_CPU_TARGET = 0.01
PUT_BACK_TARGET_S = 1.0
FOLDERS = 2000
IDLE_S = 30.0


def fill(project: Path, files: int) -> None:
    per_folder = max(1, files // FOLDERS)
    for index in range(min(FOLDERS, files)):
        folder = project / "node_modules" / f"p{index // 100}" / f"m{index}"
        folder.mkdir(parents=True)
        for each in range(per_folder):
            (folder / f"f{each}.js").write_bytes(b"module.exports = 1;\n")



def reaper_pids(state_dir: Path) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"services.reaper --state-root {state_dir}"],
                           capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def put_back_s(project: Path, container: str) -> float:
    """From the VM's write of `.envrc` to the moment the host's checkout no longer holds it."""
    target = project / ".envrc"
    began = time.perf_counter()
    written = subprocess.run(["docker", "exec", "--user", "dev", "--workdir", "/workspace", container, "sh", "-c",
                              "echo id > .envrc"], capture_output=True, text=True)
    if written.returncode != 0:
        raise SystemExit(f"the VM could not write .envrc: {written.stderr}")
    while target.exists():
        if time.perf_counter() - began > 60:
            return float("inf")
        time.sleep(0.01)
    return time.perf_counter() - began


def main(rounds: int = 7, files: int = 200_000, isolated: bool = False) -> float:
    version = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL_OPENCODE_VERSION}"}}}}',
                     BASE_IMAGE)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        envs, projects, slugs = {}, {}, {}
        for name, count in (("one file", 0), ("large", files)):
            home = root / name.replace(" ", "-")
            home.mkdir()
            env = isolated_environment(home)
            env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h",
                       OPENCODE_SANDBOX_WORKSPACE="isolated" if isolated else "shared")
            record_baked_version(Path(env["XDG_STATE_HOME"]) / "opencode-sandbox", version)
            project, slug = make_project(home)
            # The checkout is this user's, as a user's own is: the VM writes it through the runtime's mapping.
            subprocess.run(["chown", "-R", f"{os.geteuid()}:{os.getegid()}", str(project)], check=True)
            if count:
                fill(project, count)
            envs[name], projects[name], slugs[name] = env, project, slug
        tool = [*launcher(), "shell", "--", "true"]
        try:
            for name in envs:
                serve_once(launcher(), projects[name], envs[name])
            medians = interleaved_medians(
                {name: (lambda name=name: time_command(tool, projects[name], envs[name])) for name in envs},
                rounds=rounds,
            )
            state_dir = Path(envs["large"]["XDG_STATE_HOME"]) / "opencode-sandbox"
            pids = reaper_pids(state_dir)
            time.sleep(3)  # the look after the last start
            before, began = cpu_seconds(pids), time.monotonic()
            time.sleep(IDLE_S)
            idle = (cpu_seconds(pids) - before) / (time.monotonic() - began)
            latencies = [] if isolated else sorted(put_back_s(projects["large"], vm_name(slugs["large"]))
                                                   for _ in range(5))
        finally:
            for slug in slugs.values():
                clean_up(slug)
    ratio = medians["large"] / medians["one file"]
    print(f"workspace: {'isolated' if isolated else 'shared'}")
    print(f"{'case':<28}{'figure':>12}{'target':>10}")
    print(f"{'warm start, one file':<28}{medians['one file'] * 1000:>10.1f}ms")
    print(f"{f'warm start, {files} files':<28}{medians['large'] * 1000:>10.1f}ms")
    print(f"{'idle reaper, share of a core':<28}{idle * 100:>11.2f}%{IDLE_CPU_TARGET * 100:>9.0f}%")
    if latencies:
        put_back = latencies[len(latencies) // 2]
        print(f"{'put back (median of 5)':<28}{put_back * 1000:>10.0f}ms{PUT_BACK_TARGET_S * 1000:>8.0f}ms")
    print(f"ratio (large checkout / one file): {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=7)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--isolated", action="store_true", help="run in the isolated workspace")
    arguments = parser.parse_args()
    main(arguments.rounds, arguments.files, arguments.isolated)
