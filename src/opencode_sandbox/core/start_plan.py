"""The plan of one start, step by step: what `--dry-run` prints and what the start then carries out."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from opencode_sandbox.core.lifecycle import DaemonPlan, HomeAction, HomePlan, VmPlan
from opencode_sandbox.core.records import Record


class Step(StrEnum):
    GUARD = "guard"
    AUTO_PRUNE = "auto-prune"
    CHECKS = "doctor"
    IMAGE = "image"
    VM = "vm"
    HOME = "home volume"
    GIT = "git"
    PROVISION = "provisioning"
    DAEMON = "daemon"
    SESSION = "session"


class PlannedStep(Record):
    step: Step
    action: str
    """What the step does, in a word or two: the part a dry run and the start agree on."""
    detail: str = ""
    """Why, or on what: for the reader only."""

    def line(self) -> str:
        return f"{self.step.value}: {self.action}" + (f" ({self.detail})" if self.detail else "")


class StartPlan(Record):
    steps: tuple[PlannedStep, ...]
    notes: tuple[str, ...] = ()
    """What the start will use or say (network, mounts, ports, secrets), one line each."""

    def actions(self) -> list[tuple[Step, str]]:
        return [(planned.step, planned.action) for planned in self.steps]

    def lines(self) -> list[str]:
        return [*self.notes, *(planned.line() for planned in self.steps)]


def plan_auto_prune(seconds_since_last: float | None, interval_s: float, age: str) -> PlannedStep:
    """At most once per `interval_s`: nothing turns stale in a way that matters faster than that."""
    if seconds_since_last is not None and seconds_since_last < interval_s:
        return PlannedStep(Step.AUTO_PRUNE, "skip", "it ran within the hour")
    return PlannedStep(Step.AUTO_PRUNE, "run", f"remove artifacts unused for {age}")


def plan_image(building: Sequence[str], reference: str) -> PlannedStep:
    """`building`: the images a check found out of date, in build order."""
    if building:
        return PlannedStep(Step.IMAGE, "build", ", ".join(building))
    return PlannedStep(Step.IMAGE, "reuse", reference)


def vm_step(vm: str, plan: VmPlan) -> PlannedStep:
    return PlannedStep(Step.VM, plan.action.value, f"{vm}: {plan.reason}")


def home_step(plan: HomePlan, made: str | None = None) -> PlannedStep:
    """`made`: the name of the volume a start has made, where it made one."""
    if plan.action is HomeAction.USE:
        return PlannedStep(Step.HOME, "use", plan.volume or "")
    if plan.action is HomeAction.ASK:
        return PlannedStep(Step.HOME, "keep, reset or migrate", f"{plan.volume}: the runner image changed")
    return PlannedStep(Step.HOME, "create", made or "a new one from the image")


def plan_git(is_git: bool, seeded: bool, deferred: bool) -> PlannedStep:
    if not is_git:
        return PlannedStep(Step.GIT, "none", "not a git checkout")
    if deferred:
        return PlannedStep(Step.GIT, "seed" if seeded else "keep", "the VM stays as it is until no client is attached")
    detail = "the VM's commits come back as refs/sandbox/heads/*, this repository's branches reach it as host/*"
    return PlannedStep(Step.GIT, "seed and sync" if seeded else "sync", detail)


def plan_provision(changed: Sequence[str], any_files: bool = True, agent: str = "opencode") -> PlannedStep:
    """`any_files`: the user has configuration of `agent` (its title) to copy at all."""
    if not any_files:
        return PlannedStep(Step.PROVISION, "keep", f"no {agent} configuration on this host to copy")
    if not changed:
        return PlannedStep(Step.PROVISION, "keep", f"the {agent} configuration in the VM is current")
    return PlannedStep(Step.PROVISION, "copy", ", ".join(changed))


def plan_session(agent: str) -> PlannedStep:
    """A terminal agent's start: no server, the agent's own session, attached to (made first when none runs)."""
    return PlannedStep(Step.SESSION, "attach", f"{agent}'s session in the VM, started first when none runs; "
                                               "it outlives this terminal")


def daemon_step(plan: DaemonPlan) -> PlannedStep:
    return PlannedStep(Step.DAEMON, plan.action.value, plan.reason)

