"""How a build reports progress: a live tail of its log, the full log when it matters."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TextIO

    from rich.console import Console


class BuildProgress(Protocol):
    def start(self, title: str) -> None:
        """A build of one image begins."""

    def line(self, text: str) -> None:
        """One line of the build's output."""

    def finish(self, succeeded: bool, log: Sequence[str]) -> None:
        """The build ended; `log` is its whole output."""

    def note(self, text: str) -> None:
        """A one-line message, e.g. that an image is up to date."""


class SilentProgress:
    """Reports nothing; the error raised on failure still carries the log's tail."""

    def start(self, title: str) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def finish(self, succeeded: bool, log: Sequence[str]) -> None:
        pass

    def note(self, text: str) -> None:
        pass


class RichBuildProgress:
    """A spinner with the current build step and the last few log lines.

    With `verbose` every line is printed as it comes; on failure the full log is printed.
    """

    def __init__(self, console: Console | None = None, *, stream: TextIO | None = None, verbose: bool = False,
                 tail: int = 5) -> None:
        """`console`: rich's, or one made on `stream` (the command's message stream) at first use."""
        assert console is not None or stream is not None, "a build shows its progress somewhere"
        self._console = console
        self._stream = stream
        self.verbose = verbose
        self._tail: deque[str] = deque(maxlen=tail)
        self._title = ""
        self._step = ""
        self._live: Any = None

    @property
    def console(self) -> Console:
        """Made on first use, so a run whose images are up to date never loads rich."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self._stream)
        return self._console

    def _render(self) -> Any:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.text import Text

        heading = f"{self._title}: {self._step}" if self._step else self._title
        lines = [Text("  " + line, style="dim", overflow="ellipsis", no_wrap=True) for line in self._tail]
        return Group(Spinner("dots", text=heading), *lines)

    def start(self, title: str) -> None:
        self._title = title
        self._step = ""
        self._tail.clear()
        if self.verbose or not self.console.is_terminal:
            self.console.print(title)
            return
        from rich.live import Live

        self._live = Live(self._render(), console=self.console, refresh_per_second=8, transient=True)
        self._live.start()

    def line(self, text: str) -> None:
        if self.verbose:
            self.console.print(text, markup=False, highlight=False)
            return
        if text.startswith("Step ") or (text.startswith("#") and "[" in text):
            self._step = text
        if text.strip():
            self._tail.append(text)
        if self._live is not None:
            self._live.update(self._render())

    def finish(self, succeeded: bool, log: Sequence[str]) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if not succeeded and not self.verbose:
            for text in log:
                self.console.print(text, markup=False, highlight=False)

    def note(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)
