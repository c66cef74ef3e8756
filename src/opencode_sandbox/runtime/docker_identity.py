"""`dev` in a docker-runtime VM takes the host user's uid and gid.

A container shares the host kernel's ids, so a bind-mounted checkout is writable by `dev`
only when their numbers match, and what `dev` creates is owned on the host by whatever
uid it has. The runner image makes `dev` uid 1000; right after creating a VM the docker
runtime renumbers it to the host user's ids (as the devcontainers CLI does in an image
layer, here in the container's own layer, so no extra image is built or pruned) and hands
the home volume's files to it. For a root host user that means uid 0: without id-mapped
bind mounts, nothing else can create files that root owns on the host. `dev` keeps its
name and home, but uid 0 resolves to `root` first: `id -un` then says root, and the engine,
which takes HOME from the uid, would give /root, so execs as `dev` name their HOME.
"""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

DEV_HOME = "/home/dev"

# $1 uid, $2 gid. Idempotent: only ids and files that differ are changed. Files root owns in
# the home stay root's, as the image made them.
ADOPT_SCRIPT = r"""
set -eu
uid=$1 gid=$2
if [ "$(id -g dev)" != "$gid" ]; then groupmod --non-unique --gid "$gid" dev; fi
if [ "$(id -u dev)" != "$uid" ]; then usermod --non-unique --uid "$uid" --gid "$gid" dev; fi
find /home/dev -xdev ! -uid 0 \( ! -uid "$uid" -o ! -gid "$gid" \) -exec chown -h "$uid:$gid" {} +
"""


def adopt_command(uid: int, gid: int) -> list[str]:
    """The root command that renumbers `dev` and its home to `uid`:`gid`."""
    return ["sh", "-c", ADOPT_SCRIPT, "adopt-host-identity", str(uid), str(gid)]


def with_dev_home(user: str, env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """The exec's environment with `dev`'s HOME, whatever its uid resolves to."""
    if user != "dev":
        return env
    return {"HOME": DEV_HOME, **(env or {})}
