"""The reaper's reading of a terminal agent: its hooks' state, or, for an agent without hooks, its
terminal's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.core import agents
from opencode_sandbox.core.agent_activity import AgentReport, AgentState
from opencode_sandbox.core.agents.profile import ActivitySource
from opencode_sandbox.core.quiescence import decide_stop
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.core.terminal_activity import QUIET_AFTER_S
from opencode_sandbox.services.reaper import TerminalAgentReader
from tests.services.test_attention import VM, reaper_settings, running_vm

PRINTING = AgentReport(True, AgentState.WAITING, 1, quiet_s=0, keys_s=60, printed_at_s=1000)
"""Its terminal printed a moment ago; its hooks' file says it waits."""
QUIET = AgentReport(True, AgentState.BUSY, 2, quiet_s=QUIET_AFTER_S, keys_s=60, printed_at_s=1000)
"""Its terminal has been quiet for the window; its hooks' file says it works."""


def stops(report: AgentReport, tmp_path: Path) -> bool:
    runtime = running_vm()
    runtime.guests.agent_reports[VM] = report
    activity = TerminalAgentReader(lambda kind: runtime, guests=runtime.guests)(reaper_settings(tmp_path))
    return decide_stop(activity, StopMode.WAIT_FOR_QUIESCENCE, 10).stop


def test_an_agent_without_hooks_holds_the_vm_while_its_terminal_prints(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    hookless = agents.PROFILES["codex"]._replace(activity=ActivitySource.TERMINAL)
    monkeypatch.setattr(agents, "PROFILES", {**agents.PROFILES, "codex": hookless})
    assert not stops(PRINTING, tmp_path)
    assert stops(QUIET, tmp_path)


def test_an_agent_with_hooks_is_held_by_what_they_recorded(tmp_path: Path) -> None:
    assert stops(PRINTING, tmp_path)
    assert not stops(QUIET, tmp_path)
