from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from opencode_sandbox.config.keys import DEFAULT_RELEASES_URL, KEYS
from opencode_sandbox.config.loader import config_files, load_settings
from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.errors import ConfigError
from opencode_sandbox.runtime.types import RuntimeKind

SLUG = "demo-0123456789abcd"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    user_dir = tmp_path / "config" / "opencode-sandbox"
    project = tmp_path / "project"
    (project / ".opencode-sandbox").mkdir(parents=True)
    (user_dir / SLUG).mkdir(parents=True)
    return user_dir, project


def files(layout: tuple[Path, Path]) -> list[Path]:
    return config_files(layout[0], SLUG, layout[1])


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults(layout: tuple[Path, Path]) -> None:
    settings = load_settings(files(layout), {}, {})
    assert settings.runtime is RuntimeKind.MICROSANDBOX
    assert settings.cpus == 2
    assert settings.memory == 4 * 1024**3
    assert settings.auto_stop_timeout == timedelta(seconds=10)
    assert settings.auto_stop_on_active_sessions is False
    assert settings.auto_stop_max_session_retries == 10
    assert settings.auto_prune_age == timedelta(days=30)
    assert settings.manual_prune_age == timedelta(days=7)
    assert settings.dind is False
    assert settings.extra_ca_certificates == ()
    assert settings.trust_host_ca is True
    assert settings.releases_url == DEFAULT_RELEASES_URL
    assert settings.egress_policy == EgressPolicy(Profile.PUBLIC, (), ())
    assert set(settings.sources.values()) == {"default"}


