"""The VM's own git directory, the same on both runtimes: the attacks that made the host's git
run the agent's code fail for `dev` and for root in the VM, the project keeps its identity,
and commits travel both ways."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

from opencode_sandbox.errors import SandboxError
from tests.e2e.harness import Project, git, wait_until

AS_AGENT = "git -c user.name=agent -c user.email=agent@example.org"
SYNC_WITHIN_S = 30.0
"""Docker; an emulated microVM answers each exec in seconds, and is given `LAB_SYNC_WITHIN_S`."""
LAB_SYNC_WITHIN_S = 180.0


def sync_within(project: Project) -> float:
    return LAB_SYNC_WITHIN_S if project.runtime == "microsandbox" else SYNC_WITHIN_S


def host_git_runs_nothing(project: Project, marker: Path) -> None:
    """The host user's own `git status` and `git commit`, after the VM had its go."""
    git(project.root, "status")
    (project.root / "host-change.txt").write_text(f"{marker.name}\n")
    git(project.root, "add", "host-change.txt")
    git(project.root, "commit", "-q", "-m", f"host commit after {marker.name}")
    assert not marker.exists(), f"the host's git ran the VM's command ({marker.name})"


def in_vm(project: Project, script: str, as_root: bool) -> subprocess.CompletedProcess[str]:
    return project.cli("shell", *(["--root"] if as_root else []), "--", "sh", "-c", script)


def the_host_git_dir_is_out_of_reach(project: Project, as_root: bool) -> None:
    """Two ways into the host's git directory, as `dev` or root: a new commondir, and renaming .git."""
    marker = project.root.parent / f"pwned-commondir{'-root' if as_root else ''}"
    planted = in_vm(project,
        "mkdir -p .git/x && ln -s ../objects .git/x/objects && ln -s ../refs .git/x/refs && "
        f"printf '[core]\\n\\tfsmonitor = \"touch ../{marker.name}; false\"\\n' > .git/x/config && "
        "echo x > .git/commondir", as_root)
    if as_root and project.runtime == "docker":  # root there holds no capability and no id in the checkout
        assert planted.returncode != 0, "root in a docker VM wrote the VM's git directory"
    else:
        assert planted.returncode == 0, "the VM's own git directory is the VM's to change: " + planted.stderr
    assert not (project.root / ".git" / "commondir").exists(), "the host's .git took the VM's commondir"
    host_git_runs_nothing(project, marker)
    in_vm(project, "rm -rf .git/commondir .git/x", as_root)

    renamed = in_vm(project, "mv .git .git-old", as_root)
    assert renamed.returncode != 0, "the VM renamed the git directory the checkout uses"
    assert (project.root / ".git" / "HEAD").is_file() and not (project.root / ".git-old").exists()
    assert project.shell("git status --short >/dev/null && git log -1 >/dev/null").returncode == 0


def a_gitlink_and_nested_repositories_run_nothing(project: Project) -> None:
    """Attack 3: a gitlink in the index to a nested repository whose config sets fsmonitor,
    and a `.git` file naming a bare repository the agent made."""
    marker = project.root.parent / "pwned-gitlink"
    head = git(project.root, "rev-parse", "HEAD")
    assert project.shell("true").returncode == 0  # the VM runs on, with no client: the reaper watches
    # The watch moves a git directory as soon as it appears, which would cut the attack short
    # halfway: each is made outside the checkout without its last part (`refs`, the `.git`
    # name), copied in (a copy between file systems, slow in an emulated VM) and completed by
    # renames. Whatever the watch takes between two renames is gone, as the attack should be.
    made = project.backend().exec(project.vm, ["sh", "-c",
        f"git update-index --add --cacheinfo 160000,{head},sub && mkdir -p /tmp/made/other && cd /tmp/made && "
        f"git init -q sub && git -C sub config core.fsmonitor 'touch ../../{marker.name}; false' && "
        f"git init -q --bare evil && git -C evil config core.fsmonitor 'touch ../../{marker.name}; false' && "
        "echo 'gitdir: ../evil' > other/git.part && mv evil/refs evil/refs.part && "
        "mv sub/.git/refs sub/.git/refs.part && mv sub/.git sub/dotgit.part && mv sub evil other /workspace/ && "
        "cd /workspace && { mv evil/refs.part evil/refs; mv sub/dotgit.part sub/.git; "
        "mv sub/.git/refs.part sub/.git/refs; mv other/git.part other/.git; true; }"])
    assert made.exit_code == 0, made.stderr
    gone = wait_until(lambda: not (project.root / "sub" / ".git").exists()
                      and not (project.root / "other" / ".git").exists()
                      and not (project.root / "evil" / "HEAD").exists(), sync_within(project))
    assert gone, f"the git directories the VM made stayed in the checkout while it ran; the reaper's log:\n" \
                 f"{project.reaper_log()}"
    host_git_runs_nothing(project, marker)
    for folder in ("sub", "other"):
        (project.root / folder).mkdir(exist_ok=True)
        subprocess.run(["git", "status"], cwd=project.root / folder, capture_output=True, check=False)
    assert not marker.exists(), "git run in a folder the VM made ran the VM's command"
    status = json.loads(project.cli("guard", "status", "--format", "json").stdout)["result"]
    assert {line.split(" -> ")[0] for line in status["moved_aside"]} >= {"sub/.git", "other/.git", "evil"}, status
    assert status["state"] == "changed"
    reviewed = project.shell("git reset -q")  # the next start tells the user, once
    assert "were moved aside while it ran" in reviewed.stderr and "sub/.git -> " in reviewed.stderr, reviewed.stderr
    assert json.loads(project.cli("guard", "status", "--format", "json").stdout)["result"]["moved_aside"] == []


