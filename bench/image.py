"""Warm-path cost of the image check: a no-op `ensure_project_image` (everything up to
date) against a fully cached `docker build` of the same Dockerfile, in one process.

Run: .venv/bin/python bench/image.py [--rounds N]
The last line is the ratio (target <= 0.5).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from opencode_sandbox.core.naming import BASE_IMAGE, LABEL_OPENCODE_VERSION, LABEL_SLUG
from opencode_sandbox.engine.docker import DockerImageEngine
from opencode_sandbox.images.builder import ensure_base_image, ensure_project_image
from opencode_sandbox.images.progress import SilentProgress
from opencode_sandbox.images.updater import resolve_opencode_version

DOCKERFILE = (
    f"FROM {BASE_IMAGE}\n"
    "USER root\n"
    "RUN mkdir -p /opt/project-tools && echo ready > /opt/project-tools/state\n"
    "ENV PATH=/opt/project-tools:$PATH\n"
    "USER dev\n"
)


def median_seconds(action: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def opencode_version(engine: DockerImageEngine) -> str:
    existing = engine.inspect_image(BASE_IMAGE) or {}
    label = ((existing.get("Config") or {}).get("Labels") or {}).get(LABEL_OPENCODE_VERSION)
    return str(label) if label else resolve_opencode_version(None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds

    version = opencode_version(DockerImageEngine())
    ensure_base_image(dind=False, opencode_version=version, trust_host_ca=True, progress=SilentProgress())
    slug = "bench-" + uuid.uuid4().hex[:14]
    plain_tag = f"opencode-sandbox-bench/plain-build:{slug}"
    with tempfile.TemporaryDirectory(prefix="opencode-sandbox-bench-") as temporary:
        project = Path(temporary)
        (project / ".opencode-sandbox").mkdir()
        (project / ".opencode-sandbox" / "Dockerfile").write_text(DOCKERFILE)
        plain_context = Path(temporary) / "plain"
        plain_context.mkdir()
        (plain_context / "Dockerfile").write_text(DOCKERFILE)

        def ensure() -> object:
            return ensure_project_image(
                project_dir=project,
                slug=slug,
                dind=False,
                opencode_version=version,
                trust_host_ca=True,
                progress=SilentProgress(),
            )

        def plain_build() -> object:
            return subprocess.run(
                ["docker", "build", "-q", "-t", plain_tag, str(plain_context)],
                capture_output=True,
                check=True,
            )

        try:
            first = ensure()
            plain_build()
            assert getattr(first, "built", None) is not None
            noop = median_seconds(ensure, rounds)
            cached = median_seconds(plain_build, rounds)
        finally:
            ids = subprocess.run(
                ["docker", "image", "ls", "-q", "--filter", f"label={LABEL_SLUG}={slug}"],
                capture_output=True,
                text=True,
            ).stdout.split()
            subprocess.run(["docker", "image", "rm", "--force", plain_tag, *ids], capture_output=True)

    print(f"no-op ensure_project_image: {noop * 1000:.1f} ms (median of {rounds})")
    print(f"cached docker build:        {cached * 1000:.1f} ms (median of {rounds})")
    print(f"ratio {noop / cached:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
