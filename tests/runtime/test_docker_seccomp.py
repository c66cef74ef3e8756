"""The docker runtime's seccomp profile (`runtime/docker/seccomp.py`), read as Docker and runc read it.

`verdict` evaluates the profile the way runc 1.1 and libseccomp 2.5 applied it in a container
(Docker 20.10): an unconditional rule decides a system call outright, whatever else names it;
otherwise a rule applies when, for every argument it tests, one of its conditions on that argument
holds (conditions on one argument are ORed, on different arguments ANDed); nothing that applies
leaves the default action. The docker tests below (`test_docker_seccomp_vm.py`) check the same
in real containers.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.runtime.docker import seccomp
from opencode_sandbox.runtime.docker.args import run_args, sandbox_labels
from opencode_sandbox.runtime.docker.description import DESCRIPTION, SECCOMP_PROFILE_DIGEST
from opencode_sandbox.runtime.types import SandboxSpec

PROFILE: Any = json.loads(seccomp.profile_text())
RULES: list[dict[str, Any]] = PROFILE["syscalls"]
ERRNO_NAMES = {1: "EPERM", 38: "ENOSYS"}
MODE_CALLS = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1, "mkdir": 1,
              "mkdirat": 2}
"""Each system call that takes a file mode, and the mode's argument (numbered from 0)."""
NODE_CALLS = {"mknod": 1, "mknodat": 2}
DOCKER_DOCUMENTED_REFUSALS = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module", "finit_module",
    "get_kernel_syms", "get_mempolicy", "init_module", "ioperm", "iopl", "kexec_file_load", "kexec_load", "keyctl",
    "lookup_dcookie", "mbind", "mount", "move_pages", "nfsservctl", "open_by_handle_at", "perf_event_open",
    "pivot_root", "query_module", "quotactl", "reboot", "request_key", "set_mempolicy", "setns", "settimeofday",
    "swapon", "swapoff", "sysfs", "_sysctl", "umount2", "unshare", "uselib", "userfaultfd", "ustat",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)
"""The x86_64 and arm64 system calls Docker's documentation lists as refused by its default profile
("Significant syscalls blocked by the default profile", and io_uring since Docker 25), whatever
their arguments. (`stime`, `umount`, `vm86` and `vm86old` exist only for 32-bit programs, which the
profile does not let run at all.) `clone`, `personality` and `socket` are refused only for some
arguments there, as here."""


def _applies(rule: dict[str, Any], arch: str) -> bool:
    includes = (rule.get("includes") or {}).get("arches")
    excludes = (rule.get("excludes") or {}).get("arches")
    return (not includes or arch in includes) and not (excludes and arch in excludes)


def _holds(condition: dict[str, Any], value: int) -> bool:
    if condition["op"] == "SCMP_CMP_EQ":
        return value == int(condition["value"])
    assert condition["op"] == "SCMP_CMP_MASKED_EQ", condition
    return value & int(condition["value"]) == int(condition["valueTwo"])


def _action(rule: dict[str, Any]) -> str:
    if rule["action"] == "SCMP_ACT_ALLOW":
        return "allow"
    assert rule["action"] == "SCMP_ACT_ERRNO"
    return ERRNO_NAMES[int(rule.get("errnoRet", 1))]


def verdict(name: str, args: dict[int, int] | None = None, arch: str = "amd64") -> str:
    """`allow`, or the errno the VM's call gets: `EPERM` (refused) or `ENOSYS`."""
    args = args or {}
    rules = [rule for rule in RULES if name in rule["names"] and _applies(rule, arch)]
    for rule in rules:
        if not rule.get("args"):
            return _action(rule)
    for rule in rules:
        by_argument: dict[int, list[dict[str, Any]]] = {}
        for condition in rule["args"]:
            by_argument.setdefault(condition["index"], []).append(condition)
        if all(any(_holds(condition, args.get(index, 0)) for condition in conditions)
               for index, conditions in by_argument.items()):
            return _action(rule)
    return "EPERM"


def test_the_profile_is_docker_json_that_refuses_by_default_on_the_engines_own_architecture_only() -> None:
    text = seccomp.profile_text()
    assert json.loads(text) == PROFILE == seccomp.profile()
    assert PROFILE["defaultAction"] == "SCMP_ACT_ERRNO" and "defaultErrnoRet" not in PROFILE
    assert "architectures" not in PROFILE, "archMap picks the engine's own; both at once Docker refuses"
    assert PROFILE["archMap"] == [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []},
                                  {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []}]
    for rule in RULES:
        assert set(rule) <= {"names", "action", "args", "errnoRet", "comment", "includes", "excludes"}, rule
        assert rule["comment"], f"every rule says why: {rule}"
        assert all(re.fullmatch(r"_?[a-z0-9_]+", name) for name in rule["names"]), rule


