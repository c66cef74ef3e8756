"""The first questions a start asks the Docker engine, asked in the background while it loads.

Only questions whose answers cannot mislead when they are a few milliseconds old are asked
ahead: whether the engine answers, the base images' IDs (a rebuild by another project races
the same way when asked later) and the recorded project image (an image rebuilt meanwhile
shows another ID than the fresh record names, which only sends the start to the full check).
The VM and the home volume are asked later, under the client's lease and the setup lock.
"""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import BASE_IMAGES
from opencode_sandbox.runtime.docker_api import DockerApi, inspect_path
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.services.image_record import recorded_reference

if TYPE_CHECKING:
    from opencode_sandbox.app import App


def read_ahead_for_start(app: App) -> None:
    api = DockerApi.for_environment()
    if api is None:
        return
    paths = ["/_ping"] if app.settings.runtime is RuntimeKind.DOCKER else []
    paths += [inspect_path("image", reference) for reference in BASE_IMAGES]
    reference = recorded_reference(app.paths.state_dir / app.project.slug)
    if reference is not None:
        paths.append(inspect_path("image", reference))
    api.read_ahead(paths)
