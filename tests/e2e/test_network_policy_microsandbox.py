"""The network policy and secrets on the microsandbox runtime, in booting microVMs: msb's own
policy engine refuses what the profile leaves out, puts a secret's value only into requests to its
hosts, and `network log` reads its records.

The servers are the lab machine's own. One listens on its private address, which `public` keeps
out. The others stand for the internet: the lab (scripts/kvm-lab.sh) resolves every name under
`lab.test` to a public address whose ports 443 and 8080 lead back to ports 8443 and 8080 of
`LAB_SIDE`, where the tests serve.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import trustme

from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from tests.e2e.conftest import MICROVMS_ONLY
from tests.e2e.harness import Project, ServeOnly, non_loopback_address, status_of
from tests.e2e.test_agent import NOTE, NOTE_TEXT
from tests.fixtures.model_server import ModelServer, Reply, ToolCall, provider_config, step

LAB_INTERNET = os.environ.get("OPENCODE_SANDBOX_LAB_INTERNET", "")
LAB_SIDE = "10.200.0.1"
pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(3600), *MICROVMS_ONLY,
              pytest.mark.skipif(not LAB_INTERNET, reason="needs the lab's stand-in for the internet")]

FAST_MS = 8000
"""A refused connection or lookup fails at once, the lab's emulation included; a hang takes curl's
whole --max-time (30 s), a lookup nobody answers the resolver's 5 s timeout twice."""
KEY = "sk-real-lab-5e7a9c1b3d"
PLACEHOLDER = "$MSB_OPENAI_API_KEY"


@dataclass
class Site:
    """A plain HTTP server that answers `hello` and keeps every request it gets."""

    url: str
    requests: list[str] = field(default_factory=list)


def _serve(address: str, port: int) -> Iterator[Site]:
    site = Site(f"http://{address}:{port}/")

    class Keep(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.requests.append(f"{self.requestline}\n{self.headers}")
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, port), Keep)
    site.url = f"http://{address}:{server.server_address[1]}/"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def host_site() -> Iterator[Site]:
    """A server on this host's private address."""
    address = non_loopback_address()
    if address is None:
        pytest.skip("this host has no address but loopback")
    yield from _serve(address, 0)


@pytest.fixture
def internet_site() -> Iterator[Site]:
    """A server on the stand-in internet, as `http://web.lab.test:8080/`."""
    for site in _serve(LAB_SIDE, 8080):
        site.url = "http://web.lab.test:8080/"
        yield site


def vm_fetch(project: Project, url: str, *curl: str) -> tuple[str, int]:
    """What curl in the VM gets from `url` (its body, then `status CODE`), and how many
    milliseconds it took, timed in the VM."""
    options = " ".join(shlex.quote(option) for option in curl)
    script = (f"start=$(date +%s%3N); curl -sS --max-time 30 -w '\\nstatus %{{http_code}}' {options} "
              f"{shlex.quote(url)} 2>&1; echo; echo took $(( $(date +%s%3N) - start ))")
    result = project.shell(script)
    lines = result.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("took "), (result.stdout, result.stderr)
    return "\n".join(lines[:-1]), int(lines[-1].split()[1])


def vm_resolves(project: Project, name: str) -> tuple[bool, int]:
    script = (f"start=$(date +%s%3N); getent hosts {shlex.quote(name)} >/dev/null; found=$?; "
              "echo $found $(( $(date +%s%3N) - start ))")
    result = project.shell(script)
    assert result.returncode == 0 and len(result.stdout.split()) >= 2, (result.stdout, result.stderr)
    found, took = result.stdout.split()[-2:]
    return found == "0", int(took)


def msb_records(project: Project) -> str:
    """msb's own diagnostic log of the VM, to show with a failure."""
    result = subprocess.run([str(locate_msb()), "logs", "--source", "system", "--trace", project.vm],
                            env=project.process_env(), capture_output=True, text=True, timeout=120,
                            **project.process_options())
    lines = [line for line in str(result.stdout).splitlines() if "microsandbox_network" in line]
    return "\n".join(lines)[-20000:] + str(result.stderr)[-2000:]


