"""The network policy on the docker runtime, with real servers the VM is connected to.

The VM is attached to each server's network (`docker network connect`): without that, Docker's
isolation of bridges from each other would keep the servers out of reach with no policy at all.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import random
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import LABEL_SLUG, PROXY_REPOSITORY
from opencode_sandbox.core.prune_plan import ArtifactKind, Removal
from opencode_sandbox.runtime.docker.netfilter import NETFILTER_IMAGE, network_name
from opencode_sandbox.runtime.docker.network_holder import holder_name
from opencode_sandbox.runtime.docker.proxy import VM_CA_BUNDLE, ca_volume_name, proxy_name
from opencode_sandbox.services.prune import apply_plan
from opencode_sandbox.state.store import StateStore
from tests.e2e.harness import Project, ServeOnly, Tmux, cli_command, docker, status_of
from tests.e2e.test_clients_and_idle_stop import ATTACHED_SCREEN
from tests.fixtures.images import RunnerBase

FAST_S = 8.0
"""A refused connection fails at once; a hang would take curl's whole --max-time, and a lookup
nobody answers the resolver's 5 s timeout twice. The slack is for a loaded machine."""
PIECE_LINE = re.compile(r"^  (egress proxy|proxy CA volume|project network)\s+(\S+)\s+\((.+)\)$", re.MULTILINE)
SERVER = "require('http').createServer((q, s) => s.end('hello')).listen(8080)"


class Server:
    def __init__(self, network: str, address: str, container: str, name: str) -> None:
        self.network, self.address, self.container, self.name = network, address, container, name

    @property
    def url(self) -> str:
        return f"http://{self.address}:8080/"

    @property
    def named_url(self) -> str:
        """By its host name, which Docker's DNS answers on the server's network only."""
        return f"http://{self.name}:8080/"


def _server(unique: str, kind: str, subnets: list[str], image: str) -> Server:
    network = f"osb-netpol-{kind}-{unique}"
    for subnet in subnets:
        made = docker("network", "create", "--label", f"osb-test={unique}", "--subnet", subnet, network)
        if made.returncode == 0:
            break
        assert "overlap" in made.stderr.lower(), made.stderr
    else:
        pytest.skip(f"no free subnet for the {kind} test network")
    address = subnet.rsplit(".", 1)[0] + "." + str(int(subnet.rsplit(".", 1)[1].split("/")[0]) + 10)
    container = f"osb-netpol-{kind}-srv-{unique}"
    name = f"{kind}.{unique}.test"
    docker("run", "-d", "--name", container, "--label", f"osb-test={unique}", "--network", network, "--ip", address,
           "--network-alias", name, "--user", "root", "--entrypoint", "node", image, "-e", SERVER, check=True)
    return Server(network, address, container, name)


@pytest.fixture
def servers(unique: str, runner_base_image: RunnerBase) -> Iterator[tuple[Server, Server]]:
    """A server on a private address and one in a public range (documentation addresses)."""
    image = runner_base_image.result.reference
    made: list[Server] = []
    try:
        made.append(_server(unique, "lan", [f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24"
                                            for _ in range(5)], image))
        made.append(_server(unique, "pub", [f"198.51.100.{16 * random.randint(0, 15)}/28" for _ in range(8)],
                            image))
        yield made[0], made[1]
    finally:
        for server in made:
            docker("rm", "-f", server.container)
            attached = docker("network", "inspect", "--format", "{{range .Containers}}{{.Name}} {{end}}",
                              server.network).stdout.split()
            for container in attached:  # the VM, still connected: the project's cleanup comes later
                docker("network", "disconnect", "--force", server.network, container)
            docker("network", "rm", server.network)


@pytest.fixture
def host_service() -> Iterator[int]:
    """A server on every address of the host."""
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"host")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def send_to_groups(project: Project, port: int) -> str:
    """Datagrams from the VM to the local network's broadcast and all-hosts multicast addresses,
    then, on the same socket, to the host's address on the project network, as an answer would allow."""
    script = ("use Socket; socket(my $s, PF_INET, SOCK_DGRAM, 0) or die qq(socket: $!\\n); "
              "setsockopt($s, SOL_SOCKET, SO_BROADCAST, 1); my $sent = 0; "
              f"for my $to ('255.255.255.255', '224.0.0.1', '{gateway(project)}') {{ "
              f"$sent++ if send($s, qq(from the VM to $to), 0, sockaddr_in({port}, inet_aton($to))); sleep 1 }} "
              "print qq(sent $sent\\n)")
    result = docker("exec", "--user", "dev", project.vm, "perl", "-e", script)
    return result.stdout + result.stderr


