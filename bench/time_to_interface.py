"""Time to the interface from nothing on the docker runtime, against Docker alone.

The launcher: `opencode-sandbox` in a checkout with no project image and no VM, on a real
terminal (tmux), until opencode's interface shows. The raw steps a person would take with Docker
for the same: `docker build` of the Dockerfile the tool builds (`build dockerfile`), `docker run`
of a container with a home volume filled from the image and the checkout mounted, `opencode serve`
started by `docker exec`, a wait until it answers, and `docker exec -it ... opencode attach` on the
same kind of terminal until the interface shows. Rounds alternate, each from nothing: every
image, container and volume of a round is removed before the next.

Target: ratio at most 1.2. Needs `opencode-sandbox/runner-base:latest` in the Docker engine and
tmux. Run: .venv/bin/python bench/time_to_interface.py [ROUNDS]. The last line is the ratio.
"""

from __future__ import annotations

import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Terminal, isolated_environment, launcher, time_to_interface, until
from bench.warm_start import BASE_IMAGE, LABEL_OPENCODE_VERSION, clean_up, docker, make_project
from opencode_sandbox.daemon.health import is_serving
from opencode_sandbox.images.updater import record_baked_version

TARGET = 1.2


def with_the_launcher(root: Path, env: dict[str, str]) -> float:
    project, slug = make_project(Path(tempfile.mkdtemp(dir=root)))
    try:
        return time_to_interface(launcher(), project, env)
    finally:
        clean_up(slug)


def with_docker_alone(root: Path, env: dict[str, str], dockerfile: str) -> float:
    project, _ = make_project(Path(tempfile.mkdtemp(dir=root)))
    name = f"osb-bench-raw-{uuid.uuid4().hex[:10]}"
    password = secrets.token_urlsafe(24)
    began = time.perf_counter()
    terminal: Terminal | None = None
    try:
        subprocess.run(["docker", "build", "-q", "-t", f"{name}:raw", "-f", "-", str(project)],
                       input=dockerfile.encode(), capture_output=True, check=True)
        docker("run", "--detach", "--name", name, "--init", "--user", "root", "--mount",
               f"type=volume,source={name},target=/home/dev", "--mount",
               f"type=bind,source={project},target=/workspace", "--publish", "127.0.0.1::4096",
               "--entrypoint", "sleep", f"{name}:raw", "infinity")
        port = docker("port", name, "4096/tcp").rsplit(":", 1)[-1]
        subprocess.run(["docker", "exec", "--detach", "--user", "dev", "--workdir", "/workspace", "--env",
                        "OPENCODE_SERVER_PASSWORD", name, "opencode", "serve", "--hostname", "::", "--port", "4096"],
                       env={**env, "OPENCODE_SERVER_PASSWORD": password}, check=True)
        until(lambda: is_serving(f"http://127.0.0.1:{port}", password), "opencode serve answering")
        terminal = Terminal(["docker", "exec", "-it", "--user", "dev", "--workdir", "/workspace", "--env",
                             "OPENCODE_SERVER_PASSWORD", name, "opencode", "attach", "http://127.0.0.1:4096"],
                            project, {**env, "OPENCODE_SERVER_PASSWORD": password})
        until(terminal.shows_interface, "opencode's interface through docker exec")
        return time.perf_counter() - began
    finally:
        if terminal is not None:
            terminal.close()
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False)
        subprocess.run(["docker", "volume", "rm", "--force", name], capture_output=True, check=False)
        subprocess.run(["docker", "image", "rm", "--force", f"{name}:raw"], capture_output=True, check=False)


def main(rounds: int = 3) -> float:
    version = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL_OPENCODE_VERSION}"}}}}',
                     BASE_IMAGE)
    samples: dict[str, list[float]] = {"launcher": [], "docker alone": []}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = isolated_environment(root)
        env.update(OPENCODE_SANDBOX_RUNTIME="docker", OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT="1h")
        record_baked_version(Path(env["XDG_STATE_HOME"]) / "opencode-sandbox", version)
        dockerfile = subprocess.run([*launcher(), "build", "dockerfile"], cwd=root, env=env, capture_output=True,
                                    text=True, check=True).stdout
        for round_number in range(rounds + 1):  # the first round warms the engine's caches and is not counted
            for name, measure in (("launcher", lambda: with_the_launcher(root, env)),
                                  ("docker alone", lambda: with_docker_alone(root, env, dockerfile))):
                seconds = measure()
                if round_number:
                    samples[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratio = medians["launcher"] / medians["docker alone"]
    print(f"{'way':<14}{'median s':>10}   rounds: {rounds}")
    for name, seconds in medians.items():
        print(f"{name:<14}{seconds:>10.2f}")
    print(f"time-to-interface ratio (launcher / docker build, run, exec serve, exec attach): {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
