"""The provisioning step of a start: the user's configuration of the agent (opencode or another),
copied into the VM's home where it changed since the last copy into the same home volume."""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox.app import App
from opencode_sandbox.core.agents import DEFAULT_AGENT
from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.start_plan import PlannedStep, plan_provision
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.services import provisioning
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import StateLayout


class ProvisionFacts(Record):
    files: dict[str, provisioning.Content]
    current: dict[str, str]
    """The manifest of `files`."""
    changed: list[str]
    skipped: tuple[str, ...]
    """Sources left out: links and files the user cannot read."""
    credentials: tuple[str, ...] = ()
    """Entries of the agent's configuration kept on the host: credentials."""
    agent: str = "opencode"
    """The title of the agent whose configuration this is."""

    @property
    def fingerprint(self) -> str:
        return provisioning.manifest_fingerprint(self.current)

    @property
    def step(self) -> PlannedStep:
        return plan_provision(self.changed, bool(self.files), self.agent)


def gather(app: App, home_volume: str | None) -> ProvisionFacts:
    """What to copy into a VM on `home_volume`: every file changed since the last copy into it."""
    sources = provisioning.sources_for_environment(app.project.root, app.settings.agent_profile)
    secret_names = {secret.name for secret in app.settings.secrets}
    collected = provisioning.collect_files(sources)
    files, credentials = provisioning.without_agent_credentials(
        provisioning.without_secret_keys(collected.files, secret_names), secret_names,
        every_file=app.settings.agent_profile.name != DEFAULT_AGENT)
    credentials += [f"~/{target}: a login, which the checkout's .opencode-sandbox/ may not set"
                    for target in collected.refused]
    current = provisioning.manifest(files)
    try:
        record = read_yaml_mapping(_record_path(app)) or {}
    except UnreadableState:
        record = {}
    provisioned = record.get("files") if record.get("home_volume") == home_volume else None
    previous: dict[str, str] = provisioned if isinstance(provisioned, dict) else {}
    changed = provisioning.changed_files(files, current, previous)
    return ProvisionFacts(files, current, changed, tuple(shown(str(path)) for path in collected.skipped),
                          tuple(shown(entry) for entry in credentials), app.settings.agent_profile.title)


def apply(app: App, vm: str, facts: ProvisionFacts, home_volume: str | None) -> None:
    if facts.skipped:
        app.console.warn(
            f"not copied into the VM (provisioning copies regular files you can read, never through a link): "
            f"{', '.join(facts.skipped)}",
            hint="put the file itself there in place of the link",
        )
    if facts.credentials:
        app.console.warn(
            f"kept on the host, out of the VM: {', '.join(facts.credentials)} (credentials; a file that cannot "
            "be copied without one is not copied)",
            hint="give the agent its key as a secret (docs/agents.md#credentials), or log in inside the VM",
        )
    if not facts.changed:
        return
    app.console.verbose(f"provisioning {len(facts.changed)} file(s): {', '.join(facts.changed)}")
    guest = app.guest(vm)
    result = guest.unpack_home(provisioning.tar_archive(facts.files, facts.changed))
    if result.exit_code != 0:
        from opencode_sandbox.core.dev_home import home_problem

        home = home_problem(guest.probe_home(), home_volume)
        if home is not None:
            raise SandboxError(f"copying the {facts.agent} configuration into {vm} failed: {home.reason}",
                               hint=home.hint)
        raise SandboxError(
            f"copying the {facts.agent} configuration into {vm} failed: {result.stderr.strip()}",
            hint="check the files under ~/.config/opencode, then run again",
        )
    write_yaml(_record_path(app), {"home_volume": home_volume, "files": facts.current})


def _record_path(app: App) -> Path:
    return StateLayout(app.paths.state_dir).project(app.project.slug).provisioned
