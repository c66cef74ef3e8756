"""Can `dev` use its home? Read from what a probe printed inside the VM, and what to tell the user.

The probe runs as `dev` and reports dev's ids, where `opencode` is on its PATH, and the first
folder of its home that it cannot enter or write, among those opencode and this tool write to.
It runs only when something already failed (and in `doctor`), so it costs nothing on a good start.
"""

from __future__ import annotations

from opencode_sandbox.core.records import Record

HOME = "/home/dev"
FOLDERS = (
    HOME,
    f"{HOME}/.local",
    f"{HOME}/.local/state",
    f"{HOME}/.local/state/opencode-sandbox",
    f"{HOME}/.local/share",
    f"{HOME}/.local/share/opencode",
    f"{HOME}/.cache",
    f"{HOME}/.config",
    f"{HOME}/.config/opencode",
)
"""The home and the folders opencode and this tool write to, outermost first."""

PROBE_PREFIX = "probe:"
"""What starts each line of the probe's output (`guest/shell.py` runs it as `dev`, workdir /)."""


class BlockedFolder(Record):
    path: str
    owner: tuple[int, int]
    mode: str
    """Octal permission bits as `stat` prints them, such as `755`."""


class HomeProbe(Record):
    dev: tuple[int, int] | None
    """dev's uid and gid inside the VM."""
    opencode: str
    """Where `opencode` is on dev's PATH; empty when it is not."""
    blocked: BlockedFolder | None
    """The first folder dev cannot enter or write; None when it can use them all."""


class Diagnosis(Record):
    reason: str
    """What failed, for the end of a message such as `cannot start opencode serve in VM: <reason>`."""
    hint: str


def read_probe(output: str) -> HomeProbe | None:
    """The probe's findings; None when its output holds no `probe:dev` line (it did not run)."""
    dev: tuple[int, int] | None = None
    opencode = ""
    blocked: BlockedFolder | None = None
    seen = False
    for line in output.splitlines():
        if not line.startswith(PROBE_PREFIX):
            continue
        key, _, value = line[len(PROBE_PREFIX):].partition(" ")
        words = value.split()
        if key == "dev":
            seen = True
            dev = _ids(words)
        elif key == "opencode":
            opencode = value.strip()
        elif key == "blocked" and len(words) == 4:
            owner = _ids(words[1:3])
            if owner is not None:
                blocked = BlockedFolder(words[0], owner, words[3])
    return HomeProbe(dev, opencode, blocked) if seen else None


def _ids(words: list[str]) -> tuple[int, int] | None:
    if len(words) != 2 or not all(word.isdigit() for word in words):
        return None
    return int(words[0]), int(words[1])


def home_problem(probe: HomeProbe | None, volume: str | None) -> Diagnosis | None:
    """What keeps dev from using its home, and how to fix it; None when nothing does."""
    if probe is None or probe.blocked is None:
        return None
    blocked = probe.blocked
    owner = f"uid {blocked.owner[0]}, gid {blocked.owner[1]}"
    dev = f"uid {probe.dev[0]}, gid {probe.dev[1]}" if probe.dev else "unknown ids"
    if probe.dev is not None and blocked.owner == probe.dev:
        why = f"{blocked.path} belongs to dev but its mode is {blocked.mode}"
    else:
        why = f"{blocked.path} belongs to {owner} (mode {blocked.mode}) and dev is {dev}"
    where = f"the home volume {volume}" if volume else "its home volume"
    return Diagnosis(
        f"dev cannot write its home: {why}",
        f"{where} has files dev cannot use: stop the VM with `opencode-sandbox stop`, then run "
        "`opencode-sandbox volume migrate` (a new home volume from the image, your files copied on top) "
        "or, if that does not help, `opencode-sandbox volume reset` (a fresh one); the old volume is kept",
    )


REBUILD_HINT = "check that the runner image has opencode on the PATH (`opencode-sandbox build -r`)"
GENERIC_HINT = (
    "the output above says what failed; look inside with `opencode-sandbox shell`, "
    "or stop the VM with `opencode-sandbox stop` and run again"
)


def diagnose_start_failure(output: str, probe: HomeProbe | None, volume: str | None) -> Diagnosis:
    """Why `opencode serve` could not be started, from the start's output and the probe's findings.

    An unusable home comes first: it also hides an `opencode` installed under the home.
    """
    home = home_problem(probe, volume)
    if home is not None:
        return home
    if probe is not None and not probe.opencode:
        return Diagnosis("opencode is not on dev's PATH", REBUILD_HINT)
    return Diagnosis(output.strip() or "it failed without a message", GENERIC_HINT)