def name_the_host_resolves() -> str:
    """A public name the host's own resolver answers for: Docker's DNS forwards the VM's lookups
    of such names to that resolver, often at a private address."""
    for name in ("registry.npmjs.org", "deb.debian.org", "pypi.org"):
        with contextlib.suppress(OSError):
            socket.getaddrinfo(name, 443)
            return name
    pytest.skip("this host resolves no public name")


def fetch(project: Project, url: str, *curl: str) -> tuple[str, float]:
    """What curl in the VM gets from `url`, and how long it took."""
    started = time.monotonic()
    result = docker("exec", "--user", "dev", project.vm, "curl", "-sS", "--max-time", "30", *curl, url)
    return (result.stdout + result.stderr).strip(), time.monotonic() - started


def refused_fast(project: Project, url: str, *curl: str) -> None:
    answer, took = fetch(project, url, *curl)
    assert "hello" not in answer and "host" not in answer, f"{url} answered: {answer}"
    assert took < FAST_S, f"{url} took {took:.1f} s to fail: {answer}"


def gateway(project: Project) -> str:
    return docker("network", "inspect", "--format", "{{(index .IPAM.Config 0).Gateway}}",
                  network_name(project.slug), check=True).stdout.strip()


def connect(project: Project, *servers: Server) -> None:
    """Through the VM's network holder, whose namespace the VM shares."""
    for server in servers:
        docker("network", "connect", server.network, holder_name(project.slug), check=True)


class RuleInstalls:
    """The engine's record, from now on, of what installs rules: a new container (the helper that
    rules a namespace) or an exec in a network holder."""

    def __init__(self, project: Project) -> None:
        self.holder = holder_name(project.slug)
        self.since = f"{time.time():.3f}"

    def seen(self) -> list[str]:
        listed = docker("events", "--since", self.since, "--until", f"{time.time():.3f}", "--filter", "type=container",
                        "--format", "{{.Action}}\t{{.Actor.Attributes.name}}", check=True).stdout
        events = [line.split("\t", 1) for line in listed.splitlines() if "\t" in line]
        return [f"{action} {name}" for action, name in events
                if action == "create" or (name == self.holder and action.startswith("exec_create"))]


def proxy_images() -> set[str]:
    return set(docker("images", "--format", "{{.Repository}}:{{.Tag}}", PROXY_REPOSITORY).stdout.split())


@pytest.fixture(scope="session")
def proxy_images_removed_after() -> Iterator[None]:
    """The tool builds its egress proxy image on first use (minutes: mitmproxy from PyPI): once per
    session, as the first test that needs it builds it and the others reuse it. Removed at the end
    when this session built it."""
    existed = proxy_images()
    yield
    for reference in proxy_images() - existed:
        docker("image", "rm", reference)


@pytest.fixture
def netfilter_image_removed_after() -> Iterator[None]:
    """The tool builds its network filter image on first use; a test that built it removes it."""
    existed = docker("image", "inspect", NETFILTER_IMAGE).returncode == 0
    yield
    if not existed:
        docker("image", "rm", NETFILTER_IMAGE)