def test_every_key_is_read_from_a_file(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    write(user_dir / "config.yaml", """\
runtime: docker
cpus: 6
memory: 512M
pids-limit: 1000
agent: codex
agents:
  amp: {package: "@sourcegraph/amp", command: amp}
workspace: isolated
notify: false
terminal-clipboard: true
auto-stop-timeout: 90m
auto-stop-on-active-sessions: true
auto-stop-max-session-retries: 3
daemon-start-timeout: 10m
auto-prune-age: 24h
manual-prune-age: 45s
dind: true
extra-ca-certificates: [certs/corp.pem, /abs/other.pem]
trust-host-ca: false
releases-url: http://127.0.0.1:9/latest
network: none
egress-allow: [10.1.0.0/16]
egress-deny: ["*.example.com", "[fd00::/8]:443"]
secrets:
  OPENAI_API_KEY: [api.openai.com]
  ANTHROPIC_API_KEY: {hosts: [api.anthropic.com, "*.anthropic.example"], headers: [X-Api-Key]}
mounts: ["data:/mnt/data", "~/.gitconfig:/etc-copy/gitconfig:rw"]
ports: [3000, "8080:80"]
guarded-paths: [.husky, ./Makefile]
git-sync-branches: 50
""")
    settings = load_settings(files(layout), {}, {})
    assert settings.runtime is RuntimeKind.DOCKER
    assert settings.agent == "codex"
    assert [(agent.name, agent.package) for agent in settings.agents] == [("amp", "@sourcegraph/amp")]
    assert settings.workspace == "isolated"
    assert settings.notify is False
    assert settings.terminal_clipboard is True
    assert settings.cpus == 6
    assert settings.memory == 512 * 1024**2
    assert settings.pids_limit == 1000
    assert settings.auto_stop_timeout == timedelta(minutes=90)
    assert settings.auto_stop_on_active_sessions is True
    assert settings.auto_stop_max_session_retries == 3
    assert settings.daemon_start_timeout == timedelta(minutes=10)
    assert settings.auto_prune_age == timedelta(hours=24)
    assert settings.manual_prune_age == timedelta(seconds=45)
    assert settings.dind is True
    assert settings.extra_ca_certificates == (user_dir / "certs/corp.pem", Path("/abs/other.pem"))
    assert settings.trust_host_ca is False
    assert settings.releases_url == "http://127.0.0.1:9/latest"
    assert settings.network is Profile.NONE
    assert [rule.text for rule in settings.egress_allow] == ["10.1.0.0/16"]
    assert [rule.text for rule in settings.egress_deny] == ["*.example.com", "[fd00::/8]:443"]
    assert [secret.describe() for secret in settings.secrets] == [
        "OPENAI_API_KEY -> api.openai.com",
        "ANTHROPIC_API_KEY -> api.anthropic.com, *.anthropic.example (headers x-api-key)",
    ]
    assert settings.egress_policy == EgressPolicy(Profile.NONE, settings.egress_allow, settings.egress_deny,
                                                  settings.secrets)
    assert [(mount.source, mount.target, mount.readonly) for mount in settings.mounts] == [
        (user_dir / "data", "/mnt/data", True), (Path.home() / ".gitconfig", "/etc-copy/gitconfig", False)]
    assert [(port.guest, port.host) for port in settings.ports] == [(3000, None), (80, 8080)]
    assert settings.guarded_paths == (".husky", "Makefile")
    assert settings.git_sync_branches == 50
    assert len(KEYS) == 27
    assert all(source.startswith(str(user_dir / "config.yaml")) for source in settings.sources.values())


def test_precedence_of_all_layers(layout: tuple[Path, Path]) -> None:
    user_dir, project = layout
    write(user_dir / "config.yaml", "cpus: 1\nmemory: 1G\nauto-stop-timeout: 1s\ndind: true\n")
    write(user_dir / SLUG / "config.yaml", "cpus: 2\nmemory: 2G\nauto-stop-timeout: 2s\n")
    write(project / ".opencode-sandbox" / "config.yaml", "cpus: 3\nmemory: 3G\n")
    environ = {"OPENCODE_SANDBOX_CPUS": "4"}
    settings = load_settings(files(layout), environ, {"cpus": 5, "runtime": None})
    assert settings.cpus == 5
    assert settings.sources["cpus"] == "flag --cpus"
    assert settings.memory == 3 * 1024**3
    assert settings.sources["memory"] == f"{project / '.opencode-sandbox' / 'config.yaml'}:2"
    assert settings.auto_stop_timeout == timedelta(seconds=2)
    assert settings.sources["auto-stop-timeout"] == f"{user_dir / SLUG / 'config.yaml'}:3"
    assert settings.dind is True
    assert settings.sources["runtime"] == "default"
    without_flag = load_settings(files(layout), environ, {})
    assert without_flag.cpus == 4
    assert without_flag.sources["cpus"] == "environment OPENCODE_SANDBOX_CPUS"


def test_environment_names_use_underscores(layout: tuple[Path, Path]) -> None:
    environ = {
        "OPENCODE_SANDBOX_AUTO_STOP_ON_ACTIVE_SESSIONS": "true",
        "OPENCODE_SANDBOX_RUNTIME": "docker",
        "OPENCODE_SANDBOX_MEMORY": "8G",
    }
    settings = load_settings(files(layout), environ, {})
    assert settings.auto_stop_on_active_sessions is True
    assert settings.runtime is RuntimeKind.DOCKER
    assert settings.memory == 8 * 1024**3


def test_malformed_yaml_names_file_and_line(layout: tuple[Path, Path]) -> None:
    path = write(layout[0] / "config.yaml", "cpus: 2\nmemory: [4G\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message.startswith(f"{path}:3: malformed YAML: ")
    assert caught.value.exit_code == 2


def test_unknown_key_with_suggestion(layout: tuple[Path, Path]) -> None:
    path = write(layout[1] / ".opencode-sandbox" / "config.yaml", "cpus: 2\nmemroy: 4G\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == f"{path}:2: unknown key 'memroy'"
    assert caught.value.hint == "did you mean 'memory'?"


def test_unknown_environment_variable(layout: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {"OPENCODE_SANDBOX_CPU": "2"}, {})
    assert caught.value.message == "unknown environment variable OPENCODE_SANDBOX_CPU"
    assert caught.value.hint is not None
    assert "OPENCODE_SANDBOX_CPUS" in caught.value.hint


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpus: -1", "invalid value for 'cpus': -1 is out of range; use 1 to 256"),
        ("cpus: two", "invalid value for 'cpus': 'two' is not a whole number"),
        ("cpus: true", "invalid value for 'cpus': 'True' is not a whole number"),
        ("memory: lots", "invalid value for 'memory': 'lots' is not a size; write a number and a unit: 512M, 4G"),
        ("memory: 100M", "invalid value for 'memory': '100M' is below the minimum of 512M"),
        ("auto-stop-timeout: soon", "invalid value for 'auto-stop-timeout': 'soon' is not a duration; "
                                    "write a whole number and one unit: 10s, 90m, 24h, 30d"),
        ("auto-stop-timeout: -5s", "invalid value for 'auto-stop-timeout': '-5s' is negative; "
                                   "use a positive duration such as 10s, 90m, 24h or 30d"),
        ("auto-prune-age: 7 days", "invalid value for 'auto-prune-age': '7 days' is not a duration; "
                                   "write a whole number and one unit: 10s, 90m, 24h, 30d"),
        ("manual-prune-age: 999999d", "invalid value for 'manual-prune-age': '999999d' is longer than 36500d"),
        ("runtime: qemu", "invalid value for 'runtime': 'qemu' is not a runtime; choose one of: microsandbox, docker"),
        ("dind: maybe", "invalid value for 'dind': 'maybe' is not true or false"),
        ("trust-host-ca: 3", "invalid value for 'trust-host-ca': '3' is not true or false"),
        ("auto-stop-max-session-retries: -2",
         "invalid value for 'auto-stop-max-session-retries': -2 is out of range; use 0 to 1000000"),
        ("extra-ca-certificates: {a: b}", "invalid value for 'extra-ca-certificates': expected a list of file paths"),
        ("releases-url: ftp://x", "invalid value for 'releases-url': 'ftp://x' is not an http(s) URL"),
        ("network: open", "invalid value for 'network': 'open' is not a network profile; "
                          "choose one of: public, allowlist, none, all"),
        ("egress-allow: [example.com, '*.com']",
         "invalid value for 'egress-allow': '*.com' names a whole top-level domain; "
         "name a domain below it, as in *.example.com"),
        ("egress-deny: [10.0.0.0/33]",
         "invalid value for 'egress-deny': '10.0.0.0/33' is not an address or address range (CIDR), "
         "as in 10.0.0.0/8"),
        ("egress-deny: ['']", "invalid value for 'egress-deny': an empty rule; "
                              "write a host, *.domain or an address range, with an optional :port"),
        ("egress-allow: {a: b}", "invalid value for 'egress-allow': expected a list of rules: host names, "
                                 "*.domain or address ranges, with an optional :port"),
        ("secrets: {OPENAI_API_KEY: []}",
         "invalid value for 'secrets': OPENAI_API_KEY: list the hosts its value may be sent to, "
         "such as [api.openai.com]"),
        ("secrets: {OPENAI_API_KEY: [com]}",
         "invalid value for 'secrets': 'com' names a whole top-level domain; name a domain below it, "
         "as in *.example.com"),
        ("secrets: {TOKEN: ['*.com']}",
         "invalid value for 'secrets': '*.com' names a whole top-level domain; name a domain below it, "
         "as in *.example.com"),
        ("secrets: {TOKEN: [10.0.0.1]}",
         "invalid value for 'secrets': '10.0.0.1': a secret is sent to host names, not addresses; name the host"),
        ("secrets: {TOKEN: ['api.example.com:443']}",
         "invalid value for 'secrets': 'api.example.com:443': a secret's host takes no port "
         "(the value is sent over HTTPS)"),
        ("secrets: {openai_key: [api.openai.com]}",
         "invalid value for 'secrets': 'openai_key' is not a secret's variable name; use capitals, digits "
         "and _, as in OPENAI_API_KEY"),
        ("secrets: {HTTPS_PROXY: [api.openai.com]}",
         "invalid value for 'secrets': 'HTTPS_PROXY' is read by msb or docker on this host itself; "
         "it cannot be a secret"),
        ("secrets: {MSB_HOME: [api.openai.com]}",
         "invalid value for 'secrets': 'MSB_HOME' is read by msb or docker on this host itself; "
         "it cannot be a secret"),
        ("secrets: {OPENCODE_SANDBOX_CPUS: [api.openai.com]}",
         "invalid value for 'secrets': 'OPENCODE_SANDBOX_CPUS' is one of opencode-sandbox's own settings, "
         "not a secret"),
        ("secrets: {TOKEN: {hosts: [a.example], header: [x]}}",
         "invalid value for 'secrets': TOKEN: unknown field header; a secret has hosts and headers"),
        ("secrets: {TOKEN: {hosts: [a.example], headers: ['x y']}}",
         "invalid value for 'secrets': 'x y' is not a request header name, such as authorization or x-api-key"),
        ("secrets: [OPENAI_API_KEY]",
         "invalid value for 'secrets': expected a mapping of variable names to host lists, "
         "such as {OPENAI_API_KEY: [api.openai.com]}"),
    ],
)
def test_bad_values_name_file_line_and_key(layout: tuple[Path, Path], text: str, message: str) -> None:
    path = write(layout[0] / "config.yaml", "# settings\n" + text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == f"{path}:2: {message}"
    assert caught.value.hint is not None and "default:" in caught.value.hint


def test_bad_environment_value_names_the_variable(layout: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {"OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT": "soon"}, {})
    assert caught.value.message.startswith(
        "environment OPENCODE_SANDBOX_AUTO_STOP_TIMEOUT: invalid value for 'auto-stop-timeout'"
    )


def test_network_from_environment_and_flag(layout: tuple[Path, Path]) -> None:
    write(layout[0] / "config.yaml", "network: all\n")
    environ = {"OPENCODE_SANDBOX_EGRESS_DENY": "10.9.0.0/16, 192.0.2.1:22"}
    settings = load_settings(files(layout), environ, {"network": "none"})
    assert settings.network is Profile.NONE
    assert settings.sources["network"] == "flag --network"
    assert [rule.text for rule in settings.egress_deny] == ["10.9.0.0/16", "192.0.2.1:22"]


def test_secrets_from_the_environment(layout: tuple[Path, Path]) -> None:
    environ = {"OPENCODE_SANDBOX_SECRETS": "OPENAI_API_KEY=api.openai.com; ANTHROPIC_API_KEY[x-api-key]="
                                           "api.anthropic.com,*.anthropic.example"}
    settings = load_settings(files(layout), environ, {})
    assert [secret.describe() for secret in settings.secrets] == [
        "OPENAI_API_KEY -> api.openai.com",
        "ANTHROPIC_API_KEY -> api.anthropic.com, *.anthropic.example (headers x-api-key)",
    ]
    assert settings.sources["secrets"] == "environment OPENCODE_SANDBOX_SECRETS"


@pytest.mark.parametrize(("text", "message"), [
    ("OPENAI_API_KEY", "'OPENAI_API_KEY': write NAME=host,host or NAME[header,header]=host, entries separated by ';'"),
    ("OPENAI_API_KEY=", "OPENAI_API_KEY: list the hosts its value may be sent to, such as [api.openai.com]"),
    ("A=a.example;A=b.example", "A is given twice"),
    ("A=com", "'com' names a whole top-level domain; name a domain below it, as in *.example.com"),
])
def test_bad_secrets_in_the_environment(layout: tuple[Path, Path], text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {"OPENCODE_SANDBOX_SECRETS": text}, {})
    assert caught.value.message == f"environment OPENCODE_SANDBOX_SECRETS: invalid value for 'secrets': {message}"


def test_secrets_are_never_taken_from_the_checkout(layout: tuple[Path, Path]) -> None:
    """The agent in the VM writes the checkout: it must not choose where a secret's value goes."""
    user_dir, project = layout
    checkout_file = write(project / ".opencode-sandbox" / "config.yaml",
                          "cpus: 3\nsecrets: {OPENAI_API_KEY: [exfiltrate.example]}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == (f"{checkout_file}:2: 'secrets' cannot be set in the project's checkout, "
                                    "which the agent in the VM can write")
    assert caught.value.hint is not None and str(user_dir / SLUG / "config.yaml") in caught.value.hint
    write(user_dir / SLUG / "config.yaml", "secrets: {OPENAI_API_KEY: [api.openai.com]}\n")
    write(project / ".opencode-sandbox" / "config.yaml", "cpus: 3\n")
    settings = load_settings(files(layout), {}, {})
    assert [secret.describe() for secret in settings.secrets] == ["OPENAI_API_KEY -> api.openai.com"]


def test_bad_flag_value(layout: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {"memory": "lots"})
    assert caught.value.message.startswith("flag --memory: invalid value for 'memory'")


def test_top_level_must_be_a_mapping(layout: tuple[Path, Path]) -> None:
    path = write(layout[0] / "config.yaml", "- cpus\n- memory\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == f"{path}:1: the configuration must be a mapping of keys to values"


def test_empty_file_and_comments_only_are_fine(layout: tuple[Path, Path]) -> None:
    write(layout[0] / "config.yaml", "")
    write(layout[0] / SLUG / "config.yaml", "# nothing yet\n")
    assert load_settings(files(layout), {}, {}).cpus == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(layout: tuple[Path, Path]) -> None:
    path = write(layout[0] / "config.yaml", "cpus: 2\n")
    path.chmod(0)
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == f"{path}: cannot read the configuration file: Permission denied"


def test_a_folder_in_place_of_the_file(layout: tuple[Path, Path]) -> None:
    path = layout[0] / "config.yaml"
    path.mkdir()
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == f"{path}: cannot read the configuration file: Is a directory"


def test_invalid_utf8(layout: tuple[Path, Path]) -> None:
    path = layout[0] / "config.yaml"
    path.write_bytes(b"cpus: \xff\xfe\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message.startswith(f"{path}: cannot read the configuration file: ")


def test_a_relative_mount_source_is_read_from_the_file_s_folder(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    write(user_dir / SLUG / "config.yaml", "mounts: ['../shared:/mnt/shared:rw', '~/data:/mnt/data']\n")
    settings = load_settings(files(layout), {}, {})
    assert [(mount.source, mount.readonly) for mount in settings.mounts] == [
        (user_dir / SLUG / "../shared", False), (Path.home() / "data", True)]


def test_mounts_are_never_taken_from_the_checkout(layout: tuple[Path, Path]) -> None:
    """The agent in the VM writes the checkout: a mount of ~ there would give it the user's home."""
    user_dir, project = layout
    checkout_file = write(project / ".opencode-sandbox" / "config.yaml", "mounts: ['~:/mnt/home:rw']\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == (f"{checkout_file}:1: 'mounts' cannot be set in the project's checkout, "
                                    "which the agent in the VM can write")
    assert caught.value.hint is not None and str(user_dir / SLUG / "config.yaml") in caught.value.hint


def test_the_checkout_may_publish_guest_ports_but_not_choose_host_ports(layout: tuple[Path, Path]) -> None:
    user_dir, project = layout
    checkout_file = write(project / ".opencode-sandbox" / "config.yaml", "ports: [3000, '5432:5432']\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message.startswith(
        f"{checkout_file}:1: 'ports' in the project's checkout, which the agent in the VM can write: "
        "5432:5432 names a host port")
    assert caught.value.hint is not None and str(user_dir / SLUG / "config.yaml") in caught.value.hint
    write(checkout_file, "ports: [3000, 5173]\n")
    assert [port.written for port in load_settings(files(layout), {}, {}).ports] == ["3000", "5173"]


def test_published_flags_add_to_the_configured_ports(layout: tuple[Path, Path]) -> None:
    user_dir, _ = layout
    write(user_dir / "config.yaml", "ports: [3000]\n")
    settings = load_settings(files(layout), {}, {"ports": ["8080:80", "3000"]})
    assert [port.written for port in settings.ports] == ["3000", "8080:80"]
    assert settings.sources["ports"] == f"{user_dir / 'config.yaml'}:1 and flag --publish"
    assert [port.written for port in load_settings(files(layout), {}, {"ports": None}).ports] == ["3000"]
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {"ports": ["8080:3000"]})
    assert caught.value.message.startswith("flag --publish: invalid value for 'ports': guest port 3000 is published "
                                           "twice")


@pytest.mark.parametrize(("variable", "text", "message"), [
    ("OPENCODE_SANDBOX_MOUNTS", "/srv:/workspace", "'/srv:/workspace': /workspace is the tool's own"),
    ("OPENCODE_SANDBOX_MOUNTS", "/a:/mnt/x;/b:/mnt/x", "both mount on /mnt/x"),
    ("OPENCODE_SANDBOX_PORTS", "4096", "guest port 4096 is opencode serve's"),
    ("OPENCODE_SANDBOX_PORTS", "99999", "'99999': 99999 is outside 1 to 65535"),
])
def test_bad_mounts_and_ports_name_the_entry(layout: tuple[Path, Path], variable: str, text: str,
                                             message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {variable: text}, {})
    assert message in caught.value.message
    assert caught.value.message.startswith(f"environment {variable}: invalid value")


ONLY_THE_USERS = {"secrets", "mounts", "guarded-paths", "egress-allow", "extra-ca-certificates", "releases-url",
                  "agents"}
"""Keys whose every value reaches further, so the checkout's file may not set them at all."""
WIDER_AND_NARROWER = {  # key: (a value that widens what the user's configuration gives, one that narrows it)
    "runtime": ("docker", "microsandbox"),
    "network": ("all", "none"),
    "dind": ("true", "false"),
    "terminal-clipboard": ("true", "false"),
    "trust-host-ca": (None, "false"),  # on by default: the checkout can only turn it off
    "auto-prune-age": ("1s", "60d"),
    "manual-prune-age": ("1s", "30d"),
    "ports": ("'5432:5432'", "3000"),
    "pids-limit": ("100000", "512"),
    "git-sync-branches": ("5000", "20"),
    "workspace": (None, "isolated"),  # shared by default: see the test of a user who chose isolated
}
ANY_VALUE = {"agent", "notify",
             "cpus", "memory", "auto-stop-timeout", "auto-stop-on-active-sessions", "auto-stop-max-session-retries",
             "daemon-start-timeout", "egress-deny"}
"""Keys that change how the VM runs, not what it may reach, and one that only takes reach away
(`egress-deny`): the checkout may set them."""


def test_every_key_has_its_decision_for_the_checkout() -> None:
    from opencode_sandbox.config.keys import KEYS

    assert {key.name for key in KEYS} == ONLY_THE_USERS | set(WIDER_AND_NARROWER) | ANY_VALUE
    for key in KEYS:
        assert key.in_checkout == (key.name not in ONLY_THE_USERS), key.name
        assert (key.checkout_refusal is not None) == (key.name in WIDER_AND_NARROWER), key.name


@pytest.mark.parametrize("name", sorted(ONLY_THE_USERS - {"secrets", "mounts", "agents"}))
def test_a_key_only_the_user_sets_is_refused_in_the_checkout(layout: tuple[Path, Path], name: str) -> None:
    user_dir, project = layout
    value = {"guarded-paths": "[Makefile]", "egress-allow": "['0.0.0.0/0']", "extra-ca-certificates": "[ca.pem]",
             "releases-url": "https://example.org/latest"}[name]
    checkout_file = write(project / ".opencode-sandbox" / "config.yaml", f"{name}: {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message == (f"{checkout_file}:1: '{name}' cannot be set in the project's checkout, "
                                    "which the agent in the VM can write")
    assert caught.value.hint is not None and str(user_dir / SLUG / "config.yaml") in caught.value.hint


@pytest.mark.parametrize("name", sorted(WIDER_AND_NARROWER))
def test_the_checkout_may_narrow_what_the_user_gives_but_not_widen_it(layout: tuple[Path, Path], name: str) -> None:
    user_dir, project = layout
    wider, narrower = WIDER_AND_NARROWER[name]
    checkout_file = project / ".opencode-sandbox" / "config.yaml"
    write(checkout_file, f"{name}: {narrower}\n")
    load_settings(files(layout), {}, {})
    if wider is None:
        return
    write(checkout_file, f"{name}: {wider}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert caught.value.message.startswith(
        f"{checkout_file}:1: '{name}' in the project's checkout, which the agent in the VM can write: "), \
        caught.value.message
    assert caught.value.hint is not None and str(user_dir / SLUG / "config.yaml") in caught.value.hint
    write(user_dir / "config.yaml", f"{name}: {wider}\n")  # the user's own choice: the checkout may repeat it
    if name != "ports":
        load_settings(files(layout), {}, {})


def test_the_checkout_cannot_share_a_checkout_the_user_keeps_isolated(layout: tuple[Path, Path]) -> None:
    user_dir, project = layout
    write(user_dir / "config.yaml", "workspace: isolated\n")
    checkout_file = write(project / ".opencode-sandbox" / "config.yaml", "workspace: shared\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert "the shared mode lets the VM write your checkout" in caught.value.message
    write(checkout_file, "workspace: isolated\n")
    assert load_settings(files(layout), {}, {}).workspace == "isolated"


def test_a_profile_the_user_narrowed_cannot_be_widened_back_by_the_checkout(layout: tuple[Path, Path]) -> None:
    user_dir, project = layout
    write(user_dir / "config.yaml", "network: allowlist\n")
    checkout_file = write(project / ".opencode-sandbox" / "config.yaml", "network: public\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(files(layout), {}, {})
    assert "the public network profile reaches more than allowlist" in caught.value.message
    write(checkout_file, "network: none\n")
    assert load_settings(files(layout), {}, {}).network.value == "none"