def guarded_files_are_put_back_while_the_vm_runs(project: Project) -> None:
    """A file the host runs, written in the VM mid-session, is the recorded one again within
    seconds, before the user's next `cd` or commit on the host; the review shows what it was."""
    def host_files() -> dict[str, bytes | None]:
        return {name: (project.root / name).read_bytes() if (project.root / name).exists() else None
                for name in (".envrc", ".pre-commit-config.yaml", ".vscode/tasks.json")}

    recorded = host_files()
    assert project.shell("true").returncode == 0
    written = project.backend().exec(project.vm, ["sh", "-c",
        "echo 'touch ../pwned-envrc' > .envrc && mkdir -p .vscode && echo '{}' > .vscode/tasks.json && "
        "printf 'repos:\n- repo: local\n  hooks: [{id: x, name: x, entry: touch, language: system}]\n' "
        "> .pre-commit-config.yaml"])
    assert written.exit_code == 0, written.stderr
    assert wait_until(lambda: host_files() == recorded, sync_within(project)), \
        f"a guarded file the VM wrote stayed in the checkout while it ran; the reaper's log:\n{project.reaper_log()}"
    status = json.loads(project.cli("guard", "status", "--format", "json").stdout)["result"]
    assert {line.split(":")[0] for line in status["put_back"]} == {".envrc", ".pre-commit-config.yaml",
                                                                    ".vscode/tasks.json"}, status
    reviewed = project.shell("true")
    assert "put back as they were" in reviewed.stderr and "+touch ../pwned-envrc" in reviewed.stderr, \
        reviewed.stderr
    assert json.loads(project.cli("guard", "status", "--format", "json").stdout)["result"]["put_back"] == []


def the_slug_comes_from_the_host(project: Project) -> None:
    """The VM's own config naming another project's remote changes nothing on the host."""
    changed = project.shell("git config remote.origin.url git@example.org:e2e/another-project.git")
    assert changed.returncode == 0, changed.stderr
    assert git(project.root, "config", "remote.origin.url") == project.remote
    again = project.shell("true")
    assert again.returncode == 0, again.stderr
    assert project.vms() == [project.vm], "another project's VM was attached"


