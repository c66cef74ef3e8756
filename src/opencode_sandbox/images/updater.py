"""Which opencode version to build with, and whether to offer an upgrade on run/shell.

The update check is quiet by design: the releases endpoint is asked at most once per 24 h
machine-wide (a failed check does not count), each newer version is offered once, and the
answer is data for the caller to act on. Its state lives in `<state_root>/updater.yaml`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml

if TYPE_CHECKING:
    from typing import Any

DEFAULT_RELEASES_URL = "https://api.github.com/repos/sst/opencode/releases/latest"
NPM_LATEST_URL = "https://registry.npmjs.org/opencode-ai/latest"
CHECK_INTERVAL = timedelta(hours=24)
CHECK_TIMEOUT_S = 2.0
RESOLVE_TIMEOUT_S = 10.0

_VERSION_RE = r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"


class LookupFailed(Exception):
    """The releases endpoint gave no usable answer (offline, error status, bad document)."""


class UntrustedServer(LookupFailed):
    """The endpoint's certificate chain ends in a CA this machine does not trust."""


class UpdateAction(StrEnum):
    OFFER_REBUILD = "offer-rebuild"
    """Interactive: ask whether to rebuild the image with the newer version."""
    NOTICE = "notice"
    """Non-interactive: print that a newer version exists and `opencode-sandbox build` takes it."""
    NOTHING = "nothing"


class UpdaterState(Record):
    last_check: datetime | None = None
    """When the releases endpoint last answered usefully."""
    latest_version: str | None = None
    baked_version: str | None = None
    """The opencode version in the current runner image, reused on run/shell."""
    offered: tuple[str, ...] = ()
    noticed: tuple[str, ...] = ()
    agent_versions: tuple[tuple[str, str], ...] = ()
    """Each terminal agent's version in the images built for it, reused on run/shell: (agent, version)."""
    agent_latest: tuple[tuple[str, str], ...] = ()
    """The latest release of each of those agents, as the last check found it: (agent, version)."""
    agent_packages: tuple[tuple[str, str], ...] = ()
    """The npm package each of those agents was installed from, (agent, package): what the release
    check, a process of its own that reads no configuration, asks npm about for an agent of the user's."""


class UpdateDecision(Record):
    action: UpdateAction
    baked_version: str | None
    latest_version: str | None
    checked: bool
    """Whether the releases endpoint was asked this time."""
    warnings: tuple[str, ...] = ()


# versions ------------------------------------------------------------------------------


def normalize_version(value: str) -> str | None:
    """`v1.2.3` -> `1.2.3`; None for anything that is not a release version."""
    match = re.match(_VERSION_RE, value.strip())
    return value.strip().removeprefix("v") if match else None


def version_key(version: str) -> tuple[int, int, int, int, str]:
    match = re.match(_VERSION_RE, version)
    if not match:
        return (-1, -1, -1, -1, version)
    major, minor, patch, prerelease = match.groups()
    # A release sorts after its own pre-releases.
    return (int(major), int(minor), int(patch), 0 if prerelease else 1, prerelease or "")


def is_newer(candidate: str, current: str | None) -> bool:
    return current is None or version_key(candidate) > version_key(current)


def version_from_document(document: Any) -> str:
    """The version in a GitHub release (`tag_name`) or a `{"version": ...}` document."""
    if isinstance(document, dict):
        for key in ("tag_name", "version"):
            value = document.get(key)
            if isinstance(value, str):
                version = normalize_version(value)
                if version:
                    return version
    raise LookupFailed("the answer holds no version")


def fetch_latest_version(url: str, timeout_s: float, extra_ca_certificates: Sequence[Path] = ()) -> str:
    """Ask `url`, trusting the system's CA store and the extra PEM files (see `tls.py`)."""
    import httpx

    from opencode_sandbox.images.tls import trusting_context, untrusted_certificate

    try:
        response = httpx.get(
            url,
            timeout=timeout_s,
            follow_redirects=True,
            headers={"Accept": "application/json", "User-Agent": "opencode-sandbox"},
            verify=trusting_context(extra_ca_certificates),
        )
    except httpx.HTTPError as error:
        untrusted = untrusted_certificate(error)
        if untrusted is not None:
            raise UntrustedServer(f"{url}: certificate not trusted ({untrusted.verify_message})") from None
        raise LookupFailed(f"{url}: {error.__class__.__name__}") from None
    if response.status_code != 200:
        raise LookupFailed(f"{url}: HTTP {response.status_code}")
    try:
        document = response.json()
    except ValueError:
        raise LookupFailed(f"{url}: not JSON") from None
    return version_from_document(document)


