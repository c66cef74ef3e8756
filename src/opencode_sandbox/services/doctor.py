"""Pre-flight checks: can the selected runtime work on this host, and if not, what to do."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import RuntimeUnavailable, SandboxError
from opencode_sandbox.runtime.types import RuntimeKind, SandboxStatus

if TYPE_CHECKING:
    from opencode_sandbox.app import App
    from opencode_sandbox.engine.base import ImageEngine
    from opencode_sandbox.guest.operations import Guest
    from opencode_sandbox.runtime.base import Runtime

DOCKER_START_HINT = (
    "start the Docker engine (for example `sudo systemctl start docker`, or run `dockerd`), "
    "and make sure this user may use it (`sudo usermod -aG docker $USER`)"
)


class Check(Record):
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    required_for: frozenset[RuntimeKind] = frozenset(RuntimeKind)
    of_project: bool = False
    """A check of the current project's VM rather than of the host."""


class DoctorReport(Record):
    runtime: RuntimeKind
    checks: tuple[Check, ...]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and self.runtime in c.required_for]

    @property
    def runtime_ready(self) -> bool:
        return not self.failures


def check_docker(timeout_s: float = 15.0, engine: ImageEngine | None = None) -> Check:
    if engine is None:
        from opencode_sandbox.engine.docker import DockerImageEngine

        engine = DockerImageEngine()
    try:
        version = engine.engine_version(timeout_s)
    except RuntimeUnavailable as error:
        return Check("docker", False, error.message, error.hint)
    return Check("docker", True, f"engine {version} reachable")


def check_git() -> Check:
    if shutil.which("git") is None:
        return Check("git", False, "git is not installed", "install git (for example `apt-get install git`)",
                     required_for=frozenset())
    result = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False)
    return Check("git", result.returncode == 0, result.stdout.strip() or result.stderr.strip(),
                 required_for=frozenset())


def check_project_home(runtime: Runtime, guest: Guest, volume: str | None) -> Check | None:
    """Can dev use its home in the project's VM? Asked only while the VM runs: doctor starts nothing.

    None when the project has no VM (or the runtime cannot say): there is nothing to check.
    """
    from opencode_sandbox.core.dev_home import home_problem

    vm = guest.vm
    required = frozenset({runtime.kind})
    try:
        info = runtime.get_sandbox(vm)
    except SandboxError:
        return None
    if info is None:
        return None
    if info.status is not SandboxStatus.RUNNING:
        return Check("home", True, f"not checked: {vm} is {info.status.value} (checked while it runs)",
                     required_for=required, of_project=True)
    probe = guest.probe_home()
    if probe is None:
        return Check("home", False, f"cannot ask {vm} whether dev can use its home",
                     "run `opencode-sandbox doctor` again; if it keeps failing, stop the VM with "
                     "`opencode-sandbox stop`",
                     required_for=frozenset(), of_project=True)
    problem = home_problem(probe, volume)
    if problem is not None:
        return Check("home", False, f"in {vm}: {problem.reason}", problem.hint, required_for=required,
                     of_project=True)
    ids = f" (uid {probe.dev[0]}, gid {probe.dev[1]})" if probe.dev else ""
    return Check("home", True, f"dev{ids} can use its home in {vm}", required_for=required, of_project=True)


def check_network(policy: EgressPolicy, runtime: RuntimeKind, dind: bool = False) -> Check:
    """The project's effective network policy, and whether the runtime enforces it."""
    from opencode_sandbox.runtime.select import describe

    backend = describe(runtime)
    described = policy.describe()
    refusal = backend.refusal(policy, dind)
    if refusal is not None:
        return Check("network", False, f"{described}: {refusal.message}", refusal.hint,
                     required_for=frozenset({runtime}), of_project=True)
    if policy.profile is Profile.ALL:
        return Check("network", False, f"{described}: no restriction, the VM reaches this host and its network",
                     "set `network: public` to keep private ranges and this host out of reach",
                     required_for=frozenset(), of_project=True)
    return Check("network", True, f"{described} (enforced by {backend.enforcer(policy)})", of_project=True)