def commits_travel_both_ways(project: Project) -> None:
    def vm_head() -> str:
        return project.shell("git rev-parse HEAD").stdout.strip()

    host_head = git(project.root, "rev-parse", "HEAD")
    assert wait_until(lambda: vm_head() == host_head, sync_within(project), interval=2), \
        "the VM missed the host's commits"
    agent = project.shell(f"echo agent > agent.txt && git add agent.txt && {AS_AGENT} commit -q -m 'by the agent' "
                          "&& git rev-parse HEAD")
    assert agent.returncode == 0, agent.stderr
    agent_commit = agent.stdout.strip().splitlines()[-1]
    assert wait_until(lambda: git(project.root, "rev-parse", "main") == agent_commit, sync_within(project)), \
        "the host's branch did not move to the agent's commit"
    assert git(project.root, "status", "--porcelain") == "", "the host's work tree and index match the commit"
    assert git(project.root, "rev-parse", "refs/sandbox/heads/main") == agent_commit

    (project.root / "host.txt").write_text("host\n")
    git(project.root, "add", "host.txt")
    git(project.root, "commit", "-q", "-m", "by the host")
    host_commit = git(project.root, "rev-parse", "HEAD")
    assert wait_until(lambda: vm_head() == host_commit, sync_within(project), interval=2), \
        "the VM missed the host commit"
    assert project.shell("git status --porcelain").stdout.strip() == ""

    # Something staged in the VM holds its branch where it is while the host commits on top.
    staged = project.shell("echo vm > vm-only.txt && git add vm-only.txt")
    assert staged.returncode == 0, staged.stderr
    (project.root / "host-only.txt").write_text("host\n")
    git(project.root, "add", "host-only.txt")
    git(project.root, "commit", "-q", "-m", "host side")
    host_side = git(project.root, "rev-parse", "HEAD")
    assert wait_until(lambda: project.shell("git rev-parse host/main").stdout.strip() == host_side,
                      sync_within(project), interval=2), "the host's commit did not reach the VM"
    diverged = project.shell(f"{AS_AGENT} commit -q -m 'vm side'")
    assert diverged.returncode == 0, diverged.stderr
    assert wait_until(lambda: "vm side" in git(project.root, "log", "-1", "--format=%s", "refs/sandbox/heads/main"),
                      sync_within(project)), "the VM's commit did not reach the host"
    assert git(project.root, "rev-parse", "main") == host_side, "the host's own commit stays where it is"
    status = project.cli("guard", "status")
    assert "main: both moved" in status.stdout and "git merge refs/sandbox/heads/main" in status.stdout, status.stdout


REPLANT_S = 120
LOOK_SETTLES_SHARE = 6
"""A look that counted the loop's last planting may still stop the VM after the loop ended: within
this share of the sync's time (5 s on docker, 30 s in the emulated lab)."""
"""How long the VM's loop keeps putting a planted repository back (it ends by itself)."""


