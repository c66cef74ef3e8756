"""The host's checked-out branch moved to the VM's commits, judged from object data.

Git's own way to tell whether the work tree holds a commit (`diff-files` over an index of it)
looks into every gitlink's folder, which runs that repository's configuration. Here git only
compares commits and trees; the files the VM's commits changed are hashed by the tool itself, read
without following a link, each only when its size is the blob's. So the cost follows what the
commits changed, not the size of the checkout, and nothing in the work tree configures anything.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from opencode_sandbox.core.vm_commits import (
    ABSENT,
    EMPTY_TREE,
    EXECUTABLE,
    GITLINK,
    SYMLINK,
    TreeChange,
    held_reasons,
)
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.trees import changes_between

BUSY = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG", "rebase-merge", "rebase-apply")
"""What git leaves in a worktree's git directory while an operation waits on the user."""
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024
PATHS_PER_CALL = 1000
"""Paths named on one `git ls-files` command line, well within any system's argument limit."""


def fast_forward(root: Path, git_dir: Path, prefix: str, message: str, guarded: Sequence[str],
                 object_format: str) -> str:
    """Moves the checked-out branch to `prefix<branch>` when that only adds commits, nothing is in
    progress or staged at a path they change, none of the changes is one the host holds, and the
    work tree already holds every file they changed; says `moved B`, or why not (`busy`, `diverged`, `staged`,
    `held`, `differs`), or nothing when there is nothing to do."""
    head = host_git.text(root, "symbolic-ref", "-q", "HEAD")
    if not head.startswith("refs/heads/"):
        return ""
    branch = head.removeprefix("refs/heads/")
    new = host_git.text(root, "rev-parse", "-q", "--verify", f"{prefix}{branch}^{{commit}}")
    old = host_git.text(root, "rev-parse", "-q", "--verify", "HEAD^{commit}")
    if not new or not old or old == new or host_git.succeeds(root, "merge-base", "--is-ancestor", new, old):
        return ""
    if any(os.path.lexists(git_dir / marker) for marker in BUSY):
        return f"busy {branch}"
    if not host_git.succeeds(root, "merge-base", "--is-ancestor", old, new):
        return f"diverged {branch}"
    try:
        changed = changes_between(root, old, new)
    except host_git.TooMuch:
        return f"differs {branch}"  # more changed paths than the host reads: `git merge` takes them
    if staged_among(root, changed):
        return f"staged {branch}"
    if held_reasons(changed, guarded):
        return f"held {branch}"
    if not work_tree_holds(root, changed, blob_sizes(root, changed), object_format):
        return f"differs {branch}"
    host_git.run(root, "update-ref", "-m", message, f"refs/heads/{branch}", new, old)
    # Only the changed entries of the index follow, from the commit's objects: the rest keep what
    # git knew of them, and the work tree is not read (`read-tree -m` would unpack both trees whole).
    host_git.run(root, "update-index", "-z", "--index-info", stdin=index_info(changed, object_format))
    return f"moved {branch}"


def index_info(changed: Sequence[TreeChange], object_format: str) -> bytes:
    """`git update-index -z --index-info` lines that give each changed path its entry in the newer
    commit, or remove it."""
    lines = []
    for change in changed:
        path = change.path.encode("utf-8", errors="surrogateescape")
        if change.new_mode == ABSENT:
            lines.append(b"0 " + b"0" * len(EMPTY_TREE[object_format]) + b"\t" + path + b"\0")
        else:
            lines.append(f"{change.new_mode} {change.new_id}\t".encode() + path + b"\0")
    return b"".join(lines)


