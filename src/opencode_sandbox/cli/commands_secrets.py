"""The `secrets` group: which secrets the project's VM gets, and bringing opencode's API keys over."""

from __future__ import annotations

import click

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.cli.app_passing import pass_app

if TYPE_CHECKING:
    from opencode_sandbox.app import App


@click.group()
def secrets() -> None:
    """Environment variables whose value stays on this host: the VM sees a placeholder, which
    the runtime replaces with the value only in requests to the secret's hosts."""


@secrets.command(name="list")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@pass_app
def list_secrets(app: App, output_format: str) -> None:
    """List the project's secrets: name, hosts, header fields and where the value comes from
    (environment, a secrets.env file, or missing). Never the value."""
    from opencode_sandbox.cli.render import render_secrets
    from opencode_sandbox.services.secrets import look_up_for

    click.echo(render_secrets(look_up_for(app), output_format))


@secrets.command(name="import")
@click.option("--from", "auth_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="opencode's stored logins to read (default: ~/.local/share/opencode/auth.json).")
@pass_app
def import_secrets(app: App, auth_path: str | None) -> None:
    """Turn the API keys in opencode's stored logins into secrets: each key of a known provider
    goes to ~/.config/opencode-sandbox/secrets.env (mode 600), its name and hosts to
    ~/.config/opencode-sandbox/config.yaml. From then on the key is no longer copied into the VM.
    Refreshable (OAuth) logins are not imported: log in inside the sandbox instead."""
    from pathlib import Path

    from opencode_sandbox.services.secrets import auth_file, import_keys

    report = import_keys(Path(auth_path).expanduser() if auth_path else auth_file(), app.paths.config_dir)
    say = app.console.info
    if report.imported:
        say(f"Imported from {report.auth_file}: {', '.join(report.imported)}.")
        say(f"Values in {report.values_file}; names and hosts in {report.config_file}"
            + (f" (added {', '.join(report.configured)})." if report.configured else " (already there)."))
    else:
        say(f"No API key of a known provider in {report.auth_file}.")
    if report.elsewhere:
        app.console.warn(f"not imported: {', '.join(report.elsewhere)} already set in {report.config_file} for "
                         "other hosts; left as it is")
    if report.unknown:
        app.console.warn(f"not imported, unknown provider(s): {', '.join(report.unknown)}: set them as secrets by "
                         "hand, with the variable the provider reads and its hosts (see docs/security.md)")
    if report.logins:
        app.console.warn(f"not imported, refreshable login(s): {', '.join(report.logins)}: log in inside the "
                         "sandbox instead (`opencode-sandbox shell`, then `opencode auth login`)")


def register(group: click.Group) -> None:
    group.add_command(secrets)
