"""The agent's terminal session inside the VM: a tmux session that outlives the user's terminal.

`run` attaches to it, creating it with the agent when it does not run; a second `run` attaches to
the same session, and a closed terminal only ends its own tmux client.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from opencode_sandbox.core.agent_activity import SESSION_LINE
from opencode_sandbox.core.agents import AgentProfile
from opencode_sandbox.core.agents.profile import ACTIVITY_FILE, SESSION_NAME

WORKSPACE = "/workspace"
REPORT_LIMIT_S = 2
"""How long each read of the agent's report may take in the VM: the VM's files and its tmux are the
agent's to make slow (a FIFO in place of the file, a stopped tmux server)."""
REPORT_EXEC_TIMEOUT_S = 10
REPORT_OUTPUT_LIMIT = 64 << 10
"""The report is two short lines; the host reads no more than this of what the VM answers with."""
CONFIG = "/etc/opencode-sandbox/tmux.conf"
"""In the base image: no status line, no prefix key, no delay after Escape: the agent's interface
as if it ran on the terminal itself."""


QUICK_EXIT_S = 10
_KEEP_SCREEN = (
    'started=$(date +%s); "$@"; status=$?; '
    f'if [ "$status" -ne 0 ] || [ $(( $(date +%s) - started )) -lt {QUICK_EXIT_S} ]; then '
    'printf "\n%s ended (exit status %s). Press Enter to close its session.\n" "$0" "$status"; read -r _; fi; '
    'exit "$status"'
)
"""Runs the agent; one that failed or ended within seconds of starting leaves its last screen until
Enter is pressed, since the session's end would otherwise take its message away with it."""


def attach_command(profile: AgentProfile, arguments: Sequence[str]) -> list[str]:
    """Attach to the agent's session, starting the agent in a new one when none runs; the user's
    arguments reach the agent only when the session starts."""
    return _new_session(["-A"], profile, arguments)


def start_command(profile: AgentProfile, arguments: Sequence[str], columns: int, lines: int) -> list[str]:
    """Start the agent in a new session without a client, on a window of the user's terminal's
    size, and print the session's id; tmux refuses (exit status 1) when the session runs already."""
    return _new_session(["-d", "-P", "-F", "#{session_id}", "-x", str(columns), "-y", str(lines)],
                        profile, arguments)


def _new_session(how: list[str], profile: AgentProfile, arguments: Sequence[str]) -> list[str]:
    return ["tmux", "-u", "-f", CONFIG, "new-session", *how, "-s", SESSION_NAME, "-c", WORKSPACE,
            "sh", "-c", _KEEP_SCREEN, profile.title, *profile.session_command(list(arguments))]


SESSION_ID = re.compile(r"\$[0-9]{1,9}")
"""A tmux session id as `start_command` prints it; the VM's output is read as untrusted text."""


def end_unwatched_command(session_id: str) -> list[str]:
    """End the session `session_id` (`SESSION_ID`) unless a client is attached to it."""
    script = ('[ "$(tmux display-message -p -t "$1" "#{session_attached}")" = 0 ] && tmux kill-session -t "$1"; '
              "true")
    return ["sh", "-c", script, "sh", session_id]


def report_script() -> str:
    """Run as dev: `session NOW OUTPUT KEY` or `none`, then the agent's last recorded state
    (`core/agent_activity.py`), each read given at most `REPORT_LIMIT_S`, the state only from a
    regular file. NOW, OUTPUT and KEY are the VM's clock (seconds since the epoch): now, when the
    session last printed (tmux's window activity: output alone, a cursor the terminal blinks is
    none), and when a client last pressed a key in it or attached (its session activity)."""
    return (f'if times=$(timeout {REPORT_LIMIT_S} tmux display-message -p -t {SESSION_NAME}: '
            '"#{window_activity} #{session_activity}" 2>/dev/null); then set -f; set -- $times; '
            'if [ $# = 2 ] && [ ${#1} -le 12 ] && [ ${#2} -le 12 ] && case "$1$2" in *[!0-9]*) false ;; esac; '
            'then echo "' + SESSION_LINE + ' $(date +%s) $1 $2"; else echo ' + SESSION_LINE + '; fi; '
            f'else echo none; fi; file="$HOME/{ACTIVITY_FILE}"; '
            f'[ -f "$file" ] && timeout {REPORT_LIMIT_S} head -c 200 "$file" 2>/dev/null | head -n 1; true')
