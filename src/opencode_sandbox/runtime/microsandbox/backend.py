"""The default runtime: one microsandbox microVM per project, driven through the bundled msb."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.bounded_output import OutputOverLimit
from opencode_sandbox.core.naming import (
    IMAGE_REPOSITORY_PREFIX,
    LABEL_MANAGED,
    is_ours,
    slug_of_home_volume,
    slug_of_task,
    slug_of_vm,
    slug_of_volume,
)
from opencode_sandbox.errors import (
    BootFailed,
    NotFound,
    NotOurs,
    RuntimeUnavailable,
    SandboxError,
    VmDidNotBoot,
)
from opencode_sandbox.runtime.env_passing import child_environment, env_flags
from opencode_sandbox.runtime.microsandbox import boot_log as msb_boot_log
from opencode_sandbox.runtime.microsandbox import parse as msb_parse
from opencode_sandbox.runtime.microsandbox import refusals as msb_refusals
from opencode_sandbox.runtime.microsandbox.cli import MsbCli, MsbResult
from opencode_sandbox.runtime.microsandbox.description import DESCRIPTION, MicrosandboxDescription
from opencode_sandbox.runtime.microsandbox.held_signals import signals_held
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck, probe_kvm
from opencode_sandbox.runtime.microsandbox.remembered import Remembered
from opencode_sandbox.runtime.microsandbox.sdk_worker import call_sdk
from opencode_sandbox.runtime.microsandbox.volume_files import (
    copy_tree_onto,
    extract_archive,
    is_empty_folder,
)
from opencode_sandbox.runtime.processes import end_gently
from opencode_sandbox.runtime.secret_values import checked_secret_values
from opencode_sandbox.runtime.types import (
    EXEC_OUTPUT_LIMIT,
    ExecResult,
    ImageInfo,
    Mount,
    MountKind,
    Refusal,
    RuntimeKind,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
    VolumeInfo,
    too_much_output,
)

if TYPE_CHECKING:
    from opencode_sandbox.engine.base import ImageEngine
    from opencode_sandbox.runtime.base import PreparedCommand
    from opencode_sandbox.runtime.microsandbox.remembered import Answer

_DOCTOR_HINT = "run `msb doctor` to check the runtime"
_DOCKER_RUNTIME_HINT = "use `--runtime docker` on this host (the project then runs in a container)"
_BOOT_TIMEOUT_S = 600.0
EXEC_HANDSHAKE_RETRY_S = 2.0
_VM, _IMAGE, _VOLUME = "vm", "image", "volume"
_ON_ITS_WAY = (SandboxStatus.STARTING, SandboxStatus.DRAINING, SandboxStatus.UNKNOWN)


def _vm_settled(inspected: Answer) -> bool:
    """A VM that is starting or stopping is asked again: a caller may be waiting for it."""
    return inspected is None or msb_parse.parse_status(inspected.get("status")) not in _ON_ITS_WAY


def _without_secrets(spec: SandboxSpec) -> dict[str, str]:
    """The VM's environment minus the secrets' names: for a name in `--env`, msb would copy the
    real value from its own environment into the VM. The secret's placeholder takes its place."""
    names = {secret.name for secret in spec.network.secrets} if spec.network is not None else set()
    return {name: value for name, value in spec.env.items() if name not in names}


def image_is_ours(reference: str) -> bool:
    """Runner images: references under our repository prefix (the Docker backend's rule too)."""
    repository = reference.split("/", 1)[1] if reference.startswith("docker.io/") else reference
    return repository.startswith(IMAGE_REPOSITORY_PREFIX)


