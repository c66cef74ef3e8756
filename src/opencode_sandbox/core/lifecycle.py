"""Pure decisions of the run lifecycle: what to do with the VM, the home volume, the daemon."""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum

from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.vm_status import SandboxStatus


class VmAction(StrEnum):
    CREATE = "create"
    CONNECT = "connect"
    START = "start"
    WAIT = "wait"
    RECREATE = "recreate"


class VmPlan(Record):
    action: VmAction
    reason: str
    image_changed: bool = False
    """The recreate is due to a new image (so the home volume prompt applies)."""
    deferred: bool = False
    """A change is kept back while other clients are attached: the VM is left as it is."""


def fingerprint(values: Mapping[str, object]) -> str:
    """A short stable digest of the settings that need a VM recreate when they change."""
    text = json.dumps(values, sort_keys=True, default=str)
    return sha256(text.encode()).hexdigest()[:16]


def plan_vm(
    status: SandboxStatus | None,
    booted_digest: str | None,
    current_digest: str,
    booted_fingerprint: str | None,
    current_fingerprint: str,
    owner_unlabelled: bool = False,
) -> VmPlan:
    """Reuse, start, create or recreate the project VM.

    `status` is the VM's, None when the project has none; `booted_*` come from the VM's labels
    (what it was created with); `current_*` from the image and settings of this run.
    `owner_unlabelled`: the VM is this host user's but an older version made it without the
    owner label, which Docker cannot add to a container: it is recreated once (on its home volume).
    """
    if status is None:
        return VmPlan(VmAction.CREATE, "no VM exists for this project")
    if booted_digest != current_digest:
        return VmPlan(VmAction.RECREATE, "the runner image changed", image_changed=True)
    if booted_fingerprint != current_fingerprint:
        return VmPlan(VmAction.RECREATE, "settings that need a new VM changed (cpus, memory, network, env, mounts)")
    if owner_unlabelled:
        return VmPlan(VmAction.RECREATE, "an older version made it without the label of its host user")
    if status is SandboxStatus.RUNNING:
        return VmPlan(VmAction.CONNECT, "the VM is running")
    if status in (SandboxStatus.STARTING, SandboxStatus.DRAINING):
        return VmPlan(VmAction.WAIT, f"the VM is {status.value}")
    return VmPlan(VmAction.START, f"the VM is {status.value}")


class HomeChoice(StrEnum):
    KEEP = "keep"
    RESET = "reset"
    MIGRATE = "migrate"


class HomeAction(StrEnum):
    USE = "use"
    CREATE = "create"
    ASK = "ask"


class HomePlan(Record):
    action: HomeAction
    volume: str | None
    """The volume to use (USE) or to keep offering (ASK); None when one must be created."""
    warning: str | None = None


def plan_home_volume(recorded: str | None, existing_volumes: set[str], vm_plan: VmPlan) -> HomePlan:
    if recorded is None:
        return HomePlan(HomeAction.CREATE, None)
    if recorded not in existing_volumes:
        return HomePlan(
            HomeAction.CREATE,
            None,
            warning=f"the home volume {recorded} recorded for this project no longer exists; "
            "creating a fresh one",
        )
    if vm_plan.action is VmAction.RECREATE and vm_plan.image_changed:
        return HomePlan(HomeAction.ASK, recorded)
    return HomePlan(HomeAction.USE, recorded)


class ApplyChoice(StrEnum):
    DEFER = "defer"
    PROCEED = "proceed"
    QUIT = "quit"


def needs_apply_prompt(other_clients: int, disruptive: bool) -> bool:
    """A change that would restart the daemon or recreate the VM, while others are attached."""
    return disruptive and other_clients > 0


class DaemonAction(StrEnum):
    LEAVE = "leave"
    """`shell`: its command needs no server, so none is started, checked or restarted; the next
    `run` does what its server needs."""
    CHECK_HEALTH = "check health"
    """Ask whether the server answers, then plan again."""
    CHECK_PROCESS = "check process"
    """Ask whether an `opencode serve` process runs in the VM, then plan again."""
    ASK_RESTART = "ask restart"
    """Ask whether to restart while other clients are attached, then plan again."""
    WAIT = "wait"
    """Wait for a server started earlier to answer, then plan again."""
    KEEP = "keep"
    START = "start"
    RESTART = "restart"
    """Stop whatever server runs, then start one."""


class DaemonFacts(Record):
    """What the daemon plan decides on. The questions to the VM stay None until a plan asks them,
    so a start pays only for those its case needs."""

    booted: bool
    """The VM was just (re)started, so no server runs in it yet."""
    wait: bool
    """The caller waits for the server (`run`); `shell` needs none and leaves it as it is."""
    config_changed: bool
    """The opencode configuration copied into the VM changed since the server started."""
    other_clients: int
    """Clients attached besides this one."""
    healthy: bool | None = None
    restart_approved: bool | None = None
    serve_running: bool | None = None
    came_up: bool | None = None
    """A server found starting answered within the wait."""


class DaemonPlan(Record):
    action: DaemonAction
    reason: str


def plan_daemon(facts: DaemonFacts) -> DaemonPlan:
    """Keep, start or restart `opencode serve`, or the question to ask before deciding."""
    if not facts.wait:
        return DaemonPlan(DaemonAction.LEAVE, "a shell needs no server")
    if facts.booted:
        return DaemonPlan(DaemonAction.START, "the VM was just started")
    if facts.healthy is None:
        return DaemonPlan(DaemonAction.CHECK_HEALTH, "a server may be running")
    if facts.healthy:
        if not facts.config_changed:
            return DaemonPlan(DaemonAction.KEEP, "the server answers")
        if facts.other_clients > 0 and facts.restart_approved is None:
            return DaemonPlan(DaemonAction.ASK_RESTART, "the configuration changed while other clients are attached")
        if facts.other_clients > 0 and not facts.restart_approved:
            return DaemonPlan(DaemonAction.KEEP, "the restart for the changed configuration is deferred")
        return DaemonPlan(DaemonAction.RESTART, "the opencode configuration changed")
    if facts.config_changed:
        return DaemonPlan(DaemonAction.RESTART, "the server does not answer and the configuration changed")
    if facts.serve_running is None:
        return DaemonPlan(DaemonAction.CHECK_PROCESS, "the server does not answer; it may still be starting")
    if not facts.serve_running:
        return DaemonPlan(DaemonAction.RESTART, "no server answers")
    if facts.came_up is None:
        return DaemonPlan(DaemonAction.WAIT, "a server started earlier is still coming up")
    if facts.came_up:
        return DaemonPlan(DaemonAction.KEEP, "the server started earlier came up")
    return DaemonPlan(DaemonAction.RESTART, "the server started earlier did not come up")
