"""The isolated workspace, the same on both runtimes: the VM works on a work tree of its own, seeded
from the checkout; nothing it writes reaches the host's checkout, and its work comes back only as
git data that the host's git reads without running anything the VM planted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.e2e.git_scenarios import sync_within
from tests.e2e.harness import Project, wait_until

AS_AGENT = "git -c user.name=agent -c user.email=agent@example.org"


def isolated_shell(project: Project, script: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return project.cli("shell", "--isolated", *flags, "--", "sh", "-c", script)


def user_git(project: Project, *args: str) -> str:
    """The user's own git in the checkout, as the project's host user: what it printed."""
    done = subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@example.org", *args], cwd=project.root,
                          env=project.process_env(), capture_output=True, text=True, check=True,
                          **project.process_options())
    return done.stdout.strip()


def git_answers(project: Project, *args: str) -> str | None:
    """What the user's git printed, None when it failed (a ref that is not there)."""
    try:
        return user_git(project, *args)
    except subprocess.CalledProcessError:
        return None


def reaper_log(project: Project) -> str:
    path = project.state_dir / "reaper.log"
    return path.read_text()[-3000:] if path.exists() else "no reaper log"


def checkout_files(root: Path) -> dict[str, bytes]:
    """Every file of the checkout outside `.git`, with its content (a link as its target)."""
    found: dict[str, bytes] = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if not (Path(folder) == root and name == ".git")]
        for name in files + [each for each in folders if (Path(folder) / each).is_symlink()]:
            path = Path(folder) / name
            relative = str(path.relative_to(root))
            found[relative] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return found


def the_vm_starts_from_what_the_user_sees(project: Project) -> None:
    (project.root / "tracked.txt").write_text("committed\n")
    user_git(project, "add", "tracked.txt")
    user_git(project, "commit", "-q", "-m", "tracked")
    (project.root / "tracked.txt").write_text("committed\nthe user's own edit\n")
    (project.root / "untracked.txt").write_text("not added yet\n")
    shown = isolated_shell(project, "cat tracked.txt untracked.txt; git status --short; git log -1 --format=%s")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["committed", "the user's own edit", "not added yet",
                                         " M tracked.txt", "?? untracked.txt", "tracked"], shown.stdout


def nothing_of_the_checkout_is_mounted(project: Project) -> None:
    mounts = isolated_shell(project, "cat /proc/self/mountinfo")
    assert mounts.returncode == 0, mounts.stderr
    assert str(project.root) not in mounts.stdout and project.root.name not in mounts.stdout, \
        "the host's checkout is mounted in the isolated mode"


def the_vms_work_reaches_the_host_as_refs_only(project: Project) -> None:
    before = checkout_files(project.root)
    made = isolated_shell(project, f"echo vm > vm.txt && echo 'the line of the VM' >> tracked.txt && mkdir -p deep && "
                         f"echo d > deep/file.txt && {AS_AGENT} add vm.txt && {AS_AGENT} commit -q -m 'vm commit'",
                         "--isolated")
    assert made.returncode == 0, made.stderr
    assert checkout_files(project.root) == before, "the VM's writes reached the host's checkout"
    assert wait_until(lambda: git_answers(project, "log", "-1", "--format=%s", "refs/sandbox/heads/main")
                      == "vm commit", sync_within(project)), \
        f"the idle reaper, told of the detach, brings the VM's commit at once: {reaper_log(project)}"
    wip = "refs/sandbox/wip/main"
    assert wait_until(lambda: git_answers(project, "cat-file", "-e", f"{wip}:deep/file.txt") is not None,
                      sync_within(project)), \
        f"the idle reaper brings the commit of the VM's work tree soon after the client leaves: {reaper_log(project)}"
    assert user_git(project, "show", f"{wip}:vm.txt") == "vm"
    assert user_git(project, "show", f"{wip}:deep/file.txt") == "d"
    assert user_git(project, "show", f"{wip}:tracked.txt").splitlines()[-1] == "the line of the VM"
    assert user_git(project, "rev-parse", "HEAD") != user_git(project, "rev-parse", "refs/sandbox/heads/main"), \
        "the host's branch stays where the user left it"


