"""Root in a docker-runtime VM never becomes root on the host: `dev` is not uid 0, the VM holds no
capability and gains no privilege, root's plants in the checkout fail, `dev` cannot make its own file
set-user-ID (a root host user's `dev` is root on the host), and a fork bomb stops at the VM's pids
limit. As the test's own user (root where the suite runs as root) and as uid 1001."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time

import pytest

from opencode_sandbox.runtime.docker import seccomp
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
                       "{{.HostConfig.PidsLimit}} {{json .HostConfig.SecurityOpt}}", project.vm, check=True)
    cap_drop, privileged, pids_limit, security = inspected.stdout.split(" ", 3)
    assert (cap_drop, privileged, pids_limit) == ('["ALL"]', "false", str(PIDS_LIMIT))
    options = json.loads(security)
    assert options[0] == "no-new-privileges" and len(options) == 2 and options[1].startswith("seccomp=")
    assert json.loads(options[1].removeprefix("seccomp=")) == seccomp.profile(), "the engine keeps the profile"

    # root in the VM (as an agent that found a way there would be) plants what gave host root before
    planted = docker("exec", "--user", "root", project.vm, "sh", "-c", ROOT_PLANTS)
    results = dict(line.rsplit(" ", 1) for line in planted.stdout.splitlines())
    for step in ("chown", "setuid", "setgid", "block", "char", "caps"):
        assert results.get(step) not in (None, "0"), f"root in the VM could {step}: {planted.stdout}{planted.stderr}"
    for name in ("planted-sh", "mine.txt", "block-node", "char-node"):
        found = _privileged_on_host(str(project.root / name))
        assert found is None, f"{name} on the host is {found}"

    # every set-user-ID program of the image gives nothing (`su`), and root cannot make another one,
    # even of its own file outside the checkout (the VM's seccomp profile)
    su = project.shell("su -c id root </dev/null")
    assert su.returncode != 0
    copied = docker("exec", "--user", "root", project.vm, "sh", "-c",
                    "cp /usr/bin/id /tmp/id-suid && chmod 4755 /tmp/id-suid")
    assert copied.returncode != 0 and "Operation not permitted" in copied.stderr, copied.stderr
    effective = project.shell("ls -l /tmp/id-suid; find / -xdev -perm /6000 -type f 2>/dev/null || true")
    assert effective.returncode == 0, effective.stderr
    lines = effective.stdout.splitlines()
    assert lines[0].startswith("-rwxr-xr-x 1 root"), lines[0]
    assert "/usr/bin/su" in lines[1:], "the runner image's su is the set-user-ID program tried above"
    assert "/tmp/id-suid" not in lines[1:]


SET_UID_LOOP = """
cp /bin/bash ./hb
end=$(( $(date +%s) + {seconds} ))
tries=0 refused=0
while [ "$(date +%s)" -lt "$end" ]; do
    [ -u ./hb ] && echo "set-user-ID in the VM"
    chmod 4755 ./hb 2>/dev/null || refused=$((refused + 1))
    tries=$((tries + 1))
    sleep 0.01
done
echo "tries $tries refused $refused"
"""


def test_dev_cannot_make_its_file_set_user_id_however_often_it_tries(any_user_project: Project) -> None:
    """The threat as an attacker runs it: `dev` copies a program the host can run into the checkout and sets
    its set-user-ID bit again every 10 ms; a root host user's `dev` file is root's on the host, so
    each moment the bit held another local user could run it as root. The host looks every few
    milliseconds meanwhile: the bit is never there, because the VM cannot set it at all."""
    project = any_user_project
    assert project.shell("true").returncode == 0
    planted = project.root / "hb"
    loop = subprocess.Popen(project.command("shell", "--", "sh", "-c", SET_UID_LOOP.format(seconds=8)),
                            cwd=project.root, env=project.process_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **project.process_options())
    looks, seen = 0, []
    try:
        while loop.poll() is None:
            try:
                found = os.lstat(planted)
            except FileNotFoundError:
                time.sleep(0.005)
                continue
            looks += 1
            if found.st_mode & (stat.S_ISUID | stat.S_ISGID):
                seen.append(f"mode {found.st_mode:o}, owner {found.st_uid}")
            time.sleep(0.002)
        out, err = loop.communicate(timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
    assert loop.returncode == 0, err
    assert looks > 100, f"the host looked {looks} times"
    assert seen == [], f"the host saw the VM's file set-user-ID {len(seen)} of {looks} times: {seen[:3]}"
    assert "set-user-ID in the VM" not in out
    tries, refused = (int(word) for word in out.split()[-3::2])
    assert tries > 50 and refused == tries, out
    found = os.lstat(planted)
    owner = project.user.uid if project.user is not None else os.getuid()
    assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (owner, 0o755), "dev's file is the host user's (root's too)"


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
