"""The opencode server of a VM: only with its password, and only on the host's loopback."""

from __future__ import annotations

import socket
import subprocess
from urllib.parse import urlsplit

import pytest

from tests.e2e.harness import Project, docker
from tests.e2e.test_run_lifecycle import _get, _serve_only

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def non_loopback_addresses() -> list[str]:
    output = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    addresses = [address for address in output.split() if ":" not in address and not address.startswith("127.")]
    return addresses


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def test_the_daemon_needs_its_password_and_is_published_on_loopback_only(project: Project) -> None:
    process, url, password = _serve_only(project)
    try:
        port = urlsplit(url).port
        assert urlsplit(url).hostname == "127.0.0.1" and port is not None
        assert _get(url + "/global/health", None) == 401
        assert _get(url + "/session", None) == 401
        assert _get(url + "/global/health", password[::-1]) == 401
        assert _get(url + "/global/health", password) == 200

        published = docker("port", project.vm).stdout.strip().splitlines()
        assert published == [f"4096/tcp -> 127.0.0.1:{port}"]
        assert connects("127.0.0.1", port)
        others = non_loopback_addresses()
        assert others, "this host has no non-loopback IPv4 address to try"
        for address in others:
            assert not connects(address, port), f"the daemon answers on {address}:{port}"
    finally:
        process.terminate()
        process.wait(30)
