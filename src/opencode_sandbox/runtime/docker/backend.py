"""The docker runtime: each project VM is a long-lived container, driven through the `docker` CLI.

It shares the host's kernel, so it is opt-in only. The CLI (not an SDK) keeps imports light,
honours the user's Docker contexts and `DOCKER_HOST`, and streams interactive sessions.
On a plain local engine, inspections, execs without a TTY and starts skip the CLI's own
process cost and talk to the engine's socket directly (`engine.socket_client`, `docker_exec`).

- The container runs a root keep-alive (`sleep infinity` under `--init`), whatever the
  image's entrypoint; work happens through execs.
- Images labelled `org.opencode-sandbox.dind=true` run `--privileged`, because a Docker
  engine inside the sandbox needs it. That gives the sandbox full access to the host's
  devices: use such images only for trusted projects.
- Ports are published on 127.0.0.1 only, on a free host port chosen by Docker.
- A container that exited cleanly or by `docker stop`/`docker kill` is `stopped`; one that
  exited otherwise, was OOM-killed or is dead is `crashed`.
- Whatever it makes for a project carries the owner label of the host user it runs for
  (`docker_owner`); another user's VM, volume or network piece is never listed, and every other
  call on one raises `OwnedByAnother`.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.bounded_output import OutputOverLimit
from opencode_sandbox.core.naming import (
    BASE_IMAGES,
    IMAGE_REPOSITORY_PREFIX,
    LABEL_MANAGED,
    LABEL_OWNER_UID,
    is_ours,
    slug_of_task,
    slug_of_vm,
    slug_of_volume,
)
from opencode_sandbox.core.secret_substitution import placeholder
from opencode_sandbox.engine.command import (
    ENGINE_HINT,
    DockerCli,
    DockerFailed,
    first_line,
    raise_if_engine_unavailable,
)
from opencode_sandbox.engine.docker import DockerImageEngine
from opencode_sandbox.engine.socket_client import ApiUnavailable, DockerApi
from opencode_sandbox.errors import BootFailed, NotFound, NotOurs, RuntimeUnavailable, SandboxError
from opencode_sandbox.runtime.docker import execution as docker_exec
from opencode_sandbox.runtime.docker import netfilter as docker_netfilter
from opencode_sandbox.runtime.docker import network_holder as docker_holder
from opencode_sandbox.runtime.docker import policy_marks as docker_policy_marks
from opencode_sandbox.runtime.docker.args import (
    DIND_LABEL,
    exec_args,
    label_args,
    run_args,
    sandbox_labels,
    sized_from_the_start,
)
from opencode_sandbox.runtime.docker.description import DESCRIPTION, DockerDescription
from opencode_sandbox.runtime.docker.identity import (
    DEV_HOME,
    WORK_TREE,
    adopt,
    dev_ids,
    ensure_mapped_mounts,
    forget_mapped_mounts,
    volume_at,
    with_dev_home,
    with_mapped_mounts,
)
from opencode_sandbox.runtime.docker.nft_ruleset import docker_refusal, needs_proxy
from opencode_sandbox.runtime.docker.owner import DockerOwner, mounted_volumes
from opencode_sandbox.runtime.docker.parse import (
    container_name,
    container_status,
    image_info,
    labels_of,
    published_host_port,
    published_port_map,
    sandbox_info,
    volume_info,
)
from opencode_sandbox.runtime.env_passing import child_environment
from opencode_sandbox.runtime.host_addresses import host_public_addresses
from opencode_sandbox.runtime.secret_values import checked_secret_values
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

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.core.prune_plan import ArtifactKind, PolicyPieceFact
    from opencode_sandbox.runtime.base import PreparedCommand
    from opencode_sandbox.runtime.docker import proxy as docker_proxy

FALLBACK_HELPER_IMAGE = "debian:trixie-slim"
_RUNNING_STATES = (SandboxStatus.RUNNING, SandboxStatus.STARTING, SandboxStatus.PAUSED)
_DAEMON_ERROR_PREFIXES = ("error response from daemon:", "error: no such container")


class DockerRuntime:
    """A `Runtime` whose sandboxes are Docker containers and whose volumes are named volumes."""

    kind = RuntimeKind.DOCKER

    @property
    def description(self) -> DockerDescription:
        return DESCRIPTION

    def __init__(self, cli: DockerCli | None = None, helper_image: str | None = None,
                 owner: DockerOwner | None = None) -> None:
        self.cli = cli or DockerCli()
        self.owner = owner or DockerOwner()
        """The host user this runtime acts for: what it makes carries their uid."""
        self.images = DockerImageEngine(self.cli)
        """The engine's images, through the same command and socket as the containers."""
        self.helper_image = helper_image
        """An image with `cp` for volume copies; by default this tool's base image or Debian."""

    def check_available(self) -> None:
        if not self.cli.engine_answers_ping():
            self.cli.run(["version", "--format", "{{.Server.Version}}"])

    # sandboxes
    def get_sandbox(self, name: str) -> SandboxInfo | None:
        """The sandbox as the engine describes it; a running VM's published ports come with it, read from
        the same documents, so a start that connects to it need not ask for them again."""
        document = self._container(name)
        if document is None:
            return None
        info = _with_owner(sandbox_info(document))
        if info.status is not SandboxStatus.RUNNING:
            return info
        slug = slug_of_vm(name)
        in_holder = docker_holder.holder_of(document) is not None and slug is not None
        holder_document = docker_holder.find(self.cli, slug, self.owner) if in_holder and slug is not None else None
        info = info._replace(ports=published_port_map((holder_document or {}) if in_holder else document))
        if docker_netfilter.LABEL_NETWORK_POLICY in info.labels and not self._policy_in_place(document,
                                                                                            holder_document):
            info = info._replace(repair="it was started without its network policy (outside opencode-sandbox)")
        elif slug is not None and _proxy_policy(document) is not None:
            from opencode_sandbox.runtime.docker import proxy as docker_proxy  # only a VM with a proxy has one

            if not docker_proxy.proxy_alive(self.cli, slug, self.owner):
                info = info._replace(repair=f"its egress proxy {docker_proxy.proxy_name(slug)} is not running")
        return info

    def _policy_in_place(self, document: dict[str, Any], holder_document: dict[str, Any] | None) -> bool:
        """Whether the running VM sits in a namespace holding the rules of its policy (`holder_document`:
        its network holder as just read, None when it has none)."""
        name = container_name(document)
        if docker_holder.holder_of(document) is None or slug_of_vm(name) is None:
            # a VM of an earlier version, ruled in its own namespace
            return docker_policy_marks.installed_for(name, _started_at(document))
        return holder_document is not None and docker_holder.rules_in_place(holder_document) \
            and docker_holder.joined_current_namespace(document, holder_document)

    def list_sandboxes(self) -> list[SandboxInfo]:
        """This tool's sandboxes of this host user; another user's are left out."""
        ids = self.cli.lines(["ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={LABEL_MANAGED}=true"])
        infos = [_with_owner(sandbox_info(document)) for document in self.cli.inspect("container", ids)
                 if is_ours(container_name(document), labels_of(document))
                 and self.owner.of_container(container_name(document), labels_of(document),
                                             mounted_volumes(document)).usable]
        return sorted(infos, key=lambda i: i.name)

    def sandbox_images(self) -> dict[str, str]:
        listed = self.cli.lines(["ps", "--all", "--no-trunc", "--format", "{{.Names}}\t{{.Image}}"])
        return dict(line.split("\t", 1) for line in listed if "\t" in line)

    def create_sandbox(self, spec: SandboxSpec, *, secret_values: Mapping[str, str] | None = None) -> SandboxInfo:
        """With secrets, the VM's variables hold their placeholders and the egress proxy is given
        `secret_values`, which it puts into the requests to each secret's hosts."""
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        slug = slug_of_vm(spec.name) or slug_of_task(spec.name)
        if slug is None:
            raise ValueError(f"not a sandbox name of this tool: {spec.name!r}")
        if spec.network is not None and slug_of_vm(spec.name) is None:
            raise ValueError(f"only a project VM has a network policy, not {spec.name!r}")
        refusal = docker_refusal(spec.network) if spec.network is not None else None
        if refusal is not None:  # before anything is looked up
            raise refusal
        values = checked_secret_values(spec.name, spec.network, secret_values or {})
        image = self._image_document(spec.image)
        if image is None:
            raise BootFailed(
                f"cannot start {spec.name}: image {spec.image} does not exist",
                hint="Build it with `opencode-sandbox build`.",
            )
        self._require_volumes([m.source for m in spec.mounts if m.kind is MountKind.VOLUME])
        dind_image = labels_of(image).get(DIND_LABEL) == "true"
        privileged = dind_image and spec.privileged  # a task's shell (volume edit) needs no Docker inside
        if dind_image and not spec.privileged and slug_of_vm(spec.name) is not None:
            raise BootFailed(
                f"cannot start {spec.name}: image {spec.image} asks for a privileged VM (Docker-in-Docker), "
                "which your configuration does not allow",
                hint="A privileged VM is host root for the agent. Only if you accept that, set `dind: true` in your "
                     "own configuration (~/.config/opencode-sandbox/config.yaml); otherwise remove the image's "
                     "org.opencode-sandbox.dind label.",
            )
        seccomp = None if privileged else _seccomp_profile(spec.name)  # before anything is made
        labels = {**sandbox_labels(spec.labels, slug), **self.owner.labels()}
        if spec.dev_identity is not None:
            spec, mapped = with_mapped_mounts(spec, spec.dev_identity[0])
            labels.update(mapped)
            ensure_mapped_mounts(spec.name, labels)
        network = None
        proxy: docker_proxy.ProxyEndpoint | None = None
        if spec.network is not None:
            refusal = docker_refusal(spec.network, privileged)
            if refusal is not None:
                raise refusal
            labels[docker_netfilter.LABEL_NETWORK_POLICY] = docker_netfilter.policy_label(spec.network)
            network = docker_netfilter.ensure_network(self.cli, slug, self.owner)
            if needs_proxy(spec.network):
                image_reference = docker_proxy.ensure_proxy_image(self.images, spec.ca_certificates)
                labels[docker_proxy.LABEL_PROXY_IMAGE] = image_reference
                proxy = docker_proxy.ensure_proxy(self.cli, self.images, slug, image_reference, spec.network,
                                                  host_public_addresses(), values, self.owner)
                placeholders = {secret.name: placeholder(secret.name) for secret in spec.network.secrets}
                spec = spec._replace(env={**spec.env, **placeholders, **docker_proxy.proxy_environment()})
        holder: str | None = None
        if network is not None:
            try:
                holder = self._new_holder(spec, slug, network, proxy)
            except BaseException:
                self._discard(spec.name)
                raise
            args = run_args(spec._replace(published_ports=()), labels, privileged,
                            docker_holder.NETWORK_MODE_PREFIX + holder, seccomp=seccomp)
        else:
            args = run_args(spec, labels, privileged, seccomp=seccomp)
        args.insert(1, "--pull=never")
        try:
            self.cli.run(args, environment=child_environment(spec.env))
        except DockerFailed as failure:
            if "already in use" in failure.stderr:
                self._refuse_existing(spec.name)
            self._discard(spec.name)
            message = _docker_message(failure)
            raise BootFailed(
                f"cannot start {spec.name}: {message}",
                hint=_SECCOMP_HINT if "seccomp" in message.lower() else
                "Check the image and the mounted paths, then run again.",
            ) from None
        info = self.get_sandbox(spec.name)
        if info is None or info.status is not SandboxStatus.RUNNING:
            self._discard(spec.name)
            state = info.status.value if info else "gone"
            raise BootFailed(
                f"cannot start {spec.name}: it stopped right after starting ({state})",
                hint="Check that the image runs `sleep` (coreutils) and try again.",
            )
        if proxy is not None and holder is not None:
            try:
                docker_proxy.trust_proxy(self.cli, spec.name, proxy, holder)
            except BaseException:
                self._discard(spec.name)
                raise
        if spec.dev_identity is not None:
            try:
                adopt(self.cli, spec.name, spec.image, volume_at(spec.mounts, DEV_HOME), *dev_ids(*spec.dev_identity),
                      work_volume=volume_at(spec.mounts, WORK_TREE))
            except BaseException:
                self._discard(spec.name)
                raise
        return info

    def start_sandbox(self, name: str, *, secret_values: Mapping[str, str] | None = None) -> None:
        """Start the VM in its network holder's namespace, where the rules of its policy stay
        between starts: they are installed only when the holder itself started again (or when
        no record says they were). The egress proxy, when the policy needs one, is started (or
        created again) first, and given `secret_values` again: it holds them only in memory, so
        a restarted proxy has none. A running VM left in an old namespace of its holder is
        started again; one whose rules cannot be installed is not started."""
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        document = self._owned_container(name)
        policy = docker_netfilter.policy_of_label(labels_of(document).get(docker_netfilter.LABEL_NETWORK_POLICY))
        values = checked_secret_values(name, policy, secret_values or {}, action="start")
        ensure_mapped_mounts(name, labels_of(document))
        slug = slug_of_vm(name)
        holder = docker_holder.holder_of(document)
        if policy is None or slug is None:
            self._start_container(name)
            return
        if holder is None:
            raise BootFailed(f"{name} was made by an earlier version of opencode-sandbox, with a network of its own",
                             hint="Remove it with `opencode-sandbox stop -f` (the home volume stays), then run "
                                  "again.")
        proxy = None
        if needs_proxy(policy):
            image_reference = labels_of(document).get(docker_proxy.LABEL_PROXY_IMAGE, "")
            proxy = docker_proxy.ensure_proxy(self.cli, self.images, slug, image_reference, policy,
                                              host_public_addresses(), values, self.owner)
        holder_document = docker_holder.running(self.cli, slug, self.owner)
        if not docker_holder.is_holder_of(document, holder_document):
            raise BootFailed(f"{name} joins a network holder that is gone",
                             hint="Remove it with `opencode-sandbox stop -f` (the home volume stays), then run again.")
        if not docker_holder.rules_in_place(holder_document):
            docker_netfilter.install_in_holder(self.cli, holder, policy, proxy.address if proxy is not None else None,
                                               docker_netfilter.network_name(slug))
            docker_holder.mark_rules_installed(holder_document)
        running = container_status(document.get("State") or {}) in _RUNNING_STATES
        if running and not docker_holder.joined_current_namespace(document, holder_document):
            self.cli.run_raw(["kill", name])
        self._start_container(name)
        if proxy is not None:
            try:
                docker_proxy.trust_proxy(self.cli, name, proxy, holder)
            except BaseException:
                self.cli.run_raw(["kill", name])
                raise

    def _new_holder(self, spec: SandboxSpec, slug: str, network: str,
                    proxy: docker_proxy.ProxyEndpoint | None) -> str:
        """The VM's network holder, made afresh with the VM's published ports, and its rules."""
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        assert spec.network is not None
        hosts = {docker_proxy.PROXY_HOST: str(proxy.address)} if proxy is not None else {}
        image = docker_netfilter.ensure_netfilter_image(self.cli, self.images)
        holder = docker_holder.create(self.cli, slug, docker_holder.run_args(
            slug, image, network, spec.published_ports, spec.host_ports, hosts, self.owner.labels()), self.owner)
        docker_netfilter.install_in_holder(self.cli, holder, spec.network,
                                           proxy.address if proxy is not None else None, network)
        holder_document = docker_holder.find(self.cli, slug, self.owner)
        if holder_document is None:
            raise BootFailed(f"the network holder {holder} disappeared while it was made", hint="Run again.")
        docker_holder.mark_rules_installed(holder_document)
        return holder

    def _start_container(self, name: str) -> None:
        api = self.cli.socket_api()
        if api is not None:
            try:
                docker_exec.start_container(api, name)
                return
            except ApiUnavailable:
                self.cli.give_up_socket()
            except docker_exec.EngineRefused as refused:
                raise _start_failed(name, first_line(refused.message)) from None
        try:
            self.cli.run(["start", name])
        except DockerFailed as failure:
            raise _start_failed(name, _docker_message(failure)) from None

    def stop_sandbox(self, name: str, timeout_s: float = 10.0) -> None:
        status = container_status(self._owned_container(name).get("State") or {})
        if status not in _RUNNING_STATES:
            self._stop_proxy(name, kill=False)  # a VM stopped outside the tool may have left it running
            return
        # No guest kernel sits between the container and the host's page cache: whatever
        # its processes wrote is already safe, and `docker stop` lets them flush their own
        # buffers on SIGTERM before the deadline.
        seconds = max(0, math.ceil(timeout_s))
        self._tolerate_not_running(["stop", "--time", str(seconds), name], seconds + 60.0)
        self._stop_proxy(name, kill=False)

    def kill_sandbox(self, name: str) -> None:
        status = container_status(self._owned_container(name).get("State") or {})
        if status in _RUNNING_STATES:
            self._tolerate_not_running(["kill", name], None)
        self._stop_proxy(name, kill=True)

    def _stop_proxy(self, name: str, kill: bool) -> None:
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        slug = slug_of_vm(name)
        if slug is not None:
            docker_proxy.stop_proxy(self.cli, slug, self.owner, kill=kill)

    def remove_sandbox(self, name: str) -> None:
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        status = container_status(self._owned_container(name).get("State") or {})
        if status in _RUNNING_STATES:
            self.stop_sandbox(name)
        # --volumes takes only anonymous volumes declared by the image; named ones stay.
        self.cli.run(["rm", "--force", "--volumes", name])
        forget_mapped_mounts(name)
        docker_policy_marks.forget(name)
        slug = slug_of_vm(name)
        if slug is not None:
            docker_proxy.remove_proxy(self.cli, slug, self.owner)
            docker_holder.remove(self.cli, slug, self.owner)
            docker_netfilter.remove_network(self.cli, slug, self.owner)

    def list_policy_pieces(self) -> list[PolicyPieceFact]:
        from opencode_sandbox.runtime.docker import policy_pieces as docker_policy_pieces

        return docker_policy_pieces.list_policy_pieces(self.cli, self.owner)

    def remove_policy_piece(self, kind: ArtifactKind, name: str) -> None:
        from opencode_sandbox.runtime.docker import policy_pieces as docker_policy_pieces

        docker_policy_pieces.remove_policy_piece(self.cli, kind, name, self.owner)

    def refusals(self, name: str) -> list[Refusal]:
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        document = self._owned_container(name)
        labels = labels_of(document)
        if docker_netfilter.policy_of_label(labels.get(docker_netfilter.LABEL_NETWORK_POLICY)) is None \
                or not (document.get("State") or {}).get("Running"):
            return []
        found = docker_netfilter.refusals(self.cli, self.images, docker_holder.holder_of(document) or name)
        slug = slug_of_vm(name)
        if _proxy_policy(document) is not None and slug is not None:
            found += docker_proxy.denials(self.cli, slug, self.owner)
        return found

    def port_map(self, name: str) -> dict[int, int]:
        """The VM's published ports; those of a VM in its network holder stay bound while it is stopped."""
        return published_port_map(self._ports_document(name))

    def host_port(self, name: str, guest_port: int) -> int:
        port = published_host_port(self._ports_document(name), guest_port)
        if port is None:
            raise NotFound(
                f"port {guest_port} of {name} is not published",
                hint="Start the sandbox with `opencode-sandbox run`.",
            )
        return port

    # processes
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
        env = with_dev_home(user, env)
        api = self.cli.socket_api()
        if api is not None:
            request = docker_exec.ExecRequest(name, argv, user, workdir, env, stdin=stdin is not None)
            try:
                return _exec_through_socket(api, request, stdin, timeout_s, output_limit)
            except ApiUnavailable:
                self.cli.give_up_socket()
        args = exec_args(
            name,
            argv,
            user=user,
            workdir=workdir,
            env=env,
            interactive=stdin is not None,
            tty=False,
        )
        import subprocess  # the engine's socket serves execs; the command is the fallback

        try:
            completed = self.cli.run_raw(args, stdin=stdin, timeout_s=timeout_s, environment=child_environment(env),
                                         output_limit=output_limit)
        except subprocess.TimeoutExpired:
            raise _timed_out(name, argv, timeout_s) from None
        except OutputOverLimit:
            raise too_much_output(name, argv, output_limit) from None
        stdout = completed.stdout.decode(errors="replace")
        stderr = completed.stderr.decode(errors="replace")
        if completed.returncode != 0 and not stdout:
            self._raise_exec_failure(name, stderr)
        return ExecResult(exit_code=completed.returncode, stdout=stdout, stderr=stderr)

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
        env = with_dev_home(user, env)
        # With a TTY the CLI's raw mode, resizing and signal handling are worth its cost.
        api = None if tty else self.cli.socket_api()
        if api is not None:
            # Without -i, as `docker exec` would, when there is no input to forward.
            request = docker_exec.ExecRequest(name, argv, user, workdir, env, stdin=not docker_exec.stdin_is_null())
            try:
                with _socket_exec_failures(request, None):
                    return docker_exec.attach(api, request)
            except ApiUnavailable:
                self.cli.give_up_socket()
        import subprocess

        from opencode_sandbox.runtime.screen_relay import attach_relayed, relay_wanted, user_terminal_size

        if tty:
            argv = sized_from_the_start(argv, user_terminal_size())
        args = exec_args(name, argv, user=user, workdir=workdir, env=env, interactive=True, tty=tty)

        if relay_wanted(tty):  # the VM's screen is filtered on its way to the user's terminal
            with docker_exec.sigint_handled_by(signal.SIG_IGN):
                return attach_relayed(self.cli.command(args), child_environment(env), clipboard)
        process = subprocess.Popen(self.cli.command(args), env=child_environment(env))
        with docker_exec.sigint_handled_by(signal.SIG_IGN):  # Ctrl-C belongs to the attached program
            return process.wait()

    def prepare_command(
        self, name: str, argv: Sequence[str], *, user: str = "dev", workdir: str = "/workspace",
    ) -> PreparedCommand | None:
        from opencode_sandbox.runtime.docker.gated_exec import GatedExec, can_gate

        api = self.cli.socket_api()
        if api is None or not can_gate(argv):
            return None  # the `docker` command makes the process as it runs it; a word the gate cannot read

        request = docker_exec.ExecRequest(name, argv, user, workdir, with_dev_home(user, None))
        try:
            return GatedExec(api, request, lambda: self.attach(name, argv, user=user, workdir=workdir, tty=False),
                             lambda: _socket_exec_failures(request, None))
        except (ApiUnavailable, docker_exec.EngineRefused, docker_exec.EngineLost):
            return None  # the attach meets the same trouble and says what it is

    # volumes
    def create_volume(self, name: str, labels: Mapping[str, str]) -> VolumeInfo:
        slug = slug_of_volume(name)
        if slug is None:
            raise ValueError(f"not a volume name of this tool: {name!r}")
        if self.get_volume(name) is not None:
            raise SandboxError(f"volume {name} already exists", hint="Use it, or remove it first.")
        self.cli.run(["volume", "create", *label_args({**sandbox_labels(labels, slug), **self.owner.labels()}), name])
        info = self.get_volume(name)
        if info is None:
            raise NotFound(f"volume {name} vanished right after its creation", hint=_RETRY_HINT)
        return info

    def get_volume(self, name: str) -> VolumeInfo | None:
        documents = self.cli.inspect("volume", [name])
        if not documents:
            return None
        info = volume_info(documents[0])
        if info.name != name:
            return None
        if not is_ours(info.name, info.labels):
            raise _not_ours("volume", name)
        self.owner.require("home volume", name, self.owner.of_volume(name, info.labels), info.labels)
        return info

    def list_volumes(self) -> list[VolumeInfo]:
        """This tool's home volumes of this host user; another user's are left out."""
        names = self.cli.lines(["volume", "ls", "--quiet", "--filter", f"label={LABEL_MANAGED}=true"])
        infos = [volume_info(document) for document in self.cli.inspect("volume", names)]
        return sorted((info for info in infos if is_ours(info.name, info.labels)
                       and self.owner.of_volume(info.name, info.labels).usable), key=lambda i: i.name)

    def remove_volume(self, name: str) -> None:
        self._owned_volume(name)
        try:
            self.cli.run(["volume", "rm", name])
        except DockerFailed as failure:
            if failure.is_missing:
                raise _volume_not_found(name) from None
            raise SandboxError(
                f"cannot remove volume {name}: {_docker_message(failure)}",
                hint="Remove the sandbox that uses it first (`opencode-sandbox stop -f`).",
            ) from None

    def fill_volume_from_image(self, volume: str, image: str, path: str = "/home/dev") -> None:
        """Docker's own copy-up: mounting an empty named volume over an image folder copies it.

        `run --rm` rather than `create` and `rm`: the engine removes the helper even when
        this process dies half-way, so no unnamed container is ever left behind.
        """
        self._owned_volume(volume)
        if self._image_document(image) is None:
            raise _image_not_found(image)
        mount = f"type=volume,source={volume},target={path}"
        self.cli.run(
            [
                "run",
                "--rm",
                "--pull=never",
                "--network",
                "none",
                "--label",
                f"{LABEL_MANAGED}=helper",
                "--entrypoint",
                "true",
                "--mount",
                mount,
                image,
            ]
        )

    def copy_volume(self, source: str, target: str) -> None:
        self._owned_volume(source)
        self._owned_volume(target)
        self.cli.run(
            [
                "run",
                "--rm",
                "--pull=never",
                "--user",
                "root",
                "--network",
                "none",
                "--label",
                f"{LABEL_MANAGED}=helper",
                "--mount",
                f"type=volume,source={source},target=/from,readonly",
                "--mount",
                f"type=volume,source={target},target=/to,volume-nocopy",
                "--entrypoint",
                "cp",
                self._copy_image(),
                "-a",
                "/from/.",
                "/to/",
            ]
        )

    # images
    def loaded_image(self, docker_reference: str) -> ImageInfo:
        """The Docker engine runs its own images: each one is loaded as soon as it is built."""
        return self.load_image(docker_reference)

    def load_image(self, docker_reference: str) -> ImageInfo:
        """The Docker engine runs its own images: nothing to load, only to describe."""
        document = self._image_document(docker_reference)
        if document is None:
            raise _image_not_found(docker_reference)
        return image_info(document, docker_reference)

    def list_images(self) -> list[ImageInfo]:
        references = self.cli.lines(
            [
                "image",
                "ls",
                "--filter",
                f"reference={IMAGE_REPOSITORY_PREFIX}*",
                "--format",
                "{{.Repository}}:{{.Tag}}",
            ]
        )
        wanted = [ref for ref in dict.fromkeys(references) if _is_tool_reference(ref)]
        infos: dict[str, ImageInfo] = {}
        for document in self.images.inspect_images(wanted).values():
            for tag in document.get("RepoTags") or []:
                if tag in wanted:
                    infos[tag] = image_info(document, tag)
        return [infos[ref] for ref in sorted(infos)]

    def remove_image(self, reference: str) -> None:
        if not _is_tool_reference(reference):
            raise NotOurs(
                f"image {reference} does not belong to opencode-sandbox",
                hint="Remove it with `docker image rm` if you no longer need it.",
            )
        try:
            self.images.remove_image(reference)
        except NotFound:
            raise _image_not_found(reference) from None

    # helpers
    def _container(self, name: str) -> dict[str, Any] | None:
        documents = self.cli.inspect("container", [name])
        if not documents or container_name(documents[0]) != name:
            return None
        document = documents[0]
        if not is_ours(name, labels_of(document)):
            raise _not_ours("container", name)
        self.owner.require_container("VM" if slug_of_vm(name) else "task sandbox", name, document)
        return document

    def _owned_container(self, name: str) -> dict[str, Any]:
        document = self._container(name)
        if document is None:
            raise NotFound(
                f"sandbox {name} does not exist",
                hint="List sandboxes with `opencode-sandbox list`.",
            )
        return document

    def _ports_document(self, name: str) -> dict[str, Any]:
        """The container that publishes the VM's ports: its network holder, when it has one."""
        document = self._owned_container(name)
        slug = slug_of_vm(name)
        if docker_holder.holder_of(document) is None or slug is None:
            return document
        return docker_holder.find(self.cli, slug, self.owner) or {}

    def _owned_volume(self, name: str) -> VolumeInfo:
        info = self.get_volume(name)
        if info is None:
            raise _volume_not_found(name)
        return info

    def _image_document(self, reference: str) -> dict[str, Any] | None:
        return self.images.inspect_image(reference)

    def _require_volumes(self, names: list[str]) -> None:
        if not names:
            return
        found = {str(document.get("Name")) for document in self.cli.inspect("volume", names)}
        for name in names:
            if name not in found:
                raise _volume_not_found(name)

    def _refuse_existing(self, name: str) -> None:
        self._container(name)  # raises NotOurs for a foreign container
        raise SandboxError(
            f"sandbox {name} already exists",
            hint="Use it, or remove it first with `opencode-sandbox stop -f`.",
        )

    def _discard(self, name: str) -> None:
        """Remove what a failed create left, whatever state it is in."""
        from opencode_sandbox.runtime.docker import proxy as docker_proxy

        self.cli.run_raw(["rm", "--force", "--volumes", name])
        forget_mapped_mounts(name)
        docker_policy_marks.forget(name)
        slug = slug_of_vm(name)
        if slug is not None:
            docker_proxy.remove_proxy(self.cli, slug, self.owner)
            docker_holder.remove(self.cli, slug, self.owner)
            docker_netfilter.remove_network(self.cli, slug, self.owner)

    def _tolerate_not_running(self, args: list[str], timeout_s: float | None) -> None:
        try:
            self.cli.run(args, timeout_s=timeout_s)
        except DockerFailed as failure:
            if "is not running" not in failure.stderr:
                raise

    def _raise_exec_failure(self, name: str, stderr: str) -> None:
        """Tell docker's own refusals apart from the command's ordinary failures."""
        raise_if_engine_unavailable(stderr)
        line = first_line(stderr)
        refusal = _exec_refusal(name, line) if line.lower().startswith(_DAEMON_ERROR_PREFIXES) else None
        if refusal is not None:
            raise refusal

    def _copy_image(self) -> str:
        if self.helper_image:
            return self.helper_image
        local = {info.reference for info in self.list_images()}
        for reference in (*BASE_IMAGES, *sorted(local)):
            if reference in local:
                return reference
        if self._image_document(FALLBACK_HELPER_IMAGE) is not None:
            return FALLBACK_HELPER_IMAGE
        raise SandboxError(
            "no local image to copy volumes with",
            hint="Build the runner image first with `opencode-sandbox build`.",
        )


