"""The real opencode agent works through a secret on the docker runtime: the VM holds only the
placeholder, and the egress proxy puts the real key into the HTTPS requests to the model's host.

The scripted model serves HTTPS on this host under a CA of the test's own, which the tool is
given as `extra-ca-certificates` (the proxy verifies servers with it). The proxy finds the model
by name, as it would a provider: a small relay container on a test network in a public address
range carries the names `model.<unique>.test` (port 443, to the model server) and
`other.<unique>.test` (port 8080, to a recording server that stands for any other host). The
relay is a container because Docker's DNS names only containers; the servers stay in the test
process, which sees every request they get.
"""

from __future__ import annotations

import http.server
import json
import random
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trustme

from opencode_sandbox.core.naming import LABEL_SLUG
from opencode_sandbox.runtime.docker.netfilter import network_name
from opencode_sandbox.runtime.docker.proxy import ca_volume_name, proxy_name
from tests.e2e.harness import Project, ServeOnly, docker, wait_until
from tests.e2e.test_agent import NOTE, NOTE_TEXT, opencode_logs
from tests.e2e.test_network_policy_docker import proxy_images_removed_after  # noqa: F401 (a fixture)
from tests.fixtures.images import RunnerBase
from tests.fixtures.model_server import ModelServer, Reply, ToolCall, provider_config, step

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

KEY = "sk-real-e2e-7c1d9a2b4f6e8a0c"
NEW_KEY = "sk-real-e2e-renewed-3b5d7f9a1c"
PLACEHOLDER = "$MSB_OPENAI_API_KEY"
RELAY = """const net = require('net');
for (const [listen, port] of [[443, MODEL_PORT], [8080, OTHER_PORT]]) {
  net.createServer(client => {
    const server = net.connect(port, 'GATEWAY');
    client.pipe(server); server.pipe(client);
    client.on('error', () => server.destroy()); server.on('error', () => client.destroy());
  }).listen(listen);
}"""


@dataclass
class Recorder:
    """A plain HTTP server that keeps every request it gets."""

    port: int
    requests: list[str] = field(default_factory=list)


@dataclass
class Site:
    network: str
    gateway: str
    relay: str
    model_name: str
    other_name: str


@pytest.fixture
def site(unique: str) -> Iterator[Site]:
    """The test network (in 198.51.100.0/24, which the `public` profile lets out) and its gateway,
    the host's address there, where the servers listen."""
    network = f"osb-secret-{unique}"
    for _ in range(8):
        base = 16 * random.randint(0, 15)
        gateway = f"198.51.100.{base + 1}"
        made = docker("network", "create", "--label", f"osb-test={unique}", "--subnet", f"198.51.100.{base}/28",
                      "--gateway", gateway, network)
        if made.returncode == 0:
            break
        assert "overlap" in made.stderr.lower(), made.stderr
    else:
        pytest.skip("no free subnet for the test network")
    made_site = Site(network, gateway, f"osb-secret-relay-{unique}", f"model.{unique}.test", f"other.{unique}.test")
    try:
        yield made_site
    finally:
        docker("rm", "-f", made_site.relay)
        attached = docker("network", "inspect", "--format", "{{range .Containers}}{{.Name}} {{end}}",
                          network).stdout.split()
        for container in attached:
            docker("network", "disconnect", "--force", network, container)
        docker("network", "rm", network)


