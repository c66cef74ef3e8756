"""The run lifecycle: from a checkout to a VM with opencode serving, ready to attach."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.app import App
from opencode_sandbox.core import naming
from opencode_sandbox.core.egress import Profile
from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.lifecycle import (
    ApplyChoice,
    DaemonFacts,
    HomeAction,
    HomeChoice,
    VmAction,
    VmPlan,
    fingerprint,
    needs_apply_prompt,
    plan_home_volume,
    plan_vm,
)
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.units import format_duration
from opencode_sandbox.errors import BootFailed, SandboxError, UsageError
from opencode_sandbox.runtime.types import (
    Mount,
    MountKind,
    RuntimeKind,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
)
from opencode_sandbox.services import daemon_control, provisioning, vm_boot
from opencode_sandbox.services.image_step import ReadyImage, UpdateCheck, ensure_image
from opencode_sandbox.state.files import UnreadableState, ensure_private_dir, read_yaml_mapping, write_yaml
from opencode_sandbox.state.store import ProjectState
from opencode_sandbox.ui.progress import slow_step
from opencode_sandbox.ui.prompts import choose, confirm

if TYPE_CHECKING:
    from opencode_sandbox.images.certificates import CaCertificate

WAIT_FOR_START_S = 60.0
AUTO_PRUNE_STAMP = "auto-prune.last"
DIND_START = "/usr/local/bin/opencode-sandbox-start-docker"
AUTO_PRUNE_INTERVAL_S = 3600.0
DEFERRED = "deferred"
GUARDED_TOOL_FOLDER = ".opencode-sandbox"


class ReadyVm(Record):
    name: str
    host_url: str
    """The daemon on the host's loopback."""
    password: str
    daemon_start: daemon_control.BackgroundStart | None = None
    """For `shell`: `opencode serve` still starting while the command runs."""
    ports: Mapping[int, int] = {}
    """The VM's published guest ports and their 127.0.0.1 ports, opencode serve's included."""