def test_public_refuses_private_addresses_and_the_host_and_survives_a_restart(
    any_user_project: Project, servers: tuple[Server, Server], host_service: int,
    host_datagrams: tuple[int, list[bytes]],
    netfilter_image_removed_after: None,
) -> None:
    project = any_user_project
    private, public = servers
    served = ServeOnly(project)
    try:
        assert status_of(served.url + "/global/health", served.password) == 200
        connect(project, private, public)
        assert fetch(project, public.url)[0] == "hello"
        refused_fast(project, private.url)
        refused_fast(project, f"http://{gateway(project)}:{host_service}/")
        udp_port, datagrams = host_datagrams
        sent = send_to_groups(project, udp_port)
        time.sleep(1)
        assert datagrams == [], f"a datagram from the VM reached a host service ({sent}): {datagrams}"
        assert fetch(project, f"http://{public.container}:8080/")[0] == "hello", "Docker's DNS answers"
        name = name_the_host_resolves()
        lookup = docker("exec", "--user", "dev", project.vm, "getent", "hosts", name)
        assert lookup.returncode == 0 and lookup.stdout.strip(), \
            f"{name} resolves on the host but not in the VM: the host's resolver must stay reachable"

        cap_drop = docker("inspect", "--format", "{{json .HostConfig.CapDrop}}", project.vm, check=True).stdout
        assert json.loads(cap_drop) == ["ALL"], "the VM keeps no capability, NET_RAW included"
        packet = docker("exec", "--user", "root", project.vm, "perl", "-e",
                        "use Socket; socket(my $s, 17, 3, 0) or die qq(packet: $!\\n); print qq(opened\\n)")
        assert packet.returncode != 0 and "Operation not permitted" in packet.stderr
        # Root in the VM holds the VM's capabilities: the same set (none), in the VM's network, cannot flush.
        flush = docker("run", "--rm", "--network", f"container:{holder_name(project.slug)}", "--user", "root",
                       "--cap-drop", "ALL", NETFILTER_IMAGE, "flush", "ruleset")
        assert flush.returncode != 0 and "Operation not permitted" in flush.stderr
        # The network holder, which may change the rules, shares nothing else with the VM: root there
        # sees no process of it (its `sleep` would be a second one) and can signal none.
        processes = docker("exec", "--user", "root", project.vm, "sh", "-c",
                           "for each in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $each; echo; done", check=True).stdout
        assert [line.strip() for line in processes.splitlines()].count("sleep infinity") == 1, processes
        refused_fast(project, private.url)

        logged = project.cli("network", "log", "--format", "json")
        assert logged.returncode == 0, logged.stderr
        entries = {(entry["destination"], entry["port"]): entry for entry in json.loads(logged.stdout)["result"]}
        assert entries[(private.address, 8080)]["protocol"] == "tcp"
        assert entries[(private.address, 8080)]["attempts"] >= 2
        assert entries[(private.address, 8080)]["reason"].startswith("a private address, in 10.0.0.0/8")
        assert (gateway(project), host_service) in entries
        assert (public.address, 8080) not in entries
        table = project.cli("network", "log")
        assert f"{private.address}:8080/tcp" in table.stdout, table.stdout
    finally:
        served.detach()

    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    helpers = RuleInstalls(project)
    started = project.shell("true")
    assert started.returncode == 0, started.stderr
    assert helpers.seen() == [], "a start after stop installs nothing: the rules stayed in the holder's namespace"
    assert private.network in docker("inspect", "--format", "{{json .NetworkSettings.Networks}}",
                                     holder_name(project.slug)).stdout
    refused_fast(project, private.url)
    assert fetch(project, public.url)[0] == "hello"

    docker("restart", "--time", "1", project.vm, check=True)
    refused_fast(project, private.url)  # a start outside the tool joins the same ruled namespace
    assert "started without" not in project.shell("true").stderr

    docker("restart", "--time", "1", holder_name(project.slug), check=True)
    assert fetch(project, public.url)[0] != "hello", "the VM was left in its holder's old namespace, with no network"
    installs = RuleInstalls(project)
    repaired = project.shell("true")
    assert repaired.returncode == 0, repaired.stderr
    assert "started without its network policy" in repaired.stderr, repaired.stderr
    assert [seen for seen in installs.seen() if seen.startswith("exec_create")], "the holder's new namespace is ruled"
    refused_fast(project, private.url)
    assert fetch(project, public.url)[0] == "hello"
    assert "started without" not in project.shell("true").stderr, "the rules are installed once per start"

    assert project.cli("stop").returncode == 0
    assert status_of_container(holder_name(project.slug)) == "running", "a stopped VM keeps its ruled namespace"
    removed = project.cli("stop", "-f")
    assert removed.returncode == 0, removed.stderr
    assert status_of_container(holder_name(project.slug)) == "", "the holder goes with its VM"


def status_of_container(name: str) -> str:
    return docker("inspect", "--format", "{{.State.Status}}", name).stdout.strip()


