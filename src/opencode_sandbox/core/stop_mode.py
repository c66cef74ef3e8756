"""The two idle-stop modes; apart from the quiescence rules so a detaching client loads little."""

from __future__ import annotations

from enum import StrEnum


class StopMode(StrEnum):
    WAIT_FOR_QUIESCENCE = "wait"
    STOP_IMMEDIATELY = "immediate"

    @classmethod
    def from_setting(cls, stop_on_active_sessions: bool) -> StopMode:
        """The mode for the `auto-stop-on-active-sessions` setting."""
        return cls.STOP_IMMEDIATELY if stop_on_active_sessions else cls.WAIT_FOR_QUIESCENCE
