"""What the idle reaper of one project works with, kept in `<state_root>/<slug>/reaper.yaml`.

The launcher writes the file each time a client detaches and then spawns a reaper; a reaper
that already runs picks the new values up (the daemon's port or password may have changed),
so at most one reaper per project ever runs and it never works with stale values. The file
holds the daemon password, so it is private (0600) like every state file.
"""

from __future__ import annotations

import os
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.quiescence import UNREADABLE_GRACE_S
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.stop_mode import StopMode
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import ProjectLayout, StateLayout

if TYPE_CHECKING:
    from typing import Any



class ReaperSettings(Record):
    slug: str
    vm_name: str
    runtime_kind: RuntimeKind
    daemon_url: str
    """The daemon as reached from the host, such as `http://127.0.0.1:49213`."""
    timeout_s: float
    """`auto-stop-timeout`: how long no client may be attached before the stop."""
    mode: StopMode
    max_retries: int
    """`auto-stop-max-session-retries`."""
    state_root: Path
    password: str | None = None
    generation: str = ""
    """New for every detach: a reaper that sees it change restarts its idle timer."""
    unreadable_grace_s: float = UNREADABLE_GRACE_S
    """How long a running `opencode serve` whose API cannot be read still holds the VM."""
    project_root: str = ""
    """The checkout, whose branches the reaper keeps in step with the VM's."""
    notify: bool = True
    """Signal when the agent needs the user (`services/attention.py`)."""
    agent: str = "opencode"
    """The agent's profile: opencode's server is asked about its sessions, a terminal agent's hooks
    are read in the VM."""
    agent_title: str = ""
    """How people name the agent, for its notifications: the reaper reads no configuration, where
    an agent of the user's own is defined."""
    git_branches: int = 200
    """`git-sync-branches`: the most of the VM's branches the sync brings to the host."""
    isolated: bool = False
    """The VM works on a work tree of its own: nothing of the checkout to guard, only the sync."""

    def __repr__(self) -> str:
        shown = self._asdict() | {"password": "***" if self.password else None}
        return f"ReaperSettings({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    def project(self) -> ProjectLayout:
        return StateLayout(self.state_root).project(self.slug)

    def with_new_generation(self) -> ReaperSettings:
        return self._replace(generation=os.urandom(16).hex())


def settings_path(state_root: Path, slug: str) -> Path:
    return StateLayout(state_root).project(slug).reaper_settings


def save_settings(settings: ReaperSettings) -> None:
    write_yaml(
        settings_path(settings.state_root, settings.slug),
        {
            "vm_name": settings.vm_name,
            "runtime": settings.runtime_kind.value,
            "daemon_url": settings.daemon_url,
            "password": settings.password or "",
            "timeout_s": settings.timeout_s,
            "mode": settings.mode.value,
            "max_retries": settings.max_retries,
            "generation": settings.generation,
            "unreadable_grace_s": settings.unreadable_grace_s,
            "project_root": settings.project_root,
            "agent": settings.agent,
            "agent_title": settings.agent_title,
            "notify": settings.notify,
            "git_branches": settings.git_branches,
            "isolated": settings.isolated,
        },
        durable=False,  # rewritten at every detach; a crash that could tear it ends the reaper too
    )


def load_settings(state_root: Path, slug: str) -> ReaperSettings | None:
    """The saved settings; None when there are none; UnreadableState when they are damaged."""
    data = read_yaml_mapping(settings_path(state_root, slug))
    if data is None:
        return None
    try:
        return ReaperSettings(
            slug=slug,
            vm_name=_text(data, "vm_name"),
            runtime_kind=RuntimeKind(_text(data, "runtime")),
            daemon_url=_text(data, "daemon_url"),
            timeout_s=float(data["timeout_s"]),
            mode=StopMode(_text(data, "mode")),
            max_retries=int(data["max_retries"]),
            state_root=state_root,
            password=str(data.get("password") or "") or None,
            generation=str(data.get("generation") or ""),
            unreadable_grace_s=float(data.get("unreadable_grace_s", UNREADABLE_GRACE_S)),
            project_root=str(data.get("project_root") or ""),
            agent=str(data.get("agent") or "opencode"),
            agent_title=str(data.get("agent_title") or ""),
            notify=data.get("notify", True) is not False,
            git_branches=int(data.get("git_branches", 200)),
            isolated=data.get("isolated", False) is True,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise UnreadableState(f"{settings_path(state_root, slug)}: {error}") from None


def _text(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{key}' is not a text value")
    return value