def test_none_lets_nothing_out_but_the_client_still_attaches(
    project: Project, servers: tuple[Server, Server], unique: str, netfilter_image_removed_after: None,
) -> None:
    private, public = servers
    project.env["OPENCODE_SANDBOX_NETWORK"] = "none"
    served = ServeOnly(project)
    terminal: Tmux | None = None
    try:
        assert status_of(served.url + "/global/health", served.password) == 200
        connect(project, private, public)
        refused_fast(project, public.url)
        refused_fast(project, private.url)
        started = time.monotonic()
        lookup = docker("exec", "--user", "dev", project.vm, "getent", "hosts", public.container)
        assert lookup.returncode != 0 and not lookup.stdout.strip()
        assert time.monotonic() - started < FAST_S, "a DNS lookup must fail fast"
        terminal = Tmux(f"osb-netpol-{unique}", cli_command(), project.root, project.env)
        terminal.wait_for(ATTACHED_SCREEN, timeout=900)
    finally:
        if terminal is not None:
            terminal.close()
        served.detach()


def refused_by_policy(project: Project, url: str, *curl: str) -> str:
    """The proxy's answer to a refused request: a fast 403 that names the policy."""
    answer, took = fetch(project, url, "--write-out", "\nstatus %{http_code} %{http_connect}", *curl)
    assert "hello" not in answer, f"{url} answered: {answer}"
    assert took < FAST_S, f"{url} took {took:.1f} s to be refused: {answer}"
    assert re.search(r"status (403 000|000 403)", answer), answer
    return answer


def proxy_state(project: Project) -> str:
    return docker("inspect", "--format", "{{.State.Status}} {{.Id}}", proxy_name(project.slug)).stdout.strip()


def diagnosis(project: Project) -> str:
    proxy = proxy_name(project.slug)
    return "\n".join([
        docker("logs", "--tail", "20", proxy).stdout, docker("logs", "--tail", "20", proxy).stderr,
        docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", proxy).stdout,
        docker("exec", project.vm, "cat", "/etc/hosts").stdout,
        docker("run", "--rm", "--network", f"container:{project.vm}", "--cap-add", "NET_ADMIN", NETFILTER_IMAGE,
               "list", "ruleset").stdout,
    ])


def serve_proxy(project: Project, *servers: Server) -> None:
    """The proxy resolves and reaches the test's servers on their networks, as it would the internet.
    Again after every run: a proxy created anew (the host's addresses, which its policy holds, change
    as other networks come and go) is on the project's network only."""
    for server in servers:
        connected = docker("network", "connect", server.network, proxy_name(project.slug))
        assert connected.returncode == 0 or "already exists" in connected.stderr, connected.stderr


