"""The VM's own git directory: what it is seeded with, and how the two sides' branches meet.

Git in the VM works on a git directory the host made for it once, in the project's private
state folder. It shares the host's objects read-only (an `alternates` entry) and has its own
refs, index and configuration, so nothing the VM writes is ever read by the host's git as
configuration, hooks or a git directory. Commits come back as a bundle, checked object by
object, into `refs/sandbox/heads/*`; the host's branches reach the VM as `refs/remotes/host/*`.
Everything here works on plain values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from typing import BinaryIO

VM_GIT_DIR = "/opt/opencode-sandbox/git"
"""Where the VM's git directory is mounted when the checkout's `.git` is a file (a linked
worktree); over `/workspace/.git` otherwise."""
HOST_OBJECTS = "/opt/opencode-sandbox/host-objects"
"""The host's object store, read-only in the VM."""
SANDBOX_PREFIX = "refs/sandbox/heads/"
"""The VM's branches, on the host."""
HOST_PREFIX = "refs/remotes/host/"
"""The host's branches, in the VM."""

SEED_FOLDERS = ("refs/heads", "refs/tags", "objects/info", "objects/pack", "info")

_HEX = {"sha1": 40, "sha256": 64}
_REF_NAME = r"^refs/(heads|tags|remotes|sandbox/heads)/[A-Za-z0-9._/+@-]+$"
_BAD_REF = r"(^|/)\.|\.\.|//|@\{|\.lock(/|$)|/$|\.$"
_CONFIG_KEYS = r"^(remote\.[^\n]+\.(url|pushurl|fetch)|branch\.[^\n]+\.(remote|merge|rebase))$"
_SECRET_IN_URL = r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:]*):[^/@]*@"


class HostFacts(Record):
    """What the VM's git directory is seeded from, all read from the host's repository."""

    head: str
    """`ref: refs/heads/NAME`, or a commit id when detached."""
    object_format: str
    refs: Mapping[str, str]
    """Branches and tags: full name to commit (or tag object) id."""
    config: tuple[tuple[str, str], ...]
    """The remotes and branch settings, as `git config --list` gives them."""
    shallow: str = ""
    exclude: str = ""


def is_object_id(text: str, object_format: str) -> bool:
    """A full object name in lower-case hex, as git prints it."""
    return len(text) == _HEX[object_format] and not text.strip("0123456789abcdef")


def valid_ref(name: str) -> bool:
    """A ref name the sync passes on: plain branch, tag or remote names, nothing git would
    read as something else."""
    return bool(re.match(_REF_NAME, name)) and not re.search(_BAD_REF, name)


def parse_refs(text: str, object_format: str, prefix: str) -> dict[str, str]:
    """`<id> <name>` lines below `prefix`, as `git for-each-ref` prints them; anything else
    (from a VM, where the output is the VM's to make) is left out."""
    length = _HEX[object_format]
    found: dict[str, str] = {}
    for line in text.splitlines():
        object_id, _, name = line.partition(" ")
        if (len(object_id) == length and all(c in "0123456789abcdef" for c in object_id)
                and name.startswith(prefix) and valid_ref(name)):
            found[name] = object_id
    return found


def without_password(url: str) -> str:
    """A remote URL without the password some embed after the user name."""
    return re.sub(_SECRET_IN_URL, lambda match: f"{match['scheme']}{match['user']}@", url)


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def config_text(facts: HostFacts) -> str:
    lines = ["[core]", "\trepositoryformatversion = " + ("1" if facts.object_format != "sha1" else "0"),
             "\tfilemode = true", "\tbare = false", "\tlogallrefupdates = true"]
    if facts.object_format != "sha1":
        lines += ["[extensions]", f"\tobjectformat = {facts.object_format}"]
    for key, value in facts.config:
        if not re.match(_CONFIG_KEYS, key):
            continue
        section, _, rest = key.partition(".")
        subsection, _, name = rest.rpartition(".")
        if section == "remote" and name in ("url", "pushurl"):
            value = without_password(value)
        lines += [f"[{section} {_quoted(subsection)}]", f"\t{name} = {_quoted(value)}"]
    return "\n".join(lines) + "\n"


def packed_refs(refs: Mapping[str, str], host_heads: Mapping[str, str]) -> str:
    everything = {**refs, **{HOST_PREFIX + name.removeprefix("refs/heads/"): object_id
                             for name, object_id in host_heads.items()}}
    body = "".join(f"{everything[name]} {name}\n" for name in sorted(everything, key=lambda n: n.encode()))
    return "# pack-refs with: sorted \n" + body


