"""The values a runtime is given for a VM's secrets, checked before anything starts."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.secret_values import checked_secret_values

POLICY = EgressPolicy(Profile.PUBLIC, secrets=parse_secrets({"OPENAI_API_KEY": ["api.openai.com"],
                                                             "TOKEN": ["git.example.com"]}))


def test_only_the_policys_secrets_are_taken() -> None:
    given = {"OPENAI_API_KEY": "sk-1", "TOKEN": "t-1", "OTHER": "o"}
    assert checked_secret_values("vm", POLICY, given) == {"OPENAI_API_KEY": "sk-1", "TOKEN": "t-1"}
    assert checked_secret_values("vm", EgressPolicy(), given) == {}
    assert checked_secret_values("vm", None, given) == {}


def test_a_missing_value_stops_a_start_naming_the_secret_and_where_to_set_it() -> None:
    with pytest.raises(UsageError) as raised:
        checked_secret_values("vm", POLICY, {"OPENAI_API_KEY": "sk-1", "TOKEN": ""}, action="start")
    assert raised.value.message == "sandbox vm cannot start: no value for the secret(s) TOKEN"
    assert raised.value.hint is not None and "secrets.env" in raised.value.hint


def test_secrets_under_none_are_refused() -> None:
    with pytest.raises(UsageError, match="the network profile is none"):
        checked_secret_values("vm", POLICY._replace(profile=Profile.NONE), {"OPENAI_API_KEY": "a", "TOKEN": "b"})
