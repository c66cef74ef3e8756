"""Agents of the user's own, defined by data in their configuration (the `agents` key):

    agents:
      amp:
        title: Amp
        package: "@sourcegraph/amp"          # or install: "curl -fsSL https://example.org/install.sh | sh"
        command: amp
        arguments: [--dangerously-allow-all]
        credentials:
          - {variable: AMP_API_KEY, hosts: [ampcode.com], headers: [authorization]}
        hosts: [ampcode.com]
        config: [.config/amp]
        environment: {AMP_SKIP_UPDATE_CHECK: "1"}

Each becomes a profile of a terminal agent with no hooks: its terminal's output tells whether it
works. Only the user's own files may define one: its `install` script runs as root at image build,
and its configuration folders leave the user's home for the VM. Pure: nothing here touches the machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.agents.profile import ActivitySource, AgentProfile, ConfigSource, Credential, SessionKind
from opencode_sandbox.core.credential_text import is_credential
from opencode_sandbox.core.npm_names import is_package_name
from opencode_sandbox.core.secrets import parse_secret

if TYPE_CHECKING:
    from typing import Any

FIELDS = ("title", "package", "install", "command", "arguments", "credentials", "hosts", "config", "environment")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_COMMAND = re.compile(r"^(/[A-Za-z0-9._+-]+)+$|^[A-Za-z0-9_][A-Za-z0-9._+-]*$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TITLE_LENGTH = 60
_OWN_PREFIX = "OPENCODE_SANDBOX_"

KEPT_AT_HOME = (
    ".config/opencode-sandbox", ".local/state/opencode-sandbox", ".cache/opencode-sandbox",
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".config/gh", ".kube", ".docker/config.json",
    ".netrc", ".git-credentials", ".npmrc", ".pypirc", ".config/github-copilot", ".config/git/credentials",
    ".password-store", ".local/share/keyrings", ".vault-token", ".cargo/credentials", ".cargo/credentials.toml",
    ".config/containers/auth.json", ".pgpass", ".my.cnf", ".m2/settings.xml", ".terraform.d",
    ".gradle/gradle.properties",
    ".bash_history", ".zsh_history", ".local/share/fish/fish_history", ".python_history", ".psql_history",
    ".mysql_history", ".node_repl_history", ".config/hub", ".config/glab-cli", ".config/doctl", ".config/heroku",
)
"""Below the home, besides the built-in agents' logins: this tool's own files (its `secrets.env`
among them) and the usual stores of other credentials, which no agent's configuration may name."""


def parse_agents(value: Any, builtins: Mapping[str, AgentProfile]) -> tuple[AgentProfile, ...]:
    """The `agents` key: a mapping of names to definitions; ValueError names the agent and the field."""
    if value is None:
        return ()
    if isinstance(value, str):
        raise ValueError("define agents in your configuration file, as a mapping of names to their fields; "
                         "the environment cannot")
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of agent names to their fields, such as "
                         "{amp: {package: '@sourcegraph/amp', command: amp}}")
    return tuple(parse_agent(name, fields, builtins) for name, fields in value.items())


def parse_agent(name: Any, fields: Any, builtins: Mapping[str, AgentProfile]) -> AgentProfile:
    checked = _name(name, builtins)
    if not isinstance(fields, Mapping):
        raise ValueError(f"{checked}: expected a mapping of its fields ({', '.join(FIELDS)})")
    unknown = sorted(str(field) for field in fields if field not in FIELDS)
    if unknown:
        raise ValueError(f"{checked}: unknown field {', '.join(unknown)}; an agent has {', '.join(FIELDS)}")
    try:
        return _profile(checked, fields, builtins)
    except ValueError as error:
        raise ValueError(f"{checked}: {error}") from None


def _profile(name: str, fields: Mapping[str, Any], builtins: Mapping[str, AgentProfile]) -> AgentProfile:
    package, install = _installation(fields.get("package"), fields.get("install"))
    if "command" not in fields:
        raise ValueError("'command' is missing: the program the agent's installation puts on the PATH")
    credentials = _credentials(fields.get("credentials", []))
    variables = {credential.variable for credential in credentials}
    hosts = _hosts(fields.get("hosts", []))
    credential_hosts = [host for credential in credentials for host in credential.hosts]
    return AgentProfile(
        name=name,
        title=_title(fields.get("title", name)),
        package=package,
        command=_command(fields["command"]),
        session=SessionKind.TERMINAL,
        config=tuple(ConfigSource(path, path) for path in _config(fields.get("config", []), builtins)),
        credentials=credentials,
        hosts=tuple(dict.fromkeys([*hosts, *credential_hosts])),
        environment=_environment(fields.get("environment", {}), variables),
        default_arguments=_arguments(fields.get("arguments", [])),
        activity=ActivitySource.TERMINAL,
        install=install,
        version_flag="",
    )


def _name(name: Any, builtins: Mapping[str, AgentProfile]) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"'{name}' is not an agent's name; use lower-case letters, digits and -, "
                         "starting with a letter, at most 32 characters")
    if name in builtins:
        raise ValueError(f"'{name}' is a built-in agent's name; give yours another one")
    return name


