"""Pre-flight checks: can the selected runtime work on this host, and if not, what to do."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import RuntimeUnavailable, SandboxError
from opencode_sandbox.runtime.types import RuntimeKind, SandboxStatus
from opencode_sandbox.ui.console import Console, style

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


def check_kvm() -> Check:
    from opencode_sandbox.runtime.microsandbox.kvm import probe_kvm

    probe = probe_kvm()
    if probe.ok:
        return Check("kvm", True, "/dev/kvm usable", required_for=frozenset({RuntimeKind.MICROSANDBOX}))
    return Check("kvm", False, f"microVMs cannot run here: {probe.cause}",
                 f"{probe.fix}" if probe.fix and "--runtime docker" in probe.fix
                 else f"{probe.fix}; or use `--runtime docker`",
                 required_for=frozenset({RuntimeKind.MICROSANDBOX}))


def check_git() -> Check:
    if shutil.which("git") is None:
        return Check("git", False, "git is not installed", "install git (for example `apt-get install git`)",
                     required_for=frozenset())
    result = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False)
    return Check("git", result.returncode == 0, result.stdout.strip() or result.stderr.strip(),
                 required_for=frozenset())


def check_msb() -> Check:
    from opencode_sandbox.runtime.microsandbox.cli import locate_msb, msb_version

    required = frozenset({RuntimeKind.MICROSANDBOX})
    try:
        binary = locate_msb()
        version = msb_version(binary)
    except SandboxError as error:
        return Check("msb", False, error.message, error.hint, required_for=required)
    except OSError as error:
        return Check("msb", False, f"msb cannot run: {error}",
                     "reinstall opencode-sandbox, or use `--runtime docker`", required_for=required)
    return Check("msb", True, f"{version} at {binary}", required_for=required)


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
    from opencode_sandbox.runtime.docker.nft_ruleset import docker_refusal, needs_proxy

    described = policy.describe()
    refusal = docker_refusal(policy, dind) if runtime is RuntimeKind.DOCKER else None
    if refusal is not None:
        return Check("network", False, f"{described}: {refusal.message}", refusal.hint,
                     required_for=frozenset({runtime}), of_project=True)
    if policy.profile is Profile.ALL:
        return Check("network", False, f"{described}: no restriction, the VM reaches this host and its network",
                     "set `network: public` to keep private ranges and this host out of reach",
                     required_for=frozenset(), of_project=True)
    if runtime is RuntimeKind.MICROSANDBOX:
        enforcer = "msb's policy engine"
    elif needs_proxy(policy):
        enforcer = ("the project's egress proxy (mitmproxy): only HTTP(S) through it and the address ranges "
                    "allowed leave the VM")
    else:
        enforcer = "nftables in the VM's network"
    return Check("network", True, f"{described} (enforced by {enforcer})", of_project=True)


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


def check_user_mapping() -> list[Check]:
    """For a root host user, whether the docker runtime can map the checkout to `dev` (never uid 0)."""
    import os
    import tempfile
    from pathlib import Path

    if os.geteuid() != 0:
        return []
    from opencode_sandbox.runtime.docker import idmapped_mount

    name = f"doctor-{os.getpid()}"
    try:
        with tempfile.TemporaryDirectory(prefix="opencode-sandbox-doctor-") as folder:
            try:
                idmapped_mount.ensure_mapped(Path(folder), idmapped_mount.mapped_path(name, 0),
                                             shown_uid=1000, shown_gid=1000)
            finally:
                idmapped_mount.unmount_all(name)
    except SandboxError as error:
        return [Check("users", False, f"root's files cannot be mapped to dev: {error.message}", error.hint,
                      required_for=frozenset({RuntimeKind.DOCKER}))]
    return [Check("users", True, "id-mapped mounts work: on docker, dev writes root's checkout without being uid 0",
                  required_for=frozenset({RuntimeKind.DOCKER}))]


def run_checks(runtime: RuntimeKind, project_checks: Sequence[Check] = ()) -> DoctorReport:
    """The host's checks, then those of the current project (`check_project_home`)."""
    mapping = check_user_mapping() if runtime is RuntimeKind.DOCKER else []
    return DoctorReport(runtime, (check_docker(), check_kvm(), check_git(), check_msb(), *mapping, *project_checks))


def require_ready(runtime: RuntimeKind) -> None:
    """Raise for the first check the selected runtime cannot do without."""
    report = run_checks(runtime)
    for failure in report.failures:
        raise RuntimeUnavailable(failure.detail, hint=failure.fix)


def render_report(report: DoctorReport, console: Console, stream: TextIO | None = None) -> None:
    """The checks on stdout, one a line with its fix; the verdict for the runtime last."""
    stream = stream or sys.stdout
    for check in report.checks:
        needed = report.runtime in check.required_for
        mark = style("ok  ", "green", stream) if check.ok else (
            style("FAIL", "red", stream) if needed else style("warn", "yellow", stream))
        print(f"{mark} {check.name:<7} {check.detail}", file=stream)
        if not check.ok and check.fix:
            print(f"     {'':<7} fix: {check.fix}", file=stream)
    host_failures = [check.name for check in report.failures if not check.of_project]
    project_failures = [check.name for check in report.failures if check.of_project]
    if host_failures:
        console.error(f"the {report.runtime} runtime cannot work on this host ({', '.join(host_failures)})",
                      "apply the fixes above, then run `opencode-sandbox doctor` again")
        return
    print(f"The {report.runtime} runtime can work on this host.", file=stream)
    if project_failures:
        console.error(f"this project's VM cannot work as it is ({', '.join(project_failures)})",
                      "apply the fixes above, then run `opencode-sandbox doctor` again")
