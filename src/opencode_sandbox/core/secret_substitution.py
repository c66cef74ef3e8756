"""Where a secret's value takes its placeholder's place in a request, on the docker runtime's
egress proxy (the proxy's addon calls `substitute` for every request it lets through). Pure.

Inside the VM a secret's variable holds `placeholder(name)`, the same text msb gives the VM. The
value replaces it only in the request's header fields (only those the secret names, when it names
any), and only when the request goes over HTTPS, which the proxy intercepts and verifies, to one
of the secret's hosts. A request that carries a placeholder anywhere else (to another host, over
plain HTTP, or in its URL or body to another host) is refused whole: nothing of it leaves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from opencode_sandbox.core.egress import SecretRule

PLACEHOLDER_PREFIX = "$MSB_"
_PLACEHOLDER = r"\$MSB_([A-Z_][A-Z0-9_]*)"

Headers = tuple[tuple[str, str], ...]


def placeholder(name: str) -> str:
    """What the VM's variable `name` holds instead of the secret's value."""
    return PLACEHOLDER_PREFIX + name


class Substitution(Record):
    """A request's header fields with the values put in, or why the request is refused."""

    headers: Headers
    refusal: str | None = None


def substitute(secrets: Iterable[SecretRule], values: Mapping[str, str], host: str, port: int, encrypted: bool,
               headers: Sequence[tuple[str, str]], elsewhere: Sequence[str] = ()) -> Substitution:
    """The request to `host`:`port` (`encrypted`: over HTTPS) with each placeholder in `headers`
    replaced by its value where the secret allows it; `elsewhere`: the request's other text (its
    URL and body), searched for placeholders but never changed. A placeholder is the longest
    `$MSB_NAME` in the text: `$MSB_KEY_2` is KEY_2's, never KEY's."""
    by_name = {secret.name: secret for secret in secrets}
    carried = tuple((str(field), str(text)) for field, text in headers)
    found = {match for text in [*(t for pair in carried for t in pair), *elsewhere]
             for match in re.findall(_PLACEHOLDER, text) if match in by_name}
    for name in sorted(found):
        secret = by_name[name]
        if not (encrypted and _is_secrets_host(secret, host, port)):
            where = f"over plain HTTP to {host}" if _is_secrets_host(secret, host, port) else f"to {host}"
            return Substitution(carried, f"the request carries the placeholder of the secret {name} {where}; "
                                         f"it may be sent only over HTTPS to {', '.join(secret.host_texts)}")
        if name not in values:
            return Substitution(carried, f"the proxy holds no value for the secret {name}; run "
                                         "`opencode-sandbox run` again to give it")

    def put(field: str, text: str) -> str:
        def value(match: re.Match[str]) -> str:
            secret = by_name.get(match[1])
            return values[match[1]] if secret is not None and _may_carry(secret, field) else match[0]

        return re.sub(_PLACEHOLDER, value, text)

    return Substitution(tuple((field, put(field, text)) for field, text in carried))


def _is_secrets_host(secret: SecretRule, host: str, port: int) -> bool:
    return any(rule.matches(host, None, port) for rule in secret.hosts)


def _may_carry(secret: SecretRule, field: str) -> bool:
    return not secret.headers or field.lower() in secret.headers
