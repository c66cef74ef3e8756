"""The docker runtime's egress proxy: its image's content, its container's arguments, what the VM
is given, and the addon's decisions (run against a stand-in for mitmproxy's `http` module, from
the very files the image holds)."""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import opencode_sandbox
from opencode_sandbox.core.egress import EgressPolicy, Profile, parse_rule
from opencode_sandbox.core.naming import LABEL_OWNER_UID
from opencode_sandbox.core.policy_document import policy_of_document
from opencode_sandbox.core.secrets import parse_secrets
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.errors import BootFailed, OwnedByAnother
from opencode_sandbox.runtime.docker import proxy as docker_proxy
from opencode_sandbox.runtime.docker.args import run_args
from opencode_sandbox.runtime.docker.owner import DockerOwner
from opencode_sandbox.runtime.types import SandboxSpec

PACKAGE = Path(opencode_sandbox.__file__).parent
POLICY = EgressPolicy(Profile.ALLOWLIST, (parse_rule("pub.example.test"), parse_rule("lan.example.test"),
                                          parse_rule("203.0.113.0/24:8080")), (parse_rule("*.evil.example"),),
                      parse_secrets({"API_KEY": ["pub.example.test"]}))
VALUE = "sk-distinctive-0a1b2c3d"
VM_ADDRESS = "172.30.0.3"


def test_the_vm_sends_its_traffic_to_the_proxy_in_both_spellings() -> None:
    environment = docker_proxy.proxy_environment()
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        assert environment[name] == "http://opencode-sandbox-proxy:8080"
    assert environment["NO_PROXY"] == environment["no_proxy"] == "localhost,127.0.0.1"


def test_the_vm_finds_the_proxy_in_its_hosts_file() -> None:
    spec = SandboxSpec(name="opencode-sandbox-vm-x", image="img", cpus=1, memory_mib=512)
    args = run_args(spec, {}, privileged=False, network="net", hosts={docker_proxy.PROXY_HOST: "172.30.0.2"},
                    seccomp="/p.json")
    assert args[args.index("--add-host") + 1] == "opencode-sandbox-proxy:172.30.0.2"
    assert "--add-host" not in run_args(spec, {}, privileged=False, network="net", seccomp="/p.json")


def test_the_image_holds_the_policy_module_itself_and_the_certificates_it_is_given() -> None:
    files = docker_proxy.image_files([b"pem-a", b"pem-b", b"pem-a"])
    assert files["lib/opencode_sandbox/core/egress.py"] == (PACKAGE / "core" / "egress.py").read_bytes()
    assert files["lib/proxy_addon.py"] == (PACKAGE / "runtime" / "docker" / "proxy_addon.py").read_bytes()
    assert sorted(data for path, data in files.items() if path.startswith("ca-certificates/")) == [b"pem-a", b"pem-b"]
    assert "mitmproxy==12.3.1" in files["Dockerfile"].decode()
    reference = docker_proxy.image_reference(files)
    assert reference.startswith("opencode-sandbox/egress-proxy:")
    assert docker_proxy.image_reference(docker_proxy.image_files([b"pem-a"])) != reference
    assert docker_proxy.image_reference(docker_proxy.image_files([b"pem-b", b"pem-a"])) == reference


def test_the_proxy_runs_without_capabilities_and_takes_its_policy_from_its_environment() -> None:
    args = docker_proxy._run_args("slug-0123456789abcd", "opencode-sandbox/egress-proxy:x", "net", "cfg",
                                  DockerOwner(4242).labels())
    assert args[args.index("--cap-drop") + 1] == "ALL" and "--read-only" in args
    assert f"{docker_proxy.RUN_DIR}:mode=0700,uid=10080,gid=10080,size=1m" in args
    assert "type=volume,source=opencode-sandbox-proxy-ca-slug-0123456789abcd,target=/var/lib/mitmproxy" in args
    assert args[args.index("--env") + 1] == docker_proxy.POLICY_VARIABLE, "a bare name: the value is no argument"
    assert "org.opencode-sandbox.kind=proxy" in args and "org.opencode-sandbox.slug=slug-0123456789abcd" in args
    assert f"{LABEL_OWNER_UID}=4242" in args, "the proxy is its host user's"
    assert "ssl_verify_upstream_trusted_ca=/etc/ssl/certs/ca-certificates.crt" in args, \
        "servers are verified with the system bundle, which holds the certificates the image was given"
    assert "update-ca-certificates" in docker_proxy.DOCKERFILE
    document = json.loads(docker_proxy.proxy_policy_document(POLICY, [ipaddress.ip_address("198.51.100.7")]))
    assert policy_of_document(document) == POLICY and document["host_addresses"] == ["198.51.100.7"]


