"""The values a runtime is given for a VM's secrets, checked before anything is made or started."""

from __future__ import annotations

from collections.abc import Mapping

from opencode_sandbox.core.egress import EgressPolicy
from opencode_sandbox.errors import UsageError


def checked_secret_values(name: str, policy: EgressPolicy | None, values: Mapping[str, str],
                          action: str = "be created") -> dict[str, str]:
    """The values of the secrets of `policy`, each one there; only those go to the runtime.
    `name` and `action` ("be created", "start") say what the error stops."""
    if policy is None or not policy.secrets:
        return {}
    refusal = policy.refusal()
    if refusal is not None:
        raise UsageError(refusal, hint="remove the secrets, or choose another network profile")
    missing = [secret.name for secret in policy.secrets if not values.get(secret.name)]
    if missing:
        raise UsageError(f"sandbox {name} cannot {action}: no value for the secret(s) {', '.join(missing)}",
                         hint="set them in the environment or in a secrets.env file (`opencode-sandbox secrets list`)")
    return {secret.name: values[secret.name] for secret in policy.secrets}
