"""The application context: built once per command from global flags and configuration."""

from __future__ import annotations

import os
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.config.loader import config_files, load_settings
from opencode_sandbox.paths import ToolPaths
from opencode_sandbox.project import Project, resolve_project
from opencode_sandbox.ui.console import Console

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.config.settings import Settings
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
        global_flags: dict[str, Any] | None = None,
        runtime: Runtime | None = None,
        other_runtime: Runtime | None = None,
    ) -> None:
        self.console = console
        self.paths = paths
        self.project = project
        self.settings = settings
        self.assume_yes = assume_yes
        self.interactive = interactive
        self.global_flags = dict(global_flags or {})
        self._runtime = runtime
        self._other_runtime = other_runtime
        self._other_runtime_found = other_runtime is not None

    @classmethod
    def create(
        cls,
        console: Console,
        cwd: Path,
        global_flags: dict[str, Any],
        assume_yes: bool,
        interactive: bool,
    ) -> App:
        paths = ToolPaths.from_environment()
        project = resolve_project(cwd)
        settings = load_settings(
            config_files(paths.config_dir, project.slug, project.root), os.environ, global_flags
        )
        app = cls(console, paths, project, settings, assume_yes, interactive, dict(global_flags))
        if not project.is_git:
            console.warn(
                f"{project.root} is not inside a git repository; the project is identified "
                "by this folder's path"
            )
        app.report_sources()
        return app

    def with_flags(self, flags: dict[str, Any]) -> None:
        """Re-merge the configuration with a command's own flags (cpus, memory, ...)."""
        merged = {**self.global_flags, **{k: v for k, v in flags.items() if v is not None}}
        self.settings = load_settings(
            config_files(self.paths.config_dir, self.project.slug, self.project.root),
            os.environ,
            merged,
        )
        self.report_sources()

    def report_sources(self) -> None:
        if not self.console.verbose_enabled:
            return
        from opencode_sandbox.config.keys import KEYS
        from opencode_sandbox.config.render import render_value

        self.console.verbose(f"project {self.project.slug} at {self.project.root}")
        for key in KEYS:
            value = render_value(key, getattr(self.settings, key.attribute))
            self.console.verbose(f"config {key.name} = {value}  ({self.settings.sources[key.name]})")

    @property
    def state(self) -> StateStore:
        from opencode_sandbox.state.store import StateStore

        return StateStore(self.paths.state_dir, warn=self.console.warn)

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            from opencode_sandbox.runtime.select import make_runtime

            self._runtime = make_runtime(self.settings.runtime, self.console)
        return self._runtime

    @property
    def other_runtime(self) -> Runtime | None:
        """The runtime not chosen, when it is installed here (None otherwise)."""
        if not self._other_runtime_found:
            from opencode_sandbox.runtime.select import other_runtime

            self._other_runtime = other_runtime(self.runtime.kind)
            self._other_runtime_found = True
        return self._other_runtime