def _installation(package: Any, install: Any) -> tuple[str, str]:
    """(npm package, install script): exactly one of the two."""
    if (package is None) == (install is None):
        raise ValueError("give either 'package' (an npm package) or 'install' (a script run as root at image "
                         "build), not both or neither")
    if install is not None:
        if not isinstance(install, str) or not install.strip() or "\0" in install:
            raise ValueError("'install' must be a shell script, such as 'curl -fsSL https://example.org/i.sh | sh'")
        return "", install
    if not isinstance(package, str) or not is_package_name(package):
        raise ValueError(f"'package': '{package}' is not an npm package name, such as @sourcegraph/amp; "
                         "the build installs its latest version and pins it")
    return package, ""


def _title(title: Any) -> str:
    if not isinstance(title, str) or not title.strip() or len(title) > _TITLE_LENGTH or _CONTROL.search(title):
        raise ValueError(f"'title': '{title}' is not a name to show; write one line of at most {_TITLE_LENGTH} "
                         "characters")
    return title.strip()


def _command(command: Any) -> str:
    if not isinstance(command, str) or not _COMMAND.match(command):
        raise ValueError(f"'command': '{command}' is not a program's name or absolute path, such as amp")
    return command


def _arguments(arguments: Any) -> tuple[str, ...]:
    if not isinstance(arguments, list) or not all(isinstance(item, str) and "\0" not in item for item in arguments):
        raise ValueError("'arguments' must be a list of words, such as [--dangerously-allow-all]")
    return tuple(arguments)


def _credentials(entries: Any) -> tuple[Credential, ...]:
    if not isinstance(entries, list):
        raise ValueError("'credentials' must be a list, such as "
                         "[{variable: AMP_API_KEY, hosts: [ampcode.com], headers: [authorization]}]")
    credentials: list[Credential] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or "variable" not in entry:
            raise ValueError("each of 'credentials' is {variable: NAME, hosts: [...]}, with optional headers: [...]")
        unknown = sorted(str(field) for field in entry if field not in ("variable", "hosts", "headers"))
        if unknown:
            raise ValueError(f"credentials: unknown field {', '.join(unknown)}; a credential has variable, hosts "
                             "and headers")
        try:
            secret = parse_secret(entry["variable"], {key: entry[key] for key in ("hosts", "headers") if key in entry})
        except ValueError as error:
            raise ValueError(f"credentials: {error}") from None
        if any(credential.variable == secret.name for credential in credentials):
            raise ValueError(f"credentials: {secret.name} is given twice")
        credentials.append(Credential(secret.name, tuple(secret.host_texts), secret.headers))
    return tuple(credentials)


def _hosts(hosts: Any) -> tuple[str, ...]:
    from opencode_sandbox.core.secrets import parse_secret_host

    if not isinstance(hosts, list):
        raise ValueError("'hosts' must be a list of host names or *.domain, such as [ampcode.com]")
    try:
        return tuple(parse_secret_host(host).text for host in hosts)
    except ValueError as error:
        raise ValueError(f"hosts: {error}") from None


def _environment(environment: Any, credential_variables: set[str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(environment, Mapping):
        raise ValueError("'environment' must be a mapping of variable names to values, such as {NO_UPDATE: '1'}")
    entries: list[tuple[str, str]] = []
    for name, value in environment.items():
        if not isinstance(name, str) or not _VARIABLE.match(name) or name.startswith(_OWN_PREFIX):
            raise ValueError(f"environment: '{name}' is not a variable the agent may have")
        if name in credential_variables or is_credential(name):
            raise ValueError(f"environment: {name} names a credential, and the image's environment is no place for "
                             "one; list it under 'credentials', and the VM gets a placeholder")
        if isinstance(value, bool) or not isinstance(value, str | int | float) or _CONTROL.search(str(value)):
            raise ValueError(f"environment: {name}: write its value as one line of text, in quotes, such as '1'")
        entries.append((name, str(value)))
    return tuple(entries)


def kept_at_home(builtins: Mapping[str, AgentProfile]) -> list[tuple[str, str]]:
    """What no agent of the user's own may copy, below the home: each built-in agent's logins (with the
    agent's title) and `KEPT_AT_HOME`."""
    kept = [(login, profile.title) for profile in builtins.values() for login in profile.logins]
    return kept + [(path, "") for path in KEPT_AT_HOME]


def _config(paths: Any, builtins: Mapping[str, AgentProfile]) -> tuple[str, ...]:
    if not isinstance(paths, list):
        raise ValueError("'config' must be a list of files or folders of your home, such as [.config/amp]")
    kept = kept_at_home(builtins)
    return tuple(_config_path(path, kept) for path in paths)


def _config_path(path: Any, kept: list[tuple[str, str]]) -> str:
    written = path.strip() if isinstance(path, str) else ""
    relative = written.removeprefix("~/")
    parts = PurePosixPath(relative).parts
    if not parts or relative.startswith("/") or ".." in parts or "\0" in relative or relative in (".", "~"):
        raise ValueError(f"config: '{path}' is not a file or folder inside your home; write it relative to your "
                         "home, such as .config/amp")
    folded = tuple(part.casefold() for part in parts)  # a case-insensitive file system (macOS) reads .SSH as .ssh
    for login, owner in kept:
        protected = tuple(part.casefold() for part in PurePosixPath(login).parts)
        if folded[:len(protected)] == protected or protected[:len(folded)] == folded:
            whose = f"{owner}'s login " if owner else ""
            raise ValueError(f"config: '{path}' would copy {whose}~/{login} into the VM; that stays on your host")
    return PurePosixPath(*parts).as_posix()
