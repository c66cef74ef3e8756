"""A checkout's configuration of a few hundred bytes whose YAML aliases stand for a list of billions
of items: the start refuses it with a short error instead of spelling the value out (which took
34 MB at depth 7, and all of the host's memory a few levels deeper)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

DEPTH = 9


def bomb(key: str) -> str:
    """`key`'s value: a list whose last item stands for 10 ** DEPTH items through its aliases."""
    lines = [f"{key}:", "  - &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  - &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]" for level in range(1, DEPTH)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("key", ["agent", "runtime", "memory", "auto-stop-timeout", "workspace"])
def test_a_value_made_of_aliases_is_refused_within_little_memory(key: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(bomb(key))
    assert len(config.read_bytes()) < 600
    probe = ("import sys\nfrom pathlib import Path\nfrom opencode_sandbox.config import keys, loader\n"
             "from opencode_sandbox.errors import SandboxError\n"
             "raw = loader.read_file(Path(sys.argv[1]))[sys.argv[2]]\n"
             "key = next(k for k in keys.KEYS if k.name == sys.argv[2])\n"
             "try:\n    loader._convert(key, raw)\nexcept SandboxError as error:\n    print(len(error.message))\n")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    done = subprocess.run([sys.executable, "-c", probe, str(config), key], capture_output=True, text=True,
                          timeout=60, preexec_fn=limited)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 0 < int(done.stdout) < 400, "a short error names the value's kind"
