"""Docker runtime overhead: each operation through `DockerRuntime` next to the bare `docker` CLI.

Run with `python bench/runtime.py [ROUNDS]` on a host whose Docker engine has
`debian:trixie-slim`. The last line is the worst ratio (target: at most 1.3).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.runtime.docker import seccomp
from opencode_sandbox.runtime.docker.args import run_args, sandbox_labels
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec

IMAGE = "debian:trixie-slim"
OPERATIONS = ("create", "get", "exec", "stop", "start")


def docker(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True)


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def make_spec(workspace: Path) -> SandboxSpec:
    slug = "bench-" + uuid.uuid4().hex[:14]
    return SandboxSpec(
        name=vm_name(slug),
        image=IMAGE,
        cpus=1,
        memory_mib=512,
        labels=managed_labels(slug),
        mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),),
        published_ports=(4096,),
    )


def round_through_runtime(runtime: DockerRuntime, spec: SandboxSpec) -> dict[str, float]:
    try:
        return {
            "create": timed(lambda: runtime.create_sandbox(spec)),
            "get": timed(lambda: runtime.get_sandbox(spec.name)),
            "exec": timed(lambda: runtime.exec(spec.name, ["true"], user="root")),
            "stop": timed(lambda: runtime.stop_sandbox(spec.name, timeout_s=10)),
            "start": timed(lambda: runtime.start_sandbox(spec.name)),
        }
    finally:
        docker("rm", "--force", spec.name)


def round_through_cli(spec: SandboxSpec) -> dict[str, float]:
    slug = spec.labels["org.opencode-sandbox.slug"]
    # The same confinement the runtime gives a VM: its seccomp profile (`runtime/docker/seccomp.py`).
    args = run_args(spec, sandbox_labels(spec.labels, slug), privileged=False,
                    seccomp=str(seccomp.written_profile()))
    exec_args = ["exec", "--user", "root", "--workdir", "/workspace", spec.name, "true"]
    try:
        return {
            "create": timed(lambda: docker(*args)),
            "get": timed(lambda: docker("inspect", "--type", "container", spec.name)),
            "exec": timed(lambda: docker(*exec_args)),
            "stop": timed(lambda: docker("stop", "--time", "10", spec.name)),
            "start": timed(lambda: docker("start", spec.name)),
        }
    finally:
        docker("rm", "--force", spec.name)


def main(rounds: int) -> None:
    runtime = DockerRuntime()
    through_runtime: dict[str, list[float]] = {name: [] for name in OPERATIONS}
    through_cli: dict[str, list[float]] = {name: [] for name in OPERATIONS}
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        round_through_cli(make_spec(workspace))  # warm the engine's caches
        for _ in range(rounds):
            for name, seconds in round_through_runtime(runtime, make_spec(workspace)).items():
                through_runtime[name].append(seconds)
            for name, seconds in round_through_cli(make_spec(workspace)).items():
                through_cli[name].append(seconds)
    worst = 0.0
    print(f"{'operation':<10} {'runtime ms':>11} {'docker ms':>10} {'ratio':>6}")
    for name in OPERATIONS:
        ours = statistics.median(through_runtime[name])
        bare = statistics.median(through_cli[name])
        ratio = ours / bare
        worst = max(worst, ratio)
        print(f"{name:<10} {ours * 1000:>11.1f} {bare * 1000:>10.1f} {ratio:>6.2f}")
    print(f"worst ratio: {worst:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