def network_log(project: Project) -> list[dict[str, object]]:
    logged = project.cli("network", "log", "--format", "json")
    assert logged.returncode == 0, f"{logged.stderr}\n{msb_records(project)}"
    entries: list[dict[str, object]] = json.loads(logged.stdout)["result"]
    return entries


def refused_fast(project: Project, url: str) -> str:
    answer, took = vm_fetch(project, url)
    assert "hello" not in answer, f"{url} answered: {answer}\n{msb_records(project)}"
    assert took < FAST_MS, f"refusing {url} took {took} ms: {answer}\n{msb_records(project)}"
    return answer


def test_public_keeps_the_host_out_and_lets_the_internet_in(msb_project: Project, host_site: Site,
                                                             internet_site: Site) -> None:
    project = msb_project
    first = project.cli("shell", "--", "true")
    assert first.returncode == 0, first.stderr
    refused_fast(project, host_site.url)
    refused_fast(project, host_site.url)
    assert host_site.requests == []
    answer, _ = vm_fetch(project, internet_site.url)
    assert answer.startswith("hello"), f"{answer}\n{msb_records(project)}"

    # msb keeps no record of what it refuses by address: under `public`, where every name resolves,
    # the log stays empty.
    assert network_log(project) == []
    table = project.cli("network", "log")
    assert table.returncode == 0 and "Nothing refused" in table.stdout, table.stdout + table.stderr


def test_none_lets_nothing_out_and_still_serves_the_host(msb_project: Project, internet_site: Site) -> None:
    project = msb_project
    project.env["OPENCODE_SANDBOX_NETWORK"] = "none"
    served = ServeOnly(project)
    try:
        assert status_of(served.url + "/global/health", None) == 401
        assert status_of(served.url + "/global/health", served.password) == 200
        resolved, took = vm_resolves(project, "web.lab.test")
        assert not resolved, msb_records(project)
        assert took < FAST_MS, f"a refused lookup took {took} ms\n{msb_records(project)}"
        refused_fast(project, f"http://{LAB_INTERNET}:8080/")
        assert internet_site.requests == []
        entries = network_log(project)
        assert any(entry["destination"] == "web.lab.test" and entry["protocol"] == "dns" for entry in entries), \
            f"{entries}\n{msb_records(project)}"
    finally:
        served.detach()


def in_vm(project: Project, script: str, user: str = "dev") -> str:
    result = project.backend().exec(project.vm, ["sh", "-c", script], user=user, workdir="/", timeout_s=300)
    return result.stdout + result.stderr


