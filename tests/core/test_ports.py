"""Published ports as written in the `ports` setting and `--publish`."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.ports import PublishedPort, checkout_refusal, merged, parse_port, parse_ports


@pytest.mark.parametrize(("entry", "expected"), [
    (3000, PublishedPort(3000)),
    ("3000", PublishedPort(3000)),
    ("8080:3000", PublishedPort(3000, 8080)),
    (" 1:65535 ", PublishedPort(65535, 1)),
    ("4096:8000", PublishedPort(8000, 4096)),
])
def test_a_guest_port_with_an_optional_host_port(entry: object, expected: PublishedPort) -> None:
    assert parse_port(entry) == expected


@pytest.mark.parametrize(("entry", "message"), [
    (0, "'0': 0 is outside 1 to 65535"),
    ("65536", "'65536': 65536 is outside 1 to 65535"),
    ("70000:80", "'70000:80': 70000 is outside 1 to 65535"),
    ("0:80", "'0:80': 0 is outside 1 to 65535"),
    ("-1", "is not a port"),
    ("http", "is not a port"),
    ("1.2.3.4:80:80", "is not a port"),
    (True, "is not a port"),
    (4096, "guest port 4096 is opencode serve's"),
    ("8000:4096", "guest port 4096 is opencode serve's"),
])
def test_bad_ports_say_what_is_wrong(entry: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_port(entry)


def test_a_list_a_number_or_one_entry_per_comma() -> None:
    assert parse_ports("3000, 8080:80") == (PublishedPort(3000), PublishedPort(80, 8080))
    assert parse_ports(5173) == (PublishedPort(5173),)
    assert parse_ports([3000, "3000"]) == (PublishedPort(3000),)  # the same port twice is one


@pytest.mark.parametrize(("ports", "message"), [
    ([PublishedPort(3000), PublishedPort(3000, 8080)], "guest port 3000 is published twice ('3000' and '8080:3000')"),
    ([PublishedPort(80, 8080), PublishedPort(81, 8080)], "host port 8080 is given twice ('8080:80' and '8080:81')"),
])
def test_one_port_two_ways_is_refused(ports: list[PublishedPort], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        merged(ports)
    assert str(caught.value).startswith(message)


def test_only_a_chosen_host_port_is_refused_from_the_checkout() -> None:
    assert checkout_refusal((PublishedPort(3000), PublishedPort(5173))) is None
    refusal = checkout_refusal((PublishedPort(3000), PublishedPort(5432, 5432)))
    assert refusal is not None and refusal.startswith("5432:5432 names a host port")
