"""The VM's branches the host holds, kept in the project's private state folder: each tip, the
commit it was judged against and why it is held (`core/vm_commits.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from opencode_sandbox.core.vm_commits import HeldBranch, held_from_mapping
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import ProjectLayout


def load(project_dir: Path) -> dict[str, HeldBranch]:
    """Branch name (without `refs/heads/`) -> what is held of it; nothing when unreadable."""
    try:
        document = read_yaml_mapping(ProjectLayout(project_dir).git_held) or {}
    except UnreadableState:
        return {}
    held: dict[str, HeldBranch] = {}
    for branch, data in document.items():
        try:
            held[str(branch)] = held_from_mapping(data if isinstance(data, Mapping) else {})
        except ValueError:
            continue
    return held


def save(project_dir: Path, held: Mapping[str, HeldBranch]) -> None:
    path = ProjectLayout(project_dir).git_held
    if not held:
        path.unlink(missing_ok=True)
        return
    write_yaml(path, {branch: {"commit": each.commit, "base": each.base, "reasons": list(each.reasons)}
                      for branch, each in sorted(held.items())})
