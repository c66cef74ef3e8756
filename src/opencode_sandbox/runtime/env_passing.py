"""Environment variables for a `docker` or `msb` command, with their values off its command line.

Every local user can read every process's command line (`ps -ef`, `/proc/PID/cmdline`); only
the process's owner can read its environment. `docker exec -e NAME` and `msb exec --env NAME`
without `=VALUE` both take the value NAME has in their own environment, so the command line
names each variable and the child process carries the values: the daemon password never
shows in the process list.

A few names are read by the `docker` or `msb` program itself, or by the dynamic loader that
starts it (`PATH`, `HOME`, `DOCKER_HOST`, `MSB_HOME`, `LD_PRELOAD`, ...): giving them the
sandbox's values would change how that program runs on the host. Their values stay on the
command line. Only a runner image's own `ENV` uses such names, and it is no secret: anyone
who can run the image reads it with `docker image inspect`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

_READ_BY_THE_HOST_PROGRAM = frozenset(
    {
        "PATH", "HOME", "TMPDIR", "USER", "SHELL", "TERM", "SSH_AUTH_SOCK", "RUST_LOG",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    }
)  # fmt: skip
_PREFIXES_READ_BY_THE_HOST_PROGRAM = ("DOCKER_", "MSB_", "LD_", "XDG_", "SSL_", "BUILDKIT_")


def read_by_the_host_program(name: str) -> bool:
    return name in _READ_BY_THE_HOST_PROGRAM or name.startswith(_PREFIXES_READ_BY_THE_HOST_PROGRAM)


def env_flags(flag: str, env: Mapping[str, str] | None) -> list[str]:
    """`flag NAME` per variable (the value travels in `child_environment`), or `flag NAME=VALUE`
    for the few names the host program reads itself."""
    args: list[str] = []
    for name, value in (env or {}).items():
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"not an environment variable name: {name!r}")
        args += [flag, f"{name}={value}" if read_by_the_host_program(name) else name]
    return args


def child_environment(
    env: Mapping[str, str] | None, inherited: Mapping[str, str] = os.environ,
    secret_values: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """The environment of the program that `env_flags` are given to; None: its caller's own.
    `secret_values` are for msb itself, which reads each `--secret`'s value there: no flag names
    them, so none reaches the VM."""
    carried = {name: value for name, value in (env or {}).items() if not read_by_the_host_program(name)}
    if not carried and not secret_values:
        return None
    return {**inherited, **carried, **(secret_values or {})}
