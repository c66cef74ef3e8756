"""What of the VM's screen reaches the host's terminal: every sequence that draws in the window, and
none that acts beyond it or makes the terminal type into its input.

A terminal obeys more than drawing: OSC 52 writes (and reads) the host's clipboard, which the user
then pastes into a host shell; a query (device status, device attributes, a mode, the window's
title, a setting) makes the terminal type its answer into its input, where a late answer lands in
the host's shell once the session ended, and some answers carry text the VM chose; iTerm2's and
kitty's file transfers, DECUDK's programmed keys, a multiplexer's passthrough and a printer act on
the host. So the filter keeps what is known to draw, by an allow-list, and drops the rest:

- CSI sequences by their final byte, private marker and intermediates (`_csi_allowed`);
- OSC by number (`OSC_KEPT`), a colour query (`?`) never;
- DCS only for sixel images and synchronized updates; APC, PM and SOS never;
- ENQ (answerback), ESC Z (identify) and the C1 controls encoded in UTF-8 never.

Two queries that interfaces wait for are answered here, with what any terminal may say, so that
an interface waiting for them goes on at once: device status (`CSI 5 n`: "OK") and primary device
attributes (`CSI c`: a VT220 with colour). The answers go to the VM, never to the host.

The VM decides how long a sequence is: the filter holds at most `SEQUENCE_LIMIT` bytes of one
unfinished sequence, and drops the rest of a longer one."""

from __future__ import annotations

import re

from opencode_sandbox.core.screen_modes import ANSI_MODES_KEPT, DEC_MODES_KEPT, VT52_MODE, ScreenModes

SEQUENCE_LIMIT = 4096
"""The bytes of one unfinished control sequence held back between two reads."""

OSC_KEPT = frozenset({0, 1, 2, 4, 8, 10, 11, 12, 17, 19, 22, 104, 110, 111, 112, 117, 119})
"""Titles, the palette and colours (set, never queried), hyperlinks and the pointer's shape. Not the
working folder (OSC 7: where some terminals open the next shell) nor shell integration marks (OSC
133 may ask for clicks as input, OSC 633 adds to an editor's command history)."""

CLIPBOARD = 52
_RESETS = frozenset({b"104", b"110", b"111", b"112", b"117", b"119"})
"""OSCs that reset colours, with no text."""

STATUS_OK = b"\x1b[0n"
VT220_ATTRIBUTES = b"\x1b[?62;22c"

_ESC = 0x1B
_ENQ = 0x05

_SAFE_RUN = re.compile(
    rb"(?:[\x00-\x04\x06-\x1a\x1c-\x7f]+"  # ASCII text and the C0 controls but ENQ and ESC
    # a character of UTF-8 as RFC 3629 has it: no C1 control (U+0080 to U+009F), no overlong form
    rb"|\xc2[\xa0-\xbf]|[\xc3-\xdf][\x80-\xbf]"
    rb"|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}"
    rb"|\x1b\[[0-9;:]*[@A-MPSTXZ`abdefgms]"  # the common drawing CSIs; modes and regions are tracked
    rb"|\x1b[78DEHMNOc]"  # save and restore the cursor, index, reset
    rb"|\x1b[()*+\-./][\x30-\x7e]"  # character set designations
    rb")+"
)
_QUICK_RUN = re.compile(
    rb"(?:[^\x1b\x05]+|\x1b\[[0-9;:]*[@A-MPSTXZ`abdefgms]|\x1b[78DEHMNOc]|\x1b[()*+\-./][\x30-\x7e])+"
)
"""`_SAFE_RUN`'s sequences around any other bytes: taken at once when those are UTF-8 (`_quick_run`)."""
_C1_IN_UTF8 = re.compile(rb"\xc2[\x80-\x9f]")
_UTF8_BEGUN = re.compile(
    rb"(?:[\xc2-\xdf]|\xe0[\xa0-\xbf]?|[\xe1-\xec\xee\xef][\x80-\xbf]?|\xed[\x80-\x9f]?"
    rb"|\xf0(?:[\x90-\xbf][\x80-\xbf]?)?|[\xf1-\xf3][\x80-\xbf]{0,2}|\xf4(?:[\x80-\x8f][\x80-\xbf]?)?)\Z"
)
"""The start of a character of UTF-8 that the next read completes."""
REPLACEMENT = "\ufffd".encode()
_CSI = re.compile(rb"\x1b\[([\x3c-\x3f]?)([\x30-\x3b]*)([\x20-\x2f]*)([\x40-\x7e])")
_CSI_BODY = re.compile(rb"\x1b\[[\x20-\x3f]*")
_STRING_END = re.compile(rb"[\x07\x18\x1a\x1b]|\xc2\x9c")
"""What ends a string sequence for a terminal: BEL, CAN, SUB, ESC (an ST, or the next sequence), ST in UTF-8."""
_NOT_SIXEL = re.compile(rb"[^\x20-\x7e\r\n]")
_DCS_KEPT = re.compile(rb"\x1bP(?:[0-9;]*q|=[12]s\x1b\\)")


