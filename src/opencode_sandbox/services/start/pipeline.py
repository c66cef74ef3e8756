"""One start of `run` and `shell`, from a checkout to a VM with opencode serving: each step gathers
facts, plans (pure, in `core/`) and applies. The dry run gathers and plans, and changes nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from opencode_sandbox.app import App
from opencode_sandbox.core import naming
from opencode_sandbox.core.agents import SessionKind
from opencode_sandbox.core.lifecycle import ApplyChoice, DaemonFacts, DaemonPlan, VmAction, plan_daemon
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.start_plan import (
    PlannedStep,
    StartPlan,
    Step,
    daemon_step,
    home_step,
    plan_auto_prune,
    plan_git,
    plan_image,
    plan_session,
    vm_step,
)
from opencode_sandbox.core.units import format_duration
from opencode_sandbox.core.workspace import ISOLATED, SHARED
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.services import daemon_control, vm_boot
from opencode_sandbox.services.image_step import ReadyImage, UpdateCheck, ensure_image, predict_image
from opencode_sandbox.services.start import checks, provision
from opencode_sandbox.services.start.daemon import DaemonStep, DaemonTarget
from opencode_sandbox.services.start.spec import VmShape, is_isolated, vm_shape
from opencode_sandbox.services.start.vm_step import VmStep, ask_apply
from opencode_sandbox.services.workspace_mode import guard_runs_at_start
from opencode_sandbox.state.files import ensure_private_dir
from opencode_sandbox.state.store import ProjectState
from opencode_sandbox.state_layout import StateLayout
from opencode_sandbox.ui.prompts import confirm

AUTO_PRUNE_INTERVAL_S = 3600.0
GUARDED_TOOL_FOLDER = ".opencode-sandbox"
GUARD_STEP = PlannedStep(Step.GUARD, "review", "what a VM changed among the files the host runs: keep or revert it, "
                                               "and record them")


GUARD_SKIPPED = PlannedStep(Step.GUARD, "skip", "the isolated mode mounts nothing of the checkout: nothing to guard")


def workspace_note(app: App) -> str:
    if is_isolated(app):
        return ("workspace: isolated: the VM works on its own work tree (a volume, seeded from this checkout at "
                "its first start); its work comes back through `opencode-sandbox diff` and `apply`")
    return "workspace: shared: the VM works on this checkout at /workspace (the guard watches the files you run)"


class ReadyVm(Record):
    name: str
    host_url: str
    """The daemon on the host's loopback."""
    password: str
    ports: Mapping[int, int] = {}
    """The VM's published guest ports and their 127.0.0.1 ports, opencode serve's included."""
    kept_as_found: bool = False
    """The VM was running, and the start changed nothing an agent reads as it starts: no file of
    the checkout reverted, the VM used as it was, nothing copied into its home."""


