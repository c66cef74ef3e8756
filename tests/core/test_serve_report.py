"""What a silent opencode serve waits on, read from the VM's /proc/net tables."""

from __future__ import annotations

from opencode_sandbox.core.serve_report import Waiting, connections, hint_for, summary

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1000 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4765 1 0 100 0 0 10 0
   1: 0100007F:B120 0100007F:1000 01 00000000:00000000 00:00000000 00000000  1000        0 4766 1 0 100 0 0 10 0
   2: 020200C0:B120 01FFFF0A:01BB 02 00000000:00000000 00:00000000 00000000     0        0 47651 2 0 20 0 0 10 -1
"""
UDP = """   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
10056: 020200C0:B6EE 3500000A:0035 01 00000000:00000000 00:00000000 00000000     0        0 47652 2 0 0
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 000000FD000000000000000002000000:E0FA 00470626000000000000000001000000:01BB 02 00000001:00000000 01:0000004E
"""


def test_connecting_sockets_and_lookups_are_named_and_loopback_and_listeners_left_out() -> None:
    found = [*connections(TCP, "tcp"), *connections(UDP, "udp"), *connections(TCP6, "tcp6")]

    assert found == [Waiting("tcp", "10.255.255.1", 443, "connecting, no answer yet"),
                     Waiting("udp", "10.0.0.53", 53, "sent"),
                     Waiting("tcp", "2606:4700::1", 443, "connecting, no answer yet")]
    assert [each.describe() for each in found] == [
        "tcp 10.255.255.1:443 (connecting, no answer yet)", "a name lookup at 10.0.0.53:53",
        "tcp [2606:4700::1]:443 (connecting, no answer yet)"]


def test_the_summary_says_it_printed_nothing_and_what_it_waits_on() -> None:
    waiting = connections(TCP, "tcp")
    said = summary("  PID STAT ELAPSED COMMAND\n   41 Sl   15:02 opencode serve --hostname 0.0.0.0\n", waiting, True)

    assert said.splitlines() == [
        "opencode serve has printed nothing: it never got as far as listening.",
        "It waits on the network: tcp 10.255.255.1:443 (connecting, no answer yet).",
        "Its processes in the VM:",
        "    PID STAT ELAPSED COMMAND",
        "     41 Sl   15:02 opencode serve --hostname 0.0.0.0"]
    assert "network policy" in (hint_for(waiting) or "")
    assert hint_for([]) is None and summary("", [], False) == ""


def test_lines_that_are_not_a_table_row_are_skipped() -> None:
    assert connections("garbage\n0: zz:zz 00:00 02\n\n", "tcp") == []


def test_a_server_that_answers_inside_the_vm_but_not_on_the_host_is_told_apart() -> None:
    said = summary("", [], False, inside="401")
    assert said == ("It answers inside the VM (HTTP 401 on 127.0.0.1:4096), but not on the port the runtime "
                    "publishes on the host: the runtime does not forward that port to it.")
    assert "port forwarding" in (hint_for([], "401") or "")
    assert summary("", [], False, inside="000") == "" and hint_for([], "000") is None
    assert hint_for([], None) is None
