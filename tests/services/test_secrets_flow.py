"""Secrets through the whole run flow on the fake runtime: where values come from, what stops a
start before anything is made, what the VM is given, and that no value lands anywhere else."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.core.egress import Profile, SecretRule
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services import provisioning
from opencode_sandbox.services.secrets import auth_file, look_up, values_files
from opencode_sandbox.services.start.pipeline import Start
from opencode_sandbox.ui.console import LogLevel
from tests.services.app_fakes import SLUG, messages
from tests.services.test_run_flow import VM, Flow

VALUE = "sk-distinctive-9f8e7d6c5b4a"
SECRETS = parse_secrets({"OPENAI_API_KEY": ["api.openai.com"]})


class SecretsFlow(Flow):
    """A project on a fake microsandbox runtime whose settings name secrets."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(root, monkeypatch)
        self.runtime.kind = RuntimeKind.MICROSANDBOX
        self.secrets: tuple[SecretRule, ...] = SECRETS
        self.profile = Profile.PUBLIC
        self.archives = self.runtime.guests.unpacked.setdefault(VM, [])

    def app(self, interactive: bool = False) -> App:
        app = super().app(interactive)
        app.settings = app.settings._replace(runtime=self.runtime.kind, secrets=self.secrets, network=self.profile)
        return app

    def user_values(self, text: str, mode: int = 0o600) -> Path:
        path = values_files(self.app().paths.config_dir, SLUG)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return path


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SecretsFlow]:
    root = tmp_path / "project"
    root.mkdir()
    made = SecretsFlow(root, monkeypatch)
    try:
        yield made
    finally:
        made.runtime.close()


def test_a_value_from_the_user_s_file_reaches_the_runtime_at_create_and_at_start(flow: SecretsFlow) -> None:
    flow.user_values(f"OPENAI_API_KEY={VALUE}\n")
    flow.prepare()
    assert flow.runtime.sandboxes[VM].secret_values == {"OPENAI_API_KEY": VALUE}
    flow.runtime.stop_sandbox(VM)
    flow.runtime.sandboxes[VM].secret_values = {}
    flow.prepare()
    assert flow.calls("start_sandbox") == ["start_sandbox"]
    assert flow.runtime.sandboxes[VM].secret_values == {"OPENAI_API_KEY": VALUE}


def test_no_value_anywhere_stops_the_start_before_anything_is_made(flow: SecretsFlow) -> None:
    with pytest.raises(UsageError) as raised:
        flow.prepare()
    config_dir = flow.app().paths.config_dir
    assert raised.value.message == (
        f"no value for the secret(s) OPENAI_API_KEY: looked in environment, {config_dir / SLUG / 'secrets.env'}, "
        f"{config_dir / 'secrets.env'}")
    assert raised.value.hint is not None and "secrets import" in raised.value.hint
    assert flow.runtime.calls == [("check_available", "")]


def test_a_file_others_can_read_is_refused_with_the_chmod_to_run(flow: SecretsFlow) -> None:
    path = flow.user_values(f"OPENAI_API_KEY={VALUE}\n", mode=0o640)
    with pytest.raises(UsageError) as raised:
        flow.prepare()
    assert raised.value.message.startswith(f"{path} can be read or changed by other users (mode 640)")
    assert raised.value.hint == f"run `chmod 600 {path}`"
    assert VALUE not in raised.value.message
    assert flow.runtime.calls == [("check_available", "")]


def test_secrets_under_none_are_a_usage_error(flow: SecretsFlow) -> None:
    flow.user_values(f"OPENAI_API_KEY={VALUE}\n")
    flow.profile = Profile.NONE
    with pytest.raises(UsageError, match="the network profile is none"):
        flow.prepare()
    assert flow.runtime.calls == [("check_available", "")]


def test_the_docker_runtime_is_given_the_values_as_microsandbox_is(flow: SecretsFlow) -> None:
    flow.user_values(f"OPENAI_API_KEY={VALUE}\n")
    flow.runtime.kind = RuntimeKind.DOCKER
    flow.prepare()
    assert flow.runtime.sandboxes[VM].secret_values == {"OPENAI_API_KEY": VALUE}


def test_a_changed_secret_recreates_the_vm(flow: SecretsFlow) -> None:
    flow.user_values(f"OPENAI_API_KEY={VALUE}\nOTHER_TOKEN=x\n")
    flow.prepare()
    flow.runtime.calls.clear()
    flow.secrets = parse_secrets({"OPENAI_API_KEY": ["api.openai.com"], "OTHER_TOKEN": ["api.other.example"]})
    flow.prepare()
    assert flow.calls("create_sandbox", "remove_sandbox") == ["remove_sandbox", "create_sandbox"]
    assert flow.runtime.sandboxes[VM].secret_values == {"OPENAI_API_KEY": VALUE, "OTHER_TOKEN": "x"}


