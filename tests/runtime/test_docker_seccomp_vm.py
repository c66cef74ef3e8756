"""A docker-runtime VM under its seccomp profile: neither `dev` nor root in it can make a set-user-ID,
set-group-ID or device file (a root host user's `dev` is root on the host), while the
ordinary work of a development VM goes on. The VM is made by `DockerRuntime.create_sandbox` with the
test user's ids for `dev`, so a root test user gets the id-mapped checkout where the bit is root's."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from tests.fixtures.images import RunnerBase
from tests.runtime.conftest import build_image, docker

pytestmark = pytest.mark.docker

ATTEMPTS = r'''
import ctypes, errno, os, socket, stat, subprocess, sys

os.chdir(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100


def outcome(call):
    try:
        call()
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    return "ok"


def shell(command):
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    if done.returncode == 0:
        return "ok"
    return "EPERM" if "Operation not permitted" in done.stderr else f"exit {done.returncode}: {done.stderr[-300:]!r}"


def syscall(number, *args):
    if libc.syscall(number, *args) < 0:
        raise OSError(ctypes.get_errno(), "")


def fchmodat_loop():
    folder = os.open(".", os.O_RDONLY)
    last = None
    for _ in range(2000):
        try:
            os.chmod("f", 0o4755, dir_fd=folder)  # fchmodat
            return
        except OSError as error:
            last = error
    raise last


def io_uring():
    params = ctypes.create_string_buffer(120)
    syscall(425, 8, params)  # io_uring_setup, the same number on every architecture


def openat2():
    how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
    syscall(437, AT_FDCWD, b"made-by-openat2", how, ctypes.sizeof(how))


with open("f", "w") as stream:
    stream.write("data\n")
results = {
    "chmod 4755 f": shell("chmod 4755 f"),
    "chmod g+s f": shell("chmod g+s f"),
    "chmod u+s f": shell("chmod u+s f"),
    "os.chmod 4755": outcome(lambda: os.chmod("f", 0o4755)),
    "os.chmod 2755": outcome(lambda: os.chmod("f", 0o2755)),
    "os.fchmod 6755": outcome(lambda: os.fchmod(os.open("f", os.O_RDONLY), 0o6755)),
    "open O_CREAT 4755": outcome(lambda: os.open("x", os.O_CREAT | os.O_WRONLY, 0o4755)),
    "mkdir 2755": outcome(lambda: os.mkdir("d", 0o2755)),
    "mknod char 1:3": outcome(lambda: os.mknod("n", 0o600 | stat.S_IFCHR, os.makedev(1, 3))),
    "mknod block 7:7": outcome(lambda: os.mknod("b", 0o600 | stat.S_IFBLK, os.makedev(7, 7))),
    "mknod regular 4755": outcome(lambda: os.mknod("r", 0o4755 | stat.S_IFREG)),
    "fchmodat loop": outcome(fchmodat_loop),
    "fchmodat2 4755": outcome(lambda: syscall(452, AT_FDCWD, b"f", 0o4755, 0)),
    "openat2": outcome(openat2),
    "clone3": outcome(lambda: syscall(435, 0, 0)),
    "io_uring_setup": outcome(io_uring),
    "unshare user namespace": outcome(lambda: os.unshare(os.CLONE_NEWUSER)),
    "socket AF_ALG": outcome(lambda: socket.socket(38, socket.SOCK_SEQPACKET)),
    "socket AF_VSOCK": outcome(lambda: socket.socket(40, socket.SOCK_STREAM)),
    # what must keep working
    "chmod 755 f": shell("chmod 755 f"),
    "chmod 644 f": shell("chmod 644 f"),
    "chmod 1777 sticky folder": shell("mkdir sticky && chmod 1777 sticky"),
    "mkdir -p": shell("mkdir -p a/b/c"),
    "open O_CREAT 644": outcome(lambda: os.close(os.open("y", os.O_CREAT | os.O_WRONLY, 0o644))),
    "mkfifo": outcome(lambda: os.mkfifo("fifo")),
    "unix socket": outcome(lambda: socket.socket(socket.AF_UNIX).bind("sock")),
    "tcp socket": outcome(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()),
    "git init and commit": shell("git init -q repo && cd repo && echo a > a && git add a && "
                                 "git -c user.name=t -c user.email=t@example.com commit -qm first"),
    "npm --version": shell("npm --version"),
    "python3 -m venv": shell("python3 -m venv venv && venv/bin/pip --version"),
    "pip --version": shell("pip --version"),
    "threads and processes": shell("python3 -c 'import concurrent.futures as f; "
                                   "f.ThreadPoolExecutor(4).map(print, range(4))' >/dev/null && sh -c true"),
}
for name, result in results.items():
    print(f"{name}\t{result}")
'''

REFUSED = ("chmod 4755 f", "chmod g+s f", "chmod u+s f", "os.chmod 4755", "os.chmod 2755", "os.fchmod 6755",
           "open O_CREAT 4755", "mkdir 2755", "mknod char 1:3", "mknod block 7:7", "mknod regular 4755",
           "fchmodat loop", "io_uring_setup", "unshare user namespace", "socket AF_ALG", "socket AF_VSOCK")
ENOSYS = ("openat2", "clone3")
"""Answered ENOSYS, so that libc falls back to `openat` and `clone`."""
WORKING = ("chmod 755 f", "chmod 644 f", "chmod 1777 sticky folder", "mkdir -p", "open O_CREAT 644", "mkfifo",
           "unix socket", "tcp socket", "git init and commit", "npm --version", "python3 -m venv", "pip --version",
           "threads and processes")


@pytest.fixture(scope="module")
def pip_image(runner_base_image: RunnerBase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The runner base with Debian's pip and venv, which it lacks."""
    tag = f"opencode-sandbox-test/seccomp-pip-{uuid.uuid4().hex[:10]}:latest"
    build_image(tag, f"FROM {runner_base_image.result.reference}\nUSER root\n"
                     "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv "
                     "python3-pip >/dev/null && rm -rf /var/lib/apt/lists/*\n",
                tmp_path_factory.mktemp("seccomp-image"))
    try:
        yield tag
    finally:
        docker("image", "rm", "--force", tag)