def model_tls(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA of the test's own (its file, for `extra-ca-certificates`) and the model server's TLS
    context under it, for `model.lab.test`."""
    ca = trustme.CA()
    ca_file = folder / "model-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("model.lab.test").configure_cert(tls)
    return ca_file, tls


def test_the_agent_works_through_a_secret_under_an_allowlist(msb_project: Project, internet_site: Site,
                                                             tmp_path: Path) -> None:
    project = msb_project
    ca_file, tls = model_tls(tmp_path)
    steps = [
        step(ToolCall("write", {"filePath": f"/workspace/{NOTE}", "content": NOTE_TEXT})),
        step(Reply(f"I wrote {NOTE}."), held=True),
    ]
    with ModelServer.start(steps, bind=LAB_SIDE, advertised_host="model.lab.test", tls=tls, port=8443) as model:
        project.env.update({
            "OPENCODE_SANDBOX_NETWORK": "allowlist",
            "OPENCODE_SANDBOX_EGRESS_ALLOW": "web.lab.test:8080",
            "OPENCODE_SANDBOX_SECRETS": "OPENAI_API_KEY=model.lab.test",
            "OPENAI_API_KEY": KEY,
            "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
        })
        project.opencode_config_dir.mkdir(parents=True, exist_ok=True)
        config = provider_config("https://model.lab.test/v1", "{env:OPENAI_API_KEY}")
        (project.opencode_config_dir / "opencode.json").write_text(json.dumps(config))
        client = ServeOnly(project)
        try:
            with httpx.Client(base_url=client.url, auth=("opencode", client.password), timeout=120) as daemon:
                session = daemon.post("/session", json={"title": "through a secret"}).json()["id"]
                sent = daemon.post(f"/session/{session}/prompt_async",
                                   json={"parts": [{"type": "text", "text": f"Write {NOTE} in the checkout."}]})
                assert sent.status_code in (200, 204), sent.text
                assert steps[1].reached.wait(1200), (
                    f"the agent never came back for its next step: {model.requests}\n{msb_records(project)}")
            assert (project.root / NOTE).read_text() == NOTE_TEXT
            assert model.authorizations and set(model.authorizations) == {f"Bearer {KEY}"}, model.authorizations

            environment = in_vm(project, "printenv")
            assert f"OPENAI_API_KEY={PLACEHOLDER}" in environment.splitlines(), environment
            assert KEY not in environment
            found = in_vm(project, f"grep -rlF -- {shlex.quote(KEY)} /home/dev /workspace /etc /tmp; echo exit $?",
                          "root")
            assert found.strip().endswith("exit 1"), f"the value is in the VM's files: {found}"
            processes = in_vm(project, "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'",
                              "root")
            assert PLACEHOLDER in processes and KEY not in processes

            other, _ = vm_fetch(project, internet_site.url, "-H", f"Authorization: Bearer {PLACEHOLDER}")
            assert "hello" not in other, f"{other}\n{msb_records(project)}"
            assert not any(KEY in request for request in internet_site.requests), internet_site.requests
            assert not any(PLACEHOLDER in request for request in internet_site.requests), internet_site.requests
            plain, _ = vm_fetch(project, internet_site.url)
            assert plain.startswith("hello"), f"an allowed host answers a request without the placeholder: {plain}"
            refused_fast(project, "http://elsewhere.lab.test:8080/")

            entries = network_log(project)
            assert any(entry["destination"] in ("web.lab.test", LAB_INTERNET) and "placeholder" in str(entry["reason"])
                       for entry in entries), f"{entries}\n{msb_records(project)}"
            assert any(entry["destination"] == "elsewhere.lab.test" for entry in entries), entries
        finally:
            steps[1].release.set()
            client.detach()


def test_a_streamed_answer_comes_whole_through_a_secret(msb_project: Project, tmp_path: Path) -> None:
    """What opencode's model client does, with curl: a streamed chat completion over HTTPS that msb
    intercepts to put the secret in, streamed in chunked transfer encoding as providers do."""
    project = msb_project
    ca_file, tls = model_tls(tmp_path)
    with ModelServer.start([], bind=LAB_SIDE, advertised_host="model.lab.test", tls=tls, port=8443) as model:
        project.env.update({
            "OPENCODE_SANDBOX_NETWORK": "allowlist",
            "OPENCODE_SANDBOX_SECRETS": "OPENAI_API_KEY=model.lab.test",
            "OPENAI_API_KEY": KEY,
            "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
        })
        request = json.dumps({"model": "scripted-model", "messages": [{"role": "user", "content": "hi"}],
                              "tools": [], "stream": True})
        script = ("start=$(date +%s); curl -sS -N --max-time 120 -H \"Authorization: Bearer $OPENAI_API_KEY\" "
                  f"-H 'Content-Type: application/json' -d {shlex.quote(request)} "
                  "https://model.lab.test/v1/chat/completions; status=$?; echo; "
                  "echo exit $status took $(( $(date +%s) - start ))")
        streamed = project.shell(script)
        lines = streamed.stdout.strip().splitlines()
        assert lines and lines[-1].startswith("exit "), (streamed.stdout, streamed.stderr)
        _, status, _, took = lines[-1].split()
        assert "data: [DONE]" in streamed.stdout, f"{streamed.stdout}\n{msb_records(project)}"
        assert model.authorizations == [f"Bearer {KEY}"], model.authorizations
        assert status == "0" and int(took) < 60, f"the stream did not end: {lines[-1]}\n{msb_records(project)}"


GROUPS_SCRIPT = ("use Socket; socket(my $s, PF_INET, SOCK_DGRAM, 0) or die qq(socket: $!\\n); "
                 "setsockopt($s, SOL_SOCKET, SO_BROADCAST, 1); my $sent = 0; "
                 "for my $to ('255.255.255.255', '224.0.0.1') {{ "
                 "$sent++ if send($s, qq(from the VM to $to), 0, sockaddr_in({port}, inet_aton($to))); sleep 1 }} "
                 "print qq(sent $sent\\n)")


def test_the_ways_out_the_attack_found_are_closed_in_a_microvm(
    msb_project: Project, tmp_path: Path, host_datagrams: tuple[int, list[bytes]],
) -> None:
    """In one booted microVM, as the agent would try them: a checkout's configuration that widens
    its VM, provisioning through a link to the launcher's environment, a secret's request fronted to
    another site of the same server (in TLS, and in `Host`), and broadcast and multicast to the host."""
    project = msb_project
    checkout_config = project.root / ".opencode-sandbox" / "config.yaml"
    checkout_config.parent.mkdir(exist_ok=True)
    checkout_config.write_text("egress-allow: ['0.0.0.0/0']\n")
    widened = project.cli("shell", "--", "true")
    assert widened.returncode != 0 and "in the project's checkout, which the agent" in widened.stderr, widened.stderr
    assert project.vm_info() is None
    checkout_config.unlink()

    linked = project.root / ".opencode-sandbox" / "opencode"
    linked.mkdir()
    (linked / "env.txt").symlink_to("/proc/self/environ")
    ca = trustme.CA()
    ca_file = tmp_path / "model-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("model.lab.test", "other.lab.test").configure_cert(tls)  # one front serves both names
    udp_port, datagrams = host_datagrams
    with ModelServer.start([], bind=LAB_SIDE, advertised_host="model.lab.test", tls=tls, port=8443) as model:
        project.env.update({
            "OPENCODE_SANDBOX_SECRETS": "OPENAI_API_KEY=model.lab.test",
            "OPENAI_API_KEY": KEY,
            "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(ca_file),
        })
        bearer = '-H "Authorization: Bearer $OPENAI_API_KEY"'
        script = "; ".join([
            "echo provisioned: $(ls -A ~/.config/opencode)",
            f"curl -sS --max-time 30 {bearer} --connect-to other.lab.test:443:model.lab.test:443 "
            "https://other.lab.test/v1/models -o /dev/null -w 'tls-name %{http_code}\\n'",
            f"curl -sS --max-time 30 {bearer} -H 'Host: other.lab.test' https://model.lab.test/v1/models "
            "-o /dev/null -w 'host-header %{http_code}\\n'",
            f"curl -sS --max-time 30 {bearer} https://model.lab.test/v1/models -o /dev/null "
            "-w 'direct %{http_code}\\n'",
            f"perl -e {shlex.quote(GROUPS_SCRIPT.format(port=udp_port))}",
        ])
        tried = project.shell(script)
        time.sleep(2)
        seen = list(zip(model.hosts, model.authorizations, strict=True))
    report = f"{tried.stdout}\n{tried.stderr}\nthe server saw: {seen}\n{msb_records(project)}"
    assert "not copied into the VM" in tried.stderr and "env.txt" not in tried.stdout.split("provisioned:")[1], report
    assert "direct 200" in tried.stdout and ("model.lab.test", f"Bearer {KEY}") in seen, report
    fronted = [host for host, authorization in seen if KEY in authorization and not host.startswith("model.lab.test")]
    assert fronted == [], f"the key went to a request for another site: {report}"
    assert datagrams == [], f"a datagram from the VM reached a host service: {datagrams}\n{report}"