_RETRY_HINT = "Run the command again; if it keeps failing, check `opencode-sandbox doctor`."
_SECCOMP_HINT = ("The docker runtime runs its VMs under a seccomp profile of its own, which keeps them from making "
                 "set-user-ID files; this Docker engine or kernel cannot apply one (Docker Engine 20.10 or newer, "
                 "built with seccomp, on a kernel with CONFIG_SECCOMP_FILTER). Use such an engine, or the "
                 "microsandbox runtime.")


def _seccomp_profile(name: str) -> str:
    """The seccomp profile's file, written in the user's state folder (`docker_seccomp`)."""
    from opencode_sandbox.runtime.docker import seccomp

    try:
        return str(seccomp.written_profile())
    except OSError as error:
        where = error.filename or "in your state folder"
        raise BootFailed(f"cannot start {name}: cannot write its seccomp profile {where}: {error.strerror}",
                         hint="Check that your state folder ($XDG_STATE_HOME/opencode-sandbox, "
                              "~/.local/state/opencode-sandbox by default) is yours and writable.") from None


def _with_owner(info: SandboxInfo) -> SandboxInfo:
    """A sandbox this host user may use that carries no owner label was made by an older version."""
    return info._replace(owner_unlabelled=LABEL_OWNER_UID not in info.labels)


