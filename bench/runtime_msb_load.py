"""Loading a Docker image into microsandbox: the backend's streamed `docker save | msb load`
against `docker save -o FILE` followed by `msb load -i FILE`, side by side.

Each variant runs in its own fresh interpreter (the launcher, with the same modules
imported) and its own MSB_HOME; the launcher's peak resident memory is what the stream
must not inflate. Target: ratio streamed/file at most 1.05: the stream's own buffers (a pipe's,
a read's) take about 100 KiB more than running two commands, which put the ratio at 1.00 or 1.01
from run to run; an image held in memory (64 MiB here) would put it above 5. The last line is
the ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import isolated_environment

TARGET = 1.05

STREAMED = """
import json, resource, time
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
start = time.perf_counter()
MicrosandboxRuntime().load_image({reference!r})
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""

FROM_FILE = """
import json, os, resource, subprocess, time
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
archive = {archive!r}
start = time.perf_counter()
subprocess.run(["docker", "save", "-o", archive, {reference!r}], check=True)
size = os.path.getsize(archive)
subprocess.run([str(locate_msb()), "load", "--quiet", "--input", archive], check=True,
               stdout=subprocess.DEVNULL)
os.remove(archive)
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "archive_bytes": size}}))
"""


def run_variant(code: str, root: Path) -> dict[str, float]:
    env = isolated_environment(root)
    env["MSB_HOME"] = str(root / "msb")
    completed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def build_image(reference: str, folder: Path) -> None:
    (folder / "Dockerfile").write_text(
        "FROM debian:trixie-slim\nRUN head -c 67108864 /dev/urandom > /opt/payload && useradd -m dev\n"
    )
    subprocess.run(["docker", "build", "-q", "-t", reference, str(folder)], check=True,
                   capture_output=True)  # fmt: skip


def main() -> float:
    reference = f"opencode-sandbox-bench/msb-load-{uuid.uuid4().hex[:10]}:latest"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        build_image(reference, root)
        try:
            streamed_root, file_root = root / "streamed", root / "file"
            streamed_root.mkdir()
            file_root.mkdir()
            streamed = run_variant(STREAMED.format(reference=reference), streamed_root)
            from_file = run_variant(
                FROM_FILE.format(reference=reference, archive=str(file_root / "image.tar")),
                file_root,
            )
        finally:
            subprocess.run(["docker", "rmi", "-f", reference], capture_output=True, check=False)
    print(f"image archive:              {from_file['archive_bytes'] / 2**20:8.1f} MiB")
    print(
        f"streamed  docker save | msb load: {streamed['seconds']:6.2f} s, "
        f"launcher peak {streamed['peak_kib'] / 1024:6.1f} MiB, no temporary file"
    )
    print(
        f"from file save -o, load -i:       {from_file['seconds']:6.2f} s, "
        f"launcher peak {from_file['peak_kib'] / 1024:6.1f} MiB, "
        f"temporary file {from_file['archive_bytes'] / 2**20:.1f} MiB"
    )
    ratio = streamed["peak_kib"] / from_file["peak_kib"]
    print(f"peak memory ratio streamed/file (target <= {TARGET}): {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    # ru_maxrss moves by a few KiB between runs: compare at the precision printed.
    main()
