"""The seccomp profile of a docker-runtime VM: which system calls its processes may make, and with
which arguments.

Why: a root host user's checkout reaches the VM through an id-mapped mount where `dev` is root on
the host, so a set-user-ID file `dev` makes there is a set-user-ID root program for every local user.
A watch on the host that strips the bit can only race with a VM that sets it again; the VM must
not be able to set it at all. No capability is needed to set the bit on one's own file, so only
the system calls can be held: every call that takes a file mode
(`chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `open`, `openat`, `creat`, `mkdir`, `mkdirat`, `mknod`,
`mknodat`) is allowed only when the mode has neither S_ISUID nor S_ISGID, `mknod` only for regular
files, FIFOs and sockets (no device node); `openat2` and `clone3`, whose arguments lie in a struct
seccomp cannot read, answer ENOSYS (libc then uses `openat` and `clone`), and io_uring, whose
requests never pass through seccomp, is refused.

The profile replaces Docker's default one, so it keeps what that one keeps from a container (its
documented refusals: namespaces, mounts, keyrings, kernel modules, BPF, perf, the clock, ...) and is
an allowlist like it: `defaultAction` refuses (EPERM), and each system call the VM may make is
named in `ALLOWED` or `CONDITIONAL` below, with the reason. An allowlist rather than Docker's
default action turned around (allow, with refusals): Docker resolves each name with the engine's
libseccomp and silently drops a name it does not know, so a refusal of a system call newer than
that library (`fchmodat2`, Linux 6.6, sets the same bits as `fchmodat`) would vanish on such an
engine, while an allowlist refuses what it cannot name. System calls numbered above every one the
profile names answer ENOSYS rather than EPERM (runc adds that for the architectures of `archMap`),
so libc's fallbacks for calls it does not find keep working.

Only the engine's own 64-bit system calls are allowed (x86_64, aarch64; no `subArchitectures`): a
32-bit x86 or arm program is killed at its first system call (`Bad system call`). The 32-bit
tables multiplex sockets through `socketcall`, whose arguments seccomp cannot see.

How Docker and runc read a profile, as tried on Docker 20.10 with runc 1.1 and libseccomp 2.5
(`verdict` in tests/runtime/test_docker_seccomp.py reads it so): conditions on the same argument
inside one rule are ORed (runc adds each as a rule of its own), on different arguments ANDed; a
rule whose action is the default action is dropped; and when a system call has an unconditional
rule, its conditional rules count for nothing, whatever their action (an unconditional ALLOW
beside a conditional ERRNO allowed the call). So each rule here has one condition, every
conditional rule allows, and no system call has both kinds.

The profile is written to the user's state folder (`StateLayout.docker_seccomp`) and named on
`docker run --security-opt seccomp=<file>`: the `docker` command reads the file and hands its
content to the engine, which keeps it with the container, so restarts need no file. Its digest is
part of the VM's fingerprint (`description.SECCOMP_PROFILE_DIGEST`): a VM made with another
profile, or without one, is recreated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from opencode_sandbox.core.records import Record

S_ISUID = 0o4000
S_ISGID = 0o2000
SET_ID_BITS = S_ISUID | S_ISGID
S_IFMT = 0o170000
S_IFREG = 0o100000
S_IFIFO = 0o010000
S_IFSOCK = 0o140000
NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET."""
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
ENOSYS = 38


class Allowed(Record):
    """System calls the VM may make with any arguments."""

    why: str
    names: tuple[str, ...]


class Condition(Record):
    """One system call allowed only when its argument `argument` (numbered from 0) passes:
    `(argument & mask) == value` (SCMP_CMP_MASKED_EQ), or `argument == value` when `mask` is None."""

    name: str
    argument: int
    value: int
    mask: int | None
    why: str
    arches: tuple[str, ...] = ()
    """Docker's names of the engine architectures the rule applies on (`includes`); empty: all."""
    not_arches: tuple[str, ...] = ()
    """Those it does not apply on (`excludes`)."""


class Answered(Record):
    """System calls refused with an error of their own, so that libc falls back to another."""

    why: str
    errno: int
    names: tuple[str, ...]


class Refused(Record):
    """System calls the VM may not make (EPERM, the profile's default action): no rule names them."""

    why: str
    names: tuple[str, ...]


