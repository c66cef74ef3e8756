"""`FakeRuntime`: an in-memory `Runtime` that behaves like the real backends.

Sandboxes, volumes and images live in dicts; files are `FakeNode`s keyed by path, so volume
fills and copies keep owners, modes and symlinks. `exec` understands a small shell (`sh -c`
with `;`, `&&`, `||`, `>`, `>>`, `<`, `>&2`) and the commands services and tests use; more
programs can be scripted with `on_exec`. Bind mounts read and write the real host folder.
Published ports really listen on 127.0.0.1 while a sandbox runs.

Failure injection: `boot_failures`, `engine_down`, `crash(name)`.

As kind DOCKER it acts for one host user (`owner`, the docker runtime's own `DockerOwner`): what
it makes carries the owner label, another user's sandboxes and volumes are never listed, and
every other call on one raises `OwnedByAnother`, as the docker backend does.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import posixpath
import re
import shlex
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from opencode_sandbox.core.naming import (
    IMAGE_REPOSITORY_PREFIX,
    LABEL_MANAGED,
    LABEL_OWNER_UID,
    LABEL_SLUG,
    is_ours,
    slug_of_home_volume,
    slug_of_task,
    slug_of_vm,
)
from opencode_sandbox.errors import (
    BootFailed,
    NotFound,
    NotOurs,
    RuntimeUnavailable,
    SandboxError,
    VmDidNotBoot,
)
from opencode_sandbox.runtime.base import PreparedCommand
from opencode_sandbox.runtime.description import Description
from opencode_sandbox.runtime.docker.owner import DockerOwner
from opencode_sandbox.runtime.secret_values import checked_secret_values
from opencode_sandbox.runtime.select import describe
from opencode_sandbox.runtime.types import (
    EXEC_OUTPUT_LIMIT,
    ExecResult,
    ImageInfo,
    MountKind,
    Refusal,
    RuntimeKind,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
    VolumeInfo,
    too_much_output,
)
from tests.fakes.image_engine import FakeImageEngine

USERS = {"root": 0, "dev": 1000}
TCP_CONNECT = re.compile(r"exec 3<>/dev/tcp/(?P<address>[0-9a-f.:]+)/(?P<port>[0-9]+)")
_ACTIVE = (SandboxStatus.RUNNING, SandboxStatus.STARTING, SandboxStatus.PAUSED)


@dataclass
class FakeNode:
    kind: str
    """"dir", "file" or "link"."""
    owner: str = "root"
    mode: int = 0o755
    data: str = ""
    """A file's text or a link's target."""


Tree = dict[str, FakeNode]
"""Absolute paths for image and sandbox file systems; relative ("" = root) for volumes."""


@dataclass
class FakeImage:
    reference: str
    files: Tree
    labels: dict[str, str] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    image_id: str | None = None
    """The Docker engine's ID of the image it came from: as the real runtimes, the digest then is it."""

    @property
    def digest(self) -> str:
        if self.image_id is not None:
            return self.image_id
        listing = sorted((path, node.kind, node.owner, node.mode, node.data)
                         for path, node in self.files.items())
        return "sha256:" + hashlib.sha256(repr((listing, self.labels)).encode()).hexdigest()


@dataclass
class FakeVolume:
    name: str
    labels: dict[str, str]
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    files: Tree = field(default_factory=lambda: {"": FakeNode("dir", "root", 0o755)})


@dataclass
class FakeSandbox:
    name: str
    labels: dict[str, str]
    spec: SandboxSpec | None
    files: Tree
    status: SandboxStatus = SandboxStatus.CREATED
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    last_activity_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    listeners: dict[int, socket.socket] = field(default_factory=dict)
    image: str = ""
    """The image of a foreign sandbox (ours keep theirs in `spec`)."""
    refusals: list[Refusal] = field(default_factory=list)
    """What its network policy refused in this run (`FakeRuntime.refuse`)."""
    secret_values: dict[str, str] = field(default_factory=dict)
    """The secrets' values its last create or start was given, as msb reads them at each."""
    foreign_mounts: tuple[str, ...] = ()
    """The volumes a foreign sandbox mounts (ours keep theirs in `spec`)."""
    boots: int = 0
    """How often it was booted: what ran in it before ends with each boot."""

    @property
    def mounted_volumes(self) -> set[str]:
        if self.spec is None:
            return set(self.foreign_mounts)
        return {mount.source for mount in self.spec.mounts if mount.kind is MountKind.VOLUME}


