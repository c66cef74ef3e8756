"""Layered loading: defaults < user < user per-project < project < environment < flags."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.config.keys import KEYS, KEYS_BY_NAME, Key
from opencode_sandbox.config.settings import Settings
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import ConfigError

if TYPE_CHECKING:
    from typing import Any

    from opencode_sandbox.core.agents import AgentProfile

ENV_PREFIX = "OPENCODE_SANDBOX_"


class RawValue(Record):
    value: Any
    source: str
    base_dir: Path | None = None


CHECKOUT_FOLDER = ".opencode-sandbox"


def config_files(user_config_dir: Path, slug: str, project_dir: Path) -> list[Path]:
    """The configuration files in rising precedence."""
    return [
        user_config_dir / "config.yaml",
        user_config_dir / slug / "config.yaml",
        project_dir / CHECKOUT_FOLDER / "config.yaml",
    ]


def _suggest(name: str, candidates: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, candidates, n=1)
    return f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(candidates)


def read_file(path: Path) -> dict[str, RawValue]:
    """The keys of one YAML file with the line each is on; a missing file has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ConfigError(
            f"{path}: cannot read the configuration file: {reason}",
            hint="fix its permissions or encoding (UTF-8), or remove it",
        ) from None
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise ConfigError(f"{path}: its YAML nests deeper than can be read",
                          hint="write each key's value as a plain value, list or mapping") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(
            f"{where}: malformed YAML: {error.problem or error.context}",
            hint="fix the YAML syntax at that line",
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: malformed YAML: {error}", hint="fix the YAML syntax") from None
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(
            f"{path}:{node.start_mark.line + 1}: the configuration must be a mapping of keys to values",
            hint="write one 'key: value' per line, for example 'cpus: 4'",
        )
    loader = yaml.SafeLoader("")
    values: dict[str, RawValue] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):  # never spelt out: its aliases could expand without end
            kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
            raise ConfigError(f"{path}:{line}: a key must be a name, not a {kind}",
                              hint="write one 'key: value' per line, for example 'cpus: 4'")
        key = key_node.value
        if key not in KEYS_BY_NAME:
            raise ConfigError(
                f"{path}:{line}: unknown key '{key}'",
                hint=_suggest(key, [known.name for known in KEYS]),
            )
        try:
            value = loader.construct_object(value_node, deep=True)
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}:{line}: malformed value for '{key}': {error}",
                              hint="fix the value") from None
        except RecursionError:
            raise ConfigError(f"{path}:{line}: the value of '{key}' nests deeper than can be read",
                              hint="fix the value") from None
        values[key] = RawValue(value, f"{path}:{line}", path.parent)
    return values


def read_environment(environ: Mapping[str, str]) -> dict[str, RawValue]:
    by_variable = {key.env_variable: key for key in KEYS}
    values: dict[str, RawValue] = {}
    for variable, value in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        key = by_variable.get(variable)
        if key is None:
            raise ConfigError(
                f"unknown environment variable {variable}",
                hint=_suggest(variable, sorted(by_variable)) + f" (or unset {variable})",
            )
        values[key.name] = RawValue(value, f"environment {variable}", Path.cwd())
    return values


def _convert(key: Key, raw: RawValue) -> Any:
    try:
        value = key.read(raw.value)
    except ValueError as error:
        raise ConfigError(
            f"{raw.source}: invalid value for '{key.name}': {error}",
            hint=f"'{key.name}' is {key.help}; default: {describe_default(key)}",
        ) from None
    if key.relative_to is not None and raw.base_dir is not None:
        value = key.relative_to(value, raw.base_dir)
    return value