class RunLifecycle:
    """The steps of `run` and `shell`, in the spec's order; `attach` is the caller's."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.console = app.console
        self.slug = app.project.slug
        self.vm = naming.vm_name(self.slug)
        self.store = app.state
        self.project_dir = self.store.project_dir(self.slug)
        self.made_volume: str | None = None
        """The home volume this run created, until the VM that mounts it is up."""
        self.secret_values: dict[str, str] = {}
        """The secrets' values, for the runtime alone: msb reads them at create and every start."""
        self.host_mounts: tuple[Mount, ...] = ()
        """The `mounts` setting, each source resolved on this host."""
        self._guard_mounts: list[Mount] | None = None
        from opencode_sandbox.services import vm_git

        self.git_layout = vm_git.layout(app.project.root, self.project_dir, app.project.is_git)
        """Where the VM's own git directory is; None outside a git checkout."""

    # the whole sequence -------------------------------------------------------------------

    def prepare(self, rebuild: bool, other_clients: int, wait_for_daemon: bool = True) -> ReadyVm:
        """Every step up to a serving daemon. `wait_for_daemon=False` (shell) starts the daemon
        but does not wait for it to answer: a shell command does not need it."""
        self._review_guarded_files()
        update_check = UpdateCheck(self.app)
        update_check.start()
        self._auto_prune()
        self._doctor()
        with ExitStack() as held:
            held.enter_context(self.store.first_boot_lock(self.slug))
            upgrade_to = self._ask_upgrade(update_check)
            image = ensure_image(self.app, rebuild, upgrade_to)
            self.console.verbose(f"image {image.reference} ({image.digest})")
            state = self.store.load(self.slug)
            recorded_state = state
            existing = self.app.runtime.get_sandbox(self.vm)
            vm_plan, home_volume = self._decide(state, existing, image, other_clients)
            recorded_volume = state.home_volume
            if home_volume is not None and home_volume != recorded_volume:
                # Recorded once complete, before the VM boots on it: a launcher killed during
                # the boot leaves a project whose next run uses it, not a second, orphaned one.
                state = state._replace(home_volume=home_volume)
                self.store.save(self.slug, state)
            seeded = self._seed_git_dir()
            try:
                recreated = self._apply_vm(vm_plan, existing, image, home_volume or "")
            except BaseException:
                if self.made_volume is not None:
                    vm_boot.remove_made_volume(self.app.runtime, self.console, self.made_volume)
                    self.store.save(self.slug, state._replace(home_volume=recorded_volume))
                raise
            if recreated:
                state = state._replace(config_fingerprint=None)  # no daemon runs in a new VM yet
            if image.dind and vm_plan.action is not VmAction.CONNECT:
                self._start_inner_docker()
            password = self._password(recreated or vm_plan.action is VmAction.CREATE)
            state = state._replace(project_root=str(self.app.project.root))
            if vm_plan.action is not VmAction.CONNECT or existing is None or state.image_reference is None:
                state = state._replace(image_reference=image.reference, image_digest=image.digest)
            if state != recorded_state:
                self.store.save(self.slug, state)
            ports = self.app.runtime.port_map(self.vm)
            # host_port raises the runtime's own error for a VM whose daemon port is not published
            host_url = f"http://127.0.0.1:{ports.get(DAEMON_PORT) or self.app.runtime.host_port(self.vm, DAEMON_PORT)}"
            config_fingerprint = self._provision(home_volume)
            if vm_plan.reason != DEFERRED:
                self._sync_git(seeded)
            booted = vm_plan.action is not VmAction.CONNECT
            start = self._ensure_daemon(state, host_url, password, config_fingerprint, other_clients, booted,
                                        wait_for_daemon)
            if start is None:
                return ReadyVm(self.vm, host_url, password, ports=ports)
            return ReadyVm(self.vm, host_url, password, daemon_control.BackgroundStart(start, held.pop_all()), ports)

    # steps ---------------------------------------------------------------------------------

    def _review_guarded_files(self) -> None:
        """Before anything reads the checkout's configuration or Dockerfile: what a VM changed
        among the files the host runs is shown and kept or reverted, and the rest recorded."""
        from opencode_sandbox.services.guard import review

        if review(self.app, vm_may_write_after=True).touched_tool_folder:
            self.app.reload_settings()
        # Git keeps no empty folder: made now, the VM sees it read-only from its creation on.
        with contextlib.suppress(OSError):
            (self.app.project.root / GUARDED_TOOL_FOLDER).mkdir(exist_ok=True)

    def _auto_prune(self) -> None:
        """At most once an hour: nothing turns stale in a way that matters faster than that."""
        import time

        stamp = self.app.paths.state_dir / AUTO_PRUNE_STAMP
        try:
            if time.time() - stamp.stat().st_mtime < AUTO_PRUNE_INTERVAL_S:
                return
        except FileNotFoundError:
            pass
        ensure_private_dir(stamp.parent)
        stamp.touch()
        from opencode_sandbox.services.prune import auto_prune

        auto_prune(self.app)

    def _doctor(self) -> None:
        from opencode_sandbox.services.host_mounts import resolved_mounts

        self.host_mounts = resolved_mounts(self.app.settings, self.app.project.root)
        self.app.runtime.check_available()
        policy = self.app.settings.egress_policy
        if self.app.runtime.kind is RuntimeKind.DOCKER:
            from opencode_sandbox.runtime.nft_ruleset import docker_refusal

            refusal = docker_refusal(policy, privileged=self.app.settings.dind)
            if refusal is not None:
                raise refusal
            if self.app.settings.dind:
                self.console.warn("dind: the VM runs privileged on the docker runtime, so the agent is root on this "
                                  "host: it can read and change everything here",
                                  hint="turn `dind` off in your configuration unless this project needs Docker "
                                       "inside and you accept that")
        refused = policy.refusal()
        if refused is not None:
            raise UsageError(refused, hint="remove the secrets setting, or choose another network profile")
        if policy.secrets:
            from opencode_sandbox.services.secrets import look_up_for

            self.secret_values = look_up_for(self.app).values()
        if policy.profile is Profile.ALL:
            self.console.warn("network: all: the VM reaches everything this host reaches, its network "
                              "and its own services included")

    def _ask_upgrade(self, update_check: UpdateCheck) -> str | None:
        from opencode_sandbox.images import updater

        baked = updater.baked_version(self.app.paths.state_dir)
        newer = update_check.pending_version(baked)
        if newer and confirm(
            f"opencode {newer} is available (this image has {baked}). Rebuild the image now?",
            default=False,
            interactive=self.app.interactive,
        ):
            return newer
        return None

    def _spec(self, image: ReadyImage, home_volume: str) -> SandboxSpec:
        settings = self.app.settings
        certificates = self._intercepting_certificates()
        dev_identity = (os.getuid(), os.getgid())
        own_mounts = (
            Mount(MountKind.VOLUME, home_volume, "/home/dev"),
            Mount(MountKind.BIND, str(self.app.project.root), "/workspace"),
            *self._git_mounts(),
            *self._read_only_guarded(),
        )
        ports = (DAEMON_PORT, *(port.guest for port in settings.ports))
        values = {
            "runtime": settings.runtime.value,
            "cpus": settings.cpus,
            "memory_mib": settings.memory_mib,
            "env": image.env,
            "mounts": [*([m.kind.value, m.source, m.target, *(["ro"] if m.readonly else [])] for m in own_mounts),
                       *([m.kind.value, m.source, m.target, "ro" if m.readonly else "rw"] for m in self.host_mounts)],
            "ports": [DAEMON_PORT, *(port.written for port in settings.ports)],
            "dev_identity": list(dev_identity),
            "network": settings.egress_policy.fingerprint_value(),
        }
        if settings.runtime is RuntimeKind.MICROSANDBOX:
            # A microVM whose checkout does not mirror modes to the host is recreated once.
            values["checkout_modes"] = "mirrored"
        else:
            # A container made before it was confined (dev never uid 0, no capability, no new
            # privileges, a pids limit) is recreated once; the home volume is kept.
            values["confinement"] = {"dev": "never-root", "pids_limit": settings.pids_limit}
        labels = {
            **naming.managed_labels(self.slug),
            **({naming.LABEL_GIT: naming.GIT_OWN} if self.git_layout is not None else {}),
            naming.LABEL_IMAGE: image.reference,
            naming.LABEL_IMAGE_DIGEST: image.digest,
            naming.LABEL_FINGERPRINT: fingerprint(values),
        }
        return SandboxSpec(
            name=self.vm,
            image=image.reference,
            cpus=settings.cpus,
            memory_mib=settings.memory_mib,
            env=image.env,
            labels=labels,
            mounts=(*own_mounts, *self.host_mounts),
            workdir="/workspace",
            published_ports=ports,
            host_ports={port.guest: port.host for port in settings.ports if port.host is not None},
            dev_identity=dev_identity,
            privileged=settings.dind,
            pids_limit=settings.pids_limit if settings.runtime is RuntimeKind.DOCKER else None,
            network=settings.egress_policy,
            ca_certificates=tuple(certificate.pem for certificate in certificates),
            ca_certificate_files=tuple(dict.fromkeys(str(certificate.source) for certificate in certificates)),
        )

    def _git_mounts(self) -> list[Mount]:
        from opencode_sandbox.services import vm_git

        return vm_git.mounts(self.git_layout) if self.git_layout is not None else []

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
                            lambda line: self.console.verbose(f"git: {line}"))

    def _read_only_guarded(self) -> list[Mount]:
        """The guarded files and folders that exist, mounted read-only over the checkout (never
        inside `.git`, which is the VM's own)."""
        if self._guard_mounts is None:  # read once: every spec of one run mounts the same
            from opencode_sandbox.services.guard import guarded_paths, read_only_paths

            root = self.app.project.root
            paths = [path for path in read_only_paths(root, guarded_paths(self.app.settings))
                     if path != ".git" and not path.startswith(".git/")]
            self._guard_mounts = [Mount(MountKind.BIND, str(root / path), f"/workspace/{path}", readonly=True)
                                  for path in paths]
        return self._guard_mounts

    def _intercepting_certificates(self) -> list[CaCertificate]:
        """The CAs that verify servers when the runtime intercepts the VM's HTTPS (the docker
        runtime's egress proxy, msb under `allowlist` or with secrets): those runner images trust."""
        settings = self.app.settings
        if settings.runtime is RuntimeKind.DOCKER:
            from opencode_sandbox.runtime.nft_ruleset import needs_proxy

            intercepted = needs_proxy(settings.egress_policy)
        else:
            from opencode_sandbox.runtime.msb_network import intercepts

            intercepted = intercepts(settings.egress_policy)
        if not intercepted:
            return []
        from opencode_sandbox.images.certificates import collect_ca_certificates

        return collect_ca_certificates(settings.trust_host_ca, settings.extra_ca_certificates)

    def _plan(self, existing: SandboxInfo | None, spec: SandboxSpec, image: ReadyImage) -> VmPlan:
        labels = existing.labels if existing else {}
        return plan_vm(
            existing.status if existing else None,
            labels.get(naming.LABEL_IMAGE_DIGEST),
            image.digest,
            labels.get(naming.LABEL_FINGERPRINT),
            spec.labels[naming.LABEL_FINGERPRINT],
            existing.owner_unlabelled if existing else False,
        )

    def _decide(
        self, state: ProjectState, existing: SandboxInfo | None, image: ReadyImage, other_clients: int
    ) -> tuple[VmPlan, str | None]:
        """The VM plan and the home volume it runs on; None when a deferred change keeps a VM
        whose volume is not recorded (the state file is missing)."""
        runtime = self.app.runtime
        recorded = state.home_volume
        recorded_exists = recorded is not None and runtime.get_volume(recorded) is not None
        first_plan = self._plan(existing, self._spec(image, recorded or ""), image)
        if first_plan.action is VmAction.RECREATE and needs_apply_prompt(other_clients, True):
            choice = self._ask_apply(f"{first_plan.reason}: the VM must be recreated", other_clients)
            if choice is ApplyChoice.DEFER and existing is not None:
                self.console.info("Keeping the running VM; the change applies once no client is attached.")
                return VmPlan(VmAction.CONNECT, DEFERRED), recorded if recorded_exists else None
        home = plan_home_volume(recorded, {recorded} if recorded_exists and recorded else set(), first_plan)
        if home.warning:
            self.console.warn(home.warning)
        if home.action is HomeAction.USE and home.volume:
            volume = home.volume
        elif home.action is HomeAction.ASK and home.volume:
            volume = self._image_changed_home(home.volume, image)
        else:
            # A replacement never takes the name of a recorded volume that vanished.
            volume = self._new_home_volume(image, copy_from=None, avoid=recorded)
        return self._plan(existing, self._spec(image, volume), image), volume

    def _ask_apply(self, what: str, other_clients: int) -> ApplyChoice:
        answer = choose(
            f"{what}, but {other_clients} other client(s) are attached. "
            "Keep the running VM for now (defer), apply it now (proceed), or quit?",
            [choice.value for choice in ApplyChoice],
            ApplyChoice.DEFER.value,
            self.app.interactive,
        )
        choice = ApplyChoice(answer)
        if choice is ApplyChoice.QUIT:
            raise SandboxError("stopped at your request; nothing was changed",
                               hint="run again when the other clients have detached")
        return choice

    def _image_changed_home(self, current: str, image: ReadyImage) -> str:
        if not self.app.interactive:
            self.console.info(
                f"The runner image changed; keeping the home volume {current} "
                "(`opencode-sandbox volume migrate` or `volume reset` build one from the new image)."
            )
            return current
        answer = choose(
            f"The runner image changed and the VM is rebuilt. Home volume {current}: "
            "keep it, reset it from the new image, or migrate (new image, your files on top)?",
            [choice.value for choice in HomeChoice],
            HomeChoice.KEEP.value,
            True,
        )
        choice = HomeChoice(answer)
        if choice is HomeChoice.KEEP:
            return current
        return self._new_home_volume(image, copy_from=current if choice is HomeChoice.MIGRATE else None)

    def _new_home_volume(self, image: ReadyImage, copy_from: str | None, avoid: str | None = None) -> str:
        """A complete new home volume, or nothing at all: a failure removes the half-made one."""
        from opencode_sandbox.services.volumes import build_home_volume, free_home_volume_name

        name = free_home_volume_name(self.app.runtime, self.slug, taken=avoid)
        with slow_step(self.console, f"Creating the home volume {name}"):
            build_home_volume(self.app.runtime, self.slug, name, image.reference, copy_from, self.console.warn)
        self.made_volume = name
        return name

    def _apply_vm(self, plan: VmPlan, existing: SandboxInfo | None, image: ReadyImage, home_volume: str) -> bool:
        """Carry the VM plan out; True when a new VM was made."""
        runtime = self.app.runtime
        self.console.verbose(f"VM {self.vm}: {plan.action.value} ({plan.reason})")
        if plan.action is VmAction.CONNECT:
            if existing is not None and existing.repair:
                self.console.info(f"{self.vm} is running, but {existing.repair}: starting it again.")
                vm_boot.start(runtime, self.console, self.vm, self.secret_values)
            return False
        if plan.action is VmAction.WAIT and self._wait_running():
            return False
        from opencode_sandbox.services.published_ports import refuse_busy_host_ports

        where = self.app.settings.sources.get("ports", "")
        if plan.action in (VmAction.START, VmAction.WAIT):
            refuse_busy_host_ports(self.app.settings.ports, where)
            vm_boot.start(runtime, self.console, self.vm, self.secret_values)
            return False
        # Before the old VM goes, which frees only the host ports it holds itself.
        held = set(runtime.port_map(self.vm).values()) if existing is not None else set()
        refuse_busy_host_ports([port for port in self.app.settings.ports if port.host not in held], where)
        if plan.action is VmAction.RECREATE and existing is not None:
            with slow_step(self.console, f"Recreating {self.vm} ({plan.reason})"):
                if existing.status.is_active:
                    runtime.stop_sandbox(self.vm)
                runtime.remove_sandbox(self.vm)
        vm_boot.create(runtime, self.console, self._spec(image, home_volume), self.secret_values)
        self.made_volume = None  # the VM holds it now
        return True

    def _start_inner_docker(self) -> None:
        result = self.app.runtime.exec(self.vm, [DIND_START], user="root", timeout_s=120)
        if result.exit_code != 0:
            self.console.warn(
                f"the Docker engine inside {self.vm} did not start: "
                f"{(result.stderr or result.stdout).strip().splitlines()[-1:] or ['no output']}"
            )

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

    def _password(self, new_vm: bool) -> str:
        existing = daemon_control.read_password(self.project_dir)
        if existing and not new_vm:
            return existing
        return daemon_control.new_password(self.project_dir)

    def _provision(self, home_volume: str | None) -> str:
        """Copy what changed of the user's opencode config into the VM; its fingerprint."""
        sources = provisioning.sources_for_environment(self.app.project.root)
        secret_names = {secret.name for secret in self.app.settings.secrets}
        collected = provisioning.collect_files(sources)
        if collected.skipped:
            self.console.warn(
                f"not copied into the VM (provisioning copies regular files you can read, never through a link): "
                f"{', '.join(shown(str(path)) for path in collected.skipped)}",
                hint="put the file itself there in place of the link",
            )
        files = provisioning.without_secret_keys(collected.files, secret_names)
        current = provisioning.manifest(files)
        record_path = self.project_dir / "provisioned.yaml"
        try:
            record = read_yaml_mapping(record_path) or {}
        except UnreadableState:
            record = {}
        provisioned = record.get("files") if record.get("home_volume") == home_volume else None
        previous: dict[str, str] = provisioned if isinstance(provisioned, dict) else {}
        changed = provisioning.changed_files(files, current, previous)
        if changed:
            self.console.verbose(f"provisioning {len(changed)} file(s): {', '.join(changed)}")
            result = self.app.runtime.exec(
                self.vm, provisioning.UNPACK_COMMAND, workdir="/home/dev",
                stdin=provisioning.tar_archive(files, changed), timeout_s=120,
            )
            if result.exit_code != 0:
                from opencode_sandbox.services.dev_home_probe import home_failure

                home = home_failure(self.app.runtime, self.vm, home_volume)
                if home is not None:
                    raise SandboxError(f"copying the opencode configuration into {self.vm} failed: {home.reason}",
                                       hint=home.hint)
                raise SandboxError(
                    f"copying the opencode configuration into {self.vm} failed: {result.stderr.strip()}",
                    hint="check the files under ~/.config/opencode, then run again",
                )
            write_yaml(record_path, {"home_volume": home_volume, "files": current})
        return provisioning.manifest_fingerprint(current)

    def _ensure_daemon(
        self, state: ProjectState, host_url: str, password: str, config_fingerprint: str, other_clients: int,
        booted: bool, wait: bool,
    ) -> Callable[[], None] | None:
        """`booted`: the VM was just (re)started. Without `wait`, what the daemon still needs is
        returned, for the caller to run beside its command."""
        from opencode_sandbox.services.daemon_step import DaemonStep

        def ask_restart(other_clients: int) -> bool:
            choice = self._ask_apply("the opencode configuration changed: the server must restart", other_clients)
            return choice is ApplyChoice.PROCEED

        def record_started() -> None:
            self.store.save(self.slug, state._replace(config_fingerprint=config_fingerprint))

        step = DaemonStep(self.app.runtime, self.console, self.vm, host_url, password, state.home_volume,
                          ask_restart, record_started, self.app.settings.daemon_start_timeout.total_seconds())
        config_changed = state.config_fingerprint not in (None, config_fingerprint)
        return step.ensure(DaemonFacts(booted, wait, config_changed, other_clients))