@dataclass(frozen=True)
class ExecCall:
    """What `exec` (or a handler) sees of one command."""

    sandbox: str
    argv: tuple[str, ...]
    user: str
    workdir: str
    env: Mapping[str, str]
    stdin: bytes


ExecHandler = Callable[[ExecCall], ExecResult]


def dev_home_files() -> Tree:
    """A small runner-like image: a `dev` user with a home and a checkout folder."""
    return {
        "/": FakeNode("dir", "root", 0o755),
        "/home": FakeNode("dir", "root", 0o755),
        "/home/dev": FakeNode("dir", "dev", 0o755),
        "/home/dev/.profile": FakeNode("file", "dev", 0o644, "# profile\n"),
        "/tmp": FakeNode("dir", "root", 0o1777),
        "/workspace": FakeNode("dir", "dev", 0o755),
    }


class FakePreparedCommand:
    """A command a `FakeRuntime` made ready: nothing of it runs before `run`, and never after `end`."""

    def __init__(self, runtime: FakeRuntime, name: str, argv: tuple[str, ...], user: str, workdir: str) -> None:
        self.runtime = runtime
        self.name = name
        self.argv = argv
        self.user = user
        self.workdir = workdir
        self.outcome: str | None = None
        """"ran" or "ended", once one of them happened."""

    def run(self) -> int:
        if self.outcome is not None:
            raise RuntimeError(f"the prepared command was {self.outcome} already")
        self.outcome = "ran"
        self.runtime.calls.append(("run_prepared", self.name))
        return self.runtime.exec(self.name, self.argv, user=self.user, workdir=self.workdir).exit_code

    def end(self) -> None:
        if self.outcome is None:
            self.outcome = "ended"
            self.runtime.calls.append(("end_prepared", self.name))


