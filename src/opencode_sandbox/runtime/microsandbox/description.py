"""The microsandbox runtime's answers about itself (`runtime/description.py`)."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.types import HostCheck

if TYPE_CHECKING:
    from opencode_sandbox.core.egress import EgressPolicy
    from opencode_sandbox.errors import UsageError


class MicrosandboxDescription:
    kind = RuntimeKind.MICROSANDBOX
    runs_engine_images = False
    prepares_commands = False
    sandboxes_are_engine_containers = False
    image_label = "msb image"
    volume_remove_command = "msb volume remove"
    notice: str | None = None

    def refusal(self, policy: EgressPolicy, privileged: bool) -> UsageError | None:
        return None

    def warnings(self, privileged: bool) -> list[tuple[str, str | None]]:
        return []

    def intercepts_tls(self, policy: EgressPolicy) -> bool:
        from opencode_sandbox.runtime.microsandbox.network import intercepts

        return intercepts(policy)

    def enforcer(self, policy: EgressPolicy) -> str:
        return "msb's policy engine"

    def fingerprint_values(self, pids_limit: int) -> dict[str, object]:
        # A microVM whose checkout does not mirror modes to the host is recreated once.
        return {"checkout_modes": "mirrored"}

    def pids_limit(self, configured: int) -> int | None:
        return None

    def plan_notes(self, policy: EgressPolicy, slug: str) -> list[str]:
        return []

    def host_checks(self, selected: bool) -> list[HostCheck]:
        """Whether microVMs can boot here, and msb runs; reported whichever runtime was chosen."""
        return [_kvm(), _msb()]


def _kvm() -> HostCheck:
    from opencode_sandbox.runtime.microsandbox.kvm import probe_kvm

    probe = probe_kvm()
    if probe.ok:
        return HostCheck("kvm", True, "/dev/kvm usable")
    fix = probe.fix if probe.fix and "--runtime docker" in probe.fix else f"{probe.fix}; or use `--runtime docker`"
    return HostCheck("kvm", False, f"microVMs cannot run here: {probe.cause}", fix)


def _msb() -> HostCheck:
    from opencode_sandbox.errors import SandboxError
    from opencode_sandbox.runtime.microsandbox.cli import locate_msb, msb_version

    try:
        binary = locate_msb()
        version = msb_version(binary)
    except SandboxError as error:
        return HostCheck("msb", False, error.message, error.hint)
    except OSError as error:
        return HostCheck("msb", False, f"msb cannot run: {error}",
                         "reinstall opencode-sandbox, or use `--runtime docker`")
    return HostCheck("msb", True, f"{version} at {binary}")


DESCRIPTION = MicrosandboxDescription()
