"""Privileged entries below the checkout: what a host user who runs or opens one gets more than
their own rights from. A regular file that is set-user-ID or set-group-ID, an executable with
file capabilities (`security.capability`), a character or block device node. A set-group-ID
folder only passes its group on to what is made in it, and a FIFO or a socket grants nothing:
neither is privileged. Everything here works on plain values.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping

from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.records import Record

CAPABILITY_ATTRIBUTE = "security.capability"
FILE = "file"
CHARACTER_DEVICE = "character device"
BLOCK_DEVICE = "block device"
_KINDS = (FILE, CHARACTER_DEVICE, BLOCK_DEVICE)
SET_ID_BITS = stat.S_ISUID | stat.S_ISGID


class Privileged(Record):
    """One privileged entry, identified by its path, inode, owner, mode, capability and change
    time: rewritten, re-permissioned or replaced, it is no longer the one recorded."""

    path: str
    kind: str
    """FILE, CHARACTER_DEVICE or BLOCK_DEVICE."""
    mode: int
    """The permission bits with set-user-ID, set-group-ID and sticky (`st_mode & 0o7777`)."""
    uid: int
    inode: int
    changed_ns: int
    """The inode's change time (`st_ctime_ns`), which nothing in the VM can set back."""
    capability: str = ""
    """A file's `security.capability` value in hex, "" when it has none."""
    device: str = ""
    """A device node's `major:minor`."""

    @property
    def is_device(self) -> bool:
        return self.kind != FILE

    def traits(self) -> str:
        """What makes it privileged, as the messages name it."""
        if self.is_device:
            return f"a {self.kind} node {self.device}"
        bits = " and ".join(name for bit, name in ((stat.S_ISUID, "set-user-ID"), (stat.S_ISGID, "set-group-ID"))
                            if self.mode & bit)
        if not self.capability:
            return bits
        return f"{bits} with file capabilities" if bits else "a file with capabilities"

    def as_mapping(self) -> dict[str, object]:
        return dict(self._asdict())


def privileged_kind(mode: int, capability: bytes) -> str | None:
    """The kind of privileged entry a `st_mode` and a capability value make, None when it is none."""
    if stat.S_ISCHR(mode):
        return CHARACTER_DEVICE
    if stat.S_ISBLK(mode):
        return BLOCK_DEVICE
    if stat.S_ISREG(mode) and (mode & SET_ID_BITS or (capability and mode & 0o111)):
        return FILE
    return None


def needs_capability_check(mode: int) -> bool:
    """A capability matters only on a regular file that can be run."""
    return stat.S_ISREG(mode) and bool(mode & 0o111)


def privileged_from_mapping(data: Mapping[str, object]) -> Privileged:
    path, kind, mode, uid, inode, changed_ns, capability, device = (
        data.get(name) for name in Privileged._fields)
    if not (isinstance(path, str) and kind in _KINDS and isinstance(mode, int) and isinstance(uid, int)
            and isinstance(inode, int) and isinstance(changed_ns, int) and isinstance(capability, str)
            and isinstance(device, str)):
        raise ValueError(f"not a privileged entry: {data!r}")
    return Privileged(path, str(kind), mode, uid, inode, changed_ns, capability, device)


class Caught(Record):
    """A privileged entry the VM made, and what the host did about it."""

    found: Privileged
    done: str
    """What was done ("the bit was removed", "it was removed"); "" when nothing could be."""
    failure: str = ""
    """Why it could not be neutralised."""
    fix: str = ""
    """The command that neutralises it by hand."""

    @property
    def failed(self) -> bool:
        return not self.done

    def line(self) -> str:
        found = self.found
        about = f"owner uid {found.uid}, mode {found.mode:04o}"
        head = f"the VM made {shown(found.path)} {found.traits()} ({about}) while it ran"
        if self.failed:
            return f"{head}: it could NOT be neutralised ({shown(self.failure)}); do it by hand now: {shown(self.fix)}"
        return f"{head}: {self.done}"

    def as_mapping(self) -> dict[str, object]:
        return {"found": self.found.as_mapping(), "done": self.done, "failure": self.failure, "fix": self.fix}


def caught_from_mapping(data: Mapping[str, object]) -> Caught:
    found, done, failure, fix = data.get("found"), data.get("done"), data.get("failure", ""), data.get("fix", "")
    if not isinstance(found, dict) or not all(isinstance(text, str) for text in (done, failure, fix)):
        raise ValueError(f"not a caught privileged entry: {data!r}")
    return Caught(privileged_from_mapping(found), str(done), str(failure), str(fix))


IN_PLACE = "in place"
REPLACED = "replaced"
REMOVED = "removed"


def done_text(found: Privileged, how: str) -> str:
    """What neutralising `found` did: its privileges taken `IN_PLACE`, the file `REPLACED` by a
    copy of the host user's (another owner's file, or a capability only root may remove), or
    `REMOVED` (a device node, or a file that could be neither changed nor read)."""
    if found.is_device:
        return "it was removed (a device node is never restored)"
    if how == REPLACED:
        return "it was replaced by a copy of yours without its privileges"
    if how == REMOVED:
        return "it could be neither changed nor read, so it was removed"
    bits = bin(found.mode & SET_ID_BITS).count("1")
    done = [] if not bits else ["the bit was removed" if bits == 1 else "the bits were removed"]
    if found.capability:
        done.append("its capabilities were removed")
    return " and ".join(done)


def fix_command(found: Privileged, absolute: str, as_uid: int) -> str:
    """The shell command that does by hand what the host could not; `sudo` for another's file."""
    import shlex

    quoted = shlex.quote(absolute)
    sudo = "sudo " if as_uid != 0 and found.uid != as_uid else ""
    if found.is_device:
        return f"{sudo}rm -- {quoted}"
    steps = []
    if found.mode & SET_ID_BITS:
        steps.append(f"{sudo}chmod u-s,g-s -- {quoted}")
    if found.capability:
        steps.append(f"{sudo}setcap -r {quoted}")
    return " && ".join(steps)


PUT_BACK_HINT = ("nothing is put back by itself: if you want a bit back, set it yourself with no VM running "
                 "(`chmod u+s PATH`, `chmod g+s PATH`, `setcap CAPABILITIES PATH`); a removed device node is "
                 "not restored")