def seed_files(facts: HostFacts) -> dict[str, str]:
    """The VM's git directory's files, by path inside it (with `SEED_FOLDERS`); the index is
    made in the VM."""
    heads = {name: object_id for name, object_id in facts.refs.items() if name.startswith("refs/heads/")}
    files = {
        "HEAD": facts.head + "\n",
        "config": config_text(facts),
        "packed-refs": packed_refs(facts.refs, heads),
        "objects/info/alternates": HOST_OBJECTS + "\n",
        "info/exclude": facts.exclude,
    }
    if facts.shallow:
        files["shallow"] = facts.shallow
    return files


def branch_of(head: str) -> str | None:
    """The branch a HEAD file names; None when detached."""
    return head.removeprefix("ref: refs/heads/").strip() if head.startswith("ref: refs/heads/") else None


class SyncPlan(Record):
    fetch: tuple[str, ...]
    """The VM's branches (full names) whose tips the host does not hold yet."""
    drop: tuple[str, ...]
    """Host `refs/sandbox/heads/*` whose branch is gone from the VM."""


def plan_sync(vm_heads: Mapping[str, str], sandbox_refs: Mapping[str, str]) -> SyncPlan:
    """`vm_heads`: `refs/heads/*` in the VM; `sandbox_refs`: `refs/sandbox/heads/*` on the host."""
    fetch = tuple(name for name, object_id in sorted(vm_heads.items())
                  if sandbox_refs.get(SANDBOX_PREFIX + name.removeprefix("refs/heads/")) != object_id)
    wanted = {SANDBOX_PREFIX + name.removeprefix("refs/heads/") for name in vm_heads}
    drop = tuple(name for name in sorted(sandbox_refs) if name not in wanted)
    return SyncPlan(fetch, drop)


FAST_FORWARD_OUTCOMES = ("moved", "busy", "diverged", "staged", "differs")
"""What the fast-forward of a checked-out branch says, followed by the branch."""
WAITING_ON_WORK = ("busy", "staged", "differs")
"""Outcomes that can change without any ref changing (a merge ends, the index or the work tree
changes): the sync tries again next time."""


def fast_forward_outcome(text: str) -> str:
    """The first line of `text` that is a fast-forward's outcome, or nothing."""
    for line in text.splitlines():
        if line.split(" ", 1)[0] in FAST_FORWARD_OUTCOMES:
            return line.strip()
    return ""


def nothing_pending(outcomes: Iterable[str], planned: int, brought: int) -> bool:
    """After a sync: every branch it planned to bring in came, and no fast-forward waits on work
    that can change without a ref changing."""
    return brought == planned and not any(outcome.split(" ", 1)[0] in WAITING_ON_WORK for outcome in outcomes)


def bundle_exclusions(known: Iterable[str]) -> list[str]:
    """`^id` lines for what the host has already: the bundle holds only what is new."""
    return [f"^{object_id}" for object_id in sorted(set(known))]


BUNDLE_HEADER_LIMIT = 1 << 20


class BadBundle(ValueError):
    pass


def read_bundle_header(handle: BinaryIO, object_format: str) -> dict[str, str]:
    """The refs a v2 or v3 bundle names, read up to the blank line that starts its pack (the
    handle is left there); a header that is anything else raises `BadBundle`."""
    first = handle.readline(256)
    if first not in (b"# v2 git bundle\n", b"# v3 git bundle\n"):
        raise BadBundle("not a git bundle")
    length = _HEX[object_format]
    refs: dict[str, str] = {}
    read = len(first)
    while True:
        line = handle.readline(4096)
        read += len(line)
        if not line.endswith(b"\n") or read > BUNDLE_HEADER_LIMIT:
            raise BadBundle("the bundle's header is cut off or too long")
        text = line.decode("ascii", errors="replace").rstrip("\n")
        if not text:
            return refs
        if text.startswith(("-", "@")):
            if text.startswith("@") and text not in ("@object-format=" + object_format,):
                raise BadBundle(f"the bundle asks for {text[1:]}")
            continue
        object_id, _, name = text.partition(" ")
        if len(object_id) != length or any(c not in "0123456789abcdef" for c in object_id) or not valid_ref(name):
            raise BadBundle("the bundle names a ref that is not a plain branch")
        refs[name] = object_id