def check_secrets(app: App) -> list[Check]:
    """Each secret's hosts and where its value comes from (never the value)."""
    from opencode_sandbox.services.secrets import MISSING, look_up_for

    secrets = app.settings.secrets
    if not secrets:
        return []
    required = frozenset({app.settings.runtime})
    refusal = app.settings.egress_policy.refusal()
    if refusal is not None:
        return [Check("secrets", False, refusal, "remove the secrets setting, or choose another network profile",
                      required_for=required, of_project=True)]
    try:
        lookup = look_up_for(app)
    except SandboxError as error:
        return [Check("secrets", False, error.message, error.hint, required_for=required, of_project=True)]
    checks = []
    for secret in secrets:
        source = lookup.sources[secret.name]
        if source == MISSING:
            checks.append(Check("secrets", False, f"{secret.describe()}: no value (looked in "
                                f"{', '.join(lookup.looked_in)})",
                                f"export {secret.name}=... or add it to {lookup.looked_in[-1]} (chmod 600)",
                                required_for=required, of_project=True))
        else:
            checks.append(Check("secrets", True, f"{secret.describe()} (value from {source}; the VM sees a "
                                "placeholder)", of_project=True))
    return checks


def check_logins(secret_names: set[str]) -> list[Check]:
    """What of opencode's stored logins is copied into the VM: keys that are not secrets, and
    refreshable logins, which cannot be."""
    import json

    from opencode_sandbox.core.providers import PROVIDERS, auth_entries, providers_kept_out
    from opencode_sandbox.services.secrets import auth_file

    path = auth_file()
    try:
        entries = auth_entries(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    kept_out = providers_kept_out(secret_names)
    keys = [entry.provider for entry in entries if entry.kind == "api" and entry.provider not in kept_out]
    logins = [entry.provider for entry in entries if entry.kind == "oauth"]
    checks = []
    if keys:
        known = [provider for provider in keys if provider in PROVIDERS]
        checks.append(Check("logins", False, f"the API key(s) of {', '.join(keys)} in {path} are copied into the VM",
                            "run `opencode-sandbox secrets import` to keep them on the host as secrets" if known
                            else "set them as secrets by hand (see docs/security.md) to keep them on the host",
                            required_for=frozenset(), of_project=True))
    if logins:
        checks.append(Check("logins", False, f"the login(s) of {', '.join(logins)} in {path} are copied into the "
                            "VM: a refreshable login cannot be a secret",
                            "to keep it out of the VM, log out on this host (`opencode auth logout`) and log in "
                            "inside the sandbox (`opencode-sandbox shell`, then `opencode auth login`)",
                            required_for=frozenset(), of_project=True))
    return checks


def project_checks(app: App) -> list[Check]:
    """The checks of the current project: its network policy, and its VM when it has one."""
    from opencode_sandbox.core.naming import vm_name

    checks = [check_network(app.settings.egress_policy, app.settings.runtime, app.settings.dind),
              *check_secrets(app), *check_logins({secret.name for secret in app.settings.secrets})]
    try:
        runtime = app.runtime
    except SandboxError:
        return checks
    volume = app.state.load(app.project.slug).home_volume
    check = check_project_home(runtime, app.guest(vm_name(app.project.slug)), volume)
    return [*checks, check] if check is not None else checks


def run_checks(runtime: RuntimeKind, project_checks: Sequence[Check] = ()) -> DoctorReport:
    """The host's checks (the image engine, git, then each runtime's own), then those of the
    current project (`check_project_home`)."""
    from opencode_sandbox.runtime.select import describe

    backends = [
        Check(check.name, check.ok, check.detail, check.fix, required_for=frozenset({kind}))
        for kind in RuntimeKind for check in describe(kind).host_checks(selected=kind is runtime)
    ]
    return DoctorReport(runtime, (check_docker(), check_git(), *backends, *project_checks))


