"""Secrets on the microsandbox backend, on a scripted msb: each is a `--secret`, its value is only
in msb's environment, at create and at every start, and its name is never in an `--env` list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.core.naming import managed_labels, vm_name
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.errors import UsageError, VmDidNotBoot
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck
from opencode_sandbox.runtime.types import Mount, MountKind, SandboxSpec
from tests.fixtures.scripted_msb import ScriptedMsb, answer, not_found

SLUG = "secrets-0123456789abcd"
NAME = vm_name(SLUG)
IMAGE = f"opencode-sandbox/runner-{SLUG}:c0ffee"
VALUE = "sk-distinctive-0a1b2c3d4e5f"
SECRETS = parse_secrets({"OPENAI_API_KEY": ["api.openai.com"],
                         "ANTHROPIC_API_KEY": {"hosts": ["api.anthropic.com"], "headers": ["x-api-key"]}})
VALUES = {"OPENAI_API_KEY": VALUE, "ANTHROPIC_API_KEY": VALUE + "-anthropic"}
INSPECTED = {"name": NAME, "status": "Running", "config": {"labels": managed_labels(SLUG)}}
STOPPED = {**INSPECTED, "status": "Stopped"}


def spec(workspace: Path, profile: Profile = Profile.PUBLIC) -> SandboxSpec:
    """The runner image's own environment names a secret too: the secret must win."""
    return SandboxSpec(NAME, IMAGE, 1, 512, env={"OPENAI_API_KEY": "from-the-image", "LANG": "C.UTF-8"},
                       labels=managed_labels(SLUG), mounts=(Mount(MountKind.BIND, str(workspace), "/workspace"),),
                       network=EgressPolicy(profile, secrets=SECRETS))


def msb(folder: Path, create: dict[str, object] | None = None) -> ScriptedMsb:
    return ScriptedMsb.at(folder, {
        "inspect": [not_found("sandbox"), answer(json.dumps(INSPECTED))],
        "image inspect": [answer(json.dumps({"reference": IMAGE}))],
        "create": [create or answer()],
        "start": [answer()],
        "logs": [answer(f"ERROR guest said {VALUE}\nERROR the VM failed\n")],
        "remove": [answer()],
    })


def runtime_of(scripted: ScriptedMsb) -> MicrosandboxRuntime:
    return MicrosandboxRuntime(cli=scripted.cli, kvm_probe=lambda: KvmCheck(True))


def test_each_secret_is_a_secret_flag_and_its_value_only_in_msb_s_environment(tmp_path: Path) -> None:
    scripted = msb(tmp_path / "msb")
    runtime_of(scripted).create_sandbox(spec(tmp_path), secret_values={**VALUES, "UNRELATED": "x"})
    create = next(call for call in scripted.calls if call[0] == "create")
    environment = scripted.environments[scripted.calls.index(create)]
    assert create[create.index("--secret"):][:2] == ["--secret", "OPENAI_API_KEY@api.openai.com"]
    assert "ANTHROPIC_API_KEY:headers=[x-api-key]@api.anthropic.com" in create
    env_names = [create[index + 1] for index, arg in enumerate(create) if arg == "--env"]
    assert env_names == ["LANG"]  # the image's OPENAI_API_KEY would have msb copy the real value in
    assert all(VALUE not in arg for call in scripted.calls for arg in call)
    assert environment["OPENAI_API_KEY"] == VALUE and environment["ANTHROPIC_API_KEY"] == VALUES["ANTHROPIC_API_KEY"]
    assert "UNRELATED" not in environment  # only the spec's own secrets go to msb


def test_every_start_gives_msb_the_values_again(tmp_path: Path) -> None:
    scripted = ScriptedMsb.at(tmp_path / "msb", {"inspect": [answer(json.dumps(STOPPED))], "start": [answer()]})
    runtime_of(scripted).start_sandbox(NAME, secret_values=VALUES)
    start = scripted.calls.index(next(call for call in scripted.calls if call[0] == "start"))
    assert scripted.environments[start]["OPENAI_API_KEY"] == VALUE
    assert all(VALUE not in arg for arg in scripted.calls[start])


@pytest.mark.parametrize(("values", "profile", "message"), [
    ({"OPENAI_API_KEY": VALUE}, Profile.PUBLIC, "no value for the secret(s) ANTHROPIC_API_KEY"),
    ({**VALUES, "ANTHROPIC_API_KEY": ""}, Profile.PUBLIC, "no value for the secret(s) ANTHROPIC_API_KEY"),
    (VALUES, Profile.NONE, "the network profile is none"),
])
def test_a_missing_value_or_no_network_is_refused_before_msb_runs(
    tmp_path: Path, values: dict[str, str], profile: Profile, message: str
) -> None:
    scripted = msb(tmp_path / "msb")
    with pytest.raises(UsageError) as raised:
        runtime_of(scripted).create_sandbox(spec(tmp_path, profile), secret_values=values)
    assert message in raised.value.message
    assert scripted.calls == []


def test_a_failed_create_never_shows_a_secret_s_value(tmp_path: Path) -> None:
    scripted = msb(tmp_path / "msb", create=answer(stderr="error: failed to start\n", code=1))
    with pytest.raises(VmDidNotBoot) as raised:
        runtime_of(scripted).create_sandbox(spec(tmp_path), secret_values=VALUES)
    assert "the VM failed" in raised.value.message
    assert VALUE not in raised.value.message