class MicrosandboxRuntime:
    kind = RuntimeKind.MICROSANDBOX

    @property
    def description(self) -> MicrosandboxDescription:
        return DESCRIPTION

    def __init__(self, cli: MsbCli | None = None, kvm_probe: Callable[[], KvmCheck] = probe_kvm,
                 images: ImageEngine | None = None, *, one_command: bool = False) -> None:
        """`one_command`: this runtime serves one command of the launcher, and answers each
        question about a VM, image or volume from msb's last answer until it changes that object
        itself (`remembered.py`); otherwise every question asks msb."""
        self._cli = cli or MsbCli()
        self._remembered = Remembered(keep=one_command)
        self._kvm_probe = kvm_probe
        if images is None:
            from opencode_sandbox.engine.docker import DockerImageEngine

            images = DockerImageEngine()
        self._images = images
        """Where the runner images are built; each one is copied from there into msb's store."""

    # availability
    def kvm(self) -> KvmCheck:
        return self._kvm_probe()

    def version(self) -> str:
        return self._cli.version()

    def check_available(self) -> None:
        self._cli.check_runnable()
        check = self.kvm()
        if not check.ok:
            raise RuntimeUnavailable(f"microVMs cannot run here: {check.cause}", hint=check.fix or _DOCKER_RUNTIME_HINT)

    # sandboxes
    def _inspect(self, name: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """`msb inspect`: the VM's state, labels, environment and published ports in one answer."""

        def look() -> Answer:
            inspected = self._cli.json(["inspect", name])
            return inspected if isinstance(inspected, dict) else None

        return self._remembered.ask(_VM, name, look, fresh=fresh, settled=_vm_settled)

    def _inspect_ours(self, name: str) -> dict[str, Any]:
        inspected = self._inspect(name)
        if inspected is None:
            raise NotFound(f"sandbox {name} does not exist", hint="run `opencode-sandbox list`")
        info = msb_parse.sandbox_info(inspected)
        if not is_ours(name, info.labels):
            raise NotOurs(
                f"sandbox {name} was not created by opencode-sandbox",
                hint=f"leave it alone, or remove it yourself with `msb remove {name}`",
            )
        return inspected

    def get_sandbox(self, name: str) -> SandboxInfo | None:
        inspected = self._inspect(name)
        if inspected is None:
            return None
        info = msb_parse.sandbox_info(inspected)
        if not is_ours(name, info.labels):
            raise NotOurs(
                f"sandbox {name} exists but was not created by opencode-sandbox",
                hint=f"remove or rename it with msb (`msb remove {name}`) if it is not needed",
            )
        return info

    def list_sandboxes(self) -> list[SandboxInfo]:
        listed = self._cli.json(["list", "--label", f"{LABEL_MANAGED}=true"]) or []
        sandboxes: list[SandboxInfo] = []
        for entry in listed:
            name = str(entry.get("name", ""))
            if not (slug_of_vm(name) or slug_of_task(name)):
                continue
            inspected = self._inspect(name, fresh=True)
            if inspected is None:
                continue
            info = msb_parse.sandbox_info(inspected)
            if is_ours(name, info.labels):
                sandboxes.append(info)
        return sandboxes

    def sandbox_images(self) -> dict[str, str]:
        listed = self._cli.json(["list"]) or []
        return {str(entry.get("name", "")): str(entry.get("image", "")) for entry in listed}

    def create_sandbox(self, spec: SandboxSpec, *, secret_values: Mapping[str, str] | None = None) -> SandboxInfo:
        secret_values = checked_secret_values(spec.name, spec.network, secret_values or {})
        self._remembered.forget(_VM, spec.name)  # made only where nothing is: asked now, not remembered
        if self.get_sandbox(spec.name) is not None:  # raises NotOurs for a look-alike
            raise SandboxError(
                f"sandbox {spec.name} already exists",
                hint="remove it first (`opencode-sandbox stop -f`) or start the existing one",
            )
        if self._image(spec.image) is None:
            raise BootFailed(
                f"sandbox {spec.name} cannot boot: image {spec.image} is not loaded into microsandbox",
                hint="run `opencode-sandbox build` to build and load the runner image",
            )
        for mount in spec.mounts:
            if mount.kind is MountKind.VOLUME:
                self._our_volume_path(mount.source)
            elif not Path(mount.source).is_dir() and not Path(mount.source).is_file():
                raise BootFailed(
                    f"sandbox {spec.name} cannot boot: {mount.source} is neither a folder nor a file",
                    hint="run from inside the project's checkout, and check the paths of the setting 'mounts'",
                )
        env = _without_secrets(spec)
        result = self._cli.run(self._create_args(spec), timeout_s=_BOOT_TIMEOUT_S,
                               environment=child_environment(env, secret_values=secret_values))
        self._remembered.forget(_VM, spec.name)
        if not result.ok:
            raise self._boot_failure(spec.name, result, [*env.values(), *secret_values.values()], created=True)
        info = self.get_sandbox(spec.name)
        if info is None:
            raise BootFailed(f"sandbox {spec.name} vanished after it was created", hint="try again")
        return info

    def _create_args(self, spec: SandboxSpec) -> list[str]:
        args = [
            "create", spec.image, "--name", spec.name, "--pull", "never", "--quiet",
            "--cpus", str(spec.cpus), "--memory", f"{spec.memory_mib}M", "--workdir", spec.workdir,
        ]  # fmt: skip
        args += env_flags("--env", _without_secrets(spec))  # values travel in msb's environment: `env_passing`
        for key, value in spec.labels.items():
            args += ["--label", f"{key}={value}"]
        for mount in spec.mounts:
            args += _mount_flag(mount)
        for guest_port in spec.published_ports:
            args += ["--port", f"127.0.0.1:{spec.host_ports.get(guest_port) or _free_local_port()}:{guest_port}"]
        if spec.network is not None:
            from opencode_sandbox.runtime.host_addresses import host_public_addresses
            from opencode_sandbox.runtime.microsandbox.network import msb_network_args, upstream_trust_args

            args += msb_network_args(spec.network, host_public_addresses())
            args += upstream_trust_args(spec.network, spec.ca_certificate_files)
        return args

    def _boot_failure(self, name: str, result: MsbResult, hidden: Iterable[str], *, created: bool) -> BootFailed:
        """The error for a failed `msb create` (`created`: remove the sandbox) or `msb start`.
        msb's log of the sandbox is read first: removing the sandbox deletes it."""
        log_lines = msb_boot_log.decisive_lines(self._system_log(name), hidden)
        if created and self._inspect(name) is not None:
            self._cli.run(["remove", "--force", "--quiet", name])
            self._remembered.forget(_VM, name)
        cause = result.failure_text
        verb = "boot" if created else "start"
        logged = "".join(f"\n  {line}" for line in log_lines)
        check = self.kvm()
        if not check.ok:
            return BootFailed(
                f"sandbox {name} could not {verb}: {cause} ({check.cause}){logged}",
                hint=f"{_DOCKER_RUNTIME_HINT}; or {check.fix}" if check.fix else _DOCKER_RUNTIME_HINT,
            )
        where = "" if created else f" and `msb logs --source system {name}`"
        return VmDidNotBoot(
            f"sandbox {name} could not {verb}: {cause}{logged}",
            hint=f"run again; if it fails again, run `msb doctor`{where}. "
            f"If microVMs cannot run on this host, {_DOCKER_RUNTIME_HINT}",
            cause=cause,
        )

    def _system_log(self, name: str) -> str:
        return self._cli.run(["logs", "--source", "system", "--tail", "200", "--no-color", name]).stdout

    def start_sandbox(self, name: str, *, secret_values: Mapping[str, str] | None = None) -> None:
        """msb reads the value of each of the VM's secrets again from its environment."""
        inspected = self._inspect_ours(name)
        result = self._cli.run(["start", "--quiet", name], timeout_s=_BOOT_TIMEOUT_S,
                               environment=child_environment(None, secret_values=secret_values))
        self._remembered.forget(_VM, name)
        if not result.ok:
            hidden = [*msb_parse.env_values_of(inspected), *(secret_values or {}).values()]
            raise self._boot_failure(name, result, hidden, created=False)

    def stop_sandbox(self, name: str, timeout_s: float = 10.0) -> None:
        inspected = self._inspect_ours(name)
        if not msb_parse.parse_status(inspected.get("status")).is_active:
            return
        timeout = str(max(1, math.ceil(timeout_s)))
        result = self._cli.run(["stop", "--quiet", "--timeout", timeout, name], timeout_s=timeout_s + 30)
        self._remembered.forget(_VM, name)
        if not result.ok:
            self._stop_forced(name)

    def kill_sandbox(self, name: str) -> None:
        self._inspect_ours(name)
        self._stop_forced(name)

    def _stop_forced(self, name: str) -> None:
        result = self._cli.run(["stop", "--force", "--quiet", name])
        self._remembered.forget(_VM, name)
        if not result.ok and "not running" not in result.error_text:
            raise SandboxError(f"cannot stop sandbox {name}: {result.error_text}", hint=_DOCTOR_HINT)

    def remove_sandbox(self, name: str) -> None:
        self._inspect_ours(name)
        result = self._cli.run(["remove", "--force", "--quiet", name], timeout_s=180.0)
        self._remembered.forget(_VM, name)
        if not result.ok and not result.not_found:
            raise SandboxError(f"cannot remove sandbox {name}: {result.error_text}", hint=_DOCTOR_HINT)

    def port_map(self, name: str) -> dict[int, int]:
        inspected = self._inspect_ours(name)
        if msb_parse.parse_status(inspected.get("status")) is not SandboxStatus.RUNNING:
            return {}
        return msb_parse.published_port_map(inspected)

    def host_port(self, name: str, guest_port: int) -> int:
        port = msb_parse.published_host_port(self._inspect_ours(name), guest_port)
        if port is None:
            raise NotFound(
                f"port {guest_port} of sandbox {name} is not published",
                hint="recreate the sandbox (`opencode-sandbox stop -f`, then run again)",
            )
        return port

    def refusals(self, name: str) -> list[Refusal]:
        if not msb_parse.parse_status(self._inspect_ours(name).get("status")).is_active:
            return []
        result = self._cli.run(["logs", "--source", "system", "--json", "--debug", "--since", "1h", name],
                               timeout_s=120.0)
        if not result.ok:
            raise SandboxError(f"cannot read the network records of {name}: {result.error_text}",
                               hint=f"Check `msb logs --source system --debug {name}`, then try again.")
        return msb_refusals.refusals_of_log(result.stdout)

    # processes
    def _exec_args(self, user: str, workdir: str, env: Mapping[str, str] | None) -> list[str]:
        return ["exec", "--quiet", "--user", user, "--workdir", workdir, *env_flags("--env", env)]

    def exec(
        self,
        name: str,
        argv: Sequence[str],
        *,
        user: str = "dev",
        workdir: str = "/workspace",
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        output_limit: int = EXEC_OUTPUT_LIMIT,
    ) -> ExecResult:
        args = [*self._exec_args(user, workdir, env), "--no-tty"]
        if stdin is None:
            args.append("--no-stdin")
        if timeout_s is not None:
            args += ["--timeout", f"{max(1, math.ceil(timeout_s))}s"]
        args += [name, "--", *argv]
        wait = None if timeout_s is None else timeout_s + 30

        def run() -> MsbResult:
            try:
                return self._cli.run(args, stdin=stdin, timeout_s=wait, environment=child_environment(env),
                                     output_limit=output_limit)
            except OutputOverLimit:
                raise too_much_output(name, argv, output_limit) from None

        result = run()
        if result.agent_failed and "handshake" in result.stderr:
            # The agent was too busy to take the command, which never started: one more try is safe.
            time.sleep(EXEC_HANDSHAKE_RETRY_S)
            result = run()
        if result.returncode != 0 and result.not_found and not result.stdout:
            self._remembered.forget(_VM, name)
            raise NotFound(f"sandbox {name} does not exist", hint="run `opencode-sandbox list`")
        if result.agent_failed:
            raise SandboxError(
                f"cannot run `{argv[0]}` in {name}: {result.failure_text}",
                hint="the VM did not answer in time (a busy or slow host); run again, or "
                "`opencode-sandbox stop` and run again",
            )
        return ExecResult(result.returncode, result.stdout, result.stderr)

    def prepare_command(
        self, name: str, argv: Sequence[str], *, user: str = "dev", workdir: str = "/workspace",
    ) -> PreparedCommand | None:
        return None  # `msb exec` makes the process as it runs it

    def attach(
        self,
        name: str,
        argv: Sequence[str],
        *,
        user: str = "dev",
        workdir: str = "/workspace",
        env: Mapping[str, str] | None = None,
        tty: bool = True,
        clipboard: bool = False,
    ) -> int:
        args = self._exec_args(user, workdir, env)
        args += ["--tty" if tty else "--no-tty", name, "--", *argv]
        from opencode_sandbox.runtime.screen_relay import attach_relayed, relay_wanted

        if relay_wanted(tty):  # the VM's screen is filtered on its way to the user's terminal
            return attach_relayed(self._cli.command(*args), child_environment(env), clipboard)
        # The terminal belongs to msb for the whole session: it handles resizes and signals.
        attached: subprocess.Popen[bytes] | None = None
        try:
            with signals_held():
                attached = subprocess.Popen(self._cli.command(*args), env=child_environment(env))
            return attached.wait()
        except BaseException:  # Ctrl-C, a hang-up or a kill of this process
            if attached is not None:
                end_gently(attached, ATTACH_END_GRACE_S)
            raise

    # volumes
    def _volume_fields(self, name: str, *, fresh: bool = False) -> dict[str, str] | None:
        """`msb volume inspect` (it has no JSON format): kind, size, path, creation time and labels."""

        def look() -> Answer:
            result = self._cli.run(["volume", "inspect", name])
            if not result.ok:
                if result.not_found:
                    return None
                raise self._cli.failure(["volume", "inspect"], result)
            return dict(msb_parse.volume_inspect_fields(result.stdout))

        return self._remembered.ask(_VOLUME, name, look, fresh=fresh)

    def _our_volume_path(self, name: str) -> Path:
        fields = self._volume_fields(name)
        if fields is None:
            raise NotFound(f"volume {name} does not exist", hint="run `opencode-sandbox volume list`")
        if not is_ours(name, msb_parse.parse_label_list(fields.get("labels", ""))):
            raise NotOurs(
                f"volume {name} was not created by opencode-sandbox",
                hint="leave it alone, or manage it yourself with `msb volume`",
            )
        if fields.get("kind") not in (None, "dir"):
            raise SandboxError(f"volume {name} is not a directory volume", hint="use a directory volume")
        if fields.get("path"):
            return Path(fields["path"])
        home = Path(os.environ.get("MSB_HOME", "~/.microsandbox")).expanduser()
        return home / "volumes" / name

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        fields = self._volume_fields(name, fresh=True)
        if fields is not None:
            if not is_ours(name, msb_parse.parse_label_list(fields.get("labels", ""))):
                raise NotOurs(
                    f"volume {name} already exists and was not created by opencode-sandbox",
                    hint="leave it alone, or remove it yourself with `msb volume remove`",
                )
            raise SandboxError(
                f"volume {name} already exists",
                hint="pick another name or remove the existing volume first",
            )
        try:
            call_sdk("create-volume", {"name": name, "labels": dict(labels)})
        finally:
            self._remembered.forget(_VOLUME, name)
        info = self.get_volume(name)
        if info is None:
            raise SandboxError(f"volume {name} was not created", hint=_DOCTOR_HINT)
        return info

    def get_volume(self, name: str) -> VolumeInfo | None:
        fields = self._volume_fields(name)
        if fields is None:
            return None
        info = msb_parse.volume_info(name, fields)
        if slug_of_volume(name) is None or not is_ours(name, info.labels):
            raise NotOurs(
                f"volume {name} exists but was not created by opencode-sandbox",
                hint="leave it alone, or manage it yourself with `msb volume`",
            )
        return info

    def list_volumes(self) -> list[VolumeInfo]:
        listed = self._cli.json(["volume", "list"]) or []
        names = [str(entry.get("name", "")) for entry in listed if isinstance(entry, dict)]
        volumes: list[VolumeInfo] = []
        for name in names:
            if slug_of_home_volume(name) is None:
                continue
            fields = self._volume_fields(name, fresh=True)
            if fields is not None:
                info = msb_parse.volume_info(name, fields)
                if is_ours(name, info.labels):
                    volumes.append(info)
        return volumes

    def remove_volume(self, name: str) -> None:
        self._our_volume_path(name)
        users = [
            str(sandbox.get("name", ""))
            for sandbox in self._all_sandbox_configs()
            if name in msb_parse.named_volumes_of(sandbox)
        ]
        if users:
            raise SandboxError(
                f"volume {name} is used by sandbox {', '.join(users)}",
                hint="remove the sandbox first (`opencode-sandbox stop -f`)",
            )
        result = self._cli.run(["volume", "remove", "--quiet", name])
        self._remembered.forget(_VOLUME, name)
        if not result.ok and not result.not_found:
            raise SandboxError(f"cannot remove volume {name}: {result.error_text}", hint=_DOCTOR_HINT)

    def _all_sandbox_configs(self) -> list[dict[str, Any]]:
        """Every sandbox, ours or not: any of them may mount the volume."""
        listed = self._cli.json(["list"]) or []
        configs = [self._inspect(str(entry.get("name", "")), fresh=True) for entry in listed]
        return [config for config in configs if config is not None]

    def fill_volume_from_image(self, volume: str, image: str, path: str = "/home/dev") -> None:
        folder = self._our_volume_path(volume)
        if not is_empty_folder(folder):
            raise SandboxError(
                f"volume {volume} is not empty",
                hint="fill only a fresh volume; create a new one instead",
            )
        with self._images.export_path(image, path) as archive:
            extract_archive(archive, folder)

    def copy_volume(self, source: str, target: str) -> None:
        copy_tree_onto(self._our_volume_path(source), self._our_volume_path(target))

    # images
    def _image(self, reference: str, *, fresh: bool = False) -> ImageInfo | None:
        def look() -> Answer:
            inspected = self._cli.json(["image", "inspect", reference])
            return inspected if isinstance(inspected, dict) else None

        inspected = self._remembered.ask(_IMAGE, reference, look, fresh=fresh)
        return msb_parse.image_info(inspected) if inspected is not None else None

    def _loaded_as(self, docker_reference: str, wanted: str) -> ImageInfo | None:
        present = self._image(docker_reference)
        return present if present is not None and present.digest == wanted else None

    def _built_image_id(self, reference: str) -> str:
        document = self._images.inspect_image(reference)
        if document is None:
            raise NotFound(f"image {reference} is not in the Docker engine", hint="run `opencode-sandbox build`")
        return str(document["Id"])

    def loaded_image(self, docker_reference: str) -> ImageInfo | None:
        return self._loaded_as(docker_reference, self._built_image_id(docker_reference))

    def load_image(self, docker_reference: str) -> ImageInfo:
        wanted = self._built_image_id(docker_reference)
        present = self._loaded_as(docker_reference, wanted)
        if present is not None:
            return present
        try:
            with self._images.save(docker_reference) as archive:  # a failed save is reported first, on leaving
                load_failure = _load_archive(archive, docker_reference,
                                             self._cli.command("load", "--quiet", "--tag", docker_reference))
        finally:
            self._remembered.forget(_IMAGE, docker_reference)
        if load_failure is not None:
            raise load_failure
        loaded = self._image(docker_reference)
        if loaded is None or loaded.digest != wanted:
            raise SandboxError(
                f"image {docker_reference} did not load into microsandbox intact",
                hint="run `opencode-sandbox build` again",
            )
        return loaded

    def list_images(self) -> list[ImageInfo]:
        listed = self._cli.json(["image", "list"]) or []
        images: list[ImageInfo] = []
        for entry in listed:
            reference = str(entry.get("reference", ""))
            if not image_is_ours(reference):
                continue
            info = self._image(reference, fresh=True)
            if info is not None and image_is_ours(info.reference):
                images.append(info)
        return images

    def remove_image(self, reference: str) -> None:
        if not image_is_ours(reference):
            raise NotOurs(
                f"image {reference} was not built by opencode-sandbox",
                hint=f"remove it yourself with `msb image remove {reference}` if it is not needed",
            )
        if self._image(reference) is None:
            raise NotFound(f"image {reference} is not loaded", hint="run `opencode-sandbox image list`")
        result = self._cli.run(["image", "remove", "--quiet", reference])
        self._remembered.forget(_IMAGE, reference)
        if not result.ok:
            raise SandboxError(
                f"cannot remove image {reference}: {result.error_text}",
                hint="remove the sandboxes that use it first",
            )


def _mount_flag(mount: Mount) -> list[str]:
    """A host folder or file is shared with `host-perms=mirror`: what the guest creates or chmods
    there keeps its permission bits on the host too (msb's default keeps them in the folder's
    `user.msb.override_stat` attribute only, leaving the host files at 0600 and 0700). A home
    volume keeps the default: the host never reads it, and its modes stay private."""
    options = ["ro"] if mount.readonly else []
    if mount.kind is MountKind.VOLUME:
        flag = "--mount-named"
    else:
        flag = "--mount-file" if Path(mount.source).is_file() else "--mount-dir"
        options.append("host-perms=mirror")
    suffix = ":" + ",".join(options) if options else ""
    return [flag, f"{mount.source}:{mount.target}{suffix}"]


def _free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _load_archive(archive: IO[bytes], reference: str, load_command: list[str]) -> SandboxError | None:
    """`msb load` reading the saved image straight from the engine's pipe (or, for a stream without a
    file descriptor, copied into the loader's); its failure, if any."""
    try:
        archive.fileno()
        piped = False
    except OSError:  # io.UnsupportedOperation: an in-memory stream
        piped = True
    with subprocess.Popen(load_command, stdin=subprocess.PIPE if piped else archive,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as loader:
        if piped and loader.stdin is not None:
            with loader.stdin, contextlib.suppress(BrokenPipeError):
                shutil.copyfileobj(archive, loader.stdin)
        archive.close()  # the loader holds the only read end now: a saver whose reader died stops
        load_errors = loader.stderr.read() if loader.stderr is not None else b""
        loader.wait()
    if loader.returncode == 0:
        return None
    lines = [line for line in load_errors.decode(errors="replace").splitlines() if line.strip()]
    return SandboxError(
        f"msb load of {reference} failed: {lines[0] if lines else loader.returncode}",
        hint="check free disk space under MSB_HOME and run `msb doctor`",
    )


ATTACH_END_GRACE_S = 5.0


