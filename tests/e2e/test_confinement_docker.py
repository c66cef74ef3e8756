"""Root in a docker-runtime VM never becomes root on the host: `dev` is not uid 0, the VM holds no
capability and gains no privilege, root's plants in the checkout fail, and a fork bomb stops at
the VM's pids limit. As the test's own user (root where the suite runs as root) and as uid 1001."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest

from tests.e2e.harness import Project, docker

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

PIDS_LIMIT = 300
CAP_SETUID = "0100000280000000800000000000000000000000"
"""A `security.capability` value (version 2) that gives a program CAP_SETUID."""

ROOT_PLANTS = f"""
cd /workspace
cp /bin/sh planted-sh; echo "copy $?"
chown 0:0 mine.txt; echo "chown $?"
chmod 4755 mine.txt; echo "setuid $?"
chmod 2755 mine.txt; echo "setgid $?"
mknod block-node b 7 7; echo "block $?"
mknod char-node c 1 3; echo "char $?"
python3 -c 'import os; os.setxattr("mine.txt", "security.capability", bytes.fromhex("{CAP_SETUID}"))'; echo "caps $?"
"""

FORK_BOMB = f"""
import os, sys, time
children = []
try:
    while len(children) < {PIDS_LIMIT * 4}:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
except OSError as error:
    print(f"stopped after {{len(children)}} children: {{error.strerror}}", flush=True)
else:
    print(f"never stopped: {{len(children)}} children", flush=True)
time.sleep(float(sys.argv[1]))
for pid in children:
    os.kill(pid, 9)
"""


def _privileged_on_host(path: str) -> str | None:
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISCHR(found.st_mode) or stat.S_ISBLK(found.st_mode):
        return f"a device node {os.major(found.st_rdev)}:{os.minor(found.st_rdev)}"
    if stat.S_ISREG(found.st_mode) and found.st_mode & (stat.S_ISUID | stat.S_ISGID):
        return f"mode {found.st_mode:o}, owner {found.st_uid}"
    try:
        os.getxattr(path, "security.capability", follow_symlinks=False)
    except OSError:
        return None
    return "a file capability"


def test_nothing_in_the_vm_is_or_becomes_root(any_user_project: Project) -> None:
    project = any_user_project
    project.env["OPENCODE_SANDBOX_PIDS_LIMIT"] = str(PIDS_LIMIT)
    who = project.shell("id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status; echo mine > mine.txt")
    assert who.returncode == 0, who.stderr
    lines = who.stdout.splitlines()
    assert lines[0] != "0", "dev must never be uid 0"
    assert lines[1:] == ["CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"]

    inspected = docker("inspect", "--format", "{{json .HostConfig.CapDrop}} {{.HostConfig.Privileged}} "
                       "{{json .HostConfig.SecurityOpt}} {{.HostConfig.PidsLimit}}", project.vm, check=True)
    assert inspected.stdout.split() == ['["ALL"]', "false", '["no-new-privileges"]', str(PIDS_LIMIT)]

    # root in the VM (as an agent that found a way there would be) plants what gave host root before
    planted = docker("exec", "--user", "root", project.vm, "sh", "-c", ROOT_PLANTS)
    results = dict(line.rsplit(" ", 1) for line in planted.stdout.splitlines())
    for step in ("chown", "setuid", "setgid", "block", "char", "caps"):
        assert results.get(step) not in (None, "0"), f"root in the VM could {step}: {planted.stdout}{planted.stderr}"
    for name in ("planted-sh", "mine.txt", "block-node", "char-node"):
        found = _privileged_on_host(str(project.root / name))
        assert found is None, f"{name} on the host is {found}"

    # every set-user-ID program of the image gives nothing: `su`, and root's own set-user-ID copy of id
    su = project.shell("su -c id root </dev/null")
    assert su.returncode != 0
    docker("exec", "--user", "root", project.vm, "sh", "-c", "cp /usr/bin/id /tmp/id-suid && chmod 4755 /tmp/id-suid",
           check=True)
    effective = project.shell("ls -l /tmp/id-suid; /tmp/id-suid -u; "
                              "find / -xdev -perm /6000 -type f 2>/dev/null || true")
    assert effective.returncode == 0, effective.stderr
    lines = effective.stdout.splitlines()
    assert lines[0].startswith("-rwsr-xr-x 1 root"), lines[0]
    assert lines[1] != "0", "a set-user-ID root program gave dev uid 0"
    assert "/usr/bin/su" in lines[2:], "the runner image's su is the set-user-ID program tried above"


def test_a_fork_bomb_stops_at_the_limit_and_the_host_stays_usable(any_user_project: Project) -> None:
    project = any_user_project
    project.env["OPENCODE_SANDBOX_PIDS_LIMIT"] = str(PIDS_LIMIT)
    assert project.shell("true").returncode == 0
    bomb = subprocess.Popen(project.command("shell", "--", "python3", "-c", FORK_BOMB, "20"), cwd=project.root,
                            env=project.process_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **project.process_options())
    try:
        assert bomb.stdout is not None
        first = bomb.stdout.readline()
        assert first.startswith("stopped after "), first + (bomb.stderr.read() if bomb.stderr else "")
        children = int(first.split()[2])
        assert PIDS_LIMIT // 3 < children < PIDS_LIMIT, first
        began = time.monotonic()
        host = subprocess.run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do true & done; wait; echo usable"],
                              capture_output=True, text=True, timeout=30, check=False)
        assert host.stdout.strip() == "usable" and time.monotonic() - began < 10
        pids = docker("exec", project.vm, "cat", "/sys/fs/cgroup/pids.current")
        if pids.returncode == 0:  # cgroup v2
            assert int(pids.stdout) <= PIDS_LIMIT
    finally:
        bomb.wait(timeout=120)
    assert project.shell("echo after").stdout.strip() == "after", "the VM works again once the bomb is gone"
