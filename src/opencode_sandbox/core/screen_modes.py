"""The terminal modes an attached session changed, so the user's terminal gets them back as they
were when the session ends: a session that leaves mouse or focus reporting on would otherwise have
the terminal type reports into the user's shell, and one that leaves the alternate screen, a hidden
cursor or another keyboard protocol would leave the shell unusable. Pure: `screen_filter` feeds it
every mode sequence it passes on."""

from __future__ import annotations

ON_BY_DEFAULT = frozenset({2, 7, 8, 25})
"""DEC private modes a terminal starts with set: ANSI (not VT52), autowrap, autorepeat, the visible
cursor. Every other is reset."""
DEC_MODES_KEPT = frozenset({
    1, 2, 5, 6, 7, 8, 9, 12, 25, 47, 66, 69, 80,  # cursor keys, ANSI, screen, origin, wrap, repeat, cursor, ...
    1000, 1002, 1003, 1004, 1005, 1006, 1007, 1015, 1016,  # mouse and focus reporting, alternate scroll
    1034, 1035, 1036, 1037, 1039, 1047, 1048, 1049, 1070,  # meta keys, the alternate screen, sixel colours
    2004, 2026, 2027, 8452,  # bracketed paste, synchronized output, graphemes, sixel cursor
})
"""The DEC private modes a session may set or reset, each one `restore` gives back. Not others:
Tektronix mode (38) makes xterm read no CSI, so nothing after it could reset the rest, and a mode
that makes a terminal report on its own (2031, 2048) could type into the user's shell."""
VT52_MODE = 2
"""Reset, it makes the terminal a VT52, which reads no CSI: nothing could be given back. Not passed on."""
ALTERNATE_SCREENS = (1049, 1047, 47)
ANSI_MODES_KEPT = frozenset({4, 20})
"""The ANSI modes (`CSI Pm h`) a session may set: insert, and new line. Keyboard action (2) locks
the keyboard and send/receive (12) echoes keys; neither is passed on."""


class ScreenModes:
    def __init__(self) -> None:
        self.private: dict[int, bool] = {}
        """Each DEC private mode the session set or reset, as it last left it."""
        self.ansi: dict[int, bool] = {}
        self.keyboard_pushes = 0
        self.keyboard_flags_set = False
        self.modified_keys: set[int] = set()
        self.keypad_application = False
        self.cursor_style = False
        self.scroll_region = False

    def track(self, private: bytes, params: bytes, intermediates: bytes, final: bytes) -> None:
        """One CSI sequence the filter passes on."""
        numbers = _numbers(params)
        if final in b"hl" and not intermediates:
            modes = self.private if private == b"?" else self.ansi if not private else None
            if modes is not None:
                for number in numbers:
                    modes[number] = final == b"h"
        elif final == b"u" and private == b">":
            self.keyboard_pushes += 1
        elif final == b"u" and private == b"<":
            self.keyboard_pushes = max(0, self.keyboard_pushes - (numbers[0] if numbers else 1))
        elif final == b"u" and private == b"=":
            self.keyboard_flags_set = True
        elif final == b"m" and private == b">":
            self.modified_keys.add(numbers[0] if numbers else 0)
        elif final == b"q" and intermediates == b" ":
            self.cursor_style = True
        elif final == b"r" and not private:
            self.scroll_region = True

    def restore(self) -> bytes:
        """What gives the terminal back as the session found it, as far as the session changed it."""
        out: list[bytes] = []
        for number in ALTERNATE_SCREENS:  # first: the rest applies to the normal screen
            if self.private.get(number):
                out.append(b"\x1b[?%dl" % number)
        for number, on in sorted(self.private.items()):
            if number not in ALTERNATE_SCREENS and on != (number in ON_BY_DEFAULT):
                out.append(b"\x1b[?%d%s" % (number, b"h" if number in ON_BY_DEFAULT else b"l"))
        out += [b"\x1b[%dl" % number for number, on in sorted(self.ansi.items()) if on]
        if self.keyboard_pushes:
            out.append(b"\x1b[<%du" % self.keyboard_pushes)
        if self.keyboard_flags_set:
            out.append(b"\x1b[=0;1u")
        out += [b"\x1b[>%dm" % resource for resource in sorted(self.modified_keys)]
        if self.keypad_application:
            out.append(b"\x1b>")
        if self.cursor_style:
            out.append(b"\x1b[0 q")
        if self.scroll_region:
            out.append(b"\x1b7\x1b[r\x1b8")
        return b"\x1b[0m" + b"".join(out)


def _numbers(params: bytes) -> list[int]:
    return [int(part) for part in params.split(b";") if part.isdigit() and len(part) <= 6]