def host_commits_reach_the_vm(project: Project) -> None:
    (project.root / "host.txt").write_text("host\n")
    user_git(project, "add", "host.txt")
    user_git(project, "commit", "-q", "-m", "on the host")
    seen = isolated_shell(project, "git log -1 --format=%s host/main")
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip() == "on the host"


def planted_git_runs_nothing_on_the_host(project: Project) -> None:
    """The attacks of both trials, made in the isolated VM: its git directory's config, hooks and
    commondir, a nested repository and a gitlink with `core.fsmonitor`, files the host runs, a
    link out of the tree, as dev and as root. The host's git then reads the refs and objects the
    sync brought, and the user's own git runs in the checkout: nothing runs, nothing appears."""
    marker = project.root.parent / f"pwned-isolated-{os.getpid()}"
    head = user_git(project, "rev-parse", "HEAD")
    touch = f"touch {marker}; false"
    script = (
        f"git config core.fsmonitor '{touch}' && git config core.hooksPath .hooks && mkdir -p .hooks && "
        f"printf '#!/bin/sh\\n{touch}\\n' > .hooks/post-commit && chmod +x .hooks/post-commit && "
        f"git init -q sub && git -C sub config core.fsmonitor '{touch}' && "
        f"git update-index --add --cacheinfo 160000,{head},sub && "
        f"printf 'touch {marker}\\n' > .envrc && mkdir -p .vscode && echo '{{}}' > .vscode/tasks.json && "
        "ln -s /etc/passwd leak && "
        f"{AS_AGENT} commit -q -m 'hostile commit' --no-verify; true"
    )
    for flags in ((), ("--root",)):
        planted = isolated_shell(project, script, *flags)
        assert planted.returncode == 0, planted.stderr
    before = checkout_files(project.root)
    assert project.cli("diff").returncode == 0  # brings the VM's work tree as it is now
    user_git(project, "status")
    user_git(project, "log", "--all", "-3")
    user_git(project, "diff", "--stat", "HEAD", "refs/sandbox/wip/main")
    user_git(project, "show", "--stat", "refs/sandbox/wip/main")
    taken = git_answers(project, "log", "-1", "--format=%s", "refs/sandbox/heads/main", "--")
    assert taken != "hostile commit", "a commit with a gitlink and files the host runs was taken as it is"
    told = project.cli("guard", "status")
    assert "main" in told.stdout and "gitlink" in told.stdout, told.stdout + told.stderr
    (project.root / "after.txt").write_text("after\n")
    user_git(project, "add", "after.txt")
    user_git(project, "commit", "-q", "-m", "the user's commit after the attack")
    assert not marker.exists(), "the host ran what the isolated VM planted"
    after = checkout_files(project.root)
    assert {name: data for name, data in after.items() if name != "after.txt"} == before, \
        "the attack changed the host's checkout"
    assert not (project.root / "sub").exists() and not (project.root / ".envrc").exists()


def a_switch_asks_first(project: Project) -> None:
    refused = project.shell("true")
    assert refused.returncode != 0
    assert "works in the isolated mode" in refused.stderr and "--yes" in refused.stderr, refused.stderr
    planned = project.cli("run", "--dry-run", "--isolated")
    assert planned.returncode == 0, planned.stderr
    assert "workspace: isolated" in planned.stdout
    listed = project.cli("list")
    assert listed.returncode == 0 and "isolated" in listed.stdout, listed.stdout