def staged_among(root: Path, changed: Sequence[TreeChange]) -> bool:
    """Whether the index holds, for a path the new commits change, anything but the older commit's
    entry: something the user staged there, or a conflict. Only those entries are rewritten, so
    what is staged elsewhere stays staged; reading them alone spares a walk of the whole tree."""
    if not changed:
        return False
    entries: dict[str, list[str]] = {}
    for start in range(0, len(changed), PATHS_PER_CALL):
        paths = [change.path for change in changed[start:start + PATHS_PER_CALL]]
        listed = host_git.run(root, "--literal-pathspecs", "ls-files", "-s", "-z", "--", *paths).stdout
        for record in listed.split(b"\0"):
            head, _, path = record.partition(b"\t")
            if head:
                entries.setdefault(path.decode("utf-8", errors="surrogateescape"), []).append(head.decode())
    for change in changed:
        found = entries.get(change.path, [])
        expected = [] if change.old_mode == ABSENT else [f"{change.old_mode} {change.old_id} 0"]
        if found != expected:
            return True
    return False


def blob_sizes(root: Path, changed: Sequence[TreeChange]) -> dict[str, int]:
    """The size of each blob the changes bring, as the host's object store holds it."""
    wanted = sorted({change.new_id for change in changed if change.new_mode not in (ABSENT, GITLINK)})
    if not wanted:
        return {}
    listed = host_git.run(root, "cat-file", "--batch-check=%(objectname) %(objectsize)",
                          stdin="".join(f"{object_id}\n" for object_id in wanted).encode())
    sizes: dict[str, int] = {}
    for line in listed.stdout.decode(errors="replace").splitlines():
        object_id, _, size = line.partition(" ")
        if size.isdigit():
            sizes[object_id] = int(size)
    return sizes


def work_tree_holds(root: Path, changed: Sequence[TreeChange], sizes: Mapping[str, int], object_format: str) -> bool:
    """Every changed path of the work tree is as the newer commit has it: gone where it removed
    it, else a file or link of the same kind, executable bit and content."""
    try:
        top = os.open(root, _DIRECTORY)
    except OSError:
        return False
    try:
        return all(_holds(top, change, sizes, object_format) for change in changed)
    finally:
        os.close(top)


def _holds(top: int, change: TreeChange, sizes: Mapping[str, int], object_format: str) -> bool:
    *folders, name = change.path.split("/")
    folder = _folder(top, folders)
    if folder is None:
        return change.new_mode == ABSENT
    try:
        try:
            found = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return change.new_mode == ABSENT
        if change.new_mode == SYMLINK:
            if not stat.S_ISLNK(found.st_mode):
                return False
            return _object_id(os.fsencode(os.readlink(name, dir_fd=folder)), object_format) == change.new_id
        if change.new_mode in (ABSENT, GITLINK) or not stat.S_ISREG(found.st_mode):
            return False
        if (found.st_mode & stat.S_IXUSR != 0) != (change.new_mode == EXECUTABLE):
            return False
        size = sizes.get(change.new_id)
        if size is None or found.st_size != size:
            return False
        return _file_id(folder, name, size, object_format) == change.new_id
    except OSError:
        return False
    finally:
        if folder != top:
            os.close(folder)


def _folder(top: int, names: Sequence[str]) -> int | None:
    """The folder `names` leads to from `top`, each step without following a link; None where a
    step is missing or not a folder (git takes the path as absent then)."""
    current = top
    for name in names:
        try:
            inner = os.open(name, _DIRECTORY, dir_fd=current)
        except OSError:
            inner = None
        if current != top:
            os.close(current)
        if inner is None:
            return None
        current = inner
    return current


def _file_id(folder: int, name: str, size: int, object_format: str) -> str:
    """The object id git gives the file's content, read up to `size` bytes (the blob's)."""
    descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return ""
        digest = _hasher(object_format)
        digest.update(b"blob %d\0" % size)
        left = size
        while left and (chunk := handle.read(min(_CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
        if left or handle.read(1):
            return ""  # it changed size while read
    return digest.hexdigest()


def _object_id(data: bytes, object_format: str) -> str:
    digest = _hasher(object_format)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def _hasher(object_format: str) -> hashlib._Hash:
    return hashlib.sha256() if object_format == "sha256" else hashlib.sha1()
