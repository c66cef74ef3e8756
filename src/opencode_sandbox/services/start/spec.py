"""The VM one start asks for: its mounts, ports, labels and the fingerprint of what needs a new VM."""

from __future__ import annotations

import os

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.app import App
from opencode_sandbox.core import naming
from opencode_sandbox.core.lifecycle import fingerprint
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.workspace import ISOLATED, WORK_TARGET
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec

if TYPE_CHECKING:
    from opencode_sandbox.images.certificates import CaCertificate
    from opencode_sandbox.services.image_step import ReadyImage
    from opencode_sandbox.services.vm_git import Layout


BELOW_READ_ONLY_LIMIT = 16
"""Guarded paths below the checkout's top mounted read-only, at most: each is a mount of the VM (on
microsandbox a share of its own), and the watch guards the rest."""


class VmShape(Record):
    """What every spec of one start shares, read once before the VM step."""

    host_mounts: tuple[Mount, ...]
    """The `mounts` setting, each source resolved on this host."""
    git_mounts: tuple[Mount, ...]
    guarded_mounts: tuple[Mount, ...]
    """The guarded files and folders that exist, read-only over the checkout."""


def vm_shape(app: App, host_mounts: tuple[Mount, ...], git_layout: Layout | None) -> VmShape:
    from opencode_sandbox.services import vm_git

    if is_isolated(app):  # nothing of the checkout is mounted, so nothing of it is guarded
        return VmShape(host_mounts, (), ())
    git_mounts = tuple(vm_git.mounts(git_layout)) if git_layout is not None else ()
    return VmShape(host_mounts, git_mounts, tuple(read_only_guarded(app)))


def is_isolated(app: App) -> bool:
    return app.settings.workspace == ISOLATED


def workspace_mount(app: App) -> Mount:
    """The checkout itself (shared), or the VM's own work tree in its volume (isolated)."""
    if is_isolated(app):
        return Mount(MountKind.VOLUME, naming.work_volume_name(app.project.slug), WORK_TARGET)
    return Mount(MountKind.BIND, str(app.project.root), WORK_TARGET)


def read_only_guarded(app: App) -> list[Mount]:
    """The guarded files and folders that exist, mounted read-only over the checkout (never
    inside `.git`, which is the VM's own): those at the top, and the first `BELOW_READ_ONLY_LIMIT`
    of those in folders below it that the start's review found."""
    from opencode_sandbox.services.guard.reviews import guarded_below_found, guarded_paths, read_only_paths

    root = app.project.root
    top = guarded_paths(app.settings)
    below = [path for path in guarded_below_found(app) if not path.startswith(tuple(f"{each}/" for each in top))]
    paths = [path for path in read_only_paths(root, (*top, *below[:BELOW_READ_ONLY_LIMIT]))
             if path != ".git" and not path.startswith(".git/")]
    return [Mount(MountKind.BIND, str(root / path), f"/workspace/{path}", readonly=True) for path in paths]


def sandbox_spec(app: App, shape: VmShape, image: ReadyImage, home_volume: str, git_own: bool) -> SandboxSpec:
    settings = app.settings
    slug = app.project.slug
    certificates = intercepting_certificates(app)
    dev_identity = (os.getuid(), os.getgid())
    own_mounts = (
        Mount(MountKind.VOLUME, home_volume, "/home/dev"),
        workspace_mount(app),
        *shape.git_mounts,
        *shape.guarded_mounts,
    )
    ports = (DAEMON_PORT, *(port.guest for port in settings.ports))
    values: dict[str, object] = {
        "runtime": settings.runtime.value,
        "cpus": settings.cpus,
        "memory_mib": settings.memory_mib,
        "env": image.env,
        "mounts": [*([m.kind.value, m.source, m.target, *(["ro"] if m.readonly else [])] for m in own_mounts),
                   *([m.kind.value, m.source, m.target, "ro" if m.readonly else "rw"] for m in shape.host_mounts)],
        "ports": [DAEMON_PORT, *(port.written for port in settings.ports)],
        "dev_identity": list(dev_identity),
        "network": settings.egress_policy.fingerprint_value(),
    }
    backend = app.runtime.description
    values.update(backend.fingerprint_values(settings.pids_limit))
    labels = {
        **naming.managed_labels(slug),
        **({naming.LABEL_GIT: naming.GIT_OWN} if git_own and not is_isolated(app) else {}),
        **({naming.LABEL_WORKSPACE: ISOLATED} if is_isolated(app) else {}),
        naming.LABEL_IMAGE: image.reference,
        naming.LABEL_IMAGE_DIGEST: image.digest,
        naming.LABEL_FINGERPRINT: fingerprint(values),
        naming.LABEL_AGENT: settings.agent,
    }
    return SandboxSpec(
        name=naming.vm_name(slug),
        image=image.reference,
        cpus=settings.cpus,
        memory_mib=settings.memory_mib,
        env=image.env,
        labels=labels,
        mounts=(*own_mounts, *shape.host_mounts),
        workdir="/workspace",
        published_ports=ports,
        host_ports={port.guest: port.host for port in settings.ports if port.host is not None},
        dev_identity=dev_identity,
        privileged=settings.dind,
        pids_limit=backend.pids_limit(settings.pids_limit),
        network=settings.egress_policy,
        ca_certificates=tuple(certificate.pem for certificate in certificates),
        ca_certificate_files=tuple(dict.fromkeys(str(certificate.source) for certificate in certificates)),
    )


def intercepting_certificates(app: App) -> list[CaCertificate]:
    """The CAs that verify servers when the runtime intercepts the VM's HTTPS (the docker
    runtime's egress proxy, msb under `allowlist` or with secrets): those runner images trust."""
    settings = app.settings
    if not app.runtime.description.intercepts_tls(settings.egress_policy):
        return []
    from opencode_sandbox.images.certificates import collect_ca_certificates

    return collect_ca_certificates(settings.trust_host_ca, settings.extra_ca_certificates)
