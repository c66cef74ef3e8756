"""msb's last answer about each sandbox, image and volume, for a runtime that serves one command.

Every look is an msb process (5 to 20 ms on hardware, 1 to 5 s under emulation), and one start
asks about the same VM, image and home volume several times. A runtime that keeps answers forgets
one as soon as it changes that object itself, and never keeps an answer its `settled` test
refuses (a VM on its way to another state). An answer outlives the commands run in the VM: a VM
that others stopped meanwhile fails the next exec, as it would a moment after a fresh look. A
runtime whose caller watches for what others change (the idle reaper) keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    Answer = dict[str, Any] | None
    """A decoded msb answer, or None for an object msb does not have."""


def _always(answer: Answer) -> bool:
    return True


class Remembered:
    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self._answers: dict[tuple[str, str], Answer] = {}

    def ask(self, kind: str, name: str, look: Callable[[], Answer], *, fresh: bool = False,
            settled: Callable[[Answer], bool] = _always) -> Answer:
        """The kept answer about `name`, else (or when `fresh`) `look()`'s, kept if settled."""
        key = (kind, name)
        if not fresh and key in self._answers:
            return self._answers[key]
        answer = look()
        if self.keep and settled(answer):
            self._answers[key] = answer
        else:
            self._answers.pop(key, None)
        return answer

    def forget(self, kind: str, name: str) -> None:
        """The runtime changed `name` (or tried to): the next question asks msb again."""
        self._answers.pop((kind, name), None)
