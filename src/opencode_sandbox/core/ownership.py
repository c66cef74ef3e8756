"""Whose one of this tool's docker objects is.

The docker runtime labels what it makes with the uid of the host user whose run made it
(`LABEL_OWNER_UID`); the names come from the remote alone, so two host users with clones of one
remote compute the same names on a shared engine. An object made by an older version has no
owner label: it counts as this user's only when this user's state folder records it (the home
volume the state file names, a VM that mounts it); otherwise its owner is unknown, and it is left
alone like another user's. See docs/runtimes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

from opencode_sandbox.core.naming import LABEL_OWNER_UID
from opencode_sandbox.core.records import Record


class Claim(StrEnum):
    MINE = "mine"
    """Labelled with this user's uid."""
    INHERITED = "inherited"
    """Made by an older version (no owner label) and recorded as this user's."""
    OTHERS = "others"
    """Labelled with another uid (or with a label that names none)."""
    UNKNOWN = "unknown"
    """Made by an older version and not recorded as this user's: anyone's."""

    @property
    def usable(self) -> bool:
        return self in (Claim.MINE, Claim.INHERITED)


class HostUser(Record):
    """A host user as a message names them: the uid and, where known, the user name."""

    uid: int | None
    name: str | None = None

    def describe(self) -> str:
        if self.uid is None:
            return "an unknown host user"
        return f"{self.name} (uid {self.uid})" if self.name else f"uid {self.uid}"


def owner_uid(labels: Mapping[str, str]) -> int | None:
    """The uid the owner label names; None without one, or when it names no uid."""
    text = labels.get(LABEL_OWNER_UID)
    return int(text) if text is not None and text.isdecimal() else None


def judge(labels: Mapping[str, str], uid: int, recorded_here: Callable[[], bool]) -> Claim:
    """Whose the object with `labels` is, for the host user `uid`. `recorded_here` is asked only
    for an object without an owner label: does this user's state folder record it?"""
    text = labels.get(LABEL_OWNER_UID)
    if text is None:
        return Claim.INHERITED if recorded_here() else Claim.UNKNOWN
    return Claim.MINE if text == str(uid) else Claim.OTHERS


def owned_by_another(labels: Mapping[str, str], uid: int) -> bool:
    """Labelled with another owner than `uid` (an unlabelled object is not: `judge` decides it)."""
    text = labels.get(LABEL_OWNER_UID)
    return text is not None and text != str(uid)
