"""The VM step of a start: reuse, start, create or recreate the VM, on the home volume the plan picks."""

from __future__ import annotations

from collections.abc import Mapping

from opencode_sandbox.app import App
from opencode_sandbox.core import naming
from opencode_sandbox.core.lifecycle import (
    ApplyChoice,
    HomeAction,
    HomeChoice,
    HomePlan,
    VmAction,
    VmPlan,
    needs_apply_prompt,
    plan_home_volume,
    plan_vm,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import BootFailed, SandboxError
from opencode_sandbox.runtime.types import SandboxInfo, SandboxSpec, SandboxStatus
from opencode_sandbox.services import vm_boot
from opencode_sandbox.services.image_step import ReadyImage, runnable
from opencode_sandbox.services.start.spec import VmShape, sandbox_spec
from opencode_sandbox.state.store import ProjectState
from opencode_sandbox.ui.progress import slow_step
from opencode_sandbox.ui.prompts import choose

WAIT_FOR_START_S = 60.0


class VmFacts(Record):
    state: ProjectState
    existing: SandboxInfo | None
    recorded_volume_exists: bool


class VmDecision(Record):
    plan: VmPlan
    home: HomePlan
    volume: str | None
    """The home volume the VM runs on; None when a deferred change keeps a VM whose volume is
    not recorded (the state file is missing)."""
    made_volume: str | None = None
    """A home volume this start made, until the VM that mounts it is up."""


class VmStep:
    def __init__(self, app: App, shape: VmShape, secret_values: Mapping[str, str], git_own: bool) -> None:
        self.app = app
        self.console = app.console
        self.vm = naming.vm_name(app.project.slug)
        self.shape = shape
        self.secret_values = secret_values
        self.git_own = git_own
        self._specs: dict[tuple[str, str, str], SandboxSpec] = {}
        self.loaded: ReadyImage | None = None
        """The image as the runtime runs it, once this start needed it so (`runnable`)."""

    def gather(self, image: ReadyImage) -> VmFacts:
        state = self.app.state.load(self.app.project.slug)
        existing = self.app.runtime.get_sandbox(self.vm)
        recorded = state.home_volume
        exists = recorded is not None and (self._runs_on(existing, image, recorded)
                                           or self.app.runtime.get_volume(recorded) is not None)
        return VmFacts(state, existing, exists)

    def _runs_on(self, existing: SandboxInfo | None, image: ReadyImage, volume: str) -> bool:
        """The VM is running with this image, on this home volume (its fingerprint names the
        volume): the volume is there, no need to ask."""
        if existing is None or existing.status is not SandboxStatus.RUNNING:
            return False
        wanted = self.spec(image, volume).labels
        return all(existing.labels.get(label) == wanted[label]
                   for label in (naming.LABEL_FINGERPRINT, naming.LABEL_IMAGE_DIGEST))

    def runnable(self, image: ReadyImage) -> ReadyImage:
        """The image loaded into the runtime where it must be (microsandbox), once per start."""
        if self.loaded is None:
            self.loaded = runnable(self.app.runtime, self.console, image)
        return self.loaded

    def spec(self, image: ReadyImage, home_volume: str) -> SandboxSpec:
        """Made once per image and home volume: planning and creating the VM share it."""
        key = (image.reference, image.digest, home_volume)
        if key not in self._specs:
            self._specs[key] = sandbox_spec(self.app, self.shape, image, home_volume, self.git_own)
        return self._specs[key]

    def plan(self, facts: VmFacts, image: ReadyImage, volume: str | None = None) -> VmPlan:
        existing = facts.existing
        labels = existing.labels if existing else {}
        spec = self.spec(image, volume if volume is not None else facts.state.home_volume or "")
        return plan_vm(
            existing.status if existing else None,
            labels.get(naming.LABEL_IMAGE_DIGEST),
            image.digest,
            labels.get(naming.LABEL_FINGERPRINT),
            spec.labels[naming.LABEL_FINGERPRINT],
            existing.owner_unlabelled if existing else False,
        )

    def predict(self, facts: VmFacts, image: ReadyImage, other_clients: int) -> VmDecision:
        """The plan without asking anyone or making anything (the dry run)."""
        plan = self.plan(facts, image)
        if plan.action is VmAction.RECREATE and needs_apply_prompt(other_clients, True):
            plan = plan._replace(reason=f"{plan.reason}; asked first, {other_clients} other client(s) are attached")
        home = self._home_plan(facts, plan)
        return VmDecision(plan, home, home.volume)

    def decide(self, facts: VmFacts, image: ReadyImage, other_clients: int) -> VmDecision:
        """The VM plan and the home volume it runs on, asking where the plan leaves a choice."""
        recorded = facts.state.home_volume
        first_plan = self.plan(facts, image)
        if first_plan.action is VmAction.RECREATE and needs_apply_prompt(other_clients, True):
            choice = ask_apply(self.app, f"{first_plan.reason}: the VM must be recreated", other_clients)
            if choice is ApplyChoice.DEFER and facts.existing is not None:
                self.console.info("Keeping the running VM; the change applies once no client is attached.")
                volume = recorded if facts.recorded_volume_exists else None
                return VmDecision(VmPlan(VmAction.CONNECT, "deferred", deferred=True),
                                  HomePlan(HomeAction.USE, volume), volume)
        home = self._home_plan(facts, first_plan)
        if home.warning:
            self.console.warn(home.warning)
        made = None
        if home.action is HomeAction.USE and home.volume:
            volume = home.volume
        elif home.action is HomeAction.ASK and home.volume:
            volume, made = self._image_changed_home(home.volume, image)
        else:
            # A replacement never takes the name of a recorded volume that vanished.
            volume = made = self._new_home_volume(image, copy_from=None, avoid=recorded)
        return VmDecision(self.plan(facts, image, volume), home, volume, made)

    def _home_plan(self, facts: VmFacts, plan: VmPlan) -> HomePlan:
        recorded = facts.state.home_volume
        return plan_home_volume(recorded, {recorded} if facts.recorded_volume_exists and recorded else set(), plan)

    def _image_changed_home(self, current: str, image: ReadyImage) -> tuple[str, str | None]:
        if not self.app.interactive:
            self.console.info(
                f"The runner image changed; keeping the home volume {current} "
                "(`opencode-sandbox volume migrate` or `volume reset` build one from the new image)."
            )
            return current, None
        answer = choose(
            self.console,
            f"The runner image changed and the VM is rebuilt. Home volume {current}: "
            "keep it, reset it from the new image, or migrate (new image, your files on top)?",
            [choice.value for choice in HomeChoice],
            HomeChoice.KEEP.value,
            True,
        )
        choice = HomeChoice(answer)
        if choice is HomeChoice.KEEP:
            return current, None
        made = self._new_home_volume(image, copy_from=current if choice is HomeChoice.MIGRATE else None)
        return made, made

    def _new_home_volume(self, image: ReadyImage, copy_from: str | None, avoid: str | None = None) -> str:
        """A complete new home volume, or nothing at all: a failure removes the half-made one."""
        from opencode_sandbox.services.volumes import build_home_volume, free_home_volume_name

        slug = self.app.project.slug
        name = free_home_volume_name(self.app.runtime, slug, taken=avoid)
        reference = self.runnable(image).reference
        with slow_step(self.console, f"Creating the home volume {name}"):
            build_home_volume(self.app.runtime, slug, name, reference, copy_from, self.console.warn)
        return name

    def apply(self, decision: VmDecision, existing: SandboxInfo | None, image: ReadyImage) -> bool:
        """Carry the VM plan out; True when a new VM was made."""
        runtime = self.app.runtime
        plan = decision.plan
        self.console.verbose(f"VM {self.vm}: {plan.action.value} ({plan.reason})")
        if plan.action is VmAction.CONNECT:
            if existing is not None and existing.repair:
                self.console.info(f"{self.vm} is running, but {existing.repair}: starting it again.")
                vm_boot.start(runtime, self.console, self.vm, self.secret_values)
            return False
        if plan.action is VmAction.WAIT and self._wait_running():
            return False
        from opencode_sandbox.services.published_ports import refuse_busy_host_ports

        settings = self.app.settings
        # A chosen host port the VM holds itself is its own, not a busy one: before the old VM of a
        # recreate goes, or while a stopped VM's network holder keeps it bound (docker).
        chosen = existing is not None and any(port.host is not None for port in settings.ports)
        held = set(runtime.port_map(self.vm).values()) if chosen else set()
        refuse_busy_host_ports([port for port in settings.ports if port.host not in held],
                               settings.sources.get("ports", ""))
        if plan.action in (VmAction.START, VmAction.WAIT):
            vm_boot.start(runtime, self.console, self.vm, self.secret_values)
            return False
        image = self.runnable(image)  # before the old VM goes: an image that fails to load leaves it
        if plan.action is VmAction.RECREATE and existing is not None:
            with slow_step(self.console, f"Recreating {self.vm} ({plan.reason})"):
                if existing.status.is_active:
                    runtime.stop_sandbox(self.vm)
                runtime.remove_sandbox(self.vm)
        vm_boot.create(runtime, self.console, self.spec(image, decision.volume or ""), self.secret_values)
        return True

    def _wait_running(self) -> bool:
        import time

        deadline = time.monotonic() + WAIT_FOR_START_S
        while time.monotonic() < deadline:
            info = self.app.runtime.get_sandbox(self.vm)
            if info is None:
                raise BootFailed(f"{self.vm} disappeared while starting", hint="run the command again")
            if info.status is SandboxStatus.RUNNING:
                return True
            if not info.status.is_active:
                return False
            time.sleep(0.5)
        return False


def ask_apply(app: App, what: str, other_clients: int) -> ApplyChoice:
    answer = choose(
        app.console,
        f"{what}, but {other_clients} other client(s) are attached. "
        "Keep the running VM for now (defer), apply it now (proceed), or quit?",
        [choice.value for choice in ApplyChoice],
        ApplyChoice.DEFER.value,
        app.interactive,
    )
    choice = ApplyChoice(answer)
    if choice is ApplyChoice.QUIT:
        raise SandboxError("stopped at your request; nothing was changed",
                           hint="run again when the other clients have detached")
    return choice
