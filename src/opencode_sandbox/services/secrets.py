"""Where each secret's value comes from, and bringing API keys over from opencode's logins.

A value is looked up at start, in order: the host's environment, the project's `secrets.env`
(in the per-project folder under the user's config folder, never in the checkout), the user's
`secrets.env`. A file others could read is refused; a secret with no value stops the start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.config.secret_files import VALUES_FILE, read_values, values_files
from opencode_sandbox.core.egress import SecretRule
from opencode_sandbox.core.providers import PROVIDERS, AuthEntry, auth_entries
from opencode_sandbox.core.records import Record
from opencode_sandbox.core.secrets import parse_secret, render_values_file
from opencode_sandbox.errors import UsageError
from opencode_sandbox.state.files import write_atomic

if TYPE_CHECKING:
    from opencode_sandbox.app import App

ENVIRONMENT = "environment"
MISSING = "missing"


class Lookup:
    """Each secret's source (`environment`, a file's path, or `missing`) and its value. Not a
    record: its values must never show in a `repr` that reaches a log."""

    def __init__(self, secrets: Sequence[SecretRule], sources: Mapping[str, str], values: Mapping[str, str],
                 looked_in: Sequence[str]) -> None:
        self.secrets = tuple(secrets)
        self.sources = dict(sources)
        self._values = dict(values)
        self.looked_in = tuple(looked_in)

    def __repr__(self) -> str:
        return f"Lookup(sources={self.sources!r})"

    @property
    def missing(self) -> list[str]:
        return [secret.name for secret in self.secrets if self.sources[secret.name] == MISSING]

    def values(self) -> dict[str, str]:
        """Every secret's value; a `UsageError` naming where it looked when one has none."""
        missing = self.missing
        if missing:
            example = missing[0]
            raise UsageError(
                f"no value for the secret(s) {', '.join(missing)}: looked in {', '.join(self.looked_in)}",
                hint=f"export {example}=... before running, add `{example}=...` to {self.looked_in[-1]} "
                "(chmod 600), or run `opencode-sandbox secrets import`",
            )
        return dict(self._values)


def look_up(secrets: Sequence[SecretRule], environ: Mapping[str, str], files: Sequence[Path]) -> Lookup:
    """Where each of `secrets` finds its value; every existing file is checked, used or not."""
    in_files = [(path, read_values(path)) for path in files] if secrets else []
    sources: dict[str, str] = {}
    values: dict[str, str] = {}
    for secret in secrets:
        sources[secret.name] = MISSING
        found = [(ENVIRONMENT, environ.get(secret.name, ""))]
        found += [(str(path), file_values.get(secret.name, "")) for path, file_values in in_files]
        for source, value in found:
            if value:
                sources[secret.name], values[secret.name] = source, value
                break
    return Lookup(secrets, sources, values, [ENVIRONMENT, *(str(path) for path in files)])


def look_up_for(app: App) -> Lookup:
    return look_up(app.settings.secrets, os.environ, values_files(app.paths.config_dir, app.project.slug))


# import -----------------------------------------------------------------------------------------


class ImportReport(Record):
    auth_file: Path
    imported: tuple[str, ...] = ()
    """`provider -> VARIABLE` of each key written."""
    unknown: tuple[str, ...] = ()
    """Providers with an API key this tool does not know the hosts of."""
    logins: tuple[str, ...] = ()
    """Providers with a refreshable (OAuth) login, which stays in opencode's own hands."""
    values_file: Path | None = None
    config_file: Path | None = None
    configured: tuple[str, ...] = ()
    """The secrets added to the configuration file (the others were there already)."""
    elsewhere: tuple[str, ...] = ()
    """Variables the configuration file already sends to other hosts: left as they are."""


def auth_file() -> Path:
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local/share")
    return data_home / "opencode" / "auth.json"


def import_keys(auth_path: Path, config_dir: Path) -> ImportReport:
    """Each `api` login of a known provider in `auth_path` becomes a secret: its value in the
    user's `secrets.env`, its name and hosts in the user's configuration file."""
    from opencode_sandbox.config.edit import add_secrets, secrets_in

    try:
        entries = auth_entries(json.loads(auth_path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UsageError(f"{auth_path} does not exist: opencode has no stored logins to import",
                         hint="log in with `opencode auth login` on this host first, or set secrets by hand "
                         "(docs/security.md)") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(f"{auth_path} cannot be read as opencode's logins: {error}",
                         hint="check the file, or set secrets by hand (docs/security.md)") from None
    keys = [entry for entry in entries if entry.kind == "api" and entry.key]
    config_path = config_dir / "config.yaml"
    hosts_set = {secret.name: set(secret.host_texts) for secret in secrets_in(config_path)}
    known: list[AuthEntry] = []
    elsewhere: list[AuthEntry] = []
    for entry in keys:
        provider = PROVIDERS.get(entry.provider)
        if provider is None:
            continue
        set_hosts = hosts_set.get(provider.variable)
        # A key is never sent where the user pointed that variable for another purpose.
        (known if set_hosts is None or set_hosts == set(provider.hosts) else elsewhere).append(entry)
    report = ImportReport(
        auth_path,
        imported=tuple(f"{entry.provider} -> {PROVIDERS[entry.provider].variable}" for entry in known),
        unknown=tuple(entry.provider for entry in keys if entry.provider not in PROVIDERS),
        logins=tuple(entry.provider for entry in entries if entry.kind == "oauth"),
        elsewhere=tuple(PROVIDERS[entry.provider].variable for entry in elsewhere),
        config_file=config_path,
    )
    if not known:
        return report
    values_path = config_dir / VALUES_FILE
    values = read_values(values_path)
    values.update({PROVIDERS[entry.provider].variable: entry.key for entry in known})
    write_atomic(values_path.resolve(), render_values_file(values))
    secrets = [parse_secret(PROVIDERS[entry.provider].variable,
                            {"hosts": list(PROVIDERS[entry.provider].hosts),
                             "headers": list(PROVIDERS[entry.provider].headers)})
               for entry in known]
    configured = add_secrets(config_path, secrets)
    return report._replace(values_file=values_path, configured=tuple(configured))