@pytest.fixture
def vm(pip_image: str, tmp_path: Path) -> Iterator[tuple[DockerRuntime, str, Path]]:
    slug = "seccomp-" + uuid.uuid4().hex[:14]
    workspace = tmp_path / "checkout"
    workspace.mkdir()
    runtime = DockerRuntime()
    spec = SandboxSpec(name=vm_name(slug), image=pip_image, cpus=1, memory_mib=512, labels=managed_labels(slug),
                       mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),),
                       dev_identity=(os.getuid(), os.getgid()))
    try:
        runtime.create_sandbox(spec)
        yield runtime, spec.name, workspace
    finally:
        try:
            runtime.remove_sandbox(spec.name)
        finally:
            docker("rm", "--force", spec.name)


def _attempt(runtime: DockerRuntime, name: str, user: str, folder: str) -> dict[str, str]:
    ran = runtime.exec(name, ["python3", "-c", ATTEMPTS, folder], user=user, workdir="/",
                       env={"HOME": "/tmp" if user == "root" else "/home/dev"})
    assert ran.exit_code == 0, ran.stderr
    results = dict(line.split("\t", 1) for line in ran.stdout.splitlines())
    assert set(results) == {*REFUSED, *ENOSYS, *WORKING, "fchmodat2 4755"}
    return results


def _privileged(folder: Path) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        mode = path.lstat().st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(f"{path.relative_to(folder)}: {mode:o}")
    return found


def test_neither_dev_nor_root_makes_a_set_id_or_device_file_and_the_work_goes_on(
    vm: tuple[DockerRuntime, str, Path]
) -> None:
    runtime, name, workspace = vm
    made = runtime.exec(name, ["sh", "-c", "mkdir -m 700 /tmp/root-own"], user="root")
    assert made.exit_code == 0, made.stderr
    # dev in the checkout (root's on the host for a root test user); root in a folder of its own,
    # where without the profile it may set the bits of its own files (it has no id in the checkout)
    for user, folder in (("dev", "/workspace"), ("root", "/tmp/root-own")):
        results = _attempt(runtime, name, user, folder)
        wrong = {step: results[step] for step in REFUSED if results[step] != "EPERM"}
        wrong |= {step: results[step] for step in ENOSYS if results[step] != "ENOSYS"}
        wrong |= {step: results[step] for step in WORKING if results[step] != "ok"}
        assert wrong == {}, f"as {user} in {folder}: {wrong}"
        if results["fchmodat2 4755"] != "ENOSYS":  # ENOSYS where the engine's libseccomp does not know it
            assert results["fchmodat2 4755"] == "EPERM", user
    assert _privileged(workspace) == [], "a set-ID or device file reached the host"
    listed = runtime.exec(name, ["sh", "-c", "find / -xdev -perm /6000 -newer /tmp/root-own; "
                                 "find /tmp /workspace -type b -o -type c"], user="root")
    assert listed.stdout.strip() == "", listed.stdout