class FakeRuntime:
    """An in-memory `Runtime`; inspect `sandboxes`, `volumes`, `images` and `calls` freely."""

    kind = RuntimeKind.DOCKER

    @property
    def description(self) -> Description:
        """The real backend's answers for its kind: the fake stands in for that backend."""
        return describe(self.kind)

    def __init__(self, kind: RuntimeKind = RuntimeKind.DOCKER, image_engine: FakeImageEngine | None = None,
                 owner: DockerOwner | None = None) -> None:
        """`image_engine`: where Docker images come from, as the real backends take them from
        the Docker engine; without it, only what `add_docker_image` planted. `owner`: the host
        user a DOCKER fake acts for (this process's uid, no state folder, by default)."""
        self.kind = kind
        self.owner = owner or DockerOwner()
        self.image_engine = image_engine
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.volumes: dict[str, FakeVolume] = {}
        self.docker_images: dict[str, FakeImage] = {}
        """What the Docker engine holds: the source of `load_image`."""
        self.images: dict[str, FakeImage] = {}
        """What this runtime has loaded."""
        self.calls: list[tuple[str, str]] = []
        self.exec_calls: list[ExecCall] = []
        """Every command `exec` ran, in order."""
        self.handlers: dict[str, ExecHandler] = {}
        self.boot_failures: list[str] = []
        """Causes: each create or start takes the first and fails with `VmDidNotBoot` and it."""
        self.engine_down = False
        """While true, every call raises `RuntimeUnavailable`."""
        from tests.fakes.guest import FakeGuests

        self.guests = FakeGuests()
        """What runs in its VMs (`GuestFactory`), for a test to read and script."""

    # set-up helpers for tests
    def add_docker_image(
        self, reference: str, files: Tree | None = None, labels: Mapping[str, str] | None = None,
        image_id: str | None = None,
    ) -> FakeImage:
        image = FakeImage(reference, dict(files or dev_home_files()), dict(labels or {}), image_id=image_id)
        self.docker_images[reference] = image
        if self.kind is RuntimeKind.DOCKER:
            self.images[reference] = image
        return image

    def add_foreign_sandbox(self, name: str, labels: Mapping[str, str] | None = None, image: str = "",
                            mounts: Sequence[str] = (), status: SandboxStatus = SandboxStatus.CREATED) -> None:
        """A sandbox this runtime did not make: another tool's, another user's, an older version's."""
        self.sandboxes[name] = FakeSandbox(name, dict(labels or {}), None, dev_home_files(), status=status,
                                           image=image, foreign_mounts=tuple(mounts))

    def add_foreign_volume(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.volumes[name] = FakeVolume(name, dict(labels or {}))

    def on_exec(self, program: str, handler: ExecHandler) -> None:
        """Answer every exec of `program` (argv[0]) with `handler`."""
        self.handlers[program] = handler

    def crash(self, name: str) -> None:
        sandbox = self.sandboxes[name]
        self._close_ports(sandbox)
        sandbox.status = SandboxStatus.CRASHED
        sandbox.last_activity_at = datetime.now(UTC)

    def close(self) -> None:
        for sandbox in self.sandboxes.values():
            self._close_ports(sandbox)

    # Runtime
    def check_available(self) -> None:
        self._call("check_available", "")

    def get_sandbox(self, name: str) -> SandboxInfo | None:
        self._call("get_sandbox", name)
        sandbox = self.sandboxes.get(name)
        if sandbox is None:
            return None
        self._require_ours("container", name, sandbox.labels)
        self._require_owner(sandbox)
        return self._info(sandbox)

    def list_sandboxes(self) -> list[SandboxInfo]:
        self._call("list_sandboxes", "")
        return [
            self._info(sandbox)
            for name, sandbox in sorted(self.sandboxes.items())
            if is_ours(name, sandbox.labels) and self._usable(sandbox)
        ]

    def sandbox_images(self) -> dict[str, str]:
        self._call("sandbox_images", "")
        return {name: sandbox.spec.image if sandbox.spec else sandbox.image for name, sandbox in self.sandboxes.items()}

    def create_sandbox(self, spec: SandboxSpec, *, secret_values: Mapping[str, str] | None = None) -> SandboxInfo:
        self._call("create_sandbox", spec.name)
        values = checked_secret_values(spec.name, spec.network, secret_values or {})
        slug = slug_of_vm(spec.name) or slug_of_task(spec.name)
        if slug is None:
            raise ValueError(f"not a sandbox name of this tool: {spec.name!r}")
        image = self.images.get(spec.image)
        if image is None:
            raise BootFailed(
                f"cannot start {spec.name}: image {spec.image} does not exist",
                hint="Build it with `opencode-sandbox build`.",
            )
        for mount in spec.mounts:
            if mount.kind is MountKind.VOLUME and mount.source not in self.volumes:
                raise NotFound(f"volume {mount.source} does not exist", hint="Create it first.")
        existing = self.sandboxes.get(spec.name)
        if existing is not None:
            self._require_ours("container", spec.name, existing.labels)
            self._require_owner(existing)
            raise SandboxError(f"sandbox {spec.name} already exists", hint="Remove it first.")
        for mount in spec.mounts:
            if mount.kind is MountKind.BIND and not Path(mount.source).exists():
                raise BootFailed(
                    f"cannot start {spec.name}: bind source path does not exist: {mount.source}",
                    hint="Check the mounted paths.",
                )
        self._take_boot_failure(spec.name)
        labels = {**spec.labels, LABEL_MANAGED: "true", **self._owner_labels()}
        labels.setdefault(LABEL_SLUG, slug)
        files = {path: replace(node) for path, node in image.files.items()}
        sandbox = FakeSandbox(spec.name, labels, spec, files, secret_values=values)
        self._boot(sandbox)
        self.sandboxes[spec.name] = sandbox
        return self._info(sandbox)

    def start_sandbox(self, name: str, *, secret_values: Mapping[str, str] | None = None) -> None:
        self._call("start_sandbox", name)
        sandbox = self._owned(name)
        if sandbox.status is SandboxStatus.RUNNING:
            return
        if sandbox.spec is not None:
            sandbox.secret_values = checked_secret_values(name, sandbox.spec.network, secret_values or {},
                                                          action="start")
        self._take_boot_failure(name)
        self._boot(sandbox)

    def stop_sandbox(self, name: str, timeout_s: float = 10.0) -> None:
        self._call("stop_sandbox", name)
        self._halt(self._owned(name))

    def kill_sandbox(self, name: str) -> None:
        self._call("kill_sandbox", name)
        self._halt(self._owned(name))

    def remove_sandbox(self, name: str) -> None:
        self._call("remove_sandbox", name)
        sandbox = self._owned(name)
        self._halt(sandbox)
        del self.sandboxes[name]

    def refuse(self, name: str, refusal: Refusal) -> None:
        """Record a connection the sandbox's network policy refused, as a real runtime would."""
        sandbox = self._owned(name)
        assert sandbox.status is SandboxStatus.RUNNING, "only a running sandbox has network traffic"
        sandbox.refusals.append(refusal)

    def refusals(self, name: str) -> list[Refusal]:
        self._call("refusals", name)
        sandbox = self._owned(name)
        return list(sandbox.refusals) if sandbox.status is SandboxStatus.RUNNING else []

    def port_map(self, name: str) -> dict[int, int]:
        self._call("port_map", name)
        return {guest: int(listener.getsockname()[1]) for guest, listener in self._owned(name).listeners.items()}

    def host_port(self, name: str, guest_port: int) -> int:
        self._call("host_port", name)
        listener = self._owned(name).listeners.get(guest_port)
        if listener is None:
            raise NotFound(f"port {guest_port} of {name} is not published", hint="Start it.")
        return int(listener.getsockname()[1])

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
        self._call("exec", name)
        sandbox = self.sandboxes.get(name)
        if sandbox is None:
            raise NotFound(f"sandbox {name} does not exist", hint="Start it.")
        if sandbox.status is not SandboxStatus.RUNNING:
            raise SandboxError(f"sandbox {name} is not running", hint="Start it.")
        base_env = dict(sandbox.spec.env) if sandbox.spec else {}
        call = ExecCall(name, tuple(argv), user, workdir, {**base_env, **(env or {})}, stdin or b"")
        self.exec_calls.append(call)
        result = _Shell(self, sandbox, call).run_argv(list(argv), call.stdin.decode())
        if max(len(result.stdout.encode()), len(result.stderr.encode())) > output_limit:
            raise too_much_output(name, argv, output_limit)
        return result

    def prepare_command(
        self, name: str, argv: Sequence[str], *, user: str = "dev", workdir: str = "/workspace",
    ) -> PreparedCommand | None:
        self._call("prepare_command", name)
        sandbox = self.sandboxes.get(name)
        if sandbox is None or sandbox.status is not SandboxStatus.RUNNING:
            return None  # as the engine refuses an exec in a container missing or stopped
        return FakePreparedCommand(self, name, tuple(argv), user, workdir)

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
        self._call("attach", name)
        return self.exec(name, argv, user=user, workdir=workdir, env=env).exit_code

    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        self._call("create_volume", name)
        slug = slug_of_home_volume(name)
        if slug is None:
            raise ValueError(f"not a volume name of this tool: {name!r}")
        if self.get_volume(name) is not None:
            raise SandboxError(f"volume {name} already exists", hint="Remove it first.")
        all_labels = {**labels, LABEL_MANAGED: "true", **self._owner_labels()}
        all_labels.setdefault(LABEL_SLUG, slug)
        volume = FakeVolume(name, all_labels)
        self.volumes[name] = volume
        return self._volume_info(volume)

    def get_volume(self, name: str) -> VolumeInfo | None:
        self._call("get_volume", name)
        volume = self.volumes.get(name)
        if volume is None:
            return None
        self._require_ours("volume", name, volume.labels)
        self._require_volume_owner(volume)
        return self._volume_info(volume)

    def list_volumes(self) -> list[VolumeInfo]:
        self._call("list_volumes", "")
        return [
            self._volume_info(volume)
            for name, volume in sorted(self.volumes.items())
            if is_ours(name, volume.labels) and self._volume_usable(volume)
        ]

    def remove_volume(self, name: str) -> None:
        self._call("remove_volume", name)
        self._owned_volume(name)
        users = [
            sandbox.name
            for sandbox in self.sandboxes.values()
            if sandbox.spec and any(m.source == name for m in sandbox.spec.mounts)
        ]
        if users:
            raise SandboxError(
                f"cannot remove volume {name}: volume is in use - {users}",
                hint="Remove the sandbox that uses it first.",
            )
        del self.volumes[name]

    def fill_volume_from_image(self, volume: str, image: str, path: str = "/home/dev") -> None:
        self._call("fill_volume_from_image", volume)
        target = self._owned_volume(volume)
        source = self.images.get(image) or self.docker_images.get(image)
        if source is None:
            raise NotFound(f"image {image} does not exist", hint="Build it.")
        if len(target.files) > 1:
            return  # like Docker's copy-up, a volume with files is left as it is
        for file_path, node in source.files.items():
            relative = _relative(file_path, path)
            if relative is not None:
                target.files[relative] = replace(node)

    def copy_volume(self, source: str, target: str) -> None:
        self._call("copy_volume", source)
        origin = self._owned_volume(source)
        destination = self._owned_volume(target)
        for relative, node in origin.files.items():
            destination.files[relative] = replace(node)

    def _from_engine(self, docker_reference: str) -> None:
        """The engine's image under this reference, as a file tree on a runner-like image."""
        if self.image_engine is None:
            return
        document = self.image_engine.inspect_image(docker_reference)
        if document is None:
            return
        image = self.image_engine.images[document["Id"]]
        files = {**dev_home_files(), **{
            f"/{path.lstrip('/')}": FakeNode("file", "root", 0o644, data.decode(errors="replace"))
            for path, data in image.files.items()
        }}
        known = self.docker_images.get(docker_reference)
        if known is None or known.labels != image.labels or known.files != files or known.image_id != document["Id"]:
            self.add_docker_image(docker_reference, files, image.labels, str(document["Id"]))

    def loaded_image(self, docker_reference: str) -> ImageInfo | None:
        self._call("loaded_image", docker_reference)
        self._from_engine(docker_reference)
        wanted = self.docker_images.get(docker_reference)
        if wanted is None:
            raise NotFound(f"image {docker_reference} does not exist", hint="Build it.")
        present = self.images.get(docker_reference)
        return _image_info(present) if present is not None and present.digest == wanted.digest else None

    def load_image(self, docker_reference: str) -> ImageInfo:
        self._call("load_image", docker_reference)
        self._from_engine(docker_reference)
        image = self.docker_images.get(docker_reference)
        if image is None:
            raise NotFound(f"image {docker_reference} does not exist", hint="Build it.")
        self.images[docker_reference] = image
        return _image_info(image)

    def list_images(self) -> list[ImageInfo]:
        self._call("list_images", "")
        return [
            _image_info(image)
            for reference, image in sorted(self.images.items())
            if reference.startswith(IMAGE_REPOSITORY_PREFIX)
        ]

    def remove_image(self, reference: str) -> None:
        self._call("remove_image", reference)
        if not reference.startswith(IMAGE_REPOSITORY_PREFIX):
            raise NotOurs(f"image {reference} does not belong to opencode-sandbox", hint="-")
        if reference not in self.images:
            raise NotFound(f"image {reference} does not exist", hint="Build it.")
        del self.images[reference]
        if self.kind is RuntimeKind.DOCKER:
            self.docker_images.pop(reference, None)

    # internals
    def _call(self, operation: str, subject: str) -> None:
        if self.engine_down:
            raise RuntimeUnavailable("the engine is not answering", hint="Start the engine.")
        self.calls.append((operation, subject))

    def _require_ours(self, kind: str, name: str, labels: Mapping[str, str]) -> None:
        if not is_ours(name, labels):
            raise NotOurs(f"{kind} {name} was not created by opencode-sandbox", hint="-")

    def _owned(self, name: str) -> FakeSandbox:
        sandbox = self.sandboxes.get(name)
        if sandbox is None:
            raise NotFound(f"sandbox {name} does not exist", hint="List sandboxes.")
        self._require_ours("container", name, sandbox.labels)
        self._require_owner(sandbox)
        return sandbox

    def _owned_volume(self, name: str) -> FakeVolume:
        volume = self.volumes.get(name)
        if volume is None:
            raise NotFound(f"volume {name} does not exist", hint="List volumes.")
        self._require_ours("volume", name, volume.labels)
        self._require_volume_owner(volume)
        return volume

    # the host user (docker only: msb keeps each user's VMs apart itself)
    def _owner_labels(self) -> dict[str, str]:
        return self.owner.labels() if self.kind is RuntimeKind.DOCKER else {}

    def _usable(self, sandbox: FakeSandbox) -> bool:
        return self.kind is not RuntimeKind.DOCKER \
            or self.owner.of_container(sandbox.name, sandbox.labels, sandbox.mounted_volumes).usable

    def _require_owner(self, sandbox: FakeSandbox) -> None:
        if self.kind is RuntimeKind.DOCKER:
            self.owner.require_container("VM" if slug_of_vm(sandbox.name) else "task sandbox", sandbox.name,
                                         {"Config": {"Labels": sandbox.labels},
                                          "Mounts": [{"Type": "volume", "Name": name}
                                                     for name in sorted(sandbox.mounted_volumes)]})

    def _volume_usable(self, volume: FakeVolume) -> bool:
        return self.kind is not RuntimeKind.DOCKER or self.owner.of_volume(volume.name, volume.labels).usable

    def _require_volume_owner(self, volume: FakeVolume) -> None:
        if self.kind is RuntimeKind.DOCKER:
            self.owner.require("home volume", volume.name, self.owner.of_volume(volume.name, volume.labels),
                               volume.labels)

    def _take_boot_failure(self, name: str) -> None:
        if self.boot_failures:
            cause = self.boot_failures.pop(0)
            raise VmDidNotBoot(f"cannot start {name}: {cause}", hint="Check the image.", cause=cause)

    def _boot(self, sandbox: FakeSandbox) -> None:
        for port in sandbox.spec.published_ports if sandbox.spec else ():
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                listener.bind(("127.0.0.1", sandbox.spec.host_ports.get(port, 0)))
            except OSError as error:
                listener.close()
                self._close_ports(sandbox)
                raise BootFailed(f"cannot start {sandbox.name}: 127.0.0.1:{sandbox.spec.host_ports[port]}: "
                                 f"{error.strerror}", hint="Free the port.") from None
            listener.listen()
            sandbox.listeners[port] = listener
        sandbox.status = SandboxStatus.RUNNING
        sandbox.boots += 1
        sandbox.last_activity_at = datetime.now(UTC)

    def _halt(self, sandbox: FakeSandbox) -> None:
        if sandbox.status in _ACTIVE:
            self._close_ports(sandbox)
            sandbox.refusals.clear()
            sandbox.status = SandboxStatus.STOPPED
            sandbox.last_activity_at = datetime.now(UTC)

    def _close_ports(self, sandbox: FakeSandbox) -> None:
        for listener in sandbox.listeners.values():
            listener.close()
        sandbox.listeners.clear()

    def _info(self, sandbox: FakeSandbox) -> SandboxInfo:
        return SandboxInfo(
            name=sandbox.name,
            status=sandbox.status,
            image=sandbox.spec.image if sandbox.spec else "",
            created_at=sandbox.created_at,
            last_activity_at=sandbox.last_activity_at,
            labels=dict(sandbox.labels),
            owner_unlabelled=self.kind is RuntimeKind.DOCKER and LABEL_OWNER_UID not in sandbox.labels,
            # As the docker runtime does: a running VM's ports read with it.
            ports=({guest: int(listener.getsockname()[1]) for guest, listener in sandbox.listeners.items()}
                   if self.kind is RuntimeKind.DOCKER and sandbox.status is SandboxStatus.RUNNING else None),
        )

    def _volume_info(self, volume: FakeVolume) -> VolumeInfo:
        return VolumeInfo(volume.name, "docker", None, volume.created_at, dict(volume.labels))


def _image_info(image: FakeImage) -> ImageInfo:
    return ImageInfo(image.reference, image.digest, 1024, image.created_at, dict(image.labels))


def _relative(path: str, root: str) -> str | None:
    """`path` relative to `root` ("" for the root itself), None when outside it."""
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    if path == root:
        return ""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


class _Shell:
    """Runs argv or a tiny `sh -c` script against one fake sandbox."""

    def __init__(self, runtime: FakeRuntime, sandbox: FakeSandbox, call: ExecCall) -> None:
        self.runtime = runtime
        self.sandbox = sandbox
        self.call = call
        self.exited: int | None = None

    # files, resolved through the sandbox's mounts
    def _locate(self, path: str) -> tuple[Tree | Path, str]:
        absolute = posixpath.normpath(posixpath.join(self.call.workdir, path))
        mounts = self.sandbox.spec.mounts if self.sandbox.spec else ()
        for mount in sorted(mounts, key=lambda m: len(m.target), reverse=True):
            relative = _relative(absolute, mount.target)
            if relative is None:
                continue
            if mount.kind is MountKind.BIND:
                return Path(mount.source), relative
            return self.runtime.volumes[mount.source].files, relative
        return self.sandbox.files, absolute

    def _node(self, path: str, follow: bool = True) -> FakeNode | None:
        for _ in range(10):
            where, key = self._locate(path)
            if isinstance(where, Path):
                return _host_node(where / key if key else where)
            node = where.get(key)
            if node is None or node.kind != "link" or not follow:
                return node
            absolute = posixpath.normpath(posixpath.join(self.call.workdir, path))
            path = posixpath.join(posixpath.dirname(absolute), node.data)
        return None

    def _write(self, path: str, text: str, append: bool) -> str | None:
        where, key = self._locate(path)
        if isinstance(where, Path):
            target = where / key
            with target.open("a" if append else "w") as handle:
                handle.write(text)
            identity = self.sandbox.spec.dev_identity if self.sandbox.spec else None
            if identity is not None and self.call.user != "root":
                os.chown(target, *identity)
            return None
        existing = self._node(path)
        if existing is not None and existing.kind == "file":
            existing.data = existing.data + text if append else text
            return None
        where[key] = FakeNode("file", self.call.user, 0o644, text)
        return None

    # running
    def run_argv(self, argv: list[str], stdin: str) -> ExecResult:
        if not argv:
            return ExecResult(126, "", "exec: no command\n")
        handler = self.runtime.handlers.get(argv[0])
        if handler is not None:
            return handler(replace(self.call, argv=tuple(argv)))
        if argv[0] in ("sh", "bash") and len(argv) >= 3 and argv[1] == "-c":
            connect = TCP_CONNECT.fullmatch(argv[2])
            if connect is not None:
                return self.connect(connect["address"], int(connect["port"]))
            return self.run_script(argv[2], stdin)
        code, out, err = self.command(argv, stdin)
        if code == 127:
            message = f'exec: "{argv[0]}": executable file not found in $PATH\n'
            return ExecResult(127, "", message)
        return ExecResult(code, out, err)

    def connect(self, address: str, port: int) -> ExecResult:
        """bash's `/dev/tcp`, judged by the sandbox's network policy; nothing listens anywhere."""
        policy = self.sandbox.spec.network if self.sandbox.spec else None
        if policy is not None and not policy.judge(address, ipaddress.ip_address(address), port).allowed:
            self.sandbox.refusals.append(Refusal(address, "tcp", port, 1, datetime.now(UTC)))
        return ExecResult(1, "", f"bash: connect: Connection refused\nbash: /dev/tcp/{address}/{port}: "
                                 "Connection refused\n")

    def run_script(self, script: str, stdin: str) -> ExecResult:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
        out_all: list[str] = []
        err_all: list[str] = []
        code = 0
        words: list[str] = []
        pending = ""
        index = 0
        while index <= len(tokens):
            token = tokens[index] if index < len(tokens) else ";"
            if token in (";", "&&", "||"):
                run = pending == "" or (pending == "&&") == (code == 0)
                if words and run:
                    code = self._run_simple(words, stdin, out_all, err_all)
                    if self.exited is not None:
                        break
                words, pending = [], token if token != ";" else ""
            else:
                words.append(token)
            index += 1
        return ExecResult(code, "".join(out_all), "".join(err_all))

    def _run_simple(self, words: list[str], stdin: str, out: list[str], err: list[str]) -> int:
        argv: list[str] = []
        redirect: tuple[str, str] | None = None
        to_stderr = False
        index = 0
        while index < len(words):
            word = words[index]
            if word in (">", ">>") and index + 1 < len(words):
                redirect = (word, words[index + 1])
                index += 2
                continue
            if word == ">&" and index + 1 < len(words) and words[index + 1] == "2":
                to_stderr = True
                index += 2
                continue
            if word == "<" and index + 1 < len(words):
                node = self._node(words[index + 1])
                stdin = node.data if node and node.kind == "file" else ""
                index += 2
                continue
            argv.append(word)
            index += 1
        if argv and argv[0] == "exit":
            self.exited = int(argv[1]) if len(argv) > 1 else 0
            return self.exited
        code, text, errors = self.command(argv, stdin)
        if code == 127:
            errors = f"sh: 1: {argv[0]}: not found\n"
        err.append(errors)
        if redirect is not None:
            self._write(redirect[1], text, append=redirect[0] == ">>")
        elif to_stderr:
            err.append(text)
        else:
            out.append(text)
        return code

    def command(self, argv: list[str], stdin: str) -> tuple[int, str, str]:
        program, args = argv[0], argv[1:]
        user = self.call.user
        if program == "true" or program == "sync" or program == "sleep":
            return 0, "", ""
        if program == "false":
            return 1, "", ""
        if program == "echo":
            return 0, " ".join(args) + "\n", ""
        if program == "pwd":
            return 0, self.call.workdir + "\n", ""
        if program == "id":
            if "-u" in args and "-n" not in args and "-un" not in args:
                return 0, f"{USERS.get(user, 1000)}\n", ""
            return 0, user + "\n", ""
        if program == "printenv":
            if not args:
                return 0, "".join(f"{k}={v}\n" for k, v in self.call.env.items()), ""
            values = [self.call.env[name] for name in args if name in self.call.env]
            return (0 if len(values) == len(args) else 1), "".join(v + "\n" for v in values), ""
        if program == "cat":
            if not args:
                return 0, stdin, ""
            texts = []
            for path in args:
                node = self._node(path)
                if node is None or node.kind != "file":
                    return 1, "".join(texts), f"cat: {path}: No such file or directory\n"
                texts.append(node.data)
            return 0, "".join(texts), ""
        if program == "readlink":
            node = self._node(args[-1], follow=False)
            if node is None or node.kind != "link":
                return 1, "", ""
            return 0, node.data + "\n", ""
        if program == "umask" and len(args) == 1:
            return 0, "", ""  # the process's own umask (022 in the tests) applies to host files
        if program == "stat" and len(args) >= 3 and args[0] == "-c":
            lines = []
            for path in args[2:]:
                node = self._node(path, follow=False)
                if node is None:
                    return 1, "".join(lines), f"stat: cannot statx '{path}': No such file or directory\n"
                text = (
                    args[1]
                    .replace("%U", node.owner)
                    .replace("%u", str(USERS.get(node.owner, 1000)))
                    .replace("%a", f"{node.mode & 0o7777:o}")
                    .replace("%n", path)
                )
                lines.append(text + "\n")
            return 0, "".join(lines), ""
        if program == "chmod" and len(args) == 2:
            node = self._node(args[1])
            if node is None:
                return 1, "", f"chmod: cannot access '{args[1]}': No such file or directory\n"
            mode = node.mode | 0o111 if args[0] == "+x" else int(args[0], 8)
            where, key = self._locate(args[1])
            if isinstance(where, Path):
                (where / key).chmod(mode)
            else:
                node.mode = mode
            return 0, "", ""
        if program == "mkdir":
            for path in (a for a in args if not a.startswith("-")):
                where, key = self._locate(path)
                if isinstance(where, Path):
                    (where / key).mkdir(parents=True, exist_ok=True)
                    identity = self.sandbox.spec.dev_identity if self.sandbox.spec else None
                    if identity is not None and user != "root":
                        os.chown(where / key, *identity)
                else:
                    parts = key.strip("/").split("/")
                    for depth in range(1, len(parts) + 1):  # `-p`: the parents too
                        prefix = "/" if key.startswith("/") else ""
                        where.setdefault(prefix + "/".join(parts[:depth]), FakeNode("dir", user, 0o755))
            return 0, "", ""
        if program == "ln" and len(args) == 3 and args[0] == "-s":
            where, key = self._locate(args[2])
            if isinstance(where, Path):
                (where / key).symlink_to(args[1])
            else:
                where[key] = FakeNode("link", user, 0o777, args[1])
            return 0, "", ""
        if program == "rm":
            for path in (a for a in args if not a.startswith("-")):
                where, key = self._locate(path)
                if isinstance(where, Path):
                    (where / key).unlink(missing_ok=True)
                else:
                    where.pop(key, None)
            return 0, "", ""
        return 127, "", ""


def _host_node(path: Path) -> FakeNode | None:
    if path.is_symlink():
        return FakeNode("link", "root", 0o777, str(path.readlink()))
    if not path.exists():
        return None
    status = path.stat()
    owner = next((name for name, uid in USERS.items() if uid == status.st_uid), str(status.st_uid))
    if path.is_dir():
        return FakeNode("dir", owner, status.st_mode & 0o7777)
    return FakeNode("file", owner, status.st_mode & 0o7777, path.read_text(errors="replace"))
