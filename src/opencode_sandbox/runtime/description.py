"""What a runtime answers about itself, before one is made: the services ask these questions of
the runtime they use, and never branch on its kind. Each backend package holds its answers
(`docker/description.py`, `microsandbox/description.py`); `select.describe` finds them."""

from __future__ import annotations

from typing import Protocol

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from opencode_sandbox.core.egress import EgressPolicy
    from opencode_sandbox.errors import UsageError
    from opencode_sandbox.runtime.kind import RuntimeKind
    from opencode_sandbox.runtime.types import HostCheck


class Description(Protocol):
    kind: RuntimeKind
    runs_engine_images: bool
    """It runs the Docker engine's images as they are: nothing of its own to load, list or prune."""
    sandboxes_are_engine_containers: bool
    """Its sandboxes are the Docker engine's containers: listing them lists every container there."""
    image_label: str
    """What its images are called in a list (`docker image`, `msb image`)."""
    volume_remove_command: str
    """The command that removes one of its volumes by hand."""
    notice: str | None
    """What a user choosing it is told once per process; None: nothing."""
    prepares_commands: bool
    """It can make a command's process before the command runs (`Runtime.prepare_command`)."""

    def refusal(self, policy: EgressPolicy, privileged: bool) -> UsageError | None:
        """Why it cannot give a VM this network policy (`privileged`: Docker-in-Docker); None when it can."""

    def warnings(self, privileged: bool) -> list[tuple[str, str | None]]:
        """What a start says at every start about a VM it runs so (each message and its hint)."""

    def intercepts_tls(self, policy: EgressPolicy) -> bool:
        """It reads the VM's HTTPS under this policy, so the runner image must trust its CA."""

    def enforcer(self, policy: EgressPolicy) -> str:
        """What keeps the VM to the policy, in a few words."""

    def fingerprint_values(self, pids_limit: int) -> dict[str, object]:
        """Its part of the settings whose change makes a new VM."""

    def pids_limit(self, configured: int) -> int | None:
        """The process limit it gives a VM; None where it gives none."""

    def plan_notes(self, policy: EgressPolicy, slug: str) -> list[str]:
        """What a start will make beside the VM, one line each, for the dry run."""

    def host_checks(self, selected: bool) -> list[HostCheck]:
        """Its checks of this host; `selected`: the user chose it (some checks only matter then)."""
