from __future__ import annotations

import io

from rich.console import Console

from opencode_sandbox.images.progress import RichBuildProgress


def console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=False, width=200), buffer


def test_quiet_build_shows_title_and_full_log_only_on_failure() -> None:
    out, buffer = console()
    progress = RichBuildProgress(out)
    progress.start("Building img")
    progress.line("Step 1/2 : FROM base")
    progress.line("secret detail")
    progress.finish(True, ["Step 1/2 : FROM base", "secret detail"])
    assert buffer.getvalue() == "Building img\n"
    progress.start("Building img")
    progress.finish(False, ["Step 2/2 : RUN false", "it broke"])
    assert buffer.getvalue().endswith("Step 2/2 : RUN false\nit broke\n")


def test_verbose_build_prints_every_line_once() -> None:
    out, buffer = console()
    progress = RichBuildProgress(out, verbose=True)
    progress.start("Building img")
    progress.line("[not markup] line")
    progress.finish(False, ["[not markup] line"])
    assert buffer.getvalue() == "Building img\n[not markup] line\n"


def test_live_tail_on_a_terminal_is_cleared_when_done() -> None:
    buffer = io.StringIO()
    out = Console(file=buffer, force_terminal=True, width=100)
    progress = RichBuildProgress(out, tail=2)
    progress.start("Building img")
    for number in range(5):
        progress.line(f"output {number}")
    progress.finish(True, [])
    progress.note("done")
    assert buffer.getvalue().rstrip().endswith("done")
    assert list(progress._tail) == ["output 3", "output 4"]
