"""The image step of run and shell: verify or build, load into the runtime, offer upgrades."""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.app import App
from opencode_sandbox.core.agents import DEFAULT_AGENT
from opencode_sandbox.core.naming import LABEL_DIND
from opencode_sandbox.core.records import Record
from opencode_sandbox.images import updater
from opencode_sandbox.runtime.types import ImageInfo
from opencode_sandbox.services import image_record
from opencode_sandbox.state.files import ensure_private_dir
from opencode_sandbox.state_layout import StateLayout
from opencode_sandbox.ui.progress import slow_step

if TYPE_CHECKING:
    from opencode_sandbox.engine.base import ImageEngine
    from opencode_sandbox.images.progress import RichBuildProgress
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.ui.console import Console

RETRY_AFTER_S = 600.0


class ReadyImage(Record):
    reference: str
    """The Docker image's reference; once `runnable`, what the runtime runs (for microsandbox: as
    loaded)."""
    digest: str
    """The image's ID (the runtime's digest of a loaded image is the same)."""
    env: dict[str, str]
    opencode_version: str | None
    built: bool
    dind: bool = False
    """Built on the Docker-in-Docker base: its Docker engine is started after boot."""


class UpdateCheck:
    """The release check, in a detached process so an offline machine never makes a start wait.

    Its answer is recorded in updater.yaml, where this run or the next one finds it.
    """

    def __init__(self, app: App) -> None:
        self._app = app

    def start(self) -> None:
        from datetime import UTC, datetime

        state_root = self._app.paths.state_dir
        state = updater.load_state(state_root, self._app.console.warn)
        if not updater.check_due(state, datetime.now(UTC)) or self._tried_recently(state_root):
            return
        import subprocess
        import sys

        try:
            subprocess.Popen(
                [sys.executable, "-m", "opencode_sandbox.images.release_check", str(state_root),
                 self._app.settings.releases_url, *map(str, self._app.settings.extra_ca_certificates)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        except OSError as error:
            self._app.console.verbose(f"opencode update check not started: {error}")

    @staticmethod
    def _tried_recently(state_root: Path) -> bool:
        """A check that failed (offline) is retried, but not by every start within minutes."""
        import time

        stamp = StateLayout(state_root).update_attempt
        try:
            if time.time() - stamp.stat().st_mtime < RETRY_AFTER_S:
                return True
        except FileNotFoundError:
            pass
        ensure_private_dir(state_root)
        stamp.touch()
        return False

    def pending_version(self, baked: str | None) -> str | None:
        """The newer release to offer or mention now, recording that it was shown."""
        state_root = self._app.paths.state_dir
        state = updater.load_state(state_root, self._app.console.warn)
        baked = baked or state.baked_version
        action = updater.decide_update(state, baked, self._app.interactive)
        if action is updater.UpdateAction.NOTHING or state.latest_version is None:
            return None
        decision = updater.UpdateDecision(
            action=action, baked_version=baked, latest_version=state.latest_version, checked=False
        )
        updater.record_shown(state_root, decision, self._app.console.warn)
        latest = state.latest_version
        return self._offered(action, latest, f"opencode {latest} is available (this image has {baked}); "
                                             "run `opencode-sandbox build` to upgrade")

    def pending_agent_version(self) -> str | None:
        """The newer release of the project's terminal agent to offer now (or mention), recording
        that it was shown."""
        state_root = self._app.paths.state_dir
        agent = self._app.settings.agent
        action, latest, baked = updater.agent_update(updater.load_state(state_root, self._app.console.warn), agent,
                                                     self._app.interactive)
        if action is updater.UpdateAction.NOTHING or latest is None:
            return None
        updater.record_agent_shown(state_root, agent, latest, action, self._app.console.warn)
        title = self._app.settings.agent_profile.title
        return self._offered(action, latest, f"{title} {latest} is available (this image has {baked}); run "
                                             f"`opencode-sandbox build --agent {agent}` to upgrade")

    def _offered(self, action: updater.UpdateAction, latest: str, notice: str) -> str | None:
        """`latest` when the user is to be asked about it; otherwise it is mentioned in `notice`."""
        if action is updater.UpdateAction.OFFER_REBUILD:
            return latest
        self._app.console.info(notice)
        return None


def opencode_version_for_run(app: App, upgrade_to: str | None) -> str:
    """The baked version, reused so the image identity stays stable across runs."""
    if upgrade_to:
        return upgrade_to
    baked = updater.baked_version(app.paths.state_dir, app.console.warn)
    if baked:
        return baked
    return updater.resolve_opencode_version(
        None, app.settings.releases_url, extra_ca_certificates=app.settings.extra_ca_certificates
    )


def _project_state_dir(app: App) -> Path:
    return StateLayout(app.paths.state_dir).project(app.project.slug).folder


def agent_version_for_run(app: App, pinned: str | None = None, reuse_built: bool = True) -> str | None:
    """The version of a terminal agent its images are built with: `pinned`, else the one the last
    build for it used (unless not `reuse_built`), else npm's latest. None for an agent in the base
    image (opencode); empty for one its own install script installs."""
    from opencode_sandbox.core.agents import SessionKind

    profile = app.settings.agent_profile
    if profile.session is SessionKind.SERVER:
        return None
    if profile.install:
        return ""
    reused = reuse_built and not pinned
    baked = (updater.baked_agent_version(app.paths.state_dir, profile.name, app.console.warn, package=profile.package)
             if reused else None)
    return baked or updater.resolve_agent_version(profile.title, profile.package, pinned,
                                                  extra_ca_certificates=app.settings.extra_ca_certificates)


def _signature(app: App, version: str, agent_version: str | None) -> str:
    import json

    # An agent of the user's own changes with their configuration, not with this tool's version.
    inputs = version if agent_version is None else json.dumps([version, app.settings.agent_profile, agent_version])
    return image_record.inputs_signature(app.image_engine, app.project, app.settings, inputs)


def _recalled(app: App, signature: str) -> image_record.CheckedImage | None:
    """The image the last full check found, when none of its inputs changed since."""
    return image_record.recall(app.image_engine, _project_state_dir(app), signature)


def ensure_image(app: App, rebuild: bool, upgrade_to: str | None = None,
                 agent_upgrade_to: str | None = None) -> ReadyImage:
    """The project's image, checked or built in the Docker engine. The runtime is not asked: a
    start that keeps its VM never needs to (`runnable` loads the image where a VM is made)."""
    engine = app.image_engine
    version = opencode_version_for_run(app, upgrade_to)
    agent_version = agent_version_for_run(app, agent_upgrade_to)
    signature = _signature(app, version, agent_version)
    checked = None if rebuild else _recalled(app, signature)
    if checked is None:
        checked = _full_check(app, rebuild, version, engine, agent_version)
        image_record.remember(_project_state_dir(app), signature, checked)
    return ReadyImage(
        reference=checked.reference,
        digest=checked.image_id,
        env=dict(checked.env),
        opencode_version=checked.opencode_version,
        built=checked.built,
        dind=checked.labels.get(LABEL_DIND) == "true",
    )


def predict_image(app: App, rebuild: bool) -> tuple[ReadyImage, list[str]]:
    """What `ensure_image` would run, and the images it would build first, changing nothing. The
    digest is empty where it would build or load the image first; the version is the baked one."""
    version = updater.baked_version(app.paths.state_dir, app.console.warn) or "latest"
    agent_version = None
    profile = app.settings.agent_profile
    if profile.install:
        agent_version = ""
    elif profile.name != DEFAULT_AGENT:
        baked = updater.baked_agent_version(app.paths.state_dir, profile.name, package=profile.package)
        agent_version = baked or "latest"
    recalled = None if rebuild else _recalled(app, _signature(app, version, agent_version))
    if recalled is not None:
        reference, env = recalled.reference, dict(recalled.env)
    else:
        from opencode_sandbox.images.builder import plan_project_image
        from opencode_sandbox.images.image_document import env_of

        settings = app.settings
        planned = plan_project_image(
            project_dir=app.project.root, slug=app.project.slug, dind=settings.dind, opencode_version=version,
            trust_host_ca=settings.trust_host_ca, extra_ca_certificates=settings.extra_ca_certificates,
            rebuild=rebuild, engine=app.image_engine, agent=settings.agent_profile, agent_version=agent_version,
        )
        building = [image.reference for image in planned.images if image.action.value == "build"]
        reference = planned.images[-1].reference
        if building:
            return ReadyImage(reference, "", {}, None, True), building
        document = app.image_engine.inspect_image(reference)
        env = env_of(document) if document is not None else {}
    loaded = app.runtime.loaded_image(reference)
    return ReadyImage(loaded.reference if loaded else reference, loaded.digest if loaded else "", env, None,
                      False), []


def runnable(runtime: Runtime, console: Console, image: ReadyImage) -> ReadyImage:
    """The image as the runtime runs it, loaded into it first where needed."""
    loaded = load_into_runtime(runtime, console, image.reference).image
    return image._replace(reference=loaded.reference, digest=loaded.digest)


class LoadedImage(Record):
    image: ImageInfo
    loaded_now: bool
    """False when the runtime already held this very image."""


def load_into_runtime(runtime: Runtime, console: Console, reference: str) -> LoadedImage:
    """Make the built image runnable by the runtime; a load (microsandbox only, tens of seconds
    for a large image) is shown as a step of its own."""
    present = runtime.loaded_image(reference)
    if present is not None:
        return LoadedImage(present, False)
    with slow_step(console, f"Loading {reference} into {runtime.kind.value}"):
        return LoadedImage(runtime.load_image(reference), True)


def build_progress(console: Console) -> RichBuildProgress:
    """A build's progress, shown where the command's messages go."""
    from typing import TextIO, cast

    from opencode_sandbox.images.progress import RichBuildProgress

    return RichBuildProgress(stream=cast("TextIO", console.stream), verbose=console.verbose_enabled)


def _full_check(app: App, rebuild: bool, version: str, engine: ImageEngine,
                agent_version: str | None) -> image_record.CheckedImage:
    """Hash every input of the image and build it when the result is not in the engine yet."""
    from opencode_sandbox.images.builder import ensure_project_image

    settings = app.settings
    result = ensure_project_image(
        project_dir=app.project.root,
        slug=app.project.slug,
        dind=settings.dind,
        opencode_version=version,
        trust_host_ca=settings.trust_host_ca,
        extra_ca_certificates=settings.extra_ca_certificates,
        rebuild=rebuild,
        verbose=app.console.verbose_enabled,
        engine=engine,
        progress=build_progress(app.console),
        agent=settings.agent_profile,
        agent_version=agent_version,
    )
    if result.built or updater.baked_version(app.paths.state_dir, app.console.warn) != version:
        updater.record_baked_version(app.paths.state_dir, version, app.console.warn)
    state_root = app.paths.state_dir
    package = settings.agent_profile.package
    if agent_version and updater.baked_agent_version(state_root, settings.agent, package=package) != agent_version:
        updater.record_baked_agent_version(state_root, settings.agent, agent_version, app.console.warn, package=package)
    return image_record.CheckedImage(result.reference, result.image_id, dict(result.env), result.opencode_version,
                        dict(result.labels), result.built)
