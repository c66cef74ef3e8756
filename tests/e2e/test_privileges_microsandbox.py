"""Nothing with privileges comes out of a microVM through the checkout: root in the VM (and `dev`)
plant setuid and setgid copies of a binary, a file capability and device nodes in /workspace; on
the host none of them is a setuid or setgid file, carries `security.capability`, or is (or opens
as) a device, at the latest seconds after it was planted.

The host is the test process: root in the lab's first pass, the ordinary user `tester` with
`--user`. A VM boots once and serves every plant."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.git_scenarios import LAB_SYNC_WITHIN_S
from tests.e2e.harness import Project

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(2400), *MICROVMS_ONLY]

CAP_SETUID = "0100000280000000800000000000000000000000"
"""A `security.capability` value (VFS_CAP_REVISION_2, effective) granting cap_setuid."""
SETCAP = "setxattr security.capability cap_setuid+ep"
"""The step that sets `CAP_SETUID` on the file with python3's os.setxattr (the image has no setcap)."""
CAUGHT_WITHIN_S = LAB_SYNC_WITHIN_S
"""How long after the last plant the host may still show a privilege before it counts as left in
place: the idle reaper's watch looks every few seconds, less often beside an emulated VM, whose
every exec takes seconds (`git_scenarios.LAB_SYNC_WITHIN_S`)."""
UNPRIVILEGED = 65534
"""The host user a root test process runs a planted program as: nobody."""
BECOME_ROOT = "import os; os.setuid(0); print('became uid', os.getuid())\n"
"""Fed on standard input: a python3 copy runs it, an `id` copy ignores it."""

PLANTS: dict[str, list[str]] = {
    "suid-root": ["cp /usr/bin/id {path}", "chown 0:0 {path}", "chmod 4755 {path}"],
    "sgid-root": ["cp /usr/bin/id {path}", "chown 0:0 {path}", "chmod 2755 {path}"],
    "cap": ["cp -L /usr/bin/python3 {path}", SETCAP],
    "block-7-7": ["mknod {path} b 7 7", "chmod 0666 {path}"],
    "char-1-3": ["mknod {path} c 1 3", "chmod 0666 {path}"],
}
"""What root and `dev` each attempt, by the name of the planted path."""
DEV_ONLY: dict[str, list[str]] = {
    "own-u+s": ["cp /usr/bin/id {path}", "chmod u+s {path}"],
    "own-g+s": ["cp /usr/bin/id {path}", "chmod g+s {path}"],
}
"""What `dev` also attempts: the special bits on a file of its own."""

# Runs in the VM: each plant's steps (with their exit codes and errors), then what the VM sees at
# the path, as one JSON line.
IN_VM = f"""
import json, os, stat, subprocess, sys

def step(command, path):
    if command == {SETCAP!r}:
        try:
            os.setxattr(path, "security.capability", bytes.fromhex({CAP_SETUID!r}), follow_symlinks=False)
            return {{"step": command, "rc": 0, "error": ""}}
        except OSError as error:
            return {{"step": command, "rc": error.errno, "error": os.strerror(error.errno)}}
    command = command.format(path=path)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    return {{"step": command, "rc": done.returncode, "error": done.stderr.strip()}}

def seen(path):
    try:
        info = os.lstat(path)
    except OSError as error:
        return {{"missing": str(error)}}
    attributes = {{}}
    try:
        for name in os.listxattr(path, follow_symlinks=False):
            try:
                attributes[name] = os.getxattr(path, name, follow_symlinks=False).hex()
            except OSError as error:
                attributes[name] = "unreadable: " + str(error)
    except OSError as error:
        attributes["(list)"] = str(error)
    try:
        capability = os.getxattr(path, "security.capability", follow_symlinks=False).hex()
    except OSError as error:
        capability = "none: " + os.strerror(error.errno)
    return {{"type": stat.filemode(info.st_mode)[0], "mode": oct(stat.S_IMODE(info.st_mode)), "uid": info.st_uid,
            "gid": info.st_gid, "rdev": [os.major(info.st_rdev), os.minor(info.st_rdev)],
            "xattrs": attributes, "security.capability": capability}}

report = {{"id": subprocess.run(["id"], capture_output=True, text=True).stdout.strip()}}
for name, steps in json.loads(sys.argv[1]).items():
    path = "/workspace/" + name
    report[name] = {{"steps": [step(command, path) for command in steps], "vm": seen(path)}}
print("VM-REPORT " + json.dumps(report))
"""


