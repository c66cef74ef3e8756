"""The effective Dockerfile of a project and the rule that it must end as `USER dev`.

`USER 1000` is refused on purpose: sandboxes run commands as the named user `dev` and fill
the home volume from `/home/dev`; a bare uid only means `dev` if the image happens to map
it so, and one clear spelling keeps the rule checkable without building.
"""

from __future__ import annotations

from pathlib import Path

from opencode_sandbox.core.naming import BASE_IMAGE, BASE_IMAGE_DIND
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import UsageError
from opencode_sandbox.images.dockerfile import Stage, parse_stages

PROJECT_FOLDER = ".opencode-sandbox"
REQUIRED_USER = "dev"
_ACCEPTED_GROUPS = ("", "dev")

BASE_DOCKERFILE = "runner-base.Dockerfile"
BASE_DIND_DOCKERFILE = "runner-base-dind.Dockerfile"
DIND_START_SCRIPT = "opencode-sandbox-start-docker"


class EffectiveDockerfile(Record):
    text: str
    source: Path | None
    """The project's own Dockerfile, None when the default one-line Dockerfile is used."""
    context_dir: Path | None
    """The folder whose files form the build context (the project's `.opencode-sandbox/`);
    None for the default Dockerfile."""

    @property
    def display_name(self) -> str:
        return str(self.source) if self.source else "the default Dockerfile"


def project_dockerfile_path(project_dir: Path) -> Path:
    return project_dir / PROJECT_FOLDER / "Dockerfile"


def default_dockerfile(dind: bool) -> str:
    return f"FROM {BASE_IMAGE_DIND if dind else BASE_IMAGE}\n"


def packaged_file(name: str) -> str:
    """A file shipped with the package next to the base Dockerfiles."""
    return (Path(__file__).parent / "dockerfiles" / name).read_text("utf-8")


def base_dockerfile(dind: bool) -> str:
    return packaged_file(BASE_DIND_DOCKERFILE if dind else BASE_DOCKERFILE)


def read_dockerfile(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(
            f"Dockerfile not found: {path}",
            hint="Create it, or remove the reference to it.",
        ) from None
    except IsADirectoryError:
        raise UsageError(
            f"{path} is a directory, not a Dockerfile",
            hint=f"Put the project's image definition in the file {path}.",
        ) from None
    except UnicodeDecodeError:
        raise UsageError(
            f"{path} is not UTF-8 text",
            hint="Save the Dockerfile as UTF-8 text.",
        ) from None
    except OSError as error:
        raise UsageError(
            f"cannot read {path}: {error.strerror or error}",
            hint="Check the file's permissions.",
        ) from None


def effective_dockerfile(project_dir: Path, dind: bool) -> EffectiveDockerfile:
    """The project's `.opencode-sandbox/Dockerfile`, else a one-line FROM of a base image."""
    if not project_dir.is_dir():
        raise UsageError(
            f"project folder not found: {project_dir}",
            hint="Run opencode-sandbox inside the project's checkout.",
        )
    path = project_dockerfile_path(project_dir)
    folder = path.parent
    if not path.exists() and not path.is_symlink():
        # The one-line default copies nothing, so no project file can change the image.
        return EffectiveDockerfile(default_dockerfile(dind), None, None)
    text = read_dockerfile(path)
    check_final_user(text, str(path))
    return EffectiveDockerfile(text, path, folder)


def final_user(stages: list[Stage]) -> str | None:
    """The user the final stage ends with; None when it inherits from an outside image.

    Our base images end as `dev`, so a stage built on them without USER ends as `dev`.
    """
    by_name = {stage.name: stage for stage in stages if stage.name}
    stage: Stage | None = stages[-1] if stages else None
    visited: set[int] = set()
    while stage is not None and id(stage) not in visited:
        visited.add(id(stage))
        users = [i.arguments for i in stage.instructions if i.keyword == "USER"]
        if users:
            return users[-1].strip()
        if stage.base in (BASE_IMAGE, BASE_IMAGE_DIND):
            return REQUIRED_USER
        stage = by_name.get(stage.base.lower())
    return None


def is_dev_user(value: str) -> bool:
    user, _, group = value.partition(":")
    return user == REQUIRED_USER and group in _ACCEPTED_GROUPS


def check_final_user(text: str, source_name: str) -> None:
    """Raise UsageError unless the final stage of the Dockerfile ends as `USER dev`."""
    stages = parse_stages(text)
    if not stages:
        raise UsageError(
            f"{source_name} has no FROM instruction",
            hint="Start it with: FROM opencode-sandbox/runner-base:latest",
        )
    user = final_user(stages)
    if user is None:
        raise UsageError(
            f"{source_name} must end with USER dev: its final stage does not set a user",
            hint="Add 'USER dev' as the last USER instruction of the final stage.",
        )
    if not is_dev_user(user):
        raise UsageError(
            f"{source_name} must end with USER dev, but its final stage ends with USER {user}",
            hint="Switch back with 'USER dev' after the steps that need another user.",
        )