def _quick_run(data: bytes, at: int, shown: list[bytes]) -> int | None:
    """Where a run `_SAFE_RUN` would take ends, found in one pass over text that is UTF-8 (the
    codec checks it in C), its characters complete; None when the run holds anything else."""
    run = _QUICK_RUN.match(data, at)
    if run is None:
        return None
    end = run.end() if run.end() < len(data) else at + _complete(data[at:])
    text = data[at:end]
    try:
        text.decode()
    except UnicodeDecodeError:
        return None
    if not text or _C1_IN_UTF8.search(text) is not None:
        return None
    shown.append(text)
    return end


def _complete(text: bytes) -> int:
    """The length of `text` without a character of UTF-8 it ends before finishing."""
    for back in range(1, min(4, len(text)) + 1):
        byte = text[-back]
        if byte < 0x80:
            return len(text)
        if byte >= 0xC0:  # the lead byte of the last character
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(text) - back if needed > back else len(text)
    return len(text)


def _csi_allowed(private: bytes, params: bytes, intermediates: bytes, final: bytes) -> bool:
    """Whether a CSI sequence only draws, changes a mode or the cursor: none makes the terminal answer."""
    if not private and not intermediates:
        if final == b"t":
            return params in (b"22", b"23") or params.startswith((b"22;", b"23;"))  # the title stack
        if final in b"hl":
            return all(part.isdigit() and int(part) in ANSI_MODES_KEPT for part in params.split(b";"))
        return final in b"@ABCDEFGHIJKLMPSTXZ`abdefgmrsu"
    if private == b"?" and not intermediates:
        if final in b"hl":  # DEC modes set and reset, known ones only, each one the filter can give back
            return all(part.isdigit() and int(part) in DEC_MODES_KEPT for part in params.split(b";")) and not (
                final == b"l" and VT52_MODE in _numbers_of(params))
        return final in b"JK"  # selective erase; modes saved and restored (`s`, `r`) would pass the tracker
    if private in (b">", b"<", b"=") and not intermediates:
        return final == b"u" or (private == b">" and final == b"m")  # keyboard protocols set and popped
    if not private:
        # The cursor's style, and character protection. Not a soft reset (`CSI ! p`) or a conformance
        # level (`CSI " p`, which can turn on 8-bit controls): nothing could give those back.
        return (intermediates, final) in ((b" ", b"q"), (b'"', b"q"))
    return False


def _numbers_of(params: bytes) -> list[int]:
    return [int(part) for part in params.split(b";") if part.isdigit()]


def _answer(private: bytes, params: bytes, intermediates: bytes, final: bytes) -> bytes:
    if intermediates:
        return b""
    if final == b"n" and not private and params == b"5":
        return STATUS_OK
    if final == b"c" and not private and params in (b"", b"0"):
        return VT220_ATTRIBUTES
    return b""


