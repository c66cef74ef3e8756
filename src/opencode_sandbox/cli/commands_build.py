"""`build` (= `image build`), `build dockerfile`, and the `image` group."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import opener, pass_app
from opencode_sandbox.cli.option_table import AGENT_CHOICES
from opencode_sandbox.cli.options import prune_options

if TYPE_CHECKING:
    from opencode_sandbox.app import App


def _build_command(name: str) -> click.Group:
    @click.group(name=name, invoke_without_command=True)
    @click.option("-r", "--rebuild", is_flag=True,
                  help="Rebuild from scratch, ignoring every cached layer.")
    @click.option("-n", "--dry-run", is_flag=True, help="Say what would be built, build nothing.")
    @click.option("--opencode-version", metavar="VERSION",
                  help="Pin this opencode version (default: the latest release).")
    @click.option("--dind", is_flag=True, default=None,
                  help="Build on the Docker-in-Docker base image (default: config 'dind').")
    @click.option("--agent", metavar="NAME", help=f"Build the image of this agent: {AGENT_CHOICES}.")
    @click.option("--agent-version", metavar="VERSION",
                  help="Pin this version of the terminal agent's npm package (default: the latest release).")
    @click.pass_context
    def build(ctx: click.Context, rebuild: bool, dry_run: bool, opencode_version: str | None,
              dind: bool | None, agent: str | None, agent_version: str | None) -> None:
        """Build the project's runner image if anything it depends on changed.

        The base images it starts from are built first when they are missing or stale. On the
        microsandbox runtime the image is then loaded into it, unless it holds this very image
        already, so the next run does not wait for that.
        """
        if ctx.invoked_subcommand is not None:
            ctx.meta["dind"] = dind
            return
        from opencode_sandbox.services import build as builds

        app = opener().open(agent=agent)
        if dry_run:
            builds.describe_build(app, rebuild, opencode_version, dind)
        else:
            builds.build(app, rebuild, opencode_version, dind, agent_version)

    @build.command()
    @click.pass_context
    def dockerfile(ctx: click.Context) -> None:
        """Print the effective Dockerfile of this project."""
        from opencode_sandbox.services.build import effective_dockerfile

        click.echo(effective_dockerfile(opener().open(), ctx.meta.get("dind")), nl=False)

    return build


@click.group()
def image() -> None:
    """Runner images: list, build, prune."""


@image.command(name="list")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@pass_app
def image_list(app: App, output_format: str) -> None:
    """List this tool's runner images and whether the VM runtime has each loaded.

    The images are built in the Docker engine; microsandbox runs an image once it is loaded
    into it (`build` does that, and so does a run that finds it missing), the docker runtime
    runs them as they are.
    """
    from opencode_sandbox.cli.render import render_images
    from opencode_sandbox.services.listing import list_runner_images

    click.echo(render_images(list_runner_images(app), output_format))


@image.command(name="prune")
@prune_options
@pass_app
def image_prune(app: App, age: str | None, dry_run: bool, force: bool) -> None:
    """Remove cached runner images no project needs."""
    from opencode_sandbox.core.prune_plan import Scope
    from opencode_sandbox.services.prune import prune

    prune(app, age, Scope.IMAGES, dry_run, force)


image.add_command(_build_command("build"))


def register(group: click.Group) -> None:
    group.add_command(_build_command("build"))
    group.add_command(image)
