"""The state folder's layout: its names stay what users' folders hold, and only the layout names them."""

from __future__ import annotations

import re
from pathlib import Path

import opencode_sandbox
from opencode_sandbox import state_layout
from opencode_sandbox.state_layout import PROJECT_PLACES, TOOL_PLACES, StateLayout

PACKAGE = Path(opencode_sandbox.__file__).parent


def test_the_paths_are_those_earlier_versions_wrote(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    project = layout.project("demo-0123456789abcd")
    assert {
        "auto-prune": layout.auto_prune_stamp, "release check tried": layout.update_attempt,
        "release check": layout.updater, "first boot": layout.first_boot_lock("demo-0123456789abcd"),
        "policy marks": layout.policy_marks,
    } == {
        "auto-prune": tmp_path / "auto-prune.last", "release check tried": tmp_path / "update-check.attempt",
        "release check": tmp_path / "updater.yaml", "first boot": tmp_path / "vm-ensure" / "demo-0123456789abcd.lock",
        "policy marks": tmp_path / "docker-network-policy",
    }
    folder = tmp_path / "demo-0123456789abcd"
    assert (project.folder, project.state, project.daemon_password, project.provisioned, project.image_check,
            project.leases, project.stop_lock, project.reaper_settings, project.reaper_log, project.reaper_lock,
            project.guard, project.vm_git, project.gitfile, project.git_sync_lock) == (
        folder, folder / "state.yaml", folder / "daemon-password", folder / "provisioned.yaml",
        folder / "image-check.yaml", folder / "leases", folder / "stop.lock", folder / "reaper.yaml",
        folder / "reaper.log", folder / "reaper.lock", folder / "guard", folder / "git", folder / "gitfile",
        folder / "git-sync.lock")
    assert [project[place].relative_to(folder).as_posix() for place in (
        state_layout.GUARD_RECORD, state_layout.GUARD_COPIES, state_layout.GUARD_LOCK, state_layout.GUARD_MOVED)] == [
        "guard/record.yaml", "guard/copies", "guard/guard.lock", "guard/moved.yaml"]
    assert re.fullmatch(r"\.git\.[0-9a-f]{12}", project.vm_git_staging().name)
    assert re.fullmatch(r"incoming-[0-9a-f]{16}\.bundle", project.incoming_bundle().name)


def test_no_other_module_names_a_file_of_the_state_folder() -> None:
    distinctive = [place.name for place in (*TOOL_PLACES, *PROJECT_PLACES)
                   if re.search(r"[.-]", place.name) and "*" not in place.name]
    assert len(distinctive) > 10
    named = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "state_layout.py":
            continue
        text = path.read_text()
        named += [f"{path.relative_to(PACKAGE)}: {name}" for name in distinctive
                  if re.search(rf"""["'/]{re.escape(name.split('/')[-1])}["']""", text)]
    assert named == []