def test_every_call_that_takes_a_mode_is_allowed_only_without_set_id_bits() -> None:
    for name, argument in MODE_CALLS.items():
        rules = [rule for rule in RULES if name in rule["names"]]
        assert rules == [{"names": [name], "action": "SCMP_ACT_ALLOW", "comment": rules[0]["comment"], "args": [
            {"index": argument, "value": 0o6000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}]
        for mode in range(0o10000):
            expected = "EPERM" if mode & (stat.S_ISUID | stat.S_ISGID) else "allow"
            assert verdict(name, {argument: mode}) == expected, f"{name} with mode {mode:o}"
            # the kernel reads only the low bits of the mode; whatever lies above them changes nothing here
            assert verdict(name, {argument: mode | 0xFFFF_FFFF_0001_0000}) == expected


def test_mknod_makes_no_device_node_and_nothing_set_id() -> None:
    types = {stat.S_IFCHR: False, stat.S_IFBLK: False, stat.S_IFDIR: False, stat.S_IFLNK: False, 0: True,
             stat.S_IFREG: True, stat.S_IFIFO: True, stat.S_IFSOCK: True}
    for name, argument in NODE_CALLS.items():
        for kind, allowed in types.items():
            for permissions in range(0o10000):
                expected = "allow" if allowed and not permissions & 0o6000 else "EPERM"
                assert verdict(name, {argument: kind | permissions}) == expected, f"{name} {kind | permissions:o}"


def test_clone_makes_no_namespace_and_clone3_openat2_answer_enosys() -> None:
    fork = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD (glibc's fork)
    thread = 0x003D0F00  # CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | ... (pthread_create)
    vfork = 0x00004111  # CLONE_VM | CLONE_VFORK | SIGCHLD
    for arch, argument in (("amd64", 0), ("arm64", 0), ("s390x", 1)):
        for flags in (fork, thread, vfork):
            assert verdict("clone", {argument: flags}, arch) == "allow"
        for namespace in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
            assert verdict("clone", {argument: fork | namespace}, arch) == "EPERM", hex(namespace)
    assert verdict("clone3") == verdict("openat2") == "ENOSYS"


def test_personality_and_socket_families_are_docker_like_or_narrower() -> None:
    for persona in (0, 8, 0x20000, 0x20008, 0xFFFFFFFF):
        assert verdict("personality", {0: persona}) == "allow"
    for persona in (0x0040000, 0x0400000, 0x0100000, 0x0040008, 1):  # ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...
        assert verdict("personality", {0: persona}) == "EPERM"
    for family in (1, 2, 10, 16):
        assert verdict("socket", {0: family}) == "allow"
    # AF_PACKET, AF_ALG, AF_VSOCK, AF_AX25, AF_CAN, AF_BLUETOOTH, AF_XDP, and AF_INET with bits above the int
    for family in (0, 17, 38, 40, 3, 29, 31, 44, 2 | 1 << 32):
        assert verdict("socket", {0: family}) == "EPERM", family
    assert verdict("socketpair", {0: 1}) == "allow" and verdict("socketpair", {0: 30}) == "EPERM"


def test_what_docker_refuses_stays_refused_and_the_rest_of_its_default_stays_allowed() -> None:
    for name in DOCKER_DOCUMENTED_REFUSALS:
        assert verdict(name) == "EPERM", name
    for name in ("read", "execve", "fork", "ptrace", "process_vm_readv", "statx", "futex", "seccomp", "epoll_pwait",
                 "io_submit", "prctl", "setuid", "fchownat", "memfd_create", "landlock_create_ruleset", "getrandom"):
        assert verdict(name) == "allow", name


def test_each_rule_counts_as_written() -> None:
    """Docker keeps a rule only when runc would apply it as it reads: no system call has an
    unconditional rule beside conditional ones (the unconditional one alone would count), every
    conditional rule allows and tests one argument, and no rule repeats the default action
    (runc drops such a rule)."""
    unconditional = {name for rule in RULES if not rule.get("args") for name in rule["names"]}
    conditional = {name for rule in RULES if rule.get("args") for name in rule["names"]}
    assert unconditional.isdisjoint(conditional)
    names = [name for rule in RULES if not rule.get("args") for name in rule["names"]]
    assert len(names) == len(set(names)), "a system call in two unconditional rules"
    for rule in RULES:
        if rule.get("args"):
            assert rule["action"] == "SCMP_ACT_ALLOW" and len(rule["args"]) == 1, rule
        if rule["action"] == "SCMP_ACT_ERRNO":
            assert rule["errnoRet"] != 1, rule


def _kernel_syscalls() -> set[str]:
    """The system calls of the host's kernel headers: x86_64's table, or else the generic one of arm64,
    without the calls only its 32-bit architectures have."""
    for header in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
        if os.path.exists(header):
            return set(re.findall(r"#define __NR_(\w+)\s+\d+", Path(header).read_text()))
    generic = Path("/usr/include/asm-generic/unistd.h")
    if generic.exists():
        names = set(re.findall(r"#define __NR(?:3264)?_(\w+)\s+\d+", generic.read_text()))
        # arm64 calls `fstatat` newfstatat; `sync_file_range2` and `llseek` are 32-bit arm's
        return {name for name in names - {"arch_specific_syscall", "syscalls", "llseek", "fstatat", "sync_file_range2"}
                if not re.search(r"(?<!pread)(?<!pwrite)(?<!prlimit)(?<!getdents)64(_64)?$", name)
                or name == "fadvise64"}
    pytest.skip("no kernel header with the system call table (linux-libc-dev)")


def test_every_system_call_of_the_kernel_headers_was_decided_once() -> None:
    tables = {
        "allowed": [name for group in seccomp.ALLOWED for name in group.names],
        "conditional": sorted({condition.name for condition in seccomp.CONDITIONAL}),
        "answered": [name for answer in seccomp.ANSWERED for name in answer.names],
        "refused": [name for group in seccomp.REFUSED for name in group.names],
    }
    every = [name for names in tables.values() for name in names]
    assert len(every) == len(set(every)), sorted({name for name in every if every.count(name) > 1})
    assert all(group.why for group in (*seccomp.ALLOWED, *seccomp.REFUSED, *seccomp.ANSWERED))
    assert all(condition.why for condition in seccomp.CONDITIONAL)
    undecided = _kernel_syscalls() - set(every)
    assert undecided == set(), "each system call needs a row in ALLOWED, CONDITIONAL, ANSWERED or REFUSED"
    for name in tables["refused"]:
        assert verdict(name) == "EPERM", name
    for name in tables["allowed"]:
        assert verdict(name) == "allow", name


def test_the_fingerprint_records_the_profile() -> None:
    assert seccomp.profile_digest() == SECCOMP_PROFILE_DIGEST, (
        "the profile changed: set description.SECCOMP_PROFILE_DIGEST to seccomp.profile_digest(), so existing VMs "
        "are recreated with it")
    confinement: Any = DESCRIPTION.fingerprint_values(4096)["confinement"]
    assert confinement["seccomp"] == SECCOMP_PROFILE_DIGEST


def test_the_profile_file_is_private_and_written_only_when_it_differs(isolated_home: Path) -> None:
    path = seccomp.written_profile()
    assert path == Path(os.environ["XDG_STATE_HOME"]) / "opencode-sandbox" / "docker-seccomp.json"
    assert path.read_text() == seccomp.profile_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    inode = path.stat().st_ino
    assert seccomp.written_profile() == path and path.stat().st_ino == inode, "an equal file is left as it is"
    path.write_text("{}")
    assert seccomp.written_profile().read_text() == seccomp.profile_text()
    assert [entry.name for entry in path.parent.iterdir() if "seccomp" in entry.name] == ["docker-seccomp.json"]


def test_a_confined_vm_is_run_with_the_profile_and_a_privileged_one_without() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-a-0123456789abcd", image="img:1", cpus=1, memory_mib=512)
    labels = sandbox_labels({}, "a-0123456789abcd")
    confined = run_args(spec, labels, privileged=False, seccomp="/state/docker-seccomp.json")
    joined = " ".join(confined)
    assert "--cap-drop ALL --security-opt no-new-privileges --security-opt seccomp=/state/docker-seccomp.json" in joined
    privileged = run_args(spec, labels, privileged=True)
    assert "--privileged" in privileged and not any(arg.startswith("seccomp=") for arg in privileged)
    with pytest.raises(ValueError, match="seccomp"):
        run_args(spec, labels, privileged=False)


def test_the_security_document_shows_the_rules_as_they_are() -> None:
    document = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    assert seccomp.table() in document, "regenerate the table of docs/security.md from seccomp.table()"