class Start:
    """The steps of a start, in the spec's order; `carried_out` holds each step's plan as the
    start carried it out, in the shape of the dry run's."""

    def __init__(self, app: App) -> None:
        from opencode_sandbox.services import vm_git

        self.app = app
        self.console = app.console
        self.slug = app.project.slug
        self.vm = naming.vm_name(self.slug)
        self.store = app.state
        self.project_dir = self.store.project_dir(self.slug)
        self.git_layout = vm_git.layout(app.project.root, self.project_dir, app.git_paths)
        """Where the VM's own git directory is; None outside a git checkout."""
        self.carried_out: list[PlannedStep] = []
        self.reverted = False
        """The guard's review reverted what a VM changed in the checkout."""

    # the start ----------------------------------------------------------------------------

    def prepare(self, rebuild: bool, other_clients: int, wait_for_daemon: bool = True) -> ReadyVm:
        """Every step up to a serving daemon. `wait_for_daemon=False` (shell) leaves the daemon as
        it is: a shell command does not need it."""
        recorded = self.store.load(self.slug)
        self._agree_on_workspace(recorded)
        if guard_runs_at_start(self.app, recorded):
            self._review_guarded_files()
        update_check = UpdateCheck(self.app)
        update_check.start()
        self._auto_prune()
        checked = self._check()
        secret_values = checks.secret_values(self.app)
        with self.store.first_boot_lock(self.slug):
            image = self._image(rebuild, self._ask_upgrade(update_check), self._ask_agent_upgrade(update_check))
            vm = VmStep(self.app, self._shape(checked), secret_values, self.git_layout is not None)
            facts = vm.gather(image)
            decision = vm.decide(facts, image, other_clients)
            self._did(vm_step(self.vm, decision.plan), home_step(decision.home, decision.made_volume))
            state = recorded_state = facts.state
            if decision.volume is not None and decision.volume != state.home_volume:
                # Recorded once complete, before the VM boots on it: a launcher killed during
                # the boot leaves a project whose next run uses it, not a second, orphaned one.
                state = state._replace(home_volume=decision.volume)
                self.store.save(self.slug, state)
            seeded = self._seed_git_dir() if not is_isolated(self.app) else False
            if is_isolated(self.app) and decision.plan.action in (VmAction.CREATE, VmAction.RECREATE):
                state = self._ensure_work_volume(state)  # a VM that exists has its volume mounted
            try:
                recreated = vm.apply(decision, facts.existing, image)
            except BaseException:
                if decision.made_volume is not None:
                    vm_boot.remove_made_volume(self.app.runtime, self.console, decision.made_volume)
                    self.store.save(self.slug, state._replace(home_volume=recorded_state.home_volume))
                raise
            connected = decision.plan.action is VmAction.CONNECT
            if recreated:
                state = state._replace(config_fingerprint=None)  # no daemon runs in a new VM yet
            if image.dind and not connected:
                self._start_inner_docker()
            password = self._password(recreated or decision.plan.action is VmAction.CREATE)
            state = state._replace(project_root=str(self.app.project.root), workspace=self.app.settings.workspace)
            if vm.loaded is None and (facts.existing is None or state.image_reference is None):
                vm.runnable(image)
            if vm.loaded is not None:
                state = state._replace(image_reference=vm.loaded.reference, image_digest=vm.loaded.digest)
            if state != recorded_state:
                self.store.save(self.slug, state)
            found = facts.existing
            # The VM it connects to kept its ports: the runtime read them with it a moment ago.
            ports = dict(found.ports) if connected and found is not None and not found.repair \
                and found.ports is not None else self.app.runtime.port_map(self.vm)
            # host_port raises the runtime's own error for a VM whose daemon port is not published
            host_url = f"http://127.0.0.1:{ports.get(DAEMON_PORT) or self.app.runtime.host_port(self.vm, DAEMON_PORT)}"
            provisioned = provision.gather(self.app, decision.volume)
            self._did(plan_git(self.app.project.is_git, seeded, decision.plan.deferred), provisioned.step)
            provision.apply(self.app, self.vm, provisioned, decision.volume)
            if not decision.plan.deferred and is_isolated(self.app):
                self._record_host_run_paths()
                self._seed_work_tree()
            if not decision.plan.deferred:
                self._sync_git(seeded)
            daemon = self._daemon(state, DaemonTarget(host_url, password, state.home_volume,
                                                      self.app.settings.daemon_start_timeout.total_seconds()),
                                  provisioned.fingerprint)
            facts_of_daemon = self._daemon_facts(state, not connected, wait_for_daemon, provisioned.fingerprint,
                                                 other_clients)
            daemon.ensure(facts_of_daemon)
            if daemon.carried_out is not None:
                self._did(daemon_step(daemon.carried_out))
            return ReadyVm(self.vm, host_url, password, ports,
                           kept_as_found=connected and not provisioned.changed and not self.reverted)

    def _agree_on_workspace(self, recorded: ProjectState) -> None:
        """A project changes mode only with the user's yes; before the VM of the isolated mode goes,
        its work reaches the host (`refs/sandbox/wip/*`), and its work tree's volume stays."""
        before = recorded.workspace or SHARED
        wanted = self.app.settings.workspace
        if before == wanted:
            return
        if recorded.workspace is None and self.app.runtime.get_sandbox(self.vm) is None:
            return  # no VM was made in either mode yet
        question = (f"This project's VM works in the {before} mode; the {wanted} mode makes a new VM "
                    f"({'your checkout is no longer mounted' if wanted == ISOLATED else 'on your checkout'}; "
                    "the home volume stays). Switch?")
        interactive = self.app.interactive
        if not (self.app.assume_yes or confirm(self.console, question, default=False, interactive=interactive)):
            keep = "drop --isolated" if before == SHARED else "add --isolated"
            raise SandboxError(f"the project's VM works in the {before} mode",
                               hint=f"to switch, run again in a terminal and answer yes, or with --yes; to keep it, "
                                    f"{keep} or set `workspace: {before}`")
        if before == ISOLATED:
            from opencode_sandbox.services.stopping import sync_git

            sync_git(self.app)

    def _ensure_work_volume(self, state: ProjectState) -> ProjectState:
        name = naming.work_volume_name(self.slug)
        if self.app.runtime.get_volume(name) is None:
            self.app.runtime.create_volume(name, naming.managed_labels(self.slug))
            self.console.verbose(f"made the VM's work tree volume {name}")
            state = state._replace(work_seeded=None)  # a new volume is seeded afresh
        if state.work_volume != name or state.work_seeded is None:
            state = state._replace(work_volume=name)
            self.store.save(self.slug, state)
        return state

    def _record_host_run_paths(self) -> None:
        """For the sync, which holds a VM branch that changes one (the reaper has no settings)."""
        from opencode_sandbox.services.guard.reviews import host_run_paths
        from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
        from opencode_sandbox.state_layout import ProjectLayout

        path = ProjectLayout(self.project_dir).host_run_paths
        wanted = {"paths": list(host_run_paths(self.app))}
        with contextlib.suppress(UnreadableState):
            if read_yaml_mapping(path) == wanted:
                return
        write_yaml(path, wanted)

    def _seed_work_tree(self) -> None:
        """The VM's own work tree, made from the checkout at the first start of the isolated mode."""
        from opencode_sandbox.services.git_sync import work_tree
        from opencode_sandbox.services.git_sync.host_git import GitSyncError

        if not self.app.project.is_git:
            return
        name = naming.work_volume_name(self.slug)
        if self.store.load(self.slug).work_seeded == name:
            return  # seeded once and for all: its work tree is the VM's from then on
        try:
            branch = work_tree.seed(self.app.runtime, self.vm, self.app.project.root)
        except GitSyncError as error:
            raise SandboxError(f"cannot make the VM's work tree: {error}",
                               hint="check that `git status` works in this checkout, then run again") from None
        self.store.save(self.slug, self.store.load(self.slug)._replace(work_seeded=name))
        if not branch:
            return
        self.console.info(f"The VM works on its own copy of this checkout ({branch}, with your uncommitted "
                          "changes); `opencode-sandbox diff` shows its work, `apply` brings it here.")

    def _did(self, *planned: PlannedStep) -> None:
        self.carried_out.extend(planned)

    def _review_guarded_files(self) -> None:
        """Before anything reads the checkout's configuration or Dockerfile: what a VM changed
        among the files the host runs is shown and kept or reverted, and the rest recorded."""
        from opencode_sandbox.services.guard.reviews import review

        reviewed = review(self.app, vm_may_write_after=True, ask_reaper=True)
        self.reverted = reviewed.reverted
        if reviewed.touched_tool_folder:
            self.app.reload_settings()
        # Git keeps no empty folder: made now, the VM sees it read-only from its creation on.
        with contextlib.suppress(OSError):
            (self.app.project.root / GUARDED_TOOL_FOLDER).mkdir(exist_ok=True)
        self._did(GUARD_STEP)

    def _auto_prune_step(self) -> PlannedStep:
        import time

        stamp = StateLayout(self.app.paths.state_dir).auto_prune_stamp
        try:
            since = time.time() - stamp.stat().st_mtime
        except FileNotFoundError:
            since = None
        return plan_auto_prune(since, AUTO_PRUNE_INTERVAL_S, format_duration(self.app.settings.auto_prune_age))

    def _auto_prune(self) -> None:
        planned = self._auto_prune_step()
        self._did(planned)
        if planned.action == "skip":
            return
        stamp = StateLayout(self.app.paths.state_dir).auto_prune_stamp
        ensure_private_dir(stamp.parent)
        stamp.touch()
        from opencode_sandbox.services.prune import auto_prune

        auto_prune(self.app)

    def _check(self) -> checks.Checked:
        checked = checks.check(self.app)
        for message, hint in checked.warnings:
            self.console.warn(message, hint=hint)
        self._did(checked.step)
        return checked

    def _shape(self, checked: checks.Checked) -> VmShape:
        return vm_shape(self.app, checked.host_mounts, self.git_layout)

    def _ask_upgrade(self, update_check: UpdateCheck) -> str | None:
        from opencode_sandbox.images import updater

        baked = updater.baked_version(self.app.paths.state_dir, self.console.warn)
        newer = update_check.pending_version(baked)
        if newer and confirm(
            self.console,
            f"opencode {newer} is available (this image has {baked}). Rebuild the image now?",
            default=False,
            interactive=self.app.interactive,
        ):
            return newer
        return None

    def _ask_agent_upgrade(self, update_check: UpdateCheck) -> str | None:
        from opencode_sandbox.core.agents import DEFAULT_AGENT

        if self.app.settings.agent == DEFAULT_AGENT:  # opencode's version is `_ask_upgrade`'s
            return None
        newer = update_check.pending_agent_version()
        title = self.app.settings.agent_profile.title
        if newer and confirm(self.console, f"{title} {newer} is available. Rebuild the image now?", default=False,
                             interactive=self.app.interactive):
            return newer
        return None

    def _image(self, rebuild: bool, upgrade_to: str | None, agent_upgrade_to: str | None = None) -> ReadyImage:
        image = ensure_image(self.app, rebuild, upgrade_to, agent_upgrade_to)
        self.console.verbose(f"image {image.reference} ({image.digest})")
        self._did(plan_image([image.reference] if image.built else [], image.reference))
        return image

    def _seed_git_dir(self) -> bool:
        """The VM's own git directory, made from the host's repository when there is none (a
        new project, or one that ran before VMs had their own); True when made now."""
        if self.git_layout is None:
            return False
        from opencode_sandbox.services import vm_git

        try:
            made = vm_git.ensure_seeded(self.git_layout)
        except (vm_git.GitSyncError, OSError) as error:
            raise SandboxError(f"cannot make the VM's git directory: {error}",
                               hint="check that `git status` works in this checkout, then run again") from None
        if made:
            self.console.verbose(f"made the VM's git directory {self.git_layout.state}")
        return made

    def _sync_git(self, seeded: bool) -> None:
        """The VM's commits to the host and the host's to the VM, before anyone works."""
        if self.git_layout is None:
            return
        from opencode_sandbox.services import vm_git

        if seeded:
            try:
                vm_git.finish_seed(self.app.runtime, self.vm, self.git_layout)
            except (vm_git.GitSyncError, SandboxError) as error:
                self.console.warn(str(getattr(error, "message", error)),
                                  hint="run `git reset` in `opencode-sandbox shell` to rebuild it")
        vm_git.sync_project(self.app.runtime, self.vm, self.app.project.root, self.project_dir,
                            lambda line: self.console.verbose(f"git: {line}"), self.app.git_paths,
                            self.app.settings.git_sync_branches, work_tree=False, host_moved_only=not seeded)
        vm_git.tell_held(self.console, self.project_dir)

    def _start_inner_docker(self) -> None:
        result = self.app.guest(self.vm).start_inner_docker()
        if result.exit_code != 0:
            self.console.warn(
                f"the Docker engine inside {self.vm} did not start: "
                f"{(result.stderr or result.stdout).strip().splitlines()[-1:] or ['no output']}"
            )

    def _password(self, new_vm: bool) -> str:
        existing = daemon_control.read_password(self.project_dir)
        if existing and not new_vm:
            return existing
        return daemon_control.new_password(self.project_dir)

    @staticmethod
    def _daemon_facts(state: ProjectState, booted: bool, wait: bool, config_fingerprint: str,
                      other_clients: int) -> DaemonFacts:
        config_changed = state.config_fingerprint not in (None, config_fingerprint)
        return DaemonFacts(booted, wait, config_changed, other_clients)

    def _daemon(self, state: ProjectState, target: DaemonTarget, config_fingerprint: str) -> DaemonStep:
        def ask_restart(other_clients: int) -> bool:
            what = "the opencode configuration changed: the server must restart"
            return ask_apply(self.app, what, other_clients) is ApplyChoice.PROCEED

        def record_started() -> None:
            self.store.save(self.slug, state._replace(config_fingerprint=config_fingerprint))

        return DaemonStep(self.app.guest(self.vm), self.console, target, ask_restart, record_started)

    # the dry run ---------------------------------------------------------------------------

    def plan(self, rebuild: bool = False, wait_for_daemon: bool = True) -> StartPlan:
        """What a start would do, step by step, gathering facts and changing nothing."""
        steps = [GUARD_STEP if guard_runs_at_start(self.app, self.store.load(self.slug)) else GUARD_SKIPPED,
                 self._auto_prune_step()]
        checked = checks.check(self.app, dry_run=True)
        steps.append(checked.step)
        image, building = predict_image(self.app, rebuild)
        steps.append(plan_image(building, image.reference))
        vm = VmStep(self.app, self._shape(checked), {}, self.git_layout is not None)
        facts = vm.gather(image)
        from opencode_sandbox.state.leases import count_live_leases

        others = count_live_leases(self.app.paths.state_dir, self.slug)
        decision = vm.predict(facts, image, others)
        steps += [vm_step(self.vm, decision.plan), home_step(decision.home)]
        seeded = self.git_layout is not None and not self.git_layout.state.exists()
        steps.append(plan_git(self.app.project.is_git, seeded, decision.plan.deferred))
        provisioned = provision.gather(self.app, decision.volume)
        steps.append(provisioned.step)
        profile = self.app.settings.agent_profile
        if wait_for_daemon and profile.session is SessionKind.TERMINAL:
            steps.append(plan_session(profile.title))
        else:
            booted = decision.plan.action is not VmAction.CONNECT or facts.existing is None
            daemon_facts = self._daemon_facts(facts.state, booted, wait_for_daemon, provisioned.fingerprint, others)
            steps.append(daemon_step(self._predict_daemon(facts.state, daemon_facts, provisioned.fingerprint)))
        return StartPlan(tuple(steps), (workspace_note(self.app), *checks.notes(self.app, checked),
                                         *self.app.runtime.description.plan_notes(self.app.settings.egress_policy,
                                                                                  self.slug)))

    def _predict_daemon(self, state: ProjectState, facts: DaemonFacts, config_fingerprint: str) -> DaemonPlan:
        password = daemon_control.read_password(self.project_dir)
        port = self.app.runtime.port_map(self.vm).get(DAEMON_PORT) if not facts.booted else None
        if facts.booted or password is None or port is None:
            return plan_daemon(facts._replace(booted=True))
        target = DaemonTarget(f"http://127.0.0.1:{port}", password, state.home_volume,
                              self.app.settings.daemon_start_timeout.total_seconds())
        return self._daemon(state, target, config_fingerprint).predict(facts)