def _started_at(document: Mapping[str, Any]) -> str:
    return str((document.get("State") or {}).get("StartedAt", ""))


def _proxy_policy(document: Mapping[str, Any]) -> object | None:
    """The container's network policy when it sends its traffic through the egress proxy."""
    policy = docker_netfilter.policy_of_label(labels_of(document).get(docker_netfilter.LABEL_NETWORK_POLICY))
    return policy if policy is not None and needs_proxy(policy) else None


def _is_tool_reference(reference: str) -> bool:
    return reference.startswith(IMAGE_REPOSITORY_PREFIX) and "<none>" not in reference


def _docker_message(failure: DockerFailed) -> str:
    message = first_line(failure.stderr) or failure.message
    for prefix in ("docker: ", "Error response from daemon: ", "Error: "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def _exec_refusal(name: str, daemon_message: str) -> SandboxError | None:
    """Our error for the engine refusing an exec, when the refusal is about the sandbox itself."""
    lowered = daemon_message.lower()
    if "no such container" in lowered:
        return NotFound(f"sandbox {name} does not exist", hint="Start it with `opencode-sandbox run`.")
    if "is not running" in lowered or "is paused" in lowered:
        return SandboxError(f"sandbox {name} is not running", hint="Start it with `opencode-sandbox run`.")
    return None


def _exec_through_socket(
    api: DockerApi, request: docker_exec.ExecRequest, stdin: bytes | None, timeout_s: float | None, output_limit: int
) -> ExecResult:
    with _socket_exec_failures(request, timeout_s):
        try:
            captured = docker_exec.run_captured(api, request, stdin, timeout_s, output_limit)
        except OutputOverLimit:
            raise too_much_output(request.container, request.argv, output_limit) from None
    return ExecResult(
        exit_code=captured.exit_code,
        stdout=captured.stdout.decode(errors="replace"),
        stderr=captured.stderr.decode(errors="replace"),
    )


@contextmanager
def _socket_exec_failures(request: docker_exec.ExecRequest, timeout_s: float | None) -> Iterator[None]:
    """The socket path's failures as the same errors the CLI path raises; `ApiUnavailable` passes."""
    name, argv = request.container, request.argv
    try:
        yield
    except docker_exec.EngineRefused as refused:
        message = first_line(refused.message)
        raise _exec_refusal(name, message) or SandboxError(
            f"cannot run `{' '.join(argv)}` in {name}: {message}", hint=_RETRY_HINT
        ) from None
    except docker_exec.EngineLost:
        raise RuntimeUnavailable("the Docker engine stopped answering", hint=ENGINE_HINT) from None
    except TimeoutError:
        raise _timed_out(name, argv, timeout_s) from None


def _timed_out(name: str, argv: Sequence[str], timeout_s: float | None) -> SandboxError:
    return SandboxError(
        f"`{' '.join(argv)}` in {name} did not finish within {timeout_s or 0:g} s",
        hint="Check what the command waits for inside the sandbox.",
    )


def _start_failed(name: str, reason: str) -> BootFailed:
    return BootFailed(
        f"cannot start {name}: {reason}",
        hint="Check that the project folder still exists, or remove the sandbox.",
    )


def _not_ours(kind: str, name: str) -> NotOurs:
    return NotOurs(
        f"{kind} {name} exists but was not created by opencode-sandbox",
        hint=f"Rename or remove that {kind} with `docker`; opencode-sandbox leaves it alone.",
    )


def _volume_not_found(name: str) -> NotFound:
    return NotFound(f"volume {name} does not exist", hint="List volumes with `opencode-sandbox volume list`.")


def _image_not_found(reference: str) -> NotFound:
    return NotFound(f"image {reference} does not exist", hint="Build it with `opencode-sandbox build`.")