def plant(project: Project, plants: dict[str, list[str]], *flags: str) -> dict[str, Any]:
    """Runs the plants in the VM (as root with `--root`), and returns what the VM reported."""
    loader = f"import base64; exec(base64.b64decode({base64.b64encode(IN_VM.encode()).decode()!r}))"
    done = project.cli("shell", *flags, "--", "python3", "-c", loader, json.dumps(plants), timeout=1800)
    assert done.returncode == 0, f"the plants did not run in the VM:\n{done.stdout}\n{done.stderr}"
    [line] = [line for line in done.stdout.splitlines() if line.startswith("VM-REPORT ")]
    report: dict[str, Any] = json.loads(line.removeprefix("VM-REPORT "))
    report["(shell stderr)"] = done.stderr.strip()
    return report


@dataclass(frozen=True)
class HostView:
    """A path of the checkout as the host user sees it."""

    path: Path
    facts: str
    privileges: tuple[str, ...]


def host_view(path: Path) -> HostView:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return HostView(path, "absent", ())
    privileges: list[str] = []
    kind = stat.filemode(info.st_mode)[0]
    if stat.S_ISREG(info.st_mode) and info.st_mode & stat.S_ISUID:
        privileges.append(f"a setuid file of uid {info.st_uid}")
    if stat.S_ISREG(info.st_mode) and info.st_mode & stat.S_ISGID:
        privileges.append(f"a setgid file of gid {info.st_gid}")
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        privileges.append(f"a {'char' if stat.S_ISCHR(info.st_mode) else 'block'} device node "
                          f"{os.major(info.st_rdev)},{os.minor(info.st_rdev)}")
    attributes = host_attributes(path)
    if "security.capability" in attributes:
        privileges.append(f"file capabilities {attributes['security.capability']}")
    opened = open_as_host_user(path, info)
    if opened.startswith("reaches"):
        privileges.append(f"opening it {opened}")
    facts = (f"type {kind!r} mode {oct(stat.S_IMODE(info.st_mode))} owner {info.st_uid}:{info.st_gid} "
             f"rdev {os.major(info.st_rdev)},{os.minor(info.st_rdev)}; xattrs {attributes or '{}'}; open: {opened}")
    return HostView(path, facts, tuple(privileges))


def host_attributes(path: Path) -> dict[str, str]:
    """The path's extended attributes, `user.msb.override_stat` decoded."""
    attributes: dict[str, str] = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as error:
        return {"(list)": str(error)}
    for name in names:
        try:
            value = os.getxattr(path, name, follow_symlinks=False)
        except OSError as error:
            attributes[name] = f"unreadable: {error}"
            continue
        attributes[name] = decode_override_stat(value) if name == "user.msb.override_stat" else value.hex()
    # Listing can leave out names the caller may not see; a capability is looked up by name too.
    if "security.capability" not in attributes:
        with contextlib.suppress(OSError):
            attributes["security.capability"] = os.getxattr(path, "security.capability",
                                                             follow_symlinks=False).hex()
    return attributes


def decode_override_stat(value: bytes) -> str:
    """msb's record of the owner and mode the guest sees: version, uid, gid, st_mode, rdev."""
    if len(value) != struct.calcsize("<IIIII"):
        return value.hex()
    version, uid, gid, mode, rdev = struct.unpack("<IIIII", value)
    return (f"v{version} {uid}:{gid} type {stat.filemode(mode)[0]!r} mode {oct(stat.S_IMODE(mode))} "
            f"rdev {os.major(rdev)},{os.minor(rdev)}")


def open_as_host_user(path: Path, info: os.stat_result) -> str:
    """What opening the path for reading gets the host user: a device, or not."""
    if stat.S_ISLNK(info.st_mode) or stat.S_ISDIR(info.st_mode):
        return "not tried (a link or folder)"
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as error:
        return f"refused ({error.strerror})"
    try:
        opened = os.fstat(descriptor)
        if stat.S_ISCHR(opened.st_mode) or stat.S_ISBLK(opened.st_mode):
            return f"reaches device {os.major(opened.st_rdev)},{os.minor(opened.st_rdev)}"
        return f"not a device ({stat.filemode(opened.st_mode)[0]!r})"
    finally:
        os.close(descriptor)


def run_unprivileged(path: Path) -> str:
    """What running a planted program gets an unprivileged host user: the host's own user when it is
    not root; else nobody, through a hard link (the same file) in a folder that nobody can enter."""
    with tempfile.TemporaryDirectory() as folder:
        program = path
        as_nobody: dict[str, Any] = {}
        try:
            if os.geteuid() == 0:
                os.chmod(folder, 0o755)
                program = Path(folder) / "planted"
                os.link(path, program)
                as_nobody = {"user": UNPRIVILEGED, "group": UNPRIVILEGED, "extra_groups": []}
            ran = subprocess.run([str(program)], input=BECOME_ROOT, capture_output=True, text=True, timeout=120,
                                 cwd=folder, **as_nobody)
        except OSError as error:
            return f"not run ({error})"
    said = (ran.stdout + ran.stderr).strip().splitlines()
    return f"uid {as_nobody.get('user', os.geteuid())} ran it: exit {ran.returncode}, {said[-1] if said else ''!r}"