class Flow:
    """A mitmproxy flow as much as the addon reads of it: the names of its server agree unless a
    test gives others."""

    def __init__(self, host: str, port: int) -> None:
        self.request = SimpleNamespace(host=host, port=port, scheme="http", url=f"http://{host}:{port}/",
                                       host_header=host, headers=Fields([]), get_content=lambda strict=True: b"",
                                       authority="", http_version="HTTP/1.1")
        self.client_conn = SimpleNamespace(sni=None, peername=(VM_ADDRESS, 40000))
        self.server_conn = SimpleNamespace(sni=None)
        self.response: Any = None


@pytest.fixture
def addon_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The addon as the image holds it, importing the image's copy of the policy module."""
    for path, data in docker_proxy.image_files([]).items():
        if path.startswith("lib/"):
            target = tmp_path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    stand_in = ModuleType("mitmproxy")
    http = ModuleType("mitmproxy.http")

    class Response:
        @staticmethod
        def make(status: int, body: str, headers: dict[str, str]) -> SimpleNamespace:
            return SimpleNamespace(status_code=status, body=body, headers=headers)

    http.Response = Response  # type: ignore[attr-defined]
    stand_in.http = http  # type: ignore[attr-defined]
    tcp = ModuleType("mitmproxy.tcp")
    stand_in.tcp = tcp  # type: ignore[attr-defined]
    document = json.loads(docker_proxy.proxy_policy_document(POLICY, []))
    monkeypatch.setenv(docker_proxy.POLICY_VARIABLE, json.dumps(document))
    saved = {name: module for name, module in sys.modules.items() if name.startswith("opencode_sandbox")}
    for name in saved:
        del sys.modules[name]
    monkeypatch.setitem(sys.modules, "mitmproxy", stand_in)
    monkeypatch.setitem(sys.modules, "mitmproxy.http", http)
    monkeypatch.setitem(sys.modules, "mitmproxy.tcp", tcp)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    clients = tmp_path / "clients.json"
    clients.write_text(json.dumps([VM_ADDRESS]))
    try:
        module = importlib.import_module("proxy_addon")
        monkeypatch.setattr(module, "CLIENTS_FILE", str(clients))
        assert module.EgressPolicyAddon.__module__ == "proxy_addon"
        copied = tmp_path / "lib/opencode_sandbox/core/egress.py"
        assert sys.modules["opencode_sandbox.core.egress"].__file__ == str(copied)
        yield module
    finally:
        for name in [name for name in sys.modules if name.startswith("opencode_sandbox") or name == "proxy_addon"]:
            del sys.modules[name]
        sys.modules.update(saved)


def judged(module: ModuleType, host: str, port: int, resolved: list[str],
           monkeypatch: pytest.MonkeyPatch, hook: str = "http_connect") -> Any:
    async def resolve(name: str, _port: int) -> list[Any]:
        return [ipaddress.ip_address(address) for address in resolved]

    monkeypatch.setattr(module, "_resolve", resolve)
    flow = Flow(host, port)
    asyncio.run(getattr(module.addons[0], hook)(flow))
    return flow.response