def apply_takes_the_plain_edits_and_none_of_the_flagged(project: Project) -> None:
    """After the attacks: `diff` shows the VM's work escaped and flagged; `apply -y` brings the plain
    edits into the checkout as uncommitted changes and nothing flagged; the host's git still runs
    nothing the VM planted."""
    marker = project.root.parent / f"pwned-isolated-{os.getpid()}"
    written = isolated_shell(project, "printf 'plain\\n\\033]52;c;cHduZWQ=\\a\\n' > escaped.txt && "
                                      "printf 'x\\n' > \"$(printf 'name\\033[31m.txt')\"")
    assert written.returncode == 0, written.stderr
    shown = project.cli("diff")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, "the VM's text reached the terminal raw"
    assert "escaped.txt" in shown.stdout and "vm.txt" in shown.stdout
    described = json.loads(project.cli("diff", "--format", "json").stdout)["result"]
    flags = {change["path"]: set(change["flags"]) for change in described["changes"]}
    assert "gitlink" in flags["sub"] and "host-run" in flags[".envrc"] and "link-leaves-tree" in flags["leak"], flags
    assert "host-run" in flags[".vscode/tasks.json"]
    applied = project.cli("apply", "-y")
    assert applied.returncode == 0, applied.stderr
    assert (project.root / "vm.txt").read_text() == "vm\n"
    assert (project.root / "deep" / "file.txt").read_text() == "d\n"
    assert (project.root / "escaped.txt").read_bytes().startswith(b"plain\n")
    for flagged in ("sub", ".envrc", "leak", ".vscode"):
        assert not (project.root / flagged).exists() and not (project.root / flagged).is_symlink(), flagged
    assert ".envrc" in applied.stdout and "left out" in applied.stdout
    assert (project.root / "vm.txt").stat().st_mode & 0o7777 == 0o644
    assert user_git(project, "status", "--short", "vm.txt") == "?? vm.txt", "applied as an uncommitted change"
    user_git(project, "add", "-A")
    user_git(project, "commit", "-q", "-m", "the VM's work, applied")
    assert not marker.exists(), "the host ran what the isolated VM planted, after apply"
    again = json.loads(project.cli("diff", "--format", "json").stdout)["result"]["changes"]
    assert {change["path"] for change in again} >= {"sub", ".envrc", "leak"}, "left-out changes stay to be seen"
    assert "vm.txt" not in {change["path"] for change in again}


def the_vms_work_outlives_its_vm(project: Project) -> None:
    """`stop -f` removes the VM and the state file, never the work tree's volume: the next start of
    the isolated mode finds the VM's uncommitted work as it left it."""
    kept = isolated_shell(project, "echo unsaved >> tracked.txt")
    assert kept.returncode == 0, kept.stderr
    removed = project.cli("stop", "-f")
    assert removed.returncode == 0, removed.stderr
    again = isolated_shell(project, "tail -n 1 tracked.txt")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "unsaved", "the VM's uncommitted work was lost with its VM"


def a_renamed_branch_keeps_the_sync_going(project: Project) -> None:
    """`feature` renamed to `feature/x` in the VM: the host's `refs/sandbox/heads/feature` must go
    before `feature/x` can come, and the work tree's commit comes whatever the branches do."""
    made = isolated_shell(project, "git branch feature")
    assert made.returncode == 0, made.stderr
    assert wait_until(lambda: git_answers(project, "rev-parse", "-q", "--verify", "refs/sandbox/heads/feature")
                      is not None, sync_within(project)), reaper_log(project)
    renamed = isolated_shell(project, "git branch -m feature feature/x && echo renamed > after-rename.txt")
    assert renamed.returncode == 0, renamed.stderr
    assert wait_until(lambda: git_answers(project, "rev-parse", "-q", "--verify", "refs/sandbox/heads/feature/x")
                      is not None, sync_within(project)), reaper_log(project)
    assert git_answers(project, "rev-parse", "-q", "--verify", "refs/sandbox/heads/feature") is None
    assert wait_until(lambda: git_answers(project, "cat-file", "-e", "refs/sandbox/wip/main:after-rename.txt")
                      is not None, sync_within(project)), reaper_log(project)