class ScreenFilter:
    """Feed it the VM's screen, read by read; each call gives what may reach the host's terminal
    and what to answer the VM in the terminal's place.

    A terminal ends a string sequence (OSC, DCS, APC, ...) at BEL, ESC, CAN, SUB or ST, and an ESC
    that is no ST starts the next sequence: the filter ends each string at the first of them too,
    so what it takes for a string's text is never something the terminal would obey."""

    def __init__(self, clipboard: bool = False) -> None:
        self._held = b""
        self._dropping = False
        """In the rest of a string sequence that is dropped."""
        self._passing = False
        """In the rest of a sixel image, passed on as it comes."""
        self._clipboard = clipboard
        """Whether OSC 52 may set the host's clipboard (never read it)."""
        self.modes = ScreenModes()
        """What the session changed of the terminal's modes: `modes.restore()` gives it back."""

    def close(self) -> bytes:
        """What gives the terminal back when the session ends: an ST for an image the session left
        unfinished (a terminal inside a string obeys nothing), then the modes reset."""
        unfinished = b"\x1b\\" if self._passing else b""
        self._passing = self._dropping = False
        self._held = b""
        return unfinished + self.modes.restore()

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        data = self._held + data
        self._held = b""
        shown: list[bytes] = []
        answers: list[bytes] = []
        at = 0
        while at < len(data):
            if self._dropping:
                after = self._dropped_up_to(data, at)
            elif self._passing:
                after = self._passed_up_to(data, at, shown)
            else:
                after = _quick_run(data, at, shown)
                if after is None:
                    run = _SAFE_RUN.match(data, at)
                    after = run.end() if run is not None else self._sequence(data, at, shown, answers)
                    if run is not None:
                        shown.append(run.group())
            if after is None:
                self._hold(data[at:])
                break
            at = after
        return b"".join(shown), b"".join(answers)

    def _hold(self, rest: bytes) -> None:
        """Keep an unfinished sequence for the next read, up to the limit: past it the sequence is
        dropped, the rest of it too."""
        if len(rest) <= SEQUENCE_LIMIT:
            self._held = rest
        elif not rest.startswith(b"\x1b["):  # a CSI ends at its first final byte; what follows is drawn as text
            self._dropping = True

    def _dropped_up_to(self, data: bytes, at: int) -> int | None:
        end = _STRING_END.search(data, at)
        if end is None:
            if not data.endswith(b"\xc2"):
                return len(data)
            return len(data) - 1 if len(data) - 1 > at else None  # it may begin an ST in UTF-8
        after = self._string_end(data, end)
        if after is None:
            return end.start() if end.start() > at else None
        self._dropping = False
        return after

    @staticmethod
    def _string_end(data: bytes, end: re.Match[bytes]) -> int | None:
        """Where the ground state resumes after a string's end found at `end`: after its
        terminator, or at an ESC that starts another sequence; None while undecided."""
        if end.group() != b"\x1b":
            return end.end()
        if end.end() >= len(data):
            return None
        return end.end() + 1 if data[end.end()] == 0x5C else end.start()

    def _passed_up_to(self, data: bytes, at: int, shown: list[bytes]) -> int | None:
        """A sixel image holds printable ASCII only: at anything else it ends, with an ST of the
        filter's own where the VM's was missing, so the terminal leaves the image where the filter does."""
        other = _NOT_SIXEL.search(data, at)
        if other is None:
            shown.append(data[at:])
            return len(data)
        shown.append(data[at:other.start()])
        if other.group() == b"\x1b" and other.end() >= len(data):
            return other.start() if other.start() > at else None
        self._passing = False
        if data[other.start():other.start() + 2] == b"\x1b\\":
            shown.append(b"\x1b\\")
            return other.start() + 2
        shown.append(b"\x1b\\")
        return other.start()

    def _sequence(self, data: bytes, at: int, shown: list[bytes], answers: list[bytes]) -> int | None:
        """Where the control sequence at `at` ends, after keeping, answering or dropping it; None
        when it is not complete yet."""
        first = data[at]
        if first == _ENQ:
            return at + 1
        if first != _ESC:
            return self._not_text(data, at, shown)
        if at + 1 >= len(data):
            return None
        kind = data[at + 1:at + 2]
        if data[at + 1] < 0x20:
            return at + 1  # an escape cut short by a control: the control still counts
        if kind == b"[":
            return self._csi(data, at, shown, answers)
        if kind == b"]":
            return self._osc(data, at, shown)
        if kind in b"=>":  # the keypad's modes
            self.modes.keypad_application = kind == b"="
            shown.append(data[at:at + 2])
            return at + 2
        if kind == b"P":
            kept = _DCS_KEPT.match(data, at)
            if kept is None and len(data) - at < 12 and _NOT_SIXEL.search(data, at + 2) is None:
                return None
            if kept is not None:
                self._passing = kept.group().endswith(b"q")  # a sixel image follows; a sync mark is whole
                shown.append(kept.group())
                return kept.end()
            self._dropping = True
            return at + 2
        if kind in b"_^X":
            self._dropping = True
            return at + 2
        if kind in b"()*+-./# %":
            if at + 2 >= len(data):
                return None
            return at + 3  # a designation not in the safe run (an unusual final): dropped
        return at + 2  # ESC Z (identify) and every other unknown escape: dropped

    @staticmethod
    def _not_text(data: bytes, at: int, shown: list[bytes]) -> int | None:
        """A byte the safe run did not take as text: a C1 control in UTF-8 (dropped), the start of a
        character the next read completes (held), or a byte that is no UTF-8 at all (shown as
        U+FFFD, as a terminal would, so that no terminal reads it as a control)."""
        if data[at] == 0xC2 and at + 1 < len(data) and 0x80 <= data[at + 1] <= 0x9F:
            return at + 2
        if _UTF8_BEGUN.match(data, at) is not None:
            return None
        shown.append(REPLACEMENT)
        return at + 1

    def _csi(self, data: bytes, at: int, shown: list[bytes], answers: list[bytes]) -> int | None:
        found = _CSI.match(data, at)
        if found is None:
            body = _CSI_BODY.match(data, at)
            assert body is not None
            if body.end() >= len(data):
                return None
            # A byte that cannot be in a CSI: the sequence is malformed and dropped up to its final byte.
            stray = body.end()
            return stray + 1 if 0x40 <= data[stray] <= 0x7E else stray
        private, params, intermediates, final = found.groups()
        if _csi_allowed(private, params, intermediates, final):
            shown.append(found.group())
            self.modes.track(private, params, intermediates, final)
        else:
            answers.append(_answer(private, params, intermediates, final))
        return found.end()

    def _osc(self, data: bytes, at: int, shown: list[bytes]) -> int | None:
        """An OSC is kept whole or not at all, so a terminal never sees one the filter cut."""
        end = _STRING_END.search(data, at + 2)
        if end is None:
            return None
        after = self._string_end(data, end)
        if after is None:
            return None
        if end.group() in (b"\x18", b"\x1a") or after == end.start():
            return after  # cut short: a terminal discards it, and so does the filter
        if _osc_shown(data[at + 2:end.start()], self._clipboard):
            shown.append(data[at:after])
        return after


def _osc_shown(body: bytes, clipboard: bool) -> bool:
    number, separator, text = body.partition(b";")
    if not separator:
        return number in _RESETS
    return number.isdigit() and len(number) <= 6 and _shown_whole(int(number), text, clipboard)


def _shown_whole(number: int, text: bytes, clipboard: bool) -> bool:
    try:
        decoded = text.decode()
    except UnicodeDecodeError:
        return False
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in decoded):
        return False
    if number == CLIPBOARD:
        return clipboard and text.partition(b";")[2] != b"?"
    if number not in OSC_KEPT:
        return False
    # Kept when it sets something, dropped when it asks (a field that is `?`: a colour, the pointer's
    # shape): a terminal answers a query into its input.
    return b"?" not in text.split(b";")