def test_the_addon_lets_through_what_the_policy_allows(addon_module: ModuleType,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert judged(addon_module, "pub.example.test", 443, ["198.51.100.10"], monkeypatch) is None
    assert judged(addon_module, "203.0.113.9", 8080, [], monkeypatch, hook="request") is None


def test_the_addon_refuses_with_a_403_naming_the_policy(addon_module: ModuleType, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for host, port, resolved, reason in [
        ("other.example", 443, ["93.184.216.34"], "not in egress-allow"),
        ("x.evil.example", 443, ["93.184.216.34"], "egress-deny *.evil.example"),
        ("203.0.113.9", 22, [], "not in egress-allow"),
        ("lan.example.test", 8080, ["10.20.30.40"], "lan.example.test resolves to 10.20.30.40, a private address"),
    ]:
        response = judged(addon_module, host, port, resolved, monkeypatch)
        assert response is not None and response.status_code == 403, host
        body = json.loads(response.body)
        assert body["error"] == "network_policy_denied" and reason in body["reason"]
        assert body["message"].startswith(f"opencode-sandbox network policy: {host}:{port} is not allowed")
        logged = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert logged["event"] == "denied" and logged["host"] == host


class Fields:
    """mitmproxy's request headers, as much as the addon uses of them."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs

    def items(self, multi: bool = False) -> list[tuple[str, str]]:
        return list(self.pairs)

    def set_all(self, field: str, values: list[str]) -> None:
        kept = [(name, value) for name, value in self.pairs if name.lower() != field]
        self.pairs = kept + [(field, value) for value in values]


class RequestFlow(Flow):
    def __init__(self, url: str, headers: list[tuple[str, str]], body: bytes = b"", sni: str | None = None,
                 host_header: str | None = None, target_authority: str = "", http_version: str = "HTTP/1.1") -> None:
        super().__init__("", 0)
        scheme, rest = url.split("://", 1)
        authority = rest.split("/", 1)[0]
        host, _, port = authority.partition(":")
        self.request = SimpleNamespace(host=host, port=int(port or (443 if scheme == "https" else 80)), scheme=scheme,
                                       url=url, host_header=host_header or authority, headers=Fields(headers),
                                       get_content=lambda strict=True: body, authority=target_authority,
                                       http_version=http_version)
        if scheme == "https":  # mitmproxy checks the server's certificate for the client's name, else the host
            self.client_conn.sni = sni or host
            self.server_conn.sni = sni or host


def requested(module: ModuleType, flow: RequestFlow, monkeypatch: pytest.MonkeyPatch,
              values: dict[str, str] | None, tmp_path: Path) -> RequestFlow:
    async def resolve(name: str, _port: int) -> list[Any]:
        return [ipaddress.ip_address("198.51.100.10")]

    monkeypatch.setattr(module, "_resolve", resolve)
    given = tmp_path / "run" / "secret-values.json"
    given.parent.mkdir(exist_ok=True)
    given.unlink(missing_ok=True)
    if values is not None:
        given.write_text(json.dumps(values))
    monkeypatch.setattr(module, "SECRET_VALUES_FILE", str(given))
    asyncio.run(module.addons[0].request(flow))
    return flow


def test_the_addon_puts_the_value_only_into_https_requests_to_the_secrets_host(
    addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    bearer = ("Authorization", "Bearer $MSB_API_KEY")
    sent = requested(addon_module, RequestFlow("https://pub.example.test/v1", [("Accept", "*/*"), bearer]),
                     monkeypatch, {"API_KEY": VALUE}, tmp_path)
    assert sent.response is None
    assert sent.request.headers.pairs == [("Accept", "*/*"), ("host", "pub.example.test"),
                                          ("authorization", f"Bearer {VALUE}")]

    for url, reason in [("https://lan.example.test/v1", "placeholder of the secret API_KEY to lan.example.test"),
                        ("http://pub.example.test/v1", "over plain HTTP to pub.example.test")]:
        refused = requested(addon_module, RequestFlow(url, [bearer]), monkeypatch, {"API_KEY": VALUE}, tmp_path)
        assert refused.response is not None and refused.response.status_code == 403, url
        body = json.loads(refused.response.body)
        assert body["error"] == "secret_policy_denied" and reason in body["reason"]
        assert bearer in refused.request.headers.pairs and VALUE not in str(refused.request.headers.pairs)
        assert VALUE not in refused.response.body
        logged = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert logged["event"] == "denied" and logged["host"] == refused.request.host and VALUE not in str(logged)
    in_body = requested(addon_module, RequestFlow("https://lan.example.test/", [], b'{"k": "$MSB_API_KEY"}'),
                        monkeypatch, {"API_KEY": VALUE}, tmp_path)
    assert in_body.response is not None and in_body.response.status_code == 403


@pytest.mark.parametrize(("sni", "host_header", "said"), [
    ("evil.example", None, "the TLS name (SNI) evil.example is not pub.example.test"),
    (None, "evil.example", "the Host header names evil.example, not pub.example.test"),
])
def test_a_request_that_names_another_site_than_its_connection_gets_no_value_and_a_403(
    addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    sni: str | None, host_header: str | None, said: str,
) -> None:
    """Connected to the secret's host, the request names another site (in TLS or in `Host`): on a
    shared front that site would get it, so neither the policy nor the secret takes the host's word."""
    bearer = ("Authorization", "Bearer $MSB_API_KEY")
    flow = requested(addon_module, RequestFlow("https://pub.example.test/v1", [bearer], sni=sni,
                                               host_header=host_header), monkeypatch, {"API_KEY": VALUE}, tmp_path)
    assert flow.response is not None and flow.response.status_code == 403
    body = json.loads(flow.response.body)
    assert body["error"] == "names_disagree" and said in body["reason"], body
    assert flow.request.headers.pairs == [bearer]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["reason"] == body["reason"]


@pytest.mark.parametrize(("target", "version", "said"), [
    ("evil.example", "HTTP/1.1", "the request target names evil.example, not pub.example.test"),
    ("pub.example.test:8443", "HTTP/1.1", "the request target names port 8443, not 443"),
    ("evil.example", "HTTP/2.0", "the request target names evil.example"),
])
def test_a_request_target_that_names_another_site_gets_no_value_and_a_403(
    addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, target: str, version: str, said: str,
) -> None:
    """In a tunnel to the secret's host, SNI and `Host` that host, the request target names another
    (`GET https://evil.example/ HTTP/1.1`, or HTTP/2's `:authority`): a server takes that first."""
    bearer = ("Authorization", "Bearer $MSB_API_KEY")
    flow = requested(addon_module, RequestFlow("https://pub.example.test/v1", [bearer], target_authority=target,
                                               http_version=version), monkeypatch, {"API_KEY": VALUE}, tmp_path)
    assert flow.response is not None and flow.response.status_code == 403
    body = json.loads(flow.response.body)
    assert body["error"] == "names_disagree" and said in body["reason"], body
    assert flow.request.headers.pairs == [bearer]


def test_a_request_whose_target_names_its_own_site_goes_on_in_origin_form(
    addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    bearer = ("Authorization", "Bearer $MSB_API_KEY")
    flow = requested(addon_module, RequestFlow("https://pub.example.test/v1", [bearer],
                                               target_authority="pub.example.test:443"),
                     monkeypatch, {"API_KEY": VALUE}, tmp_path)
    assert flow.response is None and flow.request.authority == ""
    sent = [(name.lower(), value) for name, value in flow.request.headers.pairs]
    assert sent == [("host", "pub.example.test"), ("authorization", f"Bearer {VALUE}")]


@pytest.mark.parametrize(("named", "version"), [
    ("[pub.example.test]", "HTTP/1.1"), ("[pub.example.test", "HTTP/1.1"), ("pub.example.test..", "HTTP/1.1"),
    ("pub.example.test:8443", "HTTP/1.1"), ("", "HTTP/1.1"), (None, "HTTP/1.0"), ("pub.example.test", "HTTP/2.0"),
])
def test_a_request_goes_on_naming_the_judged_server_alone_however_it_spelled_its_host(
    addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, named: str | None, version: str,
) -> None:
    """A front that cannot read the request's own spelling of its host (brackets, trailing dots,
    another port, none at all) serves its default site: the key would go there."""
    bearer = ("Authorization", "Bearer $MSB_API_KEY")
    headers = [bearer] if named is None else [("Host", named), bearer]
    flow = RequestFlow("https://pub.example.test/v1", headers, host_header=named or "", http_version=version)
    flow.request.host_header = named
    flow = requested(addon_module, flow, monkeypatch, {"API_KEY": VALUE}, tmp_path)
    assert flow.response is None
    hosts = [value for name, value in flow.request.headers.pairs if name.lower() == "host"]
    if version == "HTTP/2.0":
        assert (flow.request.authority, hosts) == ("pub.example.test", [])
    else:
        assert (flow.request.authority, hosts) == ("", ["pub.example.test"])


def test_the_judged_authority_names_a_port_only_where_it_is_not_the_schemes() -> None:
    from opencode_sandbox.core.request_names import judged_authority

    assert judged_authority("API.example.", 443, "https") == "api.example"
    assert judged_authority("api.example", 8443, "https") == "api.example:8443"
    assert judged_authority("2001:db8::1", 80, "http") == "[2001:db8::1]"
    assert judged_authority("192.0.2.7", 8080, "http") == "192.0.2.7:8080"


@pytest.mark.parametrize("client", ["172.30.0.1", "::ffff:172.30.0.9", None])
def test_the_proxy_serves_its_own_vm_alone(addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], client: str | None) -> None:
    """Another local user reaches the proxy's address through the host's bridge (the gateway's
    address), and would have the owner's secrets put in: it gets a 403 for every request."""
    for hook in ("http_connect", "request"):
        flow = Flow("pub.example.test", 443)
        flow.client_conn.peername = (client, 51000) if client else None
        asyncio.run(getattr(addon_module.addons[0], hook)(flow))
        assert flow.response is not None and flow.response.status_code == 403, hook
        assert json.loads(flow.response.body)["error"] == "not_its_vm"
    assert "serves its own VM only" in capsys.readouterr().out
    mapped = Flow("pub.example.test", 443)
    mapped.client_conn.peername = (f"::ffff:{VM_ADDRESS}", 51000, 0, 0)
    monkeypatch.setattr(addon_module, "_resolve", lambda *_: asyncio.sleep(0, [ipaddress.ip_address("198.51.100.10")]))
    asyncio.run(addon_module.addons[0].http_connect(mapped))
    assert mapped.response is None, "its VM's address, however spelled"


def test_a_proxy_given_no_address_yet_serves_no_one(addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(addon_module, "CLIENTS_FILE", str(tmp_path / "missing.json"))
    flow = Flow("pub.example.test", 443)
    asyncio.run(addon_module.addons[0].http_connect(flow))
    assert flow.response is not None and json.loads(flow.response.body)["error"] == "not_its_vm"


@pytest.mark.parametrize("sni", ["pub.example.test", None, "evil.example"])
def test_a_stream_that_is_not_http_is_cut_whatever_it_names(addon_module: ModuleType,
                                                           capsys: pytest.CaptureFixture[str], sni: str | None) -> None:
    """In a tunnel to an allowed host, bytes mitmproxy does not read as HTTP (`\\r\\nGET / HTTP/1.1`
    and `Host` another site) are relayed as they are, and a front that skips the leading line break
    serves the other site."""
    killed: list[bool] = []
    stream = SimpleNamespace(server_conn=SimpleNamespace(address=("pub.example.test", 443)),
                             client_conn=SimpleNamespace(sni=sni), kill=lambda: killed.append(True))
    addon_module.addons[0].tcp_start(stream)
    assert killed == [True]
    logged = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert logged["event"] == "denied" and "not HTTP" in logged["reason"]


def test_a_proxy_that_was_given_no_value_refuses_instead_of_sending_the_placeholder(
    addon_module: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    flow = requested(addon_module, RequestFlow("https://pub.example.test/", [("Authorization", "$MSB_API_KEY")]),
                     monkeypatch, None, tmp_path)
    assert flow.response is not None and "holds no value for the secret API_KEY" in json.loads(flow.response.body)[
        "reason"]


class Recorded(DockerCli):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[list[str], bytes | None]] = []

    def run(self, args: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None,
            environment: Any = None) -> str:
        self.calls.append((list(args), stdin))
        assert environment is None
        return ""


def test_the_values_reach_the_proxy_through_stdin_only() -> None:
    cli = Recorded()
    docker_proxy.give_secret_values(cli, "opencode-sandbox-proxy-slug", {"API_KEY": VALUE})
    [(args, stdin)] = cli.calls
    assert args[-1] == "values"
    assert VALUE not in " ".join(args) and args[:3] == ["exec", "--interactive", "opencode-sandbox-proxy-slug"]
    assert "--env" not in args and "-e" not in args
    assert stdin is not None and json.loads(stdin) == {"API_KEY": VALUE}
    assert docker_proxy.SECRET_VALUES_FILE.startswith(docker_proxy.RUN_DIR + "/"), "the tmpfs, never a disk"


class Inspected(DockerCli):
    """Answers every inspection with one container document."""

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__()
        self.document = document

    def inspect(self, kind: str, names: Sequence[str]) -> list[dict[str, Any]]:
        return [self.document]


def proxy_document(labels: dict[str, str], status: str) -> dict[str, Any]:
    return {"Name": "/opencode-sandbox-proxy-slug-0123456789abcd", "Config": {"Labels": labels},
            "State": {"Status": status, "Running": status == "running", "ExitCode": 0}}


def test_only_the_projects_own_running_proxy_counts_as_alive() -> None:
    owner = DockerOwner(4242)
    ours = {"org.opencode-sandbox.managed": "true", "org.opencode-sandbox.slug": "slug-0123456789abcd",
            LABEL_OWNER_UID: "4242"}
    theirs = {**ours, LABEL_OWNER_UID: "4343"}
    assert docker_proxy.proxy_alive(Inspected(proxy_document(ours, "running")), "slug-0123456789abcd", owner)
    assert not docker_proxy.proxy_alive(Inspected(proxy_document(ours, "exited")), "slug-0123456789abcd", owner)
    assert not docker_proxy.proxy_alive(Inspected(proxy_document({}, "running")), "slug-0123456789abcd", owner)
    assert not docker_proxy.proxy_alive(Inspected(proxy_document(theirs, "running")), "slug-0123456789abcd", owner)
    with pytest.raises(BootFailed, match="not created by opencode-sandbox"):
        docker_proxy.stop_proxy(Inspected(proxy_document({}, "running")), "slug-0123456789abcd", owner)
    with pytest.raises(OwnedByAnother, match="belongs to host user uid 4343"):
        docker_proxy.stop_proxy(Inspected(proxy_document(theirs, "running")), "slug-0123456789abcd", owner)


def test_the_proxys_refusals_are_read_back_from_its_log_lines() -> None:
    log = "\n".join([
        '{"t": "2026-12-01T22:30:00Z", "event": "denied", "host": "evil.example", "port": 443, "reason": "x"}',
        "[22:30:00.100] HTTP(S) proxy listening at *:8080.",
        '{"t": "2026-12-01T22:31:00Z", "event": "denied", "host": "evil.example", "port": 443, "reason": "x"}',
        '{"t": "2026-12-01T22:32:00Z", "event": "denied", "host": "10.1.2.3", "port": 8080, "reason": "y"}',
        '{"t": "2026-12-01T22:33:00Z", "event": "allowed", "host": "ok.example", "port": 443}',
        '{"t": "not a time", "event": "denied", "host": "odd.example", "port": 1}',
    ])
    found = {(refusal.destination, refusal.port): refusal for refusal in docker_proxy.denials_of_log(log)}
    assert set(found) == {("evil.example", 443), ("10.1.2.3", 8080)}
    evil = found[("evil.example", 443)]
    assert evil.attempts == 2 and evil.protocol == "tcp"
    assert evil.last_seen is not None and evil.last_seen.isoformat() == "2026-12-01T22:31:00+00:00"
    assert evil.reason == "x", "the reason the proxy logged, which network log shows"
