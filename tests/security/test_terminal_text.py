"""What the VM sends never acts on the host's terminal when the tool prints it: a host name the VM
asked the proxy for (an OSC 0 title, an OSC 52 clipboard write), a name in a table, a message that
quotes the VM's output."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

from opencode_sandbox.cli.render import render_refusals
from opencode_sandbox.core.egress import EgressPolicy
from opencode_sandbox.runtime.types import Refusal
from opencode_sandbox.ui.console import Console, LogLevel

CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"
TITLE = "\x1b]0;pwned\x07"
C1_CSI = "\x9b2J"


def test_network_log_escapes_the_host_names_the_vm_sent() -> None:
    refusal = Refusal(f"evil.example{CLIPBOARD}{TITLE}{C1_CSI}", "tcp", 443, 3, datetime.now(UTC),
                      f"not allowed: {TITLE}")
    table = render_refusals("vm", [refusal], EgressPolicy(), "table")
    assert "\x1b" not in table and "\x07" not in table and "\x9b" not in table
    assert "\\x1b]52;c;" in table, "shown, not dropped: the user sees what the VM tried"
    document = render_refusals("vm", [refusal], EgressPolicy(), "json")
    assert "\x1b" not in document and json.loads(document)["result"][0]["destination"].startswith("evil.example\x1b")


def test_every_message_of_the_tool_escapes_what_it_quotes_and_keeps_its_lines() -> None:
    stream = io.StringIO()
    console = Console(LogLevel.VERBOSE, stream=stream)
    console.error(f"the VM said {CLIPBOARD}", hint=f"look at {TITLE}")
    console.warn(f"first line\nsecond {C1_CSI}")
    console.info(f"info {CLIPBOARD}")
    console.note(f"note {TITLE}")
    console.verbose(f"verbose {CLIPBOARD}")
    said = stream.getvalue()
    assert "\x07" not in said and "\x9b" not in said and "]52;" not in said.replace("\\x1b]52;", "")
    assert "first line\nsecond \\x9b2J" in said
