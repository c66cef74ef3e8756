"""Can this host run KVM guests? The checks `doctor` and the microsandbox backend share."""

from __future__ import annotations

import errno
import fcntl
import os
import platform
from pathlib import Path

from opencode_sandbox.core.records import Record

KVM_DEVICE = Path("/dev/kvm")
CPUINFO = Path("/proc/cpuinfo")

# ioctl numbers from <linux/kvm.h>
_KVM_GET_API_VERSION = 0xAE00
_KVM_CREATE_VM = 0xAE01
_KVM_API_VERSION = 12

_NESTED_FIX = (
    "enable hardware virtualization (VT-x/AMD-V) in the firmware, or nested virtualization "
    "on the host of this VM; otherwise use `--runtime docker`"
)


class KvmCheck(Record):
    ok: bool
    cause: str | None = None
    """Why VMs cannot run here (None when ok)."""
    fix: str | None = None
    """What the user can do about it (None when ok)."""


def probe_kvm(device: Path = KVM_DEVICE, cpuinfo: Path = CPUINFO) -> KvmCheck:
    """Check the device, this user's access to it, the KVM API and the CPU's virtualization flag.

    A host can expose a working /dev/kvm (VMs are even created) while its CPU hides the
    virtualization extensions; guests then die at boot with KVM_EXIT_INTERNAL_ERROR. The
    missing cpuinfo flag is what tells such a host apart, so it is checked last.
    """
    if platform.system() != "Linux":
        return KvmCheck(ok=True)
    if not device.exists():
        return KvmCheck(
            ok=False,
            cause=f"{device} does not exist",
            fix="load the kvm module (`modprobe kvm_intel` or `kvm_amd`), or use `--runtime docker`",
        )
    if not os.access(device, os.R_OK | os.W_OK):
        return KvmCheck(
            ok=False,
            cause=f"{device} is not readable and writable for this user",
            fix=f"add yourself to the device's group (`sudo usermod -aG kvm $USER`, then log in "
            f"again) or grant access to {device}",
        )
    api_problem = _api_problem(device)
    if api_problem is not None:
        return KvmCheck(ok=False, cause=api_problem, fix=_NESTED_FIX)
    if not _cpu_has_virtualization(cpuinfo):
        return KvmCheck(
            ok=False,
            cause="the CPU does not expose virtualization extensions (no vmx or svm flag in "
            f"{cpuinfo}), so microVMs cannot boot",
            fix=_NESTED_FIX,
        )
    return KvmCheck(ok=True)


def _api_problem(device: Path) -> str | None:
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as error:
        return f"cannot open {device}: {error.strerror}"
    try:
        version = fcntl.ioctl(fd, _KVM_GET_API_VERSION, 0)
        if version != _KVM_API_VERSION:
            return f"{device} speaks KVM API version {version}, expected {_KVM_API_VERSION}"
        vm_fd = fcntl.ioctl(fd, _KVM_CREATE_VM, 0)
        os.close(vm_fd)
    except OSError as error:
        name = errno.errorcode.get(error.errno or 0, str(error.errno))
        return f"KVM refuses to create a VM ({name}: {error.strerror})"
    finally:
        os.close(fd)
    return None


def _cpu_has_virtualization(cpuinfo: Path) -> bool:
    if platform.machine() not in ("x86_64", "amd64", "i686", "i386"):
        # Other architectures do not list such a flag; the API checks above must do.
        return True
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return bool(flags & {"vmx", "svm"})
    return True
