"""The `docker` argument lists the docker runtime uses (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opencode_sandbox.core.naming import LABEL_DIND, LABEL_MANAGED, LABEL_SLUG
from opencode_sandbox.runtime.env_passing import env_flags
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec

DIND_LABEL = LABEL_DIND
KEEP_ALIVE = ("sleep", "infinity")
CONFINEMENT = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges")
"""No capability is kept: `dev` is never uid 0 and a non-root user gets none anyway; the tool's
own root steps in the VM write only files root owns there (the proxy's CA, /etc/hosts), and the
one step that needs more, giving `dev` the host user's ids, runs outside the VM
(`docker_users`). Without `NET_RAW`, `CHOWN`, `FOWNER`, `FSETID`, `MKNOD` or `SETFCAP`, root in the
VM can go around no network rule and leave no set-user-ID file, file capability or device node.
`no-new-privileges`: the image's set-user-ID programs (`su`, `mount`, `passwd`, ...) and any file
capability give nothing. What a process may do without any capability, such as setting the
set-user-ID bit of its own file, the VM's seccomp profile holds (`seccomp_option`)."""


def seccomp_option(profile: str) -> list[str]:
    """The VM's seccomp profile (`docker_seccomp`), a file the `docker` command reads."""
    return ["--security-opt", f"seccomp={profile}"]


def sandbox_labels(spec_labels: Mapping[str, str], slug: str) -> dict[str, str]:
    """The spec's labels plus ours: whatever this runtime creates is recognisably ours."""
    labels = dict(spec_labels)
    labels[LABEL_MANAGED] = "true"
    labels.setdefault(LABEL_SLUG, slug)
    return labels


def label_args(labels: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in sorted(labels.items()):
        args += ["--label", f"{key}={value}"]
    return args


def env_args(env: Mapping[str, str] | None) -> list[str]:
    """`-e NAME` per variable: the values travel in the command's environment (`env_passing`)."""
    return env_flags("-e", env)


def mount_arg(mount: Mount) -> str:
    # --mount, unlike -v, refuses a missing bind source instead of creating it; `volume-nocopy`
    # keeps Docker from copying image files into an empty volume behind the caller's back.
    fields = [f"type={mount.kind.value}", f"source={mount.source}", f"target={mount.target}"]
    if mount.kind is MountKind.VOLUME:
        fields.append("volume-nocopy")
    if mount.readonly:
        fields.append("readonly")
    return ",".join(fields)


def run_args(spec: SandboxSpec, labels: Mapping[str, str], privileged: bool, network: str | None = None,
             hosts: Mapping[str, str] | None = None, *, seccomp: str | None = None) -> list[str]:
    """`docker run -d` for a long-lived project VM: root keep-alive under an init process.

    The image's own entrypoint is bypassed so any runner image works; everything the user
    does runs through `docker exec` as the requested user. Unless `privileged` (Docker-in-Docker),
    the VM holds no capability at all, nothing in it gains privileges (`CONFINEMENT`) and its
    system calls are held to the seccomp profile in the file `seccomp` (`docker_seccomp`; Docker
    runs a privileged container unconfined whatever it is given).
    `hosts`: names written into the VM's `/etc/hosts`, by address.
    """
    if not privileged and seccomp is None:
        raise ValueError(f"a confined VM needs its seccomp profile: {spec.name}")
    args = [
        "run",
        "--detach",
        "--name",
        spec.name,
        "--init",
        "--user",
        "root",
        "--entrypoint",
        KEEP_ALIVE[0],
        "--cpus",
        str(spec.cpus),
        "--memory",
        f"{spec.memory_mib}m",
        "--workdir",
        spec.workdir,
    ]
    if privileged:
        args.append("--privileged")
    else:
        assert seccomp is not None
        args += [*CONFINEMENT, *seccomp_option(seccomp)]
    if spec.pids_limit is not None:
        args += ["--pids-limit", str(spec.pids_limit)]
    if network is not None:
        args += ["--network", network]
    for host, address in sorted((hosts or {}).items()):
        args += ["--add-host", f"{host}:{address}"]
    args += label_args(labels)
    args += env_args(spec.env)
    for mount in spec.mounts:
        args += ["--mount", mount_arg(mount)]
    for port in spec.published_ports:
        args += ["--publish", f"127.0.0.1:{spec.host_ports.get(port, '')}:{port}/tcp"]
    args += [spec.image, *KEEP_ALIVE[1:]]
    return args


def exec_args(
    name: str,
    argv: Sequence[str],
    *,
    user: str,
    workdir: str,
    env: Mapping[str, str] | None,
    interactive: bool,
    tty: bool,
) -> list[str]:
    args = ["exec"]
    if interactive:
        args.append("--interactive")
    if tty:
        args.append("--tty")
    args += ["--user", user, "--workdir", workdir, *env_args(env), name, *argv]
    return args


_SIZED = 'stty cols "$1" rows "$2" 2>/dev/null; shift 2; exec "$@"'


def sized_from_the_start(argv: Sequence[str], size: tuple[int, int] | None) -> list[str]:
    """`argv` run on a terminal of `size` (columns, lines) from its first instruction. `docker exec
    --tty` starts the process on a terminal of no size and sets the size only after it started
    (engines before API 1.42), so a program that reads it at once sees none: tmux then attaches as
    80x24 and resizes the agent's window twice, and an agent that draws inline loses what it drew."""
    if size is None or min(size) <= 0:
        return list(argv)
    return ["sh", "-c", _SIZED, "sh", str(size[0]), str(size[1]), *argv]