ALLOWED = (
    Allowed("files and folders by path: look them up and read their metadata, link, rename and remove them, change "
            "their owner (without CHOWN only to the caller's own ids) and times",
            ("access", "faccessat", "faccessat2", "stat", "lstat", "fstat", "newfstatat", "statx", "statfs", "fstatfs",
             "getcwd", "chdir", "fchdir", "rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat",
             "symlink", "symlinkat", "readlink", "readlinkat", "rmdir", "chown", "fchown", "lchown", "fchownat",
             "utime", "utimes", "futimesat", "utimensat", "getdents", "getdents64", "umask", "truncate", "ftruncate",
             "fallocate")),
    Allowed("reading and writing what is open: files, pipes, terminals",
            ("read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
             "lseek", "sendfile", "copy_file_range", "splice", "tee", "vmsplice", "pipe", "pipe2", "dup", "dup2",
             "dup3", "close", "close_range", "fcntl", "flock", "fsync", "fdatasync", "sync", "syncfs",
             "sync_file_range", "readahead", "fadvise64", "ioctl", "cachestat")),
    Allowed("extended attributes: the kernel refuses those that carry privileges (`security.capability`, `trusted.*`) "
            "to a process without capabilities",
            ("setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
             "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "getxattrat", "listxattrat",
             "removexattrat", "file_getattr", "file_setattr")),
    Allowed("waiting for events: poll, epoll, timers, signals and inotify as descriptors",
            ("poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
             "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
             "timerfd_settime", "timerfd_gettime", "inotify_init", "inotify_init1", "inotify_add_watch",
             "inotify_rm_watch", "fanotify_mark")),
    Allowed("Linux AIO, which databases use: it reads and writes descriptors already open, and creates nothing",
            ("io_setup", "io_destroy", "io_getevents", "io_pgetevents", "io_submit", "io_cancel")),
    Allowed("the process's own memory",
            ("brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2", "munlock",
             "mlockall", "munlockall", "remap_file_pages", "membarrier", "memfd_create", "memfd_secret", "pkey_alloc",
             "pkey_free", "pkey_mprotect", "map_shadow_stack", "mseal")),
    Allowed("processes and threads: run programs, wait for them, end; `clone` is in CONDITIONAL",
            ("fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tkill", "tgkill",
             "getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid", "getsid", "setsid", "set_tid_address",
             "set_robust_list", "get_robust_list", "futex", "futex_waitv", "futex_wake", "futex_wait",
             "futex_requeue", "rseq", "restart_syscall", "prctl", "arch_prctl", "set_thread_area", "get_thread_area",
             "pidfd_open", "pidfd_send_signal", "uretprobe")),
    Allowed("a process narrowing its own rights further (seccomp filters of its own, Landlock)",
            ("seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")),
    Allowed("signals and interval timers",
            ("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
             "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause", "alarm", "getitimer", "setitimer")),
    Allowed("user and group ids and capabilities: without capabilities the kernel lets a process only drop them or "
            "switch among its own ids",
            ("getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid", "setgid",
             "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capget",
             "capset")),
    Allowed("scheduling, priorities and resource limits: raising one past the process's own takes a capability the "
            "VM does not have",
            ("sched_yield", "sched_setparam", "sched_getparam", "sched_setscheduler", "sched_getscheduler",
             "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "sched_setaffinity",
             "sched_getaffinity", "sched_setattr", "sched_getattr", "getpriority", "setpriority", "ioprio_get",
             "ioprio_set", "getrlimit", "setrlimit", "prlimit64", "getrusage", "getcpu")),
    Allowed("reading clocks, sleeping and timers (setting the clock is refused)",
            ("time", "gettimeofday", "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "timer_create",
             "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete")),
    Allowed("what the system is: its name, load and memory, random bytes",
            ("uname", "sysinfo", "times", "getrandom")),
    Allowed("network sockets once made (`socket` and `socketpair` are in CONDITIONAL); the VM's network rules "
            "apply to them",
            ("bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername", "sendto", "recvfrom",
             "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "setsockopt", "getsockopt")),
    Allowed("System V and POSIX message queues, semaphores and shared memory, in the VM's own IPC namespace",
            ("msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget", "shmat",
             "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
             "mq_getsetattr")),
    Allowed("debugging the VM's own programs (gdb, strace, profilers), as Docker's default allows on Linux 4.8 and "
            "newer: the kernel lets a process without capabilities reach only processes of its own user, and since "
            "4.8 seccomp checks a traced call again after the tracer changed it",
            ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
             "process_mrelease")),
    Allowed("reading the mounts of the VM's own namespace, as /proc/self/mountinfo shows them",
            ("statmount", "listmount")),
    Allowed("reading the process's own security-module attributes", ("lsm_get_self_attr", "lsm_list_modules")),
)

_MODE_WHY = ("no set-user-ID or set-group-ID bit in the mode a file or folder is given or created with (a root host "
             "user's `dev` is root on the host: its set-user-ID file would be a root program there)")
_NODE_WHY = "a regular file, a FIFO or a socket only, without a set-user-ID or set-group-ID bit: no device node"
_NODE_TYPES = (0, S_IFREG, S_IFIFO, S_IFSOCK)
"""Type 0 is a regular file too."""
_CLONE_WHY = ("no flag that makes a namespace: a user namespace would give its maker every capability inside it, and "
              "with them the kernel's privileged surface")
_PERSONALITY_WHY = ("the execution domains Docker's default allows (PER_LINUX, PER_LINUX32, UNAME26, and the query "
                    "0xffffffff); no flag that weakens memory protection (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...)")
_SOCKET_WHY = ("AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK, the families a development VM uses; the others (AF_ALG, "
               "AF_VSOCK, AF_PACKET and the rarely used ones) have been the way into many kernel flaws")


def _mode_rule(name: str, argument: int) -> Condition:
    return Condition(name, argument, 0, SET_ID_BITS, _MODE_WHY)


def _node_rules(name: str, argument: int) -> tuple[Condition, ...]:
    return tuple(Condition(name, argument, kind, S_IFMT | SET_ID_BITS, _NODE_WHY) for kind in _NODE_TYPES)


CONDITIONAL: tuple[Condition, ...] = (
    _mode_rule("chmod", 1),
    _mode_rule("fchmod", 1),
    _mode_rule("fchmodat", 2),
    _mode_rule("fchmodat2", 2),  # Linux 6.6: refused altogether by an engine whose libseccomp does not know it
    _mode_rule("open", 2),  # the mode counts only with O_CREAT or O_TMPFILE; libc passes 0 otherwise
    _mode_rule("openat", 3),
    _mode_rule("creat", 1),
    _mode_rule("mkdir", 1),
    _mode_rule("mkdirat", 2),
    *_node_rules("mknod", 1),
    *_node_rules("mknodat", 2),
    Condition("clone", 0, 0, NAMESPACE_FLAGS, _CLONE_WHY, not_arches=("s390", "s390x")),
    Condition("clone", 1, 0, NAMESPACE_FLAGS, _CLONE_WHY, arches=("s390", "s390x")),  # its flags come second there
    *(Condition("personality", 0, value, None, _PERSONALITY_WHY) for value in (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)),
    *(Condition("socket", 0, family, None, _SOCKET_WHY) for family in (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)),
    Condition("socketpair", 0, AF_UNIX, None, "AF_UNIX, the only family that makes pairs in use"),
)

ANSWERED = (
    Answered("their arguments are in a struct that seccomp cannot read (`clone3`'s namespace flags, `openat2`'s "
             "mode); ENOSYS makes libc use `clone` and `openat`, which the rules above check", ENOSYS,
             ("clone3", "openat2")),
)

REFUSED = (
    Refused("io_uring: its requests (open, mkdir, ...) are carried out by the kernel without passing through seccomp, "
            "so none of the checks above would apply to them; Docker's default refuses it too since 25.0",
            ("io_uring_setup", "io_uring_enter", "io_uring_register")),
    Refused("making namespaces or joining others: a user namespace gives every capability inside it, and with them "
            "the kernel's privileged surface", ("unshare", "setns")),
    Refused("mounts and the root folder: privileged, and a mount could hide what the VM sees of the checkout",
            ("mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr", "fsopen",
             "fsconfig", "fsmount", "fspick", "mount_setattr")),
    Refused("kernel keyrings, which are not namespaced: one VM could reach the host's or another VM's keys",
            ("add_key", "keyctl", "request_key")),
    Refused("kernel programs and tracing, which see the whole host", ("bpf", "perf_event_open", "lookup_dcookie")),
    Refused("userfaultfd: it lets a process stop the kernel mid-copy, the usual tool to win a kernel race",
            ("userfaultfd",)),
    Refused("kernel modules and loading another kernel",
            ("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load")),
    Refused("the host's clock, which is not namespaced", ("settimeofday", "clock_settime", "clock_adjtime",
                                                          "adjtimex")),
    Refused("host-wide settings and devices: reboot, swap, accounting, quotas, the kernel log, the terminal, the "
            "host's name, I/O ports", ("reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
                                        "vhangup", "sethostname", "setdomainname", "iopl", "ioperm")),
    Refused("NUMA memory placement, host-wide", ("mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node",
                                                 "migrate_pages", "move_pages")),
    Refused("file handles: `open_by_handle_at` opened files outside a container before (its sister only names them)",
            ("name_to_handle_at", "open_by_handle_at")),
    Refused("fanotify, which watches whole mounts", ("fanotify_init",)),
    Refused("16-bit code segments", ("modify_ldt",)),
    Refused("changing the process's own security-module label", ("lsm_set_self_attr",)),
    Refused("obsolete, or not implemented by Linux", ("_sysctl", "sysfs", "ustat", "uselib", "create_module",
                                                      "get_kernel_syms", "query_module", "nfsservctl", "getpmsg",
                                                      "putpmsg", "afs_syscall", "tuxcall", "security", "vserver",
                                                      "epoll_ctl_old", "epoll_wait_old")),
)

ARCHITECTURES = ("SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64")
"""The engines' native architectures the profile is written for, each without its 32-bit companion."""


def _condition(condition: Condition) -> dict[str, object]:
    if condition.mask is None:
        argument: dict[str, object] = {"index": condition.argument, "value": condition.value, "op": "SCMP_CMP_EQ"}
    else:
        argument = {"index": condition.argument, "value": condition.mask, "valueTwo": condition.value,
                    "op": "SCMP_CMP_MASKED_EQ"}
    rule: dict[str, object] = {"names": [condition.name], "action": "SCMP_ACT_ALLOW", "args": [argument],
                               "comment": condition.why}
    if condition.arches:
        rule["includes"] = {"arches": list(condition.arches)}
    if condition.not_arches:
        rule["excludes"] = {"arches": list(condition.not_arches)}
    return rule


def profile() -> dict[str, object]:
    """The profile in Docker's format."""
    rules: list[dict[str, object]] = [
        {"names": list(group.names), "action": "SCMP_ACT_ALLOW", "comment": group.why} for group in ALLOWED]
    rules += [_condition(condition) for condition in CONDITIONAL]
    rules += [{"names": list(answer.names), "action": "SCMP_ACT_ERRNO", "errnoRet": answer.errno,
               "comment": answer.why} for answer in ANSWERED]
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "archMap": [{"architecture": arch, "subArchitectures": []} for arch in ARCHITECTURES],
        "syscalls": rules,
    }