def a_gitlink_commit_is_held_and_runs_nothing(project: Project, as_root: bool) -> None:
    """A gitlink the VM commits, both ways. (b) A loop in the VM puts `sub/.git` back every
    20 ms, a repository whose `core.fsmonitor` runs (the watch stops the VM once it has moved it aside
    five times), and the agent commits a gitlink `sub`: the sync
    used to fast-forward the host's branch over it, and git entered `sub` on the host. (a) The guard
    used to keep the VM's moved repository in the checkout, where the VM read its path and committed
    a gitlink to it. Neither may run anything on the host, by the tool's sync or by the user's git
    following the docs' advice; the branch is held, and told."""
    user = "root" if as_root else "dev"
    marker = project.root.parent / f"pwned-held-{user}"

    def vm(script: str) -> subprocess.CompletedProcess[str]:
        done = project.backend().exec(project.vm, ["sh", "-c", script], user=user)
        return subprocess.CompletedProcess(script, done.exit_code, done.stdout, done.stderr)

    assert project.shell("true").returncode == 0  # the VM runs on with no client: the reaper watches
    before = git(project.root, "rev-parse", "main")
    # Root's git refuses dev's checkout as of dubious ownership; an attacker as root says it is safe.
    trusting = "git config --global --add safe.directory '*' && " if as_root else ""
    prepared = vm(f"{trusting}rm -rf /tmp/prep-{user} && mkdir -p /tmp/prep-{user} && cd /tmp/prep-{user} && "
                  "git init -q sub && "
                  f"git -C sub config core.fsmonitor 'touch ../../{marker.name}; false'")
    assert prepared.returncode == 0, prepared.stderr
    # The watch may move the copy away while it is made (the loop below plants it again): only the
    # folder the VM may write is checked here.
    planted = vm(f"mkdir -p sub && {{ cp -a /tmp/prep-{user}/sub/.git sub/.git 2>/dev/null; true; }} && test -d sub")
    if as_root and project.runtime == "docker":  # root there holds no capability and no id in the checkout
        assert planted.returncode != 0, "root in a docker VM wrote the checkout"
        return
    assert planted.returncode == 0, planted.stderr
    committed = vm(f"git update-index --add --cacheinfo 160000,{before},sub && "
                   f"{AS_AGENT} commit -q -m 'vendor a module' && git rev-parse HEAD")
    assert committed.returncode == 0, committed.stderr
    gitlink_commit = committed.stdout.strip().splitlines()[-1]
    looping = vm(f"setsid nohup sh -c 'end=$(($(date +%s)+{REPLANT_S})); while [ $(date +%s) -lt $end ]; do "
                 f"[ -e /workspace/sub/.git ] || cp -a /tmp/prep-{user}/sub/.git /workspace/sub/.git 2>/dev/null; "
                 "sleep 0.02; done' >/dev/null 2>&1 &")
    assert looping.returncode == 0, looping.stderr

    def held() -> list[str]:
        status = json.loads(project.cli("guard", "status", "--format", "json").stdout)["result"]
        return list(status["held_branches"])

    def held_or_stopped() -> bool:
        return not project.vm_running() or any(line.startswith("main: held") for line in held())

    assert wait_until(held_or_stopped, sync_within(project), interval=2), \
        f"the VM's gitlink was not held; the reaper's log:\n{project.reaper_log()}"
    # The loop runs until the watch stops the VM (five plantings within a minute) or it is ended here,
    # whichever comes first; a look already under way may still stop the VM just after.
    if project.vm_running():
        with contextlib.suppress(SandboxError):  # stopped by the watch meanwhile
            vm(f"pkill -f '[c]p -a /tmp/prep-{user}'; true")
        time.sleep(sync_within(project) / LOOK_SETTLES_SHARE)
    if not project.vm_running():
        # The loop made sub/.git again as soon as it was moved aside: the watch stopped the VM (it would
        # be the VM's most of the time), and the next start says why and syncs what the VM committed.
        again = project.shell("true")
        assert again.returncode == 0, again.stderr
        assert "could not do its job" in again.stderr and "sub/.git again" in again.stderr, again.stderr
    assert wait_until(lambda: any(line.startswith("main: held") for line in held()), sync_within(project),
                      interval=2), f"the VM's gitlink was not held; the reaper's log:\n{project.reaper_log()}"
    assert not marker.exists(), "the tool's sync ran the planted repository's fsmonitor on the host"
    assert git(project.root, "rev-parse", "main") == before, "the host's branch moved onto the gitlink"
    sandbox_ref = subprocess.run(["git", "rev-parse", "-q", "--verify", "refs/sandbox/heads/main"], cwd=project.root,
                                 capture_output=True, text=True, check=False).stdout.strip()
    assert sandbox_ref != gitlink_commit, "a held branch is not under refs/sandbox/heads/"
    assert "a gitlink (submodule) at sub" in held()[0] and gitlink_commit[:12] in held()[0]

    # The user, as the docs say: status, then bring the VM's branch in.
    git(project.root, "status")
    subprocess.run(["git", "merge", "--no-edit", "refs/sandbox/heads/main"], cwd=project.root, capture_output=True,
                   check=False)
    git(project.root, "diff", "--stat", "--submodule=short", "--no-textconv", "--no-ext-diff", before, gitlink_commit)
    assert not marker.exists(), "the user's git, following the docs, ran the planted repository's fsmonitor"
    told = project.shell("true")
    assert "main: held" in told.stderr and "git merge" in told.stderr, told.stderr

    # (a): what the guard moved aside is nowhere the VM can see it, so no gitlink can name it.
    stopped = vm(f"ps -eo args | grep -c '[c]p -a /tmp/prep-{user}' || true")
    assert stopped.stdout.strip() == "0", "the VM's loop still runs"
    assert vm("test -e .opencode-sandbox/guard").returncode != 0, "the guard keeps copies in the checkout"
    moved = project.reaper_log(20_000)
    assert "moved the git directory the VM made at sub/.git" in moved, moved

    # The VM undoes the gitlink in a new commit: the history the host would take still holds it.
    undone = vm(f"git rm -q --cached sub && rm -rf sub && {AS_AGENT} commit -q -m 'undone'")
    assert undone.returncode == 0, undone.stderr
    undone_tip = vm("git rev-parse HEAD").stdout.strip()[:12]
    assert wait_until(lambda: any(line.startswith(f"main: held, the VM's commit {undone_tip}") for line in held()),
                      sync_within(project), interval=2), project.reaper_log()
    # It rewrites its branch without the gitlink: nothing is left to hold, and the work comes in.
    dropped = vm(f"git reset -q --soft {before} && echo work > work-{user}.txt && git add work-{user}.txt && "
                 f"{AS_AGENT} commit -q -m 'no module'")
    assert dropped.returncode == 0, dropped.stderr
    assert wait_until(lambda: held() == [], sync_within(project), interval=2), project.reaper_log()
    assert wait_until(lambda: git(project.root, "log", "-1", "--format=%s", "refs/sandbox/heads/main") == "no module",
                      sync_within(project)), project.reaper_log()
    assert not marker.exists()