def test_a_changed_value_alone_keeps_the_vm(flow: SecretsFlow) -> None:
    """Values are not the VM's: msb reads them at the next start."""
    flow.user_values(f"OPENAI_API_KEY={VALUE}\n")
    flow.prepare()
    flow.runtime.calls.clear()
    flow.user_values("OPENAI_API_KEY=another-value\n")
    flow.prepare()
    assert flow.calls("create_sandbox", "remove_sandbox") == []


def test_an_api_key_that_is_a_secret_is_not_copied_into_the_vm(flow: SecretsFlow) -> None:
    logins = {"openai": {"type": "api", "key": VALUE}, "anthropic": {"type": "oauth", "refresh": "r-1"},
              "groq": {"type": "api", "key": "gsk-kept"}}
    host_file = auth_file()
    host_file.parent.mkdir(parents=True)
    host_file.write_text(json.dumps(logins))
    host_file.chmod(0o600)
    flow.user_values(f"OPENAI_API_KEY={VALUE}\n")
    flow.prepare()
    [archive] = flow.archives
    with tarfile.open(fileobj=io.BytesIO(archive)) as unpacked:
        member = unpacked.getmember(provisioning.AUTH_TARGET)
        extracted = unpacked.extractfile(member)
        assert extracted is not None
        copied = json.loads(extracted.read())
    assert copied == {"anthropic": {"type": "oauth", "refresh": "r-1"}, "groq": {"type": "api", "key": "gsk-kept"}}
    assert member.mode == 0o600
    assert json.loads(host_file.read_text()) == logins  # the host's own file is left as it is


def test_no_value_is_written_logged_or_labelled(flow: SecretsFlow, tmp_path: Path) -> None:
    """A whole dry path with a distinctive value: the plan, a verbose start, a stop and a start.
    The value is only ever in the runtime's hands."""
    flow.user_values(f"OPENAI_API_KEY={VALUE}\n")
    app = flow.app()
    app.console.level = LogLevel.VERBOSE
    plan = Start(app).plan().lines()
    flow.prepare(app)
    flow.runtime.stop_sandbox(VM)
    flow.prepare(app)
    assert "secret: OPENAI_API_KEY -> api.openai.com; value from" in "\n".join(plan)
    assert VALUE not in "\n".join(plan)
    assert VALUE not in messages(app)
    sandbox = flow.runtime.sandboxes[VM]
    assert sandbox.spec is not None
    assert VALUE not in repr(sandbox.spec) and VALUE not in json.dumps(dict(sandbox.labels))
    assert "OPENAI_API_KEY" not in sandbox.spec.env
    for folder in (app.paths.state_dir, app.paths.cache_dir, flow.root):
        for path in folder.rglob("*"):
            if path.is_file():
                assert VALUE.encode() not in path.read_bytes(), path
    assert all(VALUE not in arg for call in flow.runtime.exec_calls for arg in (*call.argv, *call.env.values()))


def test_the_environment_comes_first_then_the_project_s_file_then_the_user_s(tmp_path: Path) -> None:
    project_file, user_file = values_files(tmp_path, SLUG)
    project_file.parent.mkdir(parents=True)
    project_file.write_text("B_TOKEN=from-project\nC_TOKEN=from-project\n")
    user_file.write_text("A_TOKEN=from-user\nB_TOKEN=from-user\nC_TOKEN=from-user\nD_TOKEN=from-user\n")
    for path in (project_file, user_file):
        path.chmod(0o600)
    secrets = parse_secrets({name: ["api.example.com"] for name in ("A_TOKEN", "B_TOKEN", "C_TOKEN", "D_TOKEN",
                                                                     "E_TOKEN")})
    environ = {"C_TOKEN": "from-environment", "D_TOKEN": ""}
    lookup = look_up(secrets, environ, [project_file, user_file])
    assert lookup.sources == {"A_TOKEN": str(user_file), "B_TOKEN": str(project_file),
                              "C_TOKEN": "environment", "D_TOKEN": str(user_file), "E_TOKEN": "missing"}
    assert "from-" not in repr(lookup)
    with pytest.raises(UsageError, match="E_TOKEN"):
        lookup.values()
    assert look_up(secrets[:4], environ, [project_file, user_file]).values() == {
        "A_TOKEN": "from-user", "B_TOKEN": "from-project", "C_TOKEN": "from-environment", "D_TOKEN": "from-user"}
