"""The application context of one command: console, folders, project, settings, runtimes.

It is opened once per command, after the command line is read whole (the global flags and the
command's own), so the configuration is loaded and reported once. Services receive it, or the
collaborators they use from it; nothing here knows the command line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.config.loader import config_files, load_settings
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.project import GitPaths, GitPathsQuery, Project, resolve_project
from opencode_sandbox.ui.console import Console

if TYPE_CHECKING:
    from opencode_sandbox.config.settings import Settings
    from opencode_sandbox.engine.base import ImageEngine
    from opencode_sandbox.guest.operations import Guest, GuestFactory
    from opencode_sandbox.runtime.base import Runtime
    from opencode_sandbox.state.store import StateStore

class App:
    def __init__(
        self,
        console: Console,
        paths: ToolPaths,
        project: Project,
        settings: Settings,
        assume_yes: bool = False,
        interactive: bool = False,
        runtime: Runtime | None = None,
        other_runtime: Runtime | None = None,
        image_engine: ImageEngine | None = None,
        guests: GuestFactory | None = None,
    ) -> None:
        self.console = console
        self.paths = paths
        self.project = project
        self.settings = settings
        self.assume_yes = assume_yes
        self.interactive = interactive
        self._runtime = runtime
        self._other_runtime = other_runtime
        self._other_runtime_found = other_runtime is not None
        self._image_engine = image_engine
        self._guests = guests
        self._flags: Mapping[str, object] = {}
        self._git_paths: tuple[GitPaths | None] | None = None
        self._git_query: GitPathsQuery | None = None

    @classmethod
    def open(
        cls,
        console: Console,
        cwd: Path,
        flags: Mapping[str, object],
        assume_yes: bool,
        interactive: bool,
    ) -> App:
        """`flags`: the settings given on the command line (`runtime`, `cpus`, `memory`), None
        where not given; they take precedence over the environment and the files."""
        paths = ToolPaths.from_environment()
        project = resolve_project(cwd)
        settings = _with_agent_credentials(
            load_settings(config_files(paths.config_dir, project.slug, project.root), os.environ, flags),
            paths.config_dir, project.slug)
        app = cls(console, paths, project, settings, assume_yes, interactive)
        app._flags = flags
        if not project.is_git:
            console.warn(
                f"{project.root} is not inside a git repository; the project is identified "
                "by this folder's path"
            )
        app.report_sources()
        return app

    def reload_settings(self) -> None:
        """Read the configuration again: the checkout's own file was just put back as it was."""
        self.settings = _with_agent_credentials(
            load_settings(config_files(self.paths.config_dir, self.project.slug, self.project.root), os.environ,
                          self._flags),
            self.paths.config_dir, self.project.slug)

    def report_sources(self) -> None:
        if not self.console.verbose_enabled:
            return
        from opencode_sandbox.config.keys import KEYS
        from opencode_sandbox.config.render import render_value

        self.console.verbose(f"project {self.project.slug} at {self.project.root}")
        for key in KEYS:
            value = render_value(key, getattr(self.settings, key.attribute))
            self.console.verbose(f"config {key.name} = {value}  ({self.settings.sources[key.name]})")

    def ask_git_paths_early(self) -> None:
        """Start asking git for `git_paths` now, for a caller that will need them after other work."""
        if self._git_paths is None and self._git_query is None and self.project.is_git:
            self._git_query = GitPathsQuery(self.project.root)

    @property
    def git_paths(self) -> GitPaths | None:
        """Where the checkout's git keeps its files, asked once per command; None outside git."""
        if self._git_paths is None:
            if self.project.is_git:
                query, self._git_query = self._git_query or GitPathsQuery(self.project.root), None
                self._git_paths = (query.answer(),)
            else:
                self._git_paths = (None,)
        return self._git_paths[0]

    @property
    def state(self) -> StateStore:
        from opencode_sandbox.state.store import StateStore

        return StateStore(self.paths.state_dir, warn=self.console.warn)

    def recorded_home(self, slug: str) -> str | None:
        """The home volume this user's state file records for a project: what makes an object of
        an older version, without an owner label, this user's on a shared Docker engine."""
        return self.state.load(slug).home_volume

    @property
    def runtime(self) -> Runtime:
        """The chosen runtime; a runtime with a notice (docker: what it gives up) says it once per process."""
        if self._runtime is None:
            from opencode_sandbox.runtime.select import make_runtime

            runtime = make_runtime(self.settings.runtime, self.recorded_home, one_command=True)
            if runtime.description.notice is not None:
                self.console.warn_once(runtime.description.notice)
            self._runtime = runtime
        return self._runtime

    def guest(self, vm: str) -> Guest:
        """What this tool runs inside the VM `vm`, by name, through the chosen runtime."""
        if self._guests is None:
            from opencode_sandbox.guest.shell import ShellGuest

            self._guests = ShellGuest
        return self._guests(self.runtime, vm)

    @property
    def image_engine(self) -> ImageEngine:
        """Where runner images are built and kept: the Docker engine."""
        if self._image_engine is None:
            from opencode_sandbox.engine.docker import DockerImageEngine

            self._image_engine = DockerImageEngine()
        return self._image_engine

    @property
    def other_runtime(self) -> Runtime | None:
        """The runtime not chosen, when it is installed here (None otherwise)."""
        if not self._other_runtime_found:
            from opencode_sandbox.runtime.select import other_runtime

            self._other_runtime = other_runtime(self.runtime.kind, self.recorded_home)
            self._other_runtime_found = True
        return self._other_runtime


def _with_agent_credentials(settings: Settings, config_dir: Path, slug: str) -> Settings:
    """`settings` with the agent's credentials that have a value on this host as secrets."""
    from opencode_sandbox.core.agents import implied_secrets
    from opencode_sandbox.core.egress import Profile

    profile = settings.agent_profile
    # Not when the checkout chose the agent (it may not widen what the VM gets), nor where nothing
    # could carry the key.
    if not profile.credentials or settings.agent_from_checkout or settings.network is Profile.NONE:
        return settings

    def has_value(name: str) -> bool:
        if os.environ.get(name):
            return True
        from opencode_sandbox.config.secret_files import read_values, values_files

        return any(read_values(path).get(name) for path in values_files(config_dir, slug))

    implied = implied_secrets(profile, settings.secrets, has_value)
    if not implied:
        return settings
    sources = {**settings.sources, "secrets": settings.sources["secrets"] + f" and the {profile.title} credentials"}
    return settings._replace(secrets=settings.secrets + implied, sources=sources)
