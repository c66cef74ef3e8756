"""The host's fast-forward to the VM's commits, on a checkout of one file and on one of many.

The sync moves the host's branch when the work tree already holds the VM's new commit. Git's own
check of that (an index of the commit refreshed against the work tree, then `git diff-files`)
reads every file of the checkout; the tool's (`services/git_sync/fast_forward.py`) hashes only
the files the commit changed. What cannot shrink is git's index: any move of a branch that keeps
the index in step reads and rewrites it whole. So the raw tool is the least git does to move the
branch and one index entry (`git update-ref`, then `git update-index --index-info`).

All three are timed, in one process, on a checkout of one file and on one of FILES files
(200,000 by default, in 2,000 folders), each moving the branch over a commit that changes one
file. The last line is the tool against the raw tool on the large checkout (target: at most 1.5:
what the tool adds does not grow with the checkout).
Run: .venv/bin/python bench/git_fast_forward.py [ROUNDS] [FILES]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencode_sandbox.services.git_sync.fast_forward import fast_forward

TARGET = 1.5
GITS_OWN_CHECK = r"""
set -eu
scratch="$(git rev-parse --git-dir)/index.bench.$$"
trap 'rm -f "$scratch"' EXIT
GIT_INDEX_FILE=$scratch git read-tree "$1"
GIT_INDEX_FILE=$scratch git update-index -q --refresh >/dev/null || true
GIT_INDEX_FILE=$scratch git diff-files --quiet
"""


def git(root: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@example.org", "-c", "gc.auto=0",
                           "-c", "maintenance.auto=false", *args], cwd=root,
                          input=stdin, capture_output=True, text=True, check=True).stdout.strip()


def checkout(folder: Path, files: int) -> tuple[Path, str, str]:
    """A repository of `files` files, its HEAD, and a commit on top that changes one of them, whose
    content the work tree already holds (as the VM's commits are in the shared checkout)."""
    root = folder / f"checkout-{files}"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    per_folder = max(1, files // 2000)
    for index in range(files):
        path = root / f"d{index // per_folder:04d}" / f"f{index}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"{index}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "status", "--porcelain")  # the index knows every file's stat, as a user's does
    old = git(root, "rev-parse", "HEAD")
    changed = root / "d0000" / "f0.txt"
    changed.write_text("the VM's\n")
    scratch = {**os.environ, "GIT_INDEX_FILE": str(root / ".git" / "bench-index")}
    subprocess.run(["git", "read-tree", old], cwd=root, env=scratch, check=True)
    subprocess.run(["git", "add", "d0000/f0.txt"], cwd=root, env=scratch, check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=root, env=scratch, capture_output=True, text=True,
                          check=True).stdout.strip()
    new = git(root, "commit-tree", "-p", old, "-m", "the VM's", tree)
    git(root, "update-ref", "refs/sandbox/heads/main", new)
    return root, old, new


def timed_tool(root: Path, old: str, new: str) -> float:
    began = time.perf_counter()
    said = fast_forward(root, root / ".git", "refs/sandbox/heads/", "bench", (), "sha1")
    spent = time.perf_counter() - began
    assert said == "moved main", said
    git(root, "update-ref", "refs/heads/main", old, new)
    git(root, "read-tree", "-m", "-i", new, old)  # the old state again, off the clock
    return spent


def timed_raw(root: Path, old: str, new: str) -> float:
    blob = git(root, "rev-parse", f"{new}:d0000/f0.txt")
    began = time.perf_counter()
    git(root, "update-ref", "-m", "bench", "refs/heads/main", new, old)
    git(root, "update-index", "--index-info", stdin=f"100644 {blob}\td0000/f0.txt\n")
    spent = time.perf_counter() - began
    git(root, "update-ref", "refs/heads/main", old, new)
    git(root, "read-tree", "-m", "-i", new, old)
    return spent


def timed_gits_own(root: Path, new: str) -> float:
    began = time.perf_counter()
    subprocess.run(["sh", "-c", GITS_OWN_CHECK, "check", new], cwd=root, check=True, capture_output=True)
    return time.perf_counter() - began


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    many = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    with tempfile.TemporaryDirectory(prefix="bench-ff-") as scratch:
        small = checkout(Path(scratch), 1)
        large = checkout(Path(scratch), many)
        tool: dict[int, list[float]] = {1: [], many: []}
        raw: dict[int, list[float]] = {1: [], many: []}
        own: dict[int, list[float]] = {1: [], many: []}
        for _ in range(rounds):
            for files, (root, old, new) in ((1, small), (many, large)):
                tool[files].append(timed_tool(root, old, new))
                raw[files].append(timed_raw(root, old, new))
                own[files].append(timed_gits_own(root, new))
    print(f"{'files':>8} {'tool ms':>9} {'raw ms':>8} {'git check ms':>13}")
    for files in (1, many):
        print(f"{files:>8} {median(tool[files]) * 1000:>9.1f} {median(raw[files]) * 1000:>8.1f} "
              f"{median(own[files]) * 1000:>13.1f}")
    print(f"tool, {many} files against 1: {median(tool[many]) / median(tool[1]):.2f}; "
          f"git's own check: {median(own[many]) / median(own[1]):.2f}")
    print(f"tool against raw, {many} files (target at most {TARGET}): {median(tool[many]) / median(raw[many]):.2f}")


if __name__ == "__main__":
    main()
