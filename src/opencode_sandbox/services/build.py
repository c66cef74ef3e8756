"""`build`: the project's runner image (and the base images under it), on demand."""

from __future__ import annotations

from typing import Any

from opencode_sandbox.app import App
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.images import updater
from opencode_sandbox.services.image_step import agent_version_for_run, build_progress, load_into_runtime


def _version(app: App, pinned: str | None) -> str:
    return updater.resolve_opencode_version(
        pinned, app.settings.releases_url, extra_ca_certificates=app.settings.extra_ca_certificates
    )


def _agent_version(app: App, pinned: str | None) -> str | None:
    """The terminal agent's version the build installs: `pinned`, else npm's latest."""
    from opencode_sandbox.core.agents import SessionKind
    from opencode_sandbox.errors import UsageError

    profile = app.settings.agent_profile
    if profile.session is SessionKind.SERVER and pinned:
        raise UsageError(f"--agent-version pins a terminal agent's version, not {profile.title}'s",
                         hint="pin opencode with --opencode-version, or choose the agent with --agent")
    if profile.install and pinned:
        raise UsageError(f"{profile.title} is installed by its own install script, which chooses its version",
                         hint="pin the version in the install script under 'agents' in your configuration")
    return agent_version_for_run(app, pinned, reuse_built=False)


def _image_inputs(app: App, version: str, dind: bool | None, rebuild: bool,
                  agent_version: str | None = None) -> dict[str, Any]:
    """What the project image depends on; `build -r` rebuilds the base images too."""
    settings = app.settings
    return {
        "agent": settings.agent_profile,
        "agent_version": agent_version,
        "project_dir": app.project.root,
        "slug": app.project.slug,
        "dind": settings.dind if dind is None else dind,
        "opencode_version": version,
        "trust_host_ca": settings.trust_host_ca,
        "extra_ca_certificates": settings.extra_ca_certificates,
        "rebuild": rebuild,
        "rebuild_base": rebuild,
    }


def build(app: App, rebuild: bool, pinned_version: str | None, dind: bool | None,
          pinned_agent_version: str | None = None) -> None:
    from opencode_sandbox.images.builder import ensure_project_image

    agent_version = _agent_version(app, pinned_agent_version)
    version = _version(app, pinned_version)
    app.state.know(app.project.slug)
    result = ensure_project_image(**_image_inputs(app, version, dind, rebuild, agent_version),
                                  verbose=app.console.verbose_enabled, progress=build_progress(app.console))
    updater.record_baked_version(app.paths.state_dir, version, app.console.warn)
    versions = f"opencode {version}"
    if agent_version:
        updater.record_baked_agent_version(app.paths.state_dir, app.settings.agent, agent_version, app.console.warn,
                                           package=app.settings.agent_profile.package)
        versions += f", {app.settings.agent} {agent_version}"
    elif agent_version is not None:
        versions += f", {app.settings.agent} from its install script"
    state = "built" if result.built else "up to date"
    if load_into_runtime(app.runtime, app.console, result.reference).loaded_now:
        state += f", loaded into {app.runtime.kind.value}"
    app.console.result(f"{result.reference} {state} ({versions}, {result.image_id[:19]})")


def _planned_agent_version(app: App) -> str | None:
    """The terminal agent's version a plan shows: the one its last build installed, if any."""
    from opencode_sandbox.core.agents import SessionKind

    profile = app.settings.agent_profile
    if profile.session is SessionKind.SERVER:
        return None
    if profile.install:
        return ""
    return updater.baked_agent_version(app.paths.state_dir, profile.name, package=profile.package)


def describe_build(app: App, rebuild: bool, pinned_version: str | None, dind: bool | None) -> None:
    from opencode_sandbox.images.builder import plan_project_image

    try:
        version = _version(app, pinned_version)
    except SandboxError:
        baked = updater.baked_version(app.paths.state_dir, app.console.warn)
        if baked is None:
            raise
        app.console.warn(f"cannot look up the latest opencode release; showing the plan for {baked}")
        version = baked
    agent_version = _planned_agent_version(app)
    plan = plan_project_image(**_image_inputs(app, version, dind, rebuild, agent_version))
    for image in plan.images:
        app.console.result(f"{image.action.value}: {image.reference} ({image.reason})")
    if not plan.builds_anything:
        app.console.result("nothing to build")
        project_image = plan.images[-1].reference
        if app.runtime.loaded_image(project_image) is None:
            app.console.result(f"load: {project_image} into {app.runtime.kind.value} (not loaded yet)")


def effective_dockerfile(app: App, dind: bool | None = None) -> str:
    from opencode_sandbox.images.builder import effective_dockerfile_text

    return effective_dockerfile_text(app.project.root, app.settings.dind if dind is None else dind)