def test_allowlist_goes_through_the_proxy_and_lets_out_only_what_it_names(
    project: Project, servers: tuple[Server, Server], proxy_images_removed_after: None,
    netfilter_image_removed_after: None,
) -> None:
    private, public = servers
    project.env["OPENCODE_SANDBOX_NETWORK"] = "allowlist"
    project.env["OPENCODE_SANDBOX_EGRESS_ALLOW"] = f"{public.name},{private.name}"
    booted = project.shell("true")
    assert booted.returncode == 0, booted.stderr
    # The VM sits on both servers' networks: only its rules keep it from reaching them directly.
    connect(project, private, public)
    serve_proxy(project, private, public)

    def holds() -> None:
        answer = fetch(project, public.named_url)[0]
        assert answer == "hello", f"an allowed name answers through the proxy: {answer}\n{diagnosis(project)}"
        denied = refused_by_policy(project, public.url)
        assert "opencode-sandbox network policy" in denied and "not in egress-allow" in denied, denied
        tunnel = refused_by_policy(project, "https://not-allowed.example.org/")
        assert "CONNECT tunnel failed, response 403" in tunnel, tunnel
        privately = refused_by_policy(project, private.named_url)
        assert "a private address" in privately, privately
        refused_fast(project, public.url + "direct", "--noproxy", "*")
        started = time.monotonic()
        lookup = docker("exec", "--user", "dev", project.vm, "getent", "hosts", public.name)
        assert lookup.returncode != 0 and not lookup.stdout.strip(), "the VM resolves nothing"
        assert time.monotonic() - started < FAST_S, "a DNS lookup must fail fast"

    holds()
    logged = project.cli("network", "log", "--format", "json")
    assert logged.returncode == 0, logged.stderr
    entries = json.loads(logged.stdout)["result"]
    by_proxy = [entry for entry in entries if entry["destination"] == "not-allowed.example.org"]
    assert [(entry["port"], entry["reason"]) for entry in by_proxy] == [
        (443, "not in egress-allow (the network profile is allowlist)")], entries
    to_public = [entry for entry in entries if (entry["destination"], entry["port"]) == (public.address, 8080)]
    assert len(to_public) == 2, f"through the proxy, and directly (the VM's own rules): {entries}"
    env = docker("exec", "--user", "dev", project.vm, "env", check=True).stdout
    for variable in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        assert f"{variable}=http://opencode-sandbox-proxy:8080" in env.splitlines(), env
    assert "NO_PROXY=localhost,127.0.0.1" in env.splitlines(), env
    ca = docker("exec", proxy_name(project.slug), "cat", "/var/lib/mitmproxy/mitmproxy-ca-cert.pem",
                check=True).stdout.strip()
    assert ca in docker("exec", project.vm, "cat", VM_CA_BUNDLE, check=True).stdout, "the VM trusts the proxy's CA"

    docker("kill", proxy_name(project.slug), check=True)
    answer, _ = fetch(project, public.named_url, "--max-time", "5")
    assert "hello" not in answer, "without its proxy the VM reaches nothing"
    refused_fast(project, public.url + "direct", "--noproxy", "*")
    again = project.shell("true")
    assert again.returncode == 0, again.stderr
    assert proxy_state(project).startswith("running"), "the next run starts the proxy again"
    serve_proxy(project, private, public)
    holds()

    docker("rm", "--force", proxy_name(project.slug), check=True)
    again = project.shell("true")
    assert again.returncode == 0, again.stderr
    assert proxy_state(project).startswith("running"), "the next run creates the proxy again"
    serve_proxy(project, private, public)
    holds()
    assert ca in docker("exec", project.vm, "cat", VM_CA_BUNDLE, check=True).stdout, "the CA outlived the proxy"

    # Allowed by address instead: a policy change recreates the VM, and the proxy with it.
    project.env["OPENCODE_SANDBOX_EGRESS_ALLOW"] = public.address
    changed = project.shell("true")
    assert changed.returncode == 0, changed.stderr
    connect(project, private, public)
    serve_proxy(project, private, public)
    assert fetch(project, public.url)[0] == "hello", "an allowed address answers through the proxy"
    assert "not in egress-allow" in refused_by_policy(project, public.named_url), "its name is not allowed"
    assert "not in egress-allow" in refused_by_policy(project, private.url)
    refused_fast(project, private.url + "direct", "--noproxy", "*")

    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert proxy_state(project).startswith("exited"), "the proxy stops with the VM"
    restarted = project.shell("true")
    assert restarted.returncode == 0, restarted.stderr
    assert proxy_state(project).startswith("running"), "the proxy starts before the VM"
    assert fetch(project, public.url)[0] == "hello"
    docker("stop", "--time", "1", project.vm, check=True)
    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert proxy_state(project).startswith("exited"), "a VM stopped outside the tool leaves no proxy running"
    restarted = project.shell("true")
    assert restarted.returncode == 0, restarted.stderr
    killed = project.cli("kill")
    assert killed.returncode == 0, killed.stderr
    assert proxy_state(project).startswith("exited"), "the proxy is killed with the VM"
    removed = project.cli("stop", "-f")
    assert removed.returncode == 0, removed.stderr
    labelled = f"label={LABEL_SLUG}={project.slug}"
    assert docker("ps", "--all", "--quiet", "--filter", labelled).stdout.strip() == ""
    assert docker("network", "ls", "--quiet", "--filter", labelled).stdout.strip() == ""
    volumes = docker("volume", "ls", "--format", "{{.Name}}", "--filter", labelled).stdout.split()
    assert ca_volume_name(project.slug) not in volumes
    assert all(volume.startswith(f"opencode-sandbox-home-{project.slug}-") for volume in volumes), volumes

    # A VM removed outside the tool leaves its proxy, CA volume and network: pruning finds them.
    assert project.shell("true").returncode == 0
    docker("rm", "--force", project.vm, check=True)
    pieces = [("egress proxy", proxy_name(project.slug)), ("proxy CA volume", ca_volume_name(project.slug)),
              ("project network", network_name(project.slug))]
    preview = project.cli("sandbox", "prune", "--dry-run", "-a", "0")
    assert preview.returncode == 0, preview.stderr
    assert PIECE_LINE.findall(preview.stdout) == [(kind, name, "its project has no VM") for kind, name in pieces], \
        preview.stdout
    pruned = project.cli("sandbox", "prune", "-a", "0", "--force")
    assert pruned.returncode == 0, pruned.stderr
    assert docker("ps", "--all", "--quiet", "--filter", labelled).stdout.strip() == ""
    assert docker("network", "ls", "--quiet", "--filter", labelled).stdout.strip() == ""
    assert ca_volume_name(project.slug) not in docker("volume", "ls", "--format", "{{.Name}}").stdout.split()
    assert project.home_volumes(), "a project without a VM keeps its home volume"