@pytest.fixture
def recorder(site: Site) -> Iterator[Recorder]:
    recorded: list[str] = []

    class Keep(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorded.append(f"{self.requestline}\n{self.headers}")
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"arrived")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((site.gateway, 0), Keep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Recorder(server.server_address[1], recorded)
    finally:
        server.shutdown()
        server.server_close()


def start_relay(site: Site, model_port: int, other_port: int, image: str) -> None:
    script = (RELAY.replace("MODEL_PORT", str(model_port)).replace("OTHER_PORT", str(other_port))
              .replace("GATEWAY", site.gateway))
    docker("run", "-d", "--name", site.relay, "--label", f"osb-test={site.network}", "--network", site.network,
           "--network-alias", site.model_name, "--network-alias", site.other_name, "--user", "root",
           "--entrypoint", "node", image, "-e", script, check=True)


def serve_proxy(project: Project, site: Site) -> None:
    """The proxy resolves and reaches the relay on the test network, as it would the internet;
    again after every run, as a proxy created anew is on the project's network only."""
    connected = docker("network", "connect", site.network, proxy_name(project.slug))
    assert connected.returncode == 0 or "already exists" in connected.stderr, connected.stderr


def in_vm(project: Project, script: str, user: str = "dev") -> str:
    result = docker("exec", "--user", user, project.vm, "sh", "-c", script)
    return result.stdout + result.stderr


def models_request(project: Project, site: Site) -> str:
    """What the model server answers to a request from the VM that carries the placeholder."""
    return in_vm(project, f'curl -sS --max-time 20 -H "Authorization: Bearer $OPENAI_API_KEY" '
                          f"https://{site.model_name}/v1/models")


FRONTED = """const http = require('http'), tls = require('tls');
const [connectTo, sni, host, target] = process.argv.slice(1);
http.request({host: 'opencode-sandbox-proxy', port: 8080, method: 'CONNECT', path: connectTo + ':443'})
  .on('connect', (answer, socket) => {
    if (answer.statusCode !== 200) { console.log('CONNECT ' + answer.statusCode); return; }
    const secure = tls.connect({socket, servername: sni, rejectUnauthorized: false}, () => secure.write(
      'GET ' + target + ' HTTP/1.1\\r\\nHost: ' + host + '\\r\\nAuthorization: Bearer ' + process.env.OPENAI_API_KEY +
      '\\r\\nConnection: close\\r\\n\\r\\n'));
    let got = ''; secure.on('data', part => got += part).on('end', () => console.log(got))
      .on('error', error => console.log('error ' + error.message));
  }).on('error', error => console.log('error ' + error.message)).end();
"""
RAW_STREAM = """const http = require('http'), tls = require('tls');
const [connectTo, bytes] = process.argv.slice(1);
http.request({host: 'opencode-sandbox-proxy', port: 8080, method: 'CONNECT', path: connectTo + ':443'})
  .on('connect', (answer, socket) => {
    if (answer.statusCode !== 200) { console.log('CONNECT ' + answer.statusCode); return; }
    const secure = tls.connect({socket, servername: connectTo, rejectUnauthorized: false},
                               () => secure.write(JSON.parse(bytes)));
    let got = ''; secure.on('data', part => got += part).on('end', () => console.log('received: ' + got))
      .on('close', () => console.log('closed')).on('error', error => console.log('error ' + error.message));
  }).on('error', error => console.log('error ' + error.message)).end();
"""
FRONTED_HTTP2 = """const http = require('http'), http2 = require('http2'), tls = require('tls');
const [connectTo, authority] = process.argv.slice(1);
http.request({host: 'opencode-sandbox-proxy', port: 8080, method: 'CONNECT', path: connectTo + ':443'})
  .on('connect', (answer, socket) => {
    if (answer.statusCode !== 200) { console.log('CONNECT ' + answer.statusCode); return; }
    const session = http2.connect('https://' + connectTo, {createConnection: () => tls.connect(
      {socket, servername: connectTo, ALPNProtocols: ['h2'], rejectUnauthorized: false})});
    session.on('error', error => console.log('error ' + error.message));
    const stream = session.request({':method': 'GET', ':path': '/v1/models', ':authority': authority,
                                    'authorization': 'Bearer ' + process.env.OPENAI_API_KEY});
    let got = '';
    stream.on('response', headers => got += 'HTTP/2 ' + headers[':status'] + '\\n')
      .on('data', part => got += part).on('end', () => { console.log(got); session.close(); })
      .on('error', error => { console.log('error ' + error.message); session.close(); });
    stream.end();
  }).on('error', error => console.log('error ' + error.message)).end();
"""


def fronted_request(project: Project, connect_to: str, sni: str, host: str, target: str = "/v1/models") -> str:
    """A tunnel opened to `connect_to` through the proxy that then names another site, in TLS
    (`sni`), in `Host` or in the request target (absolute form), as a client on a shared front
    would; what comes back."""
    result = docker("exec", "--user", "dev", project.vm, "node", "-e", FRONTED, connect_to, sni, host, target)
    return result.stdout + result.stderr


def fronted_http2_request(project: Project, connect_to: str, authority: str) -> str:
    """The same over HTTP/2, the other site named in `:authority` alone."""
    result = docker("exec", "--user", "dev", project.vm, "node", "-e", FRONTED_HTTP2, connect_to, authority)
    return result.stdout + result.stderr


def from_the_host_through_the_proxy(project: Project, request: str) -> str:
    """What the project's proxy answers a request sent to it from the host, as any local user can,
    through the host's bridge to the proxy's address on the project network."""
    address = docker("inspect", "--format", f'{{{{(index .NetworkSettings.Networks "{network_name(project.slug)}")'
                     '.IPAddress}}', proxy_name(project.slug), check=True).stdout.strip()
    with socket.create_connection((address, 8080), timeout=20) as connection:
        connection.sendall(request.encode())
        received = b""
        try:
            while part := connection.recv(4096):  # a refusal closes the connection
                received += part
        except TimeoutError:  # an open tunnel stays open
            received += b"\n(the connection stayed open)"
    return received.decode(errors="replace")


def assert_only_the_placeholder_in_the_vm(project: Project) -> None:
    env = in_vm(project, "printenv")
    assert f"OPENAI_API_KEY={PLACEHOLDER}" in env.splitlines(), env
    for value in (KEY, NEW_KEY):
        assert value not in env
        # root in the VM holds no capability: dev reads its own files, root the system's
        for user, folders in (("dev", ("/home/dev", "/workspace")), ("root", ("/etc", "/tmp"))):
            found = docker("exec", "--user", user, project.vm, "grep", "-rlF", "--", value, *folders)
            assert found.returncode == 1 and not found.stdout.strip(), \
                f"{value} in the VM's files: {found.stdout}{found.stderr}"
        processes = in_vm(project, "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'", "root")
        assert PLACEHOLDER in processes and value not in processes
        for container in (project.vm, proxy_name(project.slug)):
            assert value not in docker("inspect", container, check=True).stdout


def test_the_agent_works_through_a_secret_whose_value_the_vm_never_holds(
    any_user_project: Project, site: Site, recorder: Recorder, tmp_path: Path, runner_base_image: RunnerBase,
    proxy_images_removed_after: None,  # noqa: F811 (the fixture imported above)
) -> None:
    project = any_user_project
    ca = trustme.CA()
    ca_file = (project.home or tmp_path) / "model-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(site.model_name, site.other_name).configure_cert(tls)  # one front serves both names
    steps = [
        step(ToolCall("write", {"filePath": f"/workspace/{NOTE}", "content": NOTE_TEXT})),
        step(Reply(f"I wrote {NOTE}."), held=True),
    ]
    with ModelServer.start(steps, bind=site.gateway, advertised_host=site.gateway, tls=tls) as model:
        start_relay(site, urlsplit(model.url).port or 0, recorder.port, runner_base_image.result.reference)
        project.env.update({
            "OPENCODE_SANDBOX_SECRETS": f"OPENAI_API_KEY={site.model_name}",
            "OPENAI_API_KEY": KEY,
            "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
        })
        project.opencode_config_dir.mkdir(parents=True, exist_ok=True)
        base_url = f"https://{site.model_name}/v1"
        config = provider_config(base_url, "{env:OPENAI_API_KEY}")
        (project.opencode_config_dir / "opencode.json").write_text(json.dumps(config))
        if project.user and project.home:
            project.user.give(project.home)
        client = ServeOnly(project)
        try:
            serve_proxy(project, site)
            with httpx.Client(base_url=client.url, auth=("opencode", client.password), timeout=60) as daemon:
                session = daemon.post("/session", json={"title": "through a secret"}).json()["id"]
                sent = daemon.post(f"/session/{session}/prompt_async",
                                   json={"parts": [{"type": "text", "text": f"Write {NOTE} in the checkout."}]})
                assert sent.status_code in (200, 204), sent.text
                assert steps[1].reached.wait(240), (
                    f"the agent never came back for its next step: {model.requests}\n{opencode_logs(project)}\n"
                    f"{docker('logs', '--tail', '20', proxy_name(project.slug)).stdout}")
            assert (project.root / NOTE).read_text() == NOTE_TEXT
            assert model.authorizations and set(model.authorizations) == {f"Bearer {KEY}"}, model.authorizations
            assert_only_the_placeholder_in_the_vm(project)

            other = in_vm(project, f'curl -sS --max-time 20 -w "\\nstatus %{{http_code}}" -H '
                                   f'"Authorization: Bearer $OPENAI_API_KEY" http://{site.other_name}:8080/')
            assert re.search(r"status 403$", other) and "secret_policy_denied" in other, other
            assert recorder.requests == [], "the placeholder never arrives at another host"
            plain = in_vm(project, 'curl -sS --max-time 20 -w "\\nstatus %{http_code}" '
                                   f"http://{site.other_name}:8080/")
            assert plain.endswith("status 200") and len(recorder.requests) == 1, "without it, the host answers"
            logged = project.cli("network", "log", "--format", "json")
            assert logged.returncode == 0, logged.stderr
            refused = [entry for entry in json.loads(logged.stdout)["result"]
                       if entry["destination"] == site.other_name]
            assert refused and "placeholder of the secret OPENAI_API_KEY" in refused[0]["reason"], logged.stdout

            seen = len(model.authorizations)
            for sni, host in [(site.other_name, site.other_name), (site.model_name, site.other_name)]:
                fronted = fronted_request(project, site.model_name, sni, host)
                assert "HTTP/1.1 403" in fronted and "names_disagree" in fronted, fronted
            # Every other name right, the other site named in the request target alone (absolute
            # form), which a server takes before the Host header (HTTP/2: `test_http2_...`).
            fronted = fronted_request(project, site.model_name, site.model_name, site.model_name,
                                      f"https://{site.other_name}/v1/models")
            assert "HTTP/1.1 403" in fronted and "names_disagree" in fronted, fronted
            assert model.authorizations[seen:] == [], "a request naming another site got the key"
            same = fronted_request(project, site.model_name, site.model_name, site.model_name,
                                   f"https://{site.model_name}/v1/models")
            assert "scripted-model" in same, "an absolute-form target naming the same site passes: " + same
            assert model.authorizations[seen:] == [f"Bearer {KEY}"]
            # The judged site spelt so a shared front would not know it (and serve its default site):
            # the front is told the judged name alone.
            heard = len(model.hosts)
            for spelling in (f"[{site.model_name}]", f"{site.model_name}..", f"{site.model_name}:8443"):
                spelt = fronted_request(project, site.model_name, site.model_name, spelling)
                assert "scripted-model" in spelt, spelt
            assert model.hosts[heard:] == [site.model_name] * 3, model.hosts[heard:]
            # Bytes the proxy cannot read as HTTP pass it as a raw stream, which a front reading them
            # leniently (`\r\nGET ...`, a leading line break skipped) takes for a request to any site.
            raw = docker("exec", "--user", "dev", project.vm, "node", "-e", RAW_STREAM, site.model_name,
                         json.dumps("1 GET /\r\n\r\n"))
            assert "Error response" not in raw.stdout, "the front read the stream: " + raw.stdout + raw.stderr
            assert "Server: mitmproxy" in raw.stdout or "received: \n" in raw.stdout + "\n", raw.stdout + raw.stderr
            seen = len(model.authorizations)
            for request in (f"CONNECT {site.model_name}:443 HTTP/1.1\r\nHost: {site.model_name}:443\r\n\r\n",
                            f"GET http://{site.other_name}:8080/ HTTP/1.1\r\nHost: {site.other_name}:8080\r\n"
                            f"Authorization: Bearer {PLACEHOLDER}\r\nConnection: close\r\n\r\n"):
                answer = from_the_host_through_the_proxy(project, request)
                assert answer.startswith("HTTP/1.1 403") and "not_its_vm" in answer, answer
            assert model.authorizations[seen:] == [] and len(recorder.requests) == 1, "the host's user got nothing"
            onboarding = in_vm(project, 'curl -sS --max-time 20 -w "\nstatus %{http_code}" http://mitm.it/')
            assert "mitmproxy" not in onboarding.lower() and not onboarding.endswith("status 200"), onboarding
        finally:
            steps[1].release.set()
            client.detach()

        # A new value is taken at the next start; the VM is the same one.
        vm_id = project.container_id()
        stopped = project.cli("stop")
        assert stopped.returncode == 0, stopped.stderr
        project.env["OPENAI_API_KEY"] = NEW_KEY
        started = project.shell("true")
        assert started.returncode == 0, started.stderr
        assert project.container_id() == vm_id, "a new value needs no new VM"
        serve_proxy(project, site)
        seen = len(model.authorizations)
        assert "scripted-model" in models_request(project, site)
        assert model.authorizations[seen:] == [f"Bearer {NEW_KEY}"]

        # A proxy that died is started again by the next run, and given the value again.
        docker("kill", proxy_name(project.slug), check=True)
        again = project.shell("true")
        assert again.returncode == 0, again.stderr
        serve_proxy(project, site)
        seen = len(model.authorizations)
        answer = models_request(project, site)
        assert "scripted-model" in answer, f"{answer}\n{docker('logs', '--tail', '20', proxy_name(project.slug))}"
        assert model.authorizations[seen:] == [f"Bearer {NEW_KEY}"]
        assert_only_the_placeholder_in_the_vm(project)

    removed = project.cli("stop", "-f")
    assert removed.returncode == 0, removed.stderr
    labelled = f"label={LABEL_SLUG}={project.slug}"
    assert wait_until(lambda: docker("ps", "--all", "--quiet", "--filter", labelled).stdout.strip() == "", 30)
    assert docker("network", "ls", "--quiet", "--filter", labelled).stdout.strip() == ""
    volumes = docker("volume", "ls", "--format", "{{.Name}}", "--filter", labelled).stdout.split()
    assert ca_volume_name(project.slug) not in volumes


H2_FRONT = """const http2 = require('http2');
http2.createSecureServer({key: process.env.FRONT_KEY, cert: process.env.FRONT_CERT, allowHTTP1: true}, (req, res) => {
  const named = req.headers[':authority'] || req.headers.host || '';
  console.log(JSON.stringify({named, authorization: req.headers.authorization || ''}));
  res.end('the front served ' + named);
}).listen(443);
"""


def test_http2_naming_another_site_in_its_authority_alone_gets_no_key(
    project: Project, site: Site, tmp_path: Path,
    proxy_images_removed_after: None,  # noqa: F811 (the fixture imported above)
) -> None:
    """A front that speaks HTTP/2 and serves both names: in a tunnel to the secret's host, with SNI
    that host, a request names the other site in `:authority` only. The proxy must refuse it, and
    the front must see no key."""
    ca = trustme.CA()
    ca_file = tmp_path / "front-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    leaf = ca.issue_cert(site.model_name, site.other_name)
    front = f"{site.relay}-h2"
    image = docker("image", "inspect", "--format", "{{.Id}}", "opencode-sandbox/runner-base:latest",
                   check=True).stdout.strip()
    docker("run", "-d", "--name", front, "--label", f"osb-test={site.network}", "--network", site.network,
           "--network-alias", site.model_name, "--network-alias", site.other_name, "--user", "root",
           "-e", f"FRONT_KEY={leaf.private_key_pem.bytes().decode()}",
           "-e", f"FRONT_CERT={''.join(blob.bytes().decode() for blob in leaf.cert_chain_pems)}",
           "--entrypoint", "node", image, "-e", H2_FRONT, check=True)
    project.env.update({
        "OPENCODE_SANDBOX_SECRETS": f"OPENAI_API_KEY={site.model_name}",
        "OPENAI_API_KEY": KEY,
        "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
    })
    try:
        started = project.shell("true")
        assert started.returncode == 0, started.stderr
        serve_proxy(project, site)
        same = fronted_http2_request(project, site.model_name, site.model_name)
        assert "HTTP/2 200" in same and f"the front served {site.model_name}" in same, same
        fronted = fronted_http2_request(project, site.model_name, site.other_name)
        assert "HTTP/2 403" in fronted and "names_disagree" in fronted, fronted
        seen = [json.loads(line) for line in docker("logs", front, check=True).stdout.splitlines()
                if line.startswith("{")]
        assert [each["named"] for each in seen] == [site.model_name], seen
        assert [each for each in seen if KEY in each["authorization"] and each["named"] != site.model_name] == []
    finally:
        docker("rm", "-f", front)