def resolve_opencode_version(
    pinned: str | None,
    releases_url: str = DEFAULT_RELEASES_URL,
    npm_url: str = NPM_LATEST_URL,
    timeout_s: float = RESOLVE_TIMEOUT_S,
    extra_ca_certificates: Sequence[Path] = (),
) -> str:
    """The version a build installs: the pinned one, else the latest release.

    The releases endpoint is asked first, npm's `latest` dist-tag second.
    """
    if pinned:
        version = normalize_version(pinned)
        if version is None:
            raise UsageError(
                f"not an opencode version: {pinned}",
                hint="Give a release version such as --opencode-version 1.2.3.",
            )
        return version
    failures: list[LookupFailed] = []
    for url in (releases_url, npm_url):
        try:
            return fetch_latest_version(url, timeout_s, extra_ca_certificates)
        except LookupFailed as failure:
            failures.append(failure)
    from opencode_sandbox.images.tls import UNTRUSTED_HINT

    pin = "pin a version: opencode-sandbox build --opencode-version X.Y.Z"
    untrusted = any(isinstance(failure, UntrustedServer) for failure in failures)
    raise SandboxError(
        "cannot find the latest opencode release (" + "; ".join(map(str, failures)) + ")",
        hint=f"{UNTRUSTED_HINT} Or {pin}" if untrusted else f"Check the network, or {pin}",
    )


NPM_REGISTRY = "https://registry.npmjs.org"


def resolve_agent_version(
    title: str,
    package: str,
    pinned: str | None,
    timeout_s: float = RESOLVE_TIMEOUT_S,
    extra_ca_certificates: Sequence[Path] = (),
    registry: str = NPM_REGISTRY,
) -> str:
    """The version of a terminal agent's npm package a build installs: the pinned one, else npm's `latest`."""
    if pinned:
        version = normalize_version(pinned)
        if version is None:
            raise UsageError(f"not a {title} version: {pinned}",
                             hint="Give a release version such as --agent-version 1.2.3.")
        return version
    try:
        return fetch_latest_version(f"{registry}/{package}/latest", timeout_s, extra_ca_certificates)
    except LookupFailed as failure:
        from opencode_sandbox.images.tls import UNTRUSTED_HINT

        pin = "pin a version: opencode-sandbox build --agent-version X.Y.Z"
        raise SandboxError(
            f"cannot find the latest {title} release ({failure})",
            hint=f"{UNTRUSTED_HINT} Or {pin}" if isinstance(failure, UntrustedServer)
            else f"Check the network, or {pin}",
        ) from None


# state file ----------------------------------------------------------------------------


def state_path(state_root: Path) -> Path:
    from opencode_sandbox.state_layout import StateLayout

    return StateLayout(state_root).updater


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int | float) and str(value) else None


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value)
    else:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _versions(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(item) for item in value if isinstance(item, str | int | float))


def _agent_packages(value: Any) -> tuple[tuple[str, str], ...]:
    from opencode_sandbox.core.npm_names import is_package_name

    if not isinstance(value, dict):
        return ()
    return tuple((str(agent), package) for agent, package in value.items()
                 if isinstance(package, str) and is_package_name(package))