def profile_text() -> str:
    return json.dumps(profile(), indent=1) + "\n"


def profile_digest() -> str:
    """What the VM's fingerprint records of the profile (`description.SECCOMP_PROFILE_DIGEST`)."""
    from opencode_sandbox.core.digest import sha256

    return sha256(profile_text().encode()).hexdigest()[:16]


def written_profile() -> Path:
    """The profile's file in the user's state folder (mode 0600), written when it differs."""
    from opencode_sandbox.paths import ToolPaths
    from opencode_sandbox.state_layout import StateLayout

    path = StateLayout(ToolPaths.from_environment().state_dir).docker_seccomp
    text = profile_text()
    try:
        if path.read_text() == text:
            return path
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(text)
    partial.replace(path)
    return path


def table() -> str:
    """The rules that refuse or narrow, as the Markdown table of docs/security.md."""
    lines = ["| system calls (the argument tested, from 0) | what the VM gets | why |", "| --- | --- | --- |"]
    groups: dict[str, list[Condition]] = {}
    for condition in CONDITIONAL:
        groups.setdefault(condition.why, []).append(condition)
    for why, conditions in groups.items():
        arguments: dict[str, list[str]] = {}
        for condition in conditions:
            where = f" on {', '.join(condition.arches)}" if condition.arches else ""
            shown = f"{condition.argument}{where}"
            if shown not in arguments.setdefault(condition.name, []):
                arguments[condition.name].append(shown)
        names = ", ".join(f"`{name}` ({'; '.join(shown)})" for name, shown in arguments.items())
        values = list(dict.fromkeys(condition.value for condition in conditions))
        octal = conditions[0].mask is not None and conditions[0].mask < 0o1000000
        listed = " or ".join("0" if not value else f"{value:#o}" if octal else f"{value:#x}" for value in values)
        mask = conditions[0].mask
        if mask is None:
            when = f"allowed when it is {listed}"
        else:
            when = f"allowed when it & {mask:#o} is {listed}" if octal else f"allowed when it & {mask:#x} is {listed}"
        lines.append(f"| {names} | {when} | {why} |")
    for answer in ANSWERED:
        lines.append(f"| {', '.join(f'`{name}`' for name in answer.names)} | ENOSYS | {answer.why} |")
    for group in REFUSED:
        lines.append(f"| {', '.join(f'`{name}`' for name in group.names)} | refused (EPERM) | {group.why} |")
    return "\n".join(lines) + "\n"
