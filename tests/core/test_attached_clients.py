"""What `stop` says about the clients it would cut off, and when it asks."""

from __future__ import annotations

from opencode_sandbox.core.attached_clients import (
    AttachedClient,
    cut_off_note,
    describe_client,
    must_ask_before_stopping,
    stop_question,
)

NOW = 1_900_000_000.0
SERVE = AttachedClient(4242, "opencode-sandbox run --serve-only", NOW - 125)
SHELL = AttachedClient(4343, "opencode-sandbox shell -- make test", NOW - 3 * 3600 - 5)


def test_only_a_user_at_a_terminal_is_asked_and_only_when_clients_are_attached() -> None:
    assert must_ask_before_stopping([SERVE], interactive=True)
    assert not must_ask_before_stopping([SERVE], interactive=False)
    assert not must_ask_before_stopping([], interactive=True)


def test_a_client_is_named_by_its_process_its_command_and_how_long_it_has_been_attached() -> None:
    assert describe_client(SERVE, NOW) == "pid 4242: opencode-sandbox run --serve-only, attached 2m ago"
    assert describe_client(SHELL, NOW) == "pid 4343: opencode-sandbox shell -- make test, attached 3h ago"
    assert describe_client(AttachedClient(7, "", None), NOW) == "pid 7: an opencode-sandbox client"
    assert describe_client(AttachedClient(8, "x", NOW + 5), NOW).endswith("attached 0s ago")
    long = describe_client(AttachedClient(9, "opencode-sandbox shell -- " + "y" * 200, NOW - 2 * 86400), NOW)
    assert len(long) < 110 and "…" in long and long.endswith("attached 2d ago")


def test_the_question_lists_every_client() -> None:
    question = stop_question("opencode-sandbox-vm-demo", [SERVE, SHELL], NOW)
    assert question.splitlines() == [
        "2 clients are attached to opencode-sandbox-vm-demo:",
        "  pid 4242: opencode-sandbox run --serve-only, attached 2m ago",
        "  pid 4343: opencode-sandbox shell -- make test, attached 3h ago",
        "Stop the VM anyway?",
    ]
    assert stop_question("vm", [SERVE], NOW).startswith("1 client is attached to vm:")


def test_the_note_after_a_stop_counts_the_clients_cut_off() -> None:
    assert cut_off_note(0) == ""
    assert cut_off_note(1) == "1 attached client was cut off."
    assert cut_off_note(3) == "3 attached clients were cut off."
