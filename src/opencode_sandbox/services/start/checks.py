"""The checks before a start changes anything: the runtime, the mounts, the network policy, the secrets."""

from __future__ import annotations

from opencode_sandbox.app import App
from opencode_sandbox.core.egress import Profile
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.start_plan import PlannedStep, Step
from opencode_sandbox.errors import RuntimeUnavailable, UsageError
from opencode_sandbox.runtime.types import Mount

ALL_WARNING = ("network: all: the VM reaches everything this host reaches, its network and its own services "
               "included")


class Checked(Record):
    host_mounts: tuple[Mount, ...]
    """The `mounts` setting, each source resolved on this host."""
    warnings: tuple[tuple[str, str | None], ...]
    """Said at every start: each message and its hint."""
    step: PlannedStep


def check(app: App, dry_run: bool = False) -> Checked:
    """What a start needs from the settings and the host, or the refusal a start and a dry run
    share. A runtime that cannot run here stops a start; a dry run plans on and says so."""
    from opencode_sandbox.services.host_mounts import resolved_mounts

    settings = app.settings
    host_mounts = tuple(resolved_mounts(settings, app.project.root))
    unavailable = None
    try:
        app.runtime.check_available()
    except RuntimeUnavailable as error:
        if not dry_run:
            raise
        unavailable = error.message
    policy = settings.egress_policy
    warnings: list[tuple[str, str | None]] = []
    refusal = app.runtime.description.refusal(policy, privileged=settings.dind)
    if refusal is not None:
        raise refusal
    warnings += app.runtime.description.warnings(privileged=settings.dind)
    refused = policy.refusal()
    if refused is not None:
        raise UsageError(refused, hint="remove the secrets setting, or choose another network profile")
    if policy.profile is Profile.ALL:
        warnings.append((ALL_WARNING, None))
    step = (PlannedStep(Step.CHECKS, "check", f"the {settings.runtime.value} runtime") if unavailable is None
            else PlannedStep(Step.CHECKS, "fail", unavailable))
    return Checked(host_mounts, tuple(warnings), step)


def notes(app: App, checked: Checked) -> list[str]:
    """What the start will use (network, mounts, ports, secrets), for the dry run."""
    settings = app.settings
    lines = [f"network: {settings.egress_policy.describe()}"]
    lines += [f"mount: {mount.source} -> {mount.target} ({'read-only' if mount.readonly else 'read-write'})"
              for mount in checked.host_mounts]
    lines += [f"port: guest {port.guest} -> 127.0.0.1:{port.host or 'a free port'}" for port in settings.ports]
    lines += [f"secret: {line}" for line in secret_lines(app)]
    return lines


def secret_lines(app: App) -> list[str]:
    """Each secret's hosts and where its value comes from; never the value."""
    if not app.settings.secrets:
        return []
    from opencode_sandbox.services.secrets import look_up_for

    lookup = look_up_for(app)
    return [f"{secret.describe()}; value from {lookup.sources[secret.name]}" for secret in lookup.secrets]


def secret_values(app: App) -> dict[str, str]:
    """The secrets' values, for the runtime alone: msb reads them at create and every start."""
    if not app.settings.egress_policy.secrets:
        return {}
    from opencode_sandbox.services.secrets import look_up_for

    return look_up_for(app).values()
