"""An attached session through a terminal of the tool's own: the runtime's client (`docker exec -it`,
`msb exec --tty`) draws on a pseudo-terminal, and only what `core/screen_filter.py` keeps of its
screen reaches the user's terminal. The keys pass unchanged; a resize of the user's terminal is
passed on to the session.

The user's terminal is in raw mode for the session, as the runtime's client would set it, and is
given back as it was found; input the terminal typed after the session ended (a late answer to
anything) is discarded then, so none of it lands in the user's shell."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
from collections.abc import Mapping, Sequence

from opencode_sandbox.core.screen_filter import ScreenFilter
from opencode_sandbox.runtime.processes import end_gently

END_GRACE_S = 5.0
"""How long the runtime's client may take to end once its terminal is closed."""
_READ = 65536
_PENDING_LIMIT = 1 << 20
"""Bytes waiting for the session's input (keys, and the filter's answers) past which no more are
read or made: the session reads none of them."""


def relay_wanted(tty: bool) -> bool:
    """A session with a terminal, attached to one: the user's terminal is both input and output."""
    return tty and os.isatty(0) and os.isatty(1)


def user_terminal_size() -> tuple[int, int] | None:
    """The user's terminal's size (columns, lines), the one the session's terminal takes; None without one."""
    try:
        size = os.get_terminal_size(0)
    except OSError:
        return None
    return size.columns, size.lines


def attach_relayed(command: Sequence[str], env: Mapping[str, str] | None, clipboard: bool = False) -> int:
    """Run `command` on a pseudo-terminal the size of the user's, relaying the keys to it and its
    filtered screen back; its exit status."""
    import termios

    master, slave = os.openpty()
    try:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(0))
        _copy_size(master)
        process = subprocess.Popen(list(command), stdin=slave, stdout=slave, stderr=slave, env=env,
                                   start_new_session=True, preexec_fn=_take_terminal, close_fds=True)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    saved = termios.tcgetattr(0)
    previous = signal.signal(signal.SIGWINCH, lambda _number, _frame: _copy_size(master))  # the main thread's
    screen = ScreenFilter(clipboard)
    try:
        _raw(0)
        _relay(master, screen)
        return process.wait()
    finally:
        signal.signal(signal.SIGWINCH, previous)
        os.close(master)  # a client still running gets its terminal's hang-up
        end_gently(process, END_GRACE_S)
        with contextlib.suppress(OSError):  # an image left open closed, the modes the session left set reset
            _write_all(1, screen.close())
        termios.tcsetattr(0, termios.TCSAFLUSH, saved)  # and what the terminal typed since is dropped


def _take_terminal() -> None:
    """In the child, a session leader already: the pseudo-terminal becomes its controlling
    terminal, so a resize reaches it as SIGWINCH."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _copy_size(master: int) -> None:
    import termios

    with contextlib.suppress(OSError, termios.error):
        termios.tcsetwinsize(master, termios.tcgetwinsize(0))


def _raw(descriptor: int) -> None:
    import tty

    tty.setraw(descriptor)


def _relay(master: int, screen: ScreenFilter) -> None:
    """Keys to the session, its screen through `screen` to the user, until the session's terminal closes."""
    os.set_blocking(master, False)
    to_session = bytearray()
    reading_keys = True
    while True:
        readable = [master]
        if reading_keys and len(to_session) < _PENDING_LIMIT:
            readable.append(0)
        ready, writable, _ = select.select(readable, [master] if to_session else [], [])
        if 0 in ready:
            keys = os.read(0, _READ)
            if keys:
                to_session += keys
            else:
                reading_keys = False
        if master in ready:
            try:
                drawn = os.read(master, _READ)
            except OSError as error:
                if error.errno != errno.EIO:
                    raise
                drawn = b""
            if not drawn:
                return  # every process of the session closed its terminal
            shown, answers = screen.feed(drawn)
            _write_all(1, shown)
            if len(to_session) < _PENDING_LIMIT:  # a session that never reads is answered no further
                to_session += answers
        if writable and to_session:
            try:
                written = os.write(master, to_session)
            except BlockingIOError:
                written = 0
            del to_session[:written]


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(descriptor, view)
        except BlockingIOError:
            select.select([], [descriptor], [])
            continue
        view = view[written:]
