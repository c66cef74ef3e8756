"""The VM's screen on the host's terminal: drawing passes, what acts beyond the window does not,
however the VM splits it across reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_sandbox.core.screen_filter import SEQUENCE_LIMIT, STATUS_OK, VT220_ATTRIBUTES, ScreenFilter

DRAWING = [
    b"plain text, a line\r\n",
    "Unicode: \u2500\u2502 \u00e9 \u00a9 \u4e2d\u6587 \U0001f600\r\n".encode(),
    b"\x1b[1;31mred\x1b[0m",
    b"\x1b[38;2;10;20;30mtrue colour\x1b[m\x1b[48:5:200m",
    b"\x1b[H\x1b[2J\x1b[3J\x1b[10;20H\x1b[K\x1b[5A\x1b[2C\x1b[1L\x1b[2M\x1b[3P\x1b[4@\x1b[5X",
    b"\x1b[?1049h\x1b[?25l\x1b[?1000h\x1b[?1006h\x1b[?2004h\x1b[?2026h\x1b[?2026l\x1b[?1049l",
    b"\x1b[3;20r\x1b[s\x1b[u\x1b7\x1b8\x1b=\x1b>\x1bM\x1bD\x1bE\x1b(B\x1b)0",
    b"\x1b[2 q\x1b[>1u\x1b[<u\x1b[=1;1u\x1b[>4;2m",
    b"\x1b]0;opencode\x07\x1b]2;a title\x1b\\",
    b"\x1b]8;;https://example.org/\x1b\\a link\x1b]8;;\x1b\\",
    b"\x1b]11;#1e1e2e\x07\x1b]4;1;rgb:ff/00/00\x07\x1b]110\x07",
    b"\x1b[22;0t\x1b[23;0t",
    b"\x1bP0;0;0q\"1;1;10;10#0;2;0;0;0#0~~~~\x1b\\",
    b"bell\x07tab\tback\x08",
]

DANGEROUS = [
    b"\x1b]52;c;aWQgPiAvdG1wL3B3bgo=\x07",  # clipboard set
    b"\x1b]52;c;?\x1b\\",  # clipboard read
    b"\x1b]5522;type=write\x1b\\",  # kitty's clipboard
    b"\x1b]1337;File=name=cG93bg==;inline=0:aGVsbG8=\x07",  # iTerm2 download
    b"\x1b]5113;ac=send;id=x\x1b\\",  # kitty file transfer
    b"\x1b]9;you have mail\x07",  # a notification
    b"\x1b]777;notify;title;body\x07",
    b"\x1b]50;?\x07",  # font query
    b"\x1b]11;?\x07",  # colour query
    b"\x1b]4;1;?\x07",
    b"\x1b]22;?\x07",  # the pointer's shape queried
    b"\x1b[6n",  # cursor position report
    b"\x1b[?6n",
    b"\x1b[>c",  # secondary device attributes
    b"\x1b[=c",
    b"\x1b[>q",  # XTVERSION
    b"\x1b[21t",  # title report
    b"\x1b[20t",
    b"\x1b[14t",
    b"\x1b[3;100;100t",  # move the window
    b"\x1b[?2026$p",  # DECRQM
    b"\x1b[?u",  # keyboard protocol query
    b"\x1b[?1;1;0S",  # XTSMGRAPHICS
    b"\x1b[1x",  # DECREQTPARM
    b"\x1b[5i",  # printer on
    b"\x1bP$qm\x1b\\",  # DECRQSS
    b"\x1bP+q544e\x1b\\",  # XTGETTCAP
    b"\x1bP0;1|17/6563686f2070776e\x1b\\",  # DECUDK: a programmed key
    b"\x1bPtmux;\x1b\x1b]52;c;aWQ=\x07\x1b\\",  # a multiplexer's passthrough
    b"\x1b_Ga=T,t=f;L2V0Yy9wYXNzd2Q=\x1b\\",  # kitty graphics from a host file
    b"\x1b^private\x1b\\",
    b"\x1bXstring\x1b\\",
    b"\x05",  # answerback
    b"\x1bZ",  # identify
]

C1_IN_UTF8 = ["\u009d52;c;aWQ=\u009c".encode(), "\u009b6n".encode(), "\u0090$qm\u009c".encode()]


def filtered(data: bytes, cuts: list[int] | None = None) -> tuple[bytes, bytes]:
    screen = ScreenFilter()
    shown, answers = [], []
    start = 0
    for cut in sorted(cuts or []):
        part = screen.feed(data[start:cut])
        shown.append(part[0])
        answers.append(part[1])
        start = cut
    part = screen.feed(data[start:])
    return b"".join([*shown, part[0]]), b"".join([*answers, part[1]])


@pytest.mark.parametrize("drawing", DRAWING)
def test_what_draws_passes_unchanged(drawing: bytes) -> None:
    assert filtered(drawing) == (drawing, b"")


@pytest.mark.parametrize("sequence", DANGEROUS)
def test_what_acts_beyond_the_window_is_dropped_and_the_text_around_it_stays(sequence: bytes) -> None:
    shown, answers = filtered(b"before" + sequence + b"after")
    assert shown == b"beforeafter"
    assert answers == b""


@pytest.mark.parametrize("sequence", C1_IN_UTF8)
def test_a_c1_control_written_in_utf8_is_dropped_and_what_it_introduced_is_plain_text(sequence: bytes) -> None:
    shown, answers = filtered(b"before" + sequence + b"after")
    assert shown == b"before" + sequence.replace(b"\xc2\x9d", b"").replace(b"\xc2\x9b", b"").replace(
        b"\xc2\x90", b"").replace(b"\xc2\x9c", b"") + b"after"
    assert answers == b""


def test_an_osc_cut_short_by_the_next_sequence_is_dropped_and_the_next_one_judged_alone() -> None:
    assert filtered(b"\x1b]0;title\x1b]52;c;aWQ=\x07\x1b[1mbold") == (b"\x1b[1mbold", b"")
    assert filtered(b"\x1b]2;title\x18\x1b[6nx") == (b"x", b"")


def test_a_sixel_image_ends_where_its_characters_end_with_an_st_of_the_filters_own() -> None:
    shown, _ = filtered(b"\x1bPq#0~~\x07\x1b]52;c;aWQ=\x07after")
    assert shown == b"\x1bPq#0~~\x1b\\\x07after"


def test_the_two_queries_interfaces_wait_for_are_answered_to_the_vm_not_by_the_terminal() -> None:
    shown, answers = filtered(b"a\x1b[5nb\x1b[cc\x1b[0c")
    assert shown == b"abc"
    assert answers == STATUS_OK + VT220_ATTRIBUTES + VT220_ATTRIBUTES


def test_a_clipboard_write_passes_only_where_the_user_allowed_it_and_a_read_never() -> None:
    screen = ScreenFilter(clipboard=True)
    assert screen.feed(b"\x1b]52;c;aGk=\x07") == (b"\x1b]52;c;aGk=\x07", b"")
    assert screen.feed(b"\x1b]52;c;?\x07") == (b"", b"")


def test_a_sequence_longer_than_the_limit_is_dropped_whole_without_holding_it() -> None:
    screen = ScreenFilter()
    shown, _ = screen.feed(b"\x1b]52;c;" + b"A" * (3 * SEQUENCE_LIMIT))
    assert shown == b""
    shown, _ = screen.feed(b"B" * SEQUENCE_LIMIT + b"\x07visible")
    assert shown == b"visible"


def test_an_unfinished_sequence_never_holds_more_than_the_limit() -> None:
    screen = ScreenFilter()
    for _ in range(10):
        screen.feed(b"\x1bP" + b"1;" * SEQUENCE_LIMIT)
    assert len(screen._held) <= SEQUENCE_LIMIT


@given(st.lists(st.sampled_from(DRAWING + DANGEROUS), min_size=1, max_size=8), st.data())
def test_however_the_screen_is_cut_into_reads_the_same_passes(parts: list[bytes], data: st.DataObject) -> None:
    whole = b"".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(whole)), max_size=6))
    assert filtered(whole, cuts) == filtered(whole)
    expected = b"".join(part for part in parts if part in DRAWING)
    assert filtered(whole)[0] == expected


PIECES = [b"\x1b", b"[", b"]", b"52;c;", b"0;", b"6n", b"5n", b"c", b"\x07", b"\\", b"P", b"q", b"$", b"?", b">",
          b"\xc2", b"\x9d", b"\x9c", b"\x9b", b"\xe0\x80", b"\xe2\x94", b"\x80", b"a", b"\x18", b"_", b"1337;", b";",
          b"t", b"21", b"\x05", b"Z", b"u", b"1", b"m", b"2h", b"=1s"]


def _obeyed(shown: bytes) -> list[bytes]:
    """Every sequence in `shown` a terminal would obey beyond drawing, as a reference parser finds them."""
    import re

    from opencode_sandbox.core.screen_filter import OSC_KEPT, _csi_allowed

    found: list[bytes] = []
    for csi in re.finditer(rb"\x1b\[([\x3c-\x3f]?)([\x30-\x3b]*)([\x20-\x2f]*)([\x40-\x7e])", shown):
        if not _csi_allowed(*csi.groups()):
            found.append(csi.group())
    for osc in re.finditer(rb"\x1b\](\d*)", shown):
        if not osc.group(1) or int(osc.group(1)) not in OSC_KEPT:
            found.append(osc.group())
    for other in re.finditer(rb"\x1b[_^XZ]|\x1bP(?![0-9;]*q|=[12]s)|\x05", shown):
        found.append(other.group())
    text = shown.decode("utf-8", errors="strict")  # raises on anything that is no UTF-8: a raw C1 byte
    found += [char.encode() for char in text if 0x80 <= ord(char) <= 0x9F]
    return found


@settings(max_examples=2000)
@given(st.lists(st.sampled_from(PIECES), max_size=60), st.data())
def test_no_sequence_a_terminal_obeys_beyond_drawing_survives_any_bytes(pieces: list[bytes],
                                                                         data: st.DataObject) -> None:
    noise = b"".join(pieces)
    cuts = data.draw(st.lists(st.integers(0, len(noise)), max_size=4))
    shown, answers = filtered(noise, cuts)
    assert _obeyed(shown) == []
    assert answers.replace(STATUS_OK, b"").replace(VT220_ATTRIBUTES, b"") == b""


@pytest.mark.parametrize(("sent", "shown"), [
    (b"x\xc2\x1b]52;c;aWQ=\x07y\xc2\x1b[6n", "x\ufffdy\ufffd".encode()),  # a lone lead byte before ESC
    (b"\xc2\xc2\x9b\x9b6n", "\ufffd\ufffd6n".encode()),  # a lone lead byte before a C1 control
    (b"a\x9b6n\x9d52;c;aWQ=\x07b", "a\ufffd6n\ufffd52;c;aWQ=\x07b".encode()),  # raw C1 bytes
    (b"\xe0\x80\x9b6n", "\ufffd\ufffd\ufffd6n".encode()),  # an overlong ESC-like form
    (b"\xc1\x9b", "\ufffd\ufffd".encode()),
])
def test_what_is_no_utf8_never_reaches_the_terminal_as_a_control(sent: bytes, shown: bytes) -> None:
    assert filtered(sent) == (shown, b"")


@given(st.text(max_size=200), st.data())
def test_every_character_of_text_passes_however_it_is_cut(text: str, data: st.DataObject) -> None:
    wanted = "".join(char for char in text if not (ord(char) < 0x20 and char not in "\t\r\n\x07\x08")
                     and char not in "\x7f" and not 0x80 <= ord(char) <= 0x9f and char != "\x05").encode()
    encoded = wanted
    cuts = data.draw(st.lists(st.integers(0, len(encoded)), max_size=5))
    assert filtered(encoded, cuts) == (encoded, b"")


def test_the_modes_a_session_changed_are_given_back_and_only_those() -> None:
    screen = ScreenFilter()
    shown, _ = screen.feed(b"\x1b[?1049h\x1b[?1000;1006h\x1b[?1004h\x1b[?25l\x1b[?7l\x1b=\x1b[>1u\x1b[>4;2m"
                           b"\x1b[2 q\x1b[4h\x1b[3;20r\x1b[?2004h\x1b[?2004l")
    assert b"\x1b[?1049h" in shown and b"\x1b=" in shown
    restore = screen.modes.restore()
    assert restore.startswith(b"\x1b[0m\x1b[?1049l")
    for expected in (b"\x1b[?1000l", b"\x1b[?1006l", b"\x1b[?1004l", b"\x1b[?25h", b"\x1b[?7h", b"\x1b>",
                     b"\x1b[<1u", b"\x1b[>4m", b"\x1b[0 q", b"\x1b[4l", b"\x1b7\x1b[r\x1b8"):
        assert expected in restore, expected
    assert b"2004" not in restore, "reset by the session itself"
    assert ScreenFilter().modes.restore() == b"\x1b[0m"


def test_keyboard_lock_and_send_receive_modes_never_pass() -> None:
    assert filtered(b"a\x1b[2hb\x1b[12hc\x1b[4;2hd\x1b[4he") == (b"abcd\x1b[4he", b"")


def test_a_synchronized_update_mark_is_whole_and_what_follows_is_judged_again() -> None:
    assert filtered(b"\x1bP=1s\x1b\\x\x1b]52;c;aWQ=\x07y") == (b"\x1bP=1s\x1b\\xy", b"")


def test_a_session_that_ends_inside_an_image_gets_it_closed_before_the_modes_are_given_back() -> None:
    screen = ScreenFilter()
    shown, _ = screen.feed(b"\x1b[?1000h\x1b[?1049h\x1bPq#0~~\x1b")
    assert shown == b"\x1b[?1000h\x1b[?1049h\x1bPq#0~~"
    assert screen.close().startswith(b"\x1b\\\x1b[0m\x1b[?1049l")
    assert ScreenFilter().close() == b"\x1b[0m"


def test_the_vt52_mode_and_the_saving_of_modes_never_pass() -> None:
    assert filtered(b"a\x1b[?2lb\x1b[?1000sc\x1b[?1000rd\x1b[?2he") == (b"abcd\x1b[?2he", b"")


@pytest.mark.parametrize("sequence", [
    b"\x1b[?38h",  # Tektronix mode: xterm then reads no CSI, so no reset could follow
    b"\x1b[?2048h", b"\x1b[?2031h",  # the terminal reports on its own
    b"\x1b[?1000;38h",
    b'\x1b[62;0"p', b"\x1b[!p",  # a conformance level with 8-bit controls, a soft reset
    b"\x1b]7;file://host/etc\x07", b"\x1b]133;A;click_events=1\x07", b"\x1b]633;E;rm -rf ~\x07",
])
def test_what_no_reset_could_give_back_or_acts_on_the_next_shell_never_passes(sequence: bytes) -> None:
    assert filtered(b"a" + sequence + b"b") == (b"ab", b"")