CAP_SYS_ADMIN, CAP_SETFCAP = 21, 31


def vm_process_capabilities(vm: str) -> dict[int, int]:
    """The bounding set of each host process that runs the VM, by its process id."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if vm.encode() in command and any(part.endswith(b"msb") for part in command[:2]):
            found[int(entry.name)] = int(next(line.split()[1] for line in status.splitlines()
                                              if line.startswith("CapBnd:")), 16)
    return found


def gained_root(ran: str) -> bool:
    return any(sign in ran for sign in ("euid=0(", "egid=0(", "became uid 0"))


def privileged_in_tree(root: Path) -> list[HostView]:
    """Every path of the checkout (its review folder and .git included) that carries a privilege."""
    found = []
    for folder, folders, files in os.walk(root):
        for name in [*folders, *files]:
            view = host_view(Path(folder) / name)
            if view.privileges:
                found.append(view)
    return found


def describe(reports: dict[str, dict[str, Any]], views: dict[str, HostView]) -> str:
    lines = []
    for who, report in reports.items():
        lines.append(f"== as {who} in the VM ({report['id']}); the shell said: {report['(shell stderr)'] or '-'}")
        for name in views:
            if name not in report:
                continue
            steps = "; ".join(f"{step['step']} -> {step['rc']}" + (f" ({step['error']})" if step["error"] else "")
                              for step in report[name]["steps"])
            lines.append(f"  {name}\n    VM ran:   {steps}\n    VM sees:  {json.dumps(report[name]['vm'])}\n"
                         f"    host:     {views[name].facts}\n"
                         f"    verdict:  {'; '.join(views[name].privileges) or 'no privilege'}")
    return "\n".join(lines)


def test_root_in_a_microvm_leaves_no_privileged_file_or_device_on_the_host(msb_project: Project) -> None:
    project = msb_project
    root_plants = {f"root-{name}": steps for name, steps in PLANTS.items()}
    dev_plants = {f"dev-{name}": steps for name, steps in {**PLANTS, **DEV_ONLY}.items()}
    reports = {"root": plant(project, root_plants, "--root"), "dev": plant(project, dev_plants)}
    assert reports["root"]["id"].startswith("uid=0(root)"), reports["root"]["id"]
    assert reports["dev"]["id"].startswith("uid=1000(dev)"), reports["dev"]["id"]
    assert project.vm_running(), "every plant ran in the one VM, still running"

    names = [*root_plants, *dev_plants]
    if os.geteuid() == 0:  # msb run by root: without CAP_SETFCAP it cannot write a capability through
        held = vm_process_capabilities(project.vm)
        assert held and all(not bounding >> CAP_SETFCAP & 1 and not bounding >> CAP_SYS_ADMIN & 1
                            for bounding in held.values()), f"the VM's msb processes may still hold them: {held}"
    at_once = {name: host_view(project.root / name) for name in names}
    written_through = [name for name, view in at_once.items()
                       if any(each.startswith("file capabilities") for each in view.privileges)]
    assert not written_through, f"a file capability the VM set reached the host file: {written_through}"
    started = time.monotonic()
    while True:
        views = {name: host_view(project.root / name) for name in names}
        elsewhere = [view for view in privileged_in_tree(project.root)
                     if view.path.parent != project.root or view.path.name not in names]
        waited = time.monotonic() - started
        if (not any(view.privileges for view in views.values()) and not elsewhere) or waited > CAUGHT_WITHIN_S:
            break
        time.sleep(1)
    for name, view in views.items():
        if view.privileges and view.facts.startswith("type '-'"):
            ran = run_unprivileged(view.path)
            views[name] = HostView(view.path, f"{view.facts}; {ran}",
                                   (*view.privileges, "it gives an unprivileged host user root")
                                   if gained_root(ran) else view.privileges)
    message = f"the host looked {waited:.0f} s after the last plant ended\n" + describe(reports, views)
    message += "".join(f"\n  elsewhere in the checkout: {view.path}: {view.facts}; {'; '.join(view.privileges)}"
                       for view in elsewhere)
    print(f"host user uid {os.getuid()}, checkout {project.root}\n{message}")

    copied = [f"{who}: {name}" for who, report in reports.items() for name in names if name in report
              and report[name]["steps"][0]["step"].startswith("cp ") and report[name]["steps"][0]["rc"] != 0]
    assert not copied, f"the VM could not write its copies to the checkout: {copied}\n{message}"
    left = {name: view.privileges for name, view in views.items() if view.privileges}
    assert not left and not elsewhere, \
        f"privileges left on the host {CAUGHT_WITHIN_S:.0f} s after the plants: {left}\n{message}"