def _agent_versions(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        return ()
    return tuple((str(agent), str(version)) for agent, version in value.items()
                 if isinstance(version, str) and normalize_version(version))


def load_state(state_root: Path, warn: Callable[[str], None] | None = None) -> UpdaterState:
    """The recorded state; a missing file is a fresh state, a corrupt one warns and is too."""
    path = state_path(state_root)
    try:
        document = read_yaml_mapping(path)
        if document is None:
            return UpdaterState()
        return UpdaterState(
            last_check=_parse_time(document.get("last_check")),
            latest_version=_text(document.get("latest_version")),
            baked_version=_text(document.get("baked_version")),
            offered=_versions(document.get("offered")),
            noticed=_versions(document.get("noticed")),
            agent_versions=_agent_versions(document.get("agent_versions")),
            agent_latest=_agent_versions(document.get("agent_latest")),
            agent_packages=_agent_packages(document.get("agent_packages")),
        )
    except (UnreadableState, ValueError, TypeError) as error:
        if warn is not None:  # the detached check has no one to tell
            warn(f"ignoring corrupt {path} ({str(error).splitlines()[0]}); starting fresh")
        return UpdaterState()


def save_state(state_root: Path, state: UpdaterState) -> None:
    """Atomic write (temporary file + rename); folder 0700, file 0600."""
    write_yaml(
        state_path(state_root),
        {
            "last_check": state.last_check.isoformat() if state.last_check else None,
            "latest_version": state.latest_version,
            "baked_version": state.baked_version,
            "offered": list(state.offered),
            "noticed": list(state.noticed),
            "agent_versions": dict(state.agent_versions),
            "agent_latest": dict(state.agent_latest),
            "agent_packages": dict(state.agent_packages),
        },
    )


# deciding ------------------------------------------------------------------------------


def check_due(state: UpdaterState, now: datetime) -> bool:
    return state.last_check is None or now - state.last_check >= CHECK_INTERVAL or state.last_check > now


def decide_update(state: UpdaterState, baked_version: str | None, interactive: bool) -> UpdateAction:
    """Pure: what to tell the user, given what is known about the latest release."""
    latest = state.latest_version
    if latest is None or baked_version is None or not is_newer(latest, baked_version):
        return UpdateAction.NOTHING
    return _once(state, latest, interactive)


def _once(state: UpdaterState, shown: str, interactive: bool) -> UpdateAction:
    """Offer (on a terminal) or mention `shown` unless that was done before."""
    if interactive:
        return UpdateAction.NOTHING if shown in state.offered else UpdateAction.OFFER_REBUILD
    return UpdateAction.NOTHING if shown in state.noticed else UpdateAction.NOTICE


def _remember(state_root: Path, shown: str, action: UpdateAction, warn: Callable[[str], None] | None) -> None:
    """`shown` was offered or mentioned: not again."""
    state = load_state(state_root, warn)
    if action is UpdateAction.OFFER_REBUILD:
        state = state._replace(offered=_add(state.offered, shown))
    elif action is UpdateAction.NOTICE:
        state = state._replace(noticed=_add(state.noticed, shown))
    save_state(state_root, state)


def _add(versions: Iterable[str], version: str) -> tuple[str, ...]:
    existing = tuple(versions)
    return existing if version in existing else (*existing, version)


# applying ------------------------------------------------------------------------------


def refresh_latest(
    state_root: Path,
    releases_url: str = DEFAULT_RELEASES_URL,
    *,
    now: datetime | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
    warn: Callable[[str], None] | None = None,
    extra_ca_certificates: Sequence[Path] = (),
    npm_registry: str = NPM_REGISTRY,
) -> bool:
    """Ask the releases endpoint if the 24 h window allows it; True when it answered. The terminal
    agents images were built with are looked up on npm in the same round.

    Safe to run in the background: only a successful answer is written.
    """
    moment = now or datetime.now(UTC)
    state = load_state(state_root, warn)
    if not check_due(state, moment):
        return False
    try:
        latest = fetch_latest_version(releases_url, timeout_s, extra_ca_certificates)
    except (LookupFailed, SandboxError) as failure:
        if warn is not None:
            warn(f"opencode update check failed: {failure}")
        return False
    agents = _latest_agents(state, timeout_s, warn, extra_ca_certificates, npm_registry)
    current = load_state(state_root, warn)
    agent_latest = tuple(sorted({**dict(current.agent_latest), **agents}.items()))
    save_state(state_root, current._replace(last_check=moment, latest_version=latest, agent_latest=agent_latest))
    return True


def _latest_agents(state: UpdaterState, timeout_s: float, warn: Callable[[str], None] | None,
                   extra_ca_certificates: Sequence[Path], registry: str) -> dict[str, str]:
    """npm's latest release of each terminal agent an image was built with; those that answer."""
    from opencode_sandbox.core.agents import PROFILES

    found: dict[str, str] = {}
    packages = dict(state.agent_packages)
    for agent, _ in state.agent_versions:
        profile = PROFILES.get(agent)
        package = packages.get(agent) or (profile.package if profile is not None else "")
        if not package:
            continue
        try:
            found[agent] = fetch_latest_version(f"{registry}/{package}/latest", timeout_s, extra_ca_certificates)
        except LookupFailed as failure:
            if warn is not None:
                warn(f"{profile.title if profile is not None else agent} update check failed: {failure}")
    return found


def agent_update(state: UpdaterState, agent: str, interactive: bool) -> tuple[UpdateAction, str | None, str | None]:
    """What to tell the user about a newer release of a terminal agent: the action, its latest
    version and the version its image has. Each version is offered (or mentioned) once."""
    latest = dict(state.agent_latest).get(agent)
    baked = dict(state.agent_versions).get(agent)
    if latest is None or baked is None or not is_newer(latest, baked):
        return UpdateAction.NOTHING, latest, baked
    return _once(state, f"{agent} {latest}", interactive), latest, baked


def record_agent_shown(state_root: Path, agent: str, version: str, action: UpdateAction,
                       warn: Callable[[str], None] | None = None) -> None:
    _remember(state_root, f"{agent} {version}", action, warn)


def check_for_update(
    state_root: Path,
    baked_version: str | None,
    *,
    interactive: bool,
    releases_url: str = DEFAULT_RELEASES_URL,
    now: datetime | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
    extra_ca_certificates: Sequence[Path] = (),
) -> UpdateDecision:
    """Refresh (at most once per 24 h) and decide. Record what was shown with `record_shown`."""
    warnings: list[str] = []
    checked = refresh_latest(state_root, releases_url, now=now, timeout_s=timeout_s, warn=warnings.append,
                             extra_ca_certificates=extra_ca_certificates)
    state = load_state(state_root, warnings.append)
    baked = baked_version or state.baked_version
    return UpdateDecision(
        action=decide_update(state, baked, interactive),
        baked_version=baked,
        latest_version=state.latest_version,
        checked=checked,
        warnings=tuple(dict.fromkeys(warnings)),
    )


def record_shown(state_root: Path, decision: UpdateDecision, warn: Callable[[str], None] | None = None) -> None:
    """Remember that the offer (or notice) for this version was shown, so it is not again."""
    if decision.action is UpdateAction.NOTHING or decision.latest_version is None:
        return
    _remember(state_root, decision.latest_version, decision.action, warn)


def record_baked_version(state_root: Path, version: str, warn: Callable[[str], None] | None = None) -> None:
    """Called after a build: the version run/shell reuse without asking the network."""
    state = load_state(state_root, warn)
    save_state(state_root, state._replace(baked_version=version))


def baked_version(state_root: Path, warn: Callable[[str], None] | None = None) -> str | None:
    """`warn` hears of a corrupt file; without it, it is passed over in silence."""
    return load_state(state_root, warn).baked_version


def baked_agent_version(state_root: Path, agent: str, warn: Callable[[str], None] | None = None,
                        package: str = "") -> str | None:
    """The version of `agent` the last image built for it has; None before the first, and when that
    image installed another `package` than the one given (the user changed their agent's)."""
    state = load_state(state_root, warn)
    recorded = dict(state.agent_packages).get(agent)
    if package and recorded and recorded != package:
        return None
    return dict(state.agent_versions).get(agent)


def record_baked_agent_version(state_root: Path, agent: str, version: str,
                               warn: Callable[[str], None] | None = None, package: str = "") -> None:
    """`package`: the npm package of that version, which the release check asks about."""
    state = load_state(state_root, warn)
    versions = {**dict(state.agent_versions), agent: version}
    packages = dict(state.agent_packages)
    if package:
        packages[agent] = package
    save_state(state_root, state._replace(agent_versions=tuple(sorted(versions.items())),
                                          agent_packages=tuple(sorted(packages.items()))))