def secret_lines(app: App) -> list[str]:
    """Each secret's hosts and where its value comes from; never the value."""
    if not app.settings.secrets:
        return []
    from opencode_sandbox.services.secrets import look_up_for

    lookup = look_up_for(app)
    return [f"{secret.describe()}; value from {lookup.sources[secret.name]}" for secret in lookup.secrets]


def describe_plan(app: App, worktree: tuple[str, str | None] | None = None) -> list[str]:
    """What a run would do, step by step, changing nothing (`--dry-run`).

    `worktree` is the parsed `-w NAME[:BASE]`, when given.
    """
    from opencode_sandbox.images.builder import plan_project_image
    from opencode_sandbox.images.updater import baked_version

    lines = [f"auto-prune: remove artifacts unused for {format_duration(app.settings.auto_prune_age)}"]
    lines.append(f"doctor: check the {app.settings.runtime.value} runtime")
    lines.append(f"network: {app.settings.egress_policy.describe()}")
    from opencode_sandbox.services.host_mounts import resolved_mounts

    lines += [f"mount: {mount.source} -> {mount.target} ({'read-only' if mount.readonly else 'read-write'})"
              for mount in resolved_mounts(app.settings, app.project.root)]
    lines += [f"port: guest {port.guest} -> 127.0.0.1:{port.host or 'a free port'}" for port in app.settings.ports]
    lines += [f"secret: {line}" for line in secret_lines(app)]
    lines.append("guard: show what a VM changed among the files the host runs, keep or revert it, and record them")
    if app.project.is_git:
        lines.append("git: the VM works on a git directory of its own (made once from this repository); its commits "
                     "come back as refs/sandbox/heads/*, this repository's branches reach it as host/*")
    if app.settings.runtime is RuntimeKind.DOCKER:
        from opencode_sandbox.runtime.docker_proxy import proxy_name
        from opencode_sandbox.runtime.nft_ruleset import needs_proxy

        if needs_proxy(app.settings.egress_policy):
            lines.append(f"proxy: create or start {proxy_name(app.project.slug)} (mitmproxy) before the VM; "
                         "the VM reaches only the proxy")
    version = baked_version(app.paths.state_dir) or "the latest release"
    plan = plan_project_image(
        project_dir=app.project.root, slug=app.project.slug, dind=app.settings.dind,
        opencode_version=version if version != "the latest release" else "latest",
        trust_host_ca=app.settings.trust_host_ca, extra_ca_certificates=app.settings.extra_ca_certificates,
    )
    for image in plan.images:
        lines.append(f"image: {image.action.value} {image.reference} ({image.reason})")
    vm = naming.vm_name(app.project.slug)
    existing = app.runtime.get_sandbox(vm)
    state = app.state.load(app.project.slug)
    if existing is None:
        lines.append(f"vm: create {vm}")
    else:
        lines.append(f"vm: {vm} is {existing.status.value}; reuse, start or recreate it as the image requires")
    lines.append(f"home volume: {state.home_volume or 'create a new one from the image'}")
    lines.append("provisioning: copy changed opencode configuration files into the VM home")
    lines.append("daemon: verify or start opencode serve")
    if worktree is not None:
        name, base = worktree
        lines.append(f"worktree: use {name}, or create it from {base or 'HEAD'} if it does not exist")
    return lines
