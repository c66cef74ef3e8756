"""The docker runtime's answers about itself (`runtime/description.py`)."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.runtime.types import HostCheck

if TYPE_CHECKING:
    from opencode_sandbox.core.egress import EgressPolicy
    from opencode_sandbox.errors import UsageError

SECCOMP_PROFILE_DIGEST = "eda272a579265b6a"
"""`seccomp.profile_digest()`, written here so a start computes no profile (a test keeps them equal)."""
NOTICE = (
    "notice: using the docker runtime: the sandbox is a container that shares the host's "
    "kernel, a weaker isolation than a microVM"
)


class DockerDescription:
    kind = RuntimeKind.DOCKER
    runs_engine_images = True
    prepares_commands = True
    sandboxes_are_engine_containers = True
    image_label = "docker image"
    volume_remove_command = "docker volume rm"
    notice: str | None = NOTICE

    def refusal(self, policy: EgressPolicy, privileged: bool) -> UsageError | None:
        from opencode_sandbox.runtime.docker.nft_ruleset import docker_refusal

        return docker_refusal(policy, privileged=privileged)

    def warnings(self, privileged: bool) -> list[tuple[str, str | None]]:
        if not privileged:
            return []
        return [("dind: the VM runs privileged on the docker runtime, so the agent is root on this host: it can "
                 "read and change everything here",
                 "turn `dind` off in your configuration unless this project needs Docker inside and you accept that")]

    def intercepts_tls(self, policy: EgressPolicy) -> bool:
        from opencode_sandbox.runtime.docker.nft_ruleset import needs_proxy

        return needs_proxy(policy)

    def enforcer(self, policy: EgressPolicy) -> str:
        if self.intercepts_tls(policy):
            return ("the project's egress proxy (mitmproxy): only HTTP(S) through it and the address ranges "
                    "allowed leave the VM")
        return "nftables in the VM's network"

    def fingerprint_values(self, pids_limit: int) -> dict[str, object]:
        # A container made before it was confined (dev never uid 0, no capability, no new
        # privileges, a pids limit, this seccomp profile) or before its network moved to a holder
        # is recreated once; the home volume is kept.
        return {"confinement": {"dev": "never-root", "pids_limit": pids_limit, "seccomp": SECCOMP_PROFILE_DIGEST},
                "namespace": "network-holder"}

    def pids_limit(self, configured: int) -> int | None:
        return configured

    def plan_notes(self, policy: EgressPolicy, slug: str) -> list[str]:
        if not self.intercepts_tls(policy):
            return []
        from opencode_sandbox.runtime.docker.proxy import proxy_name

        return [f"proxy: create or start {proxy_name(slug)} (mitmproxy) before the VM; the VM reaches only "
                "the proxy"]

    def host_checks(self, selected: bool) -> list[HostCheck]:
        """For a root host user, whether the checkout can be mapped to `dev` (never uid 0)."""
        import os

        if not selected or os.geteuid() != 0:
            return []
        import tempfile
        from pathlib import Path

        from opencode_sandbox.errors import SandboxError
        from opencode_sandbox.runtime.docker import idmapped_mount

        name = f"doctor-{os.getpid()}"
        try:
            with tempfile.TemporaryDirectory(prefix="opencode-sandbox-doctor-") as folder:
                try:
                    idmapped_mount.ensure_mapped(Path(folder), idmapped_mount.mapped_path(name, 0),
                                                 shown_uid=1000, shown_gid=1000)
                finally:
                    idmapped_mount.unmount_all(name)
        except SandboxError as error:
            return [HostCheck("users", False, f"root's files cannot be mapped to dev: {error.message}", error.hint)]
        return [HostCheck("users", True, "id-mapped mounts work: on docker, dev writes root's checkout without "
                                         "being uid 0")]


DESCRIPTION = DockerDescription()
