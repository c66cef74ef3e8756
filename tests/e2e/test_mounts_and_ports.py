"""Host mounts and published dev-server ports, end to end: what the VM can read and write of the
host's folders, and where a server started in the VM answers on the host."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.runtime.docker.network_holder import holder_name
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project, connects, docker, non_loopback_address, wait_until

SERVER = "require('http').createServer((q, s) => s.end('dev server ' + process.argv[1])).listen(process.argv[1])"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def answer(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            return str(response.read().decode())
    except OSError as error:
        return f"no answer: {error}"


def shell(project: Project, script: str, *options: str) -> subprocess.CompletedProcess[str]:
    return project.cli("shell", *options, "--", "sh", "-c", script)


def write_config(project: Project, text: str) -> None:
    config = project.paths.config_dir / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    if project.user is not None:
        project.user.give(project.paths.config_dir)


def mount_sources(project: Project) -> tuple[Path, Path, Path]:
    """A read-only folder with a file, a read-write folder and a lone file, beside the checkout."""
    folder = project.root.parent / "shared"
    (folder / "reference").mkdir(parents=True)
    (folder / "reference" / "hello.txt").write_text("from the host\n")
    (folder / "output").mkdir()
    (folder / "gitconfig").write_text("[user]\n\tname = host\n")
    (folder / "link").symlink_to(folder / "reference")
    if project.user is not None:
        project.user.give(folder)
    return folder / "link", folder / "output", folder / "gitconfig"


def check_mounts_and_ports(project: Project, busy_port: int) -> None:
    reference, output, gitconfig = mount_sources(project)
    missing = project.root.parent / "absent"
    write_config(project, f"mounts: ['{missing}:/mnt/absent']\n")
    refused = shell(project, "true")
    assert refused.returncode == 2, refused.stderr
    assert f"mount '{missing}:/mnt/absent'" in refused.stderr and "does not exist on this host" in refused.stderr
    assert project.vm_info() is None

    host_port = free_port()
    write_config(project, f"mounts: ['{reference}:/mnt/reference', '{output}:/mnt/output:rw', "
                          f"'{gitconfig}:/mnt/config/gitconfig']\n"
                          f"ports: ['{host_port}:8000', 8001]\n")
    busy = shell(project, "true", "-p", f"{busy_port}:8002")
    assert busy.returncode == 2, busy.stderr
    assert f"host port {busy_port}" in busy.stderr and "already in use on 127.0.0.1" in busy.stderr
    assert project.vm_info() is None

    started = shell(project, f"for port in 8000 8001; do setsid nohup node -e {shlex.quote(SERVER)} $port "
                             ">/dev/null 2>&1 & done")
    assert started.returncode == 0, started.stderr
    listed = project.cli("ports", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    published = {entry["guest_port"]: entry["host_port"] for entry in json.loads(listed.stdout)["result"]}
    assert published[8000] == host_port and sorted(published) == [4096, 8000, 8001]
    for guest in (8000, 8001):
        assert wait_until(lambda guest=guest: answer(published[guest]) == f"dev server {guest}", 60), \
            answer(published[guest])
    address = non_loopback_address()
    if address is not None:
        assert not connects(address, host_port) and not connects(address, published[8001])

    read_only = ("/mnt/reference/new.txt", "/mnt/reference/hello.txt", "/mnt/config/gitconfig")
    # Root first tries to lift the read-only mounts: docker gives it no CAP_SYS_ADMIN, a microVM's
    # root holds every capability of the VM's kernel, and the runtime must refuse the writes anyway.
    remount = "for target in /mnt/reference /mnt/config/gitconfig; do mount -o remount,rw $target 2>/dev/null; done; "
    for user, first in (((), ""), (("--root",), remount)):  # one command each: a minute on an emulated microVM
        tried = shell(project, f"{first}cat /mnt/reference/hello.txt /mnt/config/gitconfig; for target in "
                               f"{' '.join(read_only)}; do (echo agent > $target) 2>/dev/null && echo wrote $target; "
                               "done; true", *user)
        assert tried.returncode == 0, tried.stderr
        assert tried.stdout == "from the host\n[user]\n\tname = host\n", f"{user}: {tried.stdout}"
    assert (reference / "hello.txt").read_text() == "from the host\n"
    assert not (reference / "new.txt").exists()
    assert gitconfig.read_text() == "[user]\n\tname = host\n"

    both = shell(project, "echo made in the VM > /mnt/output/made.txt && cat /mnt/output/made.txt")
    assert both.returncode == 0 and both.stdout == "made in the VM\n", both.stderr
    made = output / "made.txt"
    assert made.read_text() == "made in the VM\n"
    assert made.stat().st_uid == (project.user.uid if project.user else os.getuid())
    assert answer(host_port) == "dev server 8000", "the VM was kept: the same settings recreate nothing"


def test_mounts_and_ports_on_docker(any_user_project: Project, busy_port: int) -> None:
    check_mounts_and_ports(any_user_project, busy_port)


@pytest.fixture
def neighbour(unique: str) -> Iterator[str]:
    """A machine of the local network whose route to the VM's network leads through this host (a
    network namespace on a veth pair): the command prefix that runs a program there."""
    if os.geteuid() != 0:
        pytest.skip("a network namespace for the neighbour needs root")
    token = unique[1:]  # hexadecimal
    name, host_side = f"osb-nb-{token}", f"onb{token[:8]}"
    subnet = f"10.{200 + int(token[:2], 16) % 50}.{int(token[2:4], 16)}"
    steps = [["ip", "netns", "add", name],
             ["ip", "link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", name],
             ["ip", "addr", "add", f"{subnet}.1/30", "dev", host_side], ["ip", "link", "set", host_side, "up"],
             ["ip", "-n", name, "addr", "add", f"{subnet}.2/30", "dev", "eth0"],
             ["ip", "-n", name, "link", "set", "eth0", "up"], ["ip", "-n", name, "link", "set", "lo", "up"],
             ["ip", "-n", name, "route", "add", "default", "via", f"{subnet}.1"]]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        yield f"ip netns exec {name}"
    finally:
        subprocess.run(["ip", "link", "delete", host_side], capture_output=True)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def test_a_neighbour_routed_to_the_vm_reaches_none_of_its_ports(project: Project, neighbour: str) -> None:
    """Ports are published on the host's 127.0.0.1; an engine that routes other machines' packets to
    the VM's own address (Docker before 28) must still give a neighbour nothing."""
    write_config(project, "ports: [8000]\n")
    started = shell(project, f"setsid nohup node -e {shlex.quote(SERVER)} 8000 >/dev/null 2>&1 &")
    assert started.returncode == 0, started.stderr
    published = {entry["guest_port"]: entry["host_port"]
                 for entry in json.loads(project.cli("ports", "--format", "json").stdout)["result"]}
    assert wait_until(lambda: answer(published[8000]) == "dev server 8000", 60), "the host itself reaches it"
    address = docker("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                     holder_name(project.slug), check=True).stdout.split()[0]  # whose namespace the VM shares
    for port in (8000, 4096):
        tried = subprocess.run([*neighbour.split(), "curl", "-sS", "--max-time", "5", f"http://{address}:{port}/"],
                               capture_output=True, text=True)
        assert "dev server" not in tried.stdout and "401" not in tried.stdout and tried.returncode != 0, \
            f"a neighbour reached {address}:{port}: {tried.stdout}{tried.stderr}"
    assert answer(published[8000]) == "dev server 8000"


@pytest.mark.timeout(2400)  # each command in an emulated microVM takes a minute or more
@pytest.mark.parametrize("runtime", [pytest.param("microsandbox", marks=MICROVMS_ONLY)])
def test_mounts_and_ports_on_microsandbox(runtime_project: Project, busy_port: int) -> None:
    check_mounts_and_ports(runtime_project, busy_port)