def _refuse_in_checkout(layer: Mapping[str, RawValue], user_layers: list[dict[str, RawValue]],
                        user_files: list[Path]) -> None:
    """The checkout's file, which a cloned repository or the agent in the VM writes, may narrow
    what the VM may do, never widen it: a key that would is the user's alone to set."""
    instead = " or ".join(str(path) for path in reversed(user_files)) or "your own configuration file"
    for name, raw in layer.items():
        key = KEYS_BY_NAME[name]
        if not key.in_checkout:
            reason = f": {key.checkout_reason}" if key.checkout_reason else ""
            raise ConfigError(
                f"{raw.source}: '{name}' cannot be set in the project's checkout, which the agent in the VM can "
                f"write{reason}",
                hint=f"remove it there and set it in {instead}",
            )
        refusal = (key.checkout_refusal(_convert(key, raw), _users_value(key, user_layers))
                   if key.checkout_refusal is not None else None)
        if refusal is not None:
            raise ConfigError(
                f"{raw.source}: '{name}' in the project's checkout, which the agent in the VM can write: {refusal}",
                hint=f"move that entry to {instead}",
            )


def _users_value(key: Key, user_layers: list[dict[str, RawValue]]) -> Any:
    value = key.default
    for layer in user_layers:
        if key.name in layer:
            value = _convert(key, layer[key.name])
    return value


def _joined(key: Key, earlier: Any, flag: RawValue) -> Any:
    assert key.join_flag is not None
    try:
        return key.join_flag(earlier, _convert(key, flag))
    except ValueError as error:
        raise ConfigError(f"{flag.source}: invalid value for '{key.name}': {error}",
                          hint=f"'{key.name}' is {key.help}") from None


def _check_agent_known(name: str, own: tuple[AgentProfile, ...], source: str) -> None:
    if name == KEYS_BY_NAME["agent"].default and not own:
        return  # the default start loads no profile
    from opencode_sandbox.core.agents import PROFILES, find_profile

    if find_profile(name, own) is None:
        names = ", ".join([*PROFILES, *(agent.name for agent in own)])
        raise ConfigError(
            f"{source}: invalid value for 'agent': '{name}' is not an agent; choose one of: {names}",
            hint="define an agent of your own under 'agents' in your configuration file (docs/agents.md)",
        )


def describe_default(key: Key) -> str:
    from opencode_sandbox.config.render import render_value

    return render_value(key, key.default)


def load_settings(
    files: list[Path],
    environ: Mapping[str, str],
    flags: Mapping[str, Any],
) -> Settings:
    """Merge every layer; `flags` maps key names to values given on the command line."""
    layers: list[dict[str, RawValue]] = [read_file(path) for path in files]
    user_files = [path for path in files if path.parent.name != CHECKOUT_FOLDER]
    user_layers = [layer for path, layer in zip(files, layers, strict=True) if path.parent.name != CHECKOUT_FOLDER]
    for path, layer in zip(files, layers, strict=True):
        if path.parent.name == CHECKOUT_FOLDER:
            _refuse_in_checkout(layer, user_layers, user_files)
    layers.append(read_environment(environ))
    layers.append({
        name: RawValue(value, f"flag {KEYS_BY_NAME[name].flag or '--' + name}", Path.cwd())
        for name, value in flags.items()
        if value is not None
    })
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in KEYS:
        values[key.attribute] = key.default
        sources[key.name] = "default"
        for layer in layers[:-1]:
            if key.name in layer and key.join_files is not None and sources[key.name] != "default":
                values[key.attribute] = key.join_files(values[key.attribute], _convert(key, layer[key.name]))
                sources[key.name] += f" and {layer[key.name].source}"
            elif key.name in layer:
                values[key.attribute] = _convert(key, layer[key.name])
                sources[key.name] = layer[key.name].source
        flag = layers[-1].get(key.name)
        if flag is not None and key.join_flag is not None and sources[key.name] != "default":
            values[key.attribute] = _joined(key, values[key.attribute], flag)
            sources[key.name] += f" and {flag.source}"
        elif flag is not None:
            values[key.attribute] = _convert(key, flag)
            sources[key.name] = flag.source
    _check_agent_known(values["agent"], values["agents"], sources["agent"])
    from_checkout = {layer["agent"].source for path, layer in zip(files, layers, strict=False)
                     if path.parent.name == CHECKOUT_FOLDER and "agent" in layer}
    return Settings(**values, sources=sources, agent_from_checkout=sources["agent"] in from_checkout)