TLS_SERVER = ("require('https').createServer({key: require('fs').readFileSync('/tls/key.pem'), "
              "cert: require('fs').readFileSync('/tls/cert.pem')}, (q, s) => s.end('hello')).listen(8443)")


@pytest.fixture
def tls_server(servers: tuple[Server, Server], unique: str, tmp_path: Path,
               runner_base_image: RunnerBase) -> Iterator[str]:
    """An HTTPS server beside the public one, with a certificate no one trusts; its name."""
    public = servers[1]
    name = f"tls.{unique}.test"
    folder = tmp_path / "tls"
    folder.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name}", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    folder.chmod(0o755)
    (folder / "key.pem").chmod(0o644)
    address = public.address.rsplit(".", 1)[0] + "." + str(int(public.address.rsplit(".", 1)[1]) + 1)
    container = f"osb-netpol-tls-srv-{unique}"
    docker("run", "-d", "--name", container, "--label", f"osb-test={unique}", "--network", public.network,
           "--ip", address, "--network-alias", name, "--mount", f"type=bind,source={folder},target=/tls,readonly",
           "--user", "root", "--entrypoint", "node", runner_base_image.result.reference, "-e", TLS_SERVER, check=True)
    try:
        yield name
    finally:
        docker("rm", "-f", container)


def test_public_with_a_denied_name_goes_through_the_proxy_and_keeps_private_addresses_out(
    project: Project, servers: tuple[Server, Server], tls_server: str, proxy_images_removed_after: None,
    netfilter_image_removed_after: None,
) -> None:
    private, public = servers
    project.env["OPENCODE_SANDBOX_EGRESS_DENY"] = public.name
    booted = project.shell("true")
    assert booted.returncode == 0, booted.stderr
    connect(project, private, public)
    serve_proxy(project, private, public)

    assert fetch(project, public.url)[0] == "hello", "a public address answers through the proxy"
    denied = refused_by_policy(project, public.named_url)
    assert f"egress-deny {public.name}" in denied, denied
    privately = refused_by_policy(project, private.named_url)
    assert "a private address" in privately, privately
    assert "a private address" in refused_by_policy(project, private.url)
    refused_fast(project, public.url + "direct", "--noproxy", "*")
    # HTTPS is intercepted: the VM trusts the proxy's certificate for the name (no curl error 60),
    # and the proxy refuses a server whose certificate nothing it trusts has signed.
    untrusted, _ = fetch(project, f"https://{tls_server}:8443/", "--write-out", "\nstatus %{http_code}")
    assert "status 502" in untrusted and "certificate" in untrusted.lower(), untrusted
    logged = docker("logs", proxy_name(project.slug)).stdout
    assert f'"host": "{public.name}"' in logged and '"event": "denied"' in logged, logged

    # What `prune` carries out for this project's stale VM and home volume (its plan would take
    # every stale VM of the shared engine): the proxy and its CA volume go with the VM.
    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert proxy_state(project).startswith("exited")
    plan = [Removal(ArtifactKind.VM, project.vm, "stale", project.slug),
            *(Removal(ArtifactKind.HOME_VOLUME, volume, "stale", project.slug) for volume in project.home_volumes())]
    warnings: list[str] = []
    outcome = apply_plan(plan, project.backend(), None, StateStore(project.paths.state_dir), warnings.append)
    assert outcome.removed == plan and not warnings
    labelled = f"label={LABEL_SLUG}={project.slug}"
    assert docker("ps", "--all", "--quiet", "--filter", labelled).stdout.strip() == ""
    assert docker("network", "ls", "--quiet", "--filter", labelled).stdout.strip() == ""
    assert docker("volume", "ls", "--quiet", "--filter", labelled).stdout.strip() == ""
