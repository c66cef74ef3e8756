"""The release check trusts the system's CA store and `extra-ca-certificates`, not certifi's bundle.

The endpoint's CA stands for a TLS-intercepting proxy. `SSL_CERT_FILE` and `SSL_CERT_DIR` are
unset throughout: where they are set they point every client at a bundle, which hides whose
trust a client uses by default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_sandbox.app import App
from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.images.updater import load_state, resolve_opencode_version
from opencode_sandbox.services.image_step import UpdateCheck, opencode_version_for_run
from tests.cli.helpers import run_cli
from tests.fakes.runtime import FakeRuntime
from tests.fixtures.https_releases import RELEASE_VERSION, HttpsReleases, https_releases
from tests.images.certs import fake_pem
from tests.services.app_fakes import make_app

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""The system store's bundle on Debian and Ubuntu, as `update-ca-certificates` writes it."""


@pytest.fixture(autouse=True)
def no_bundle_override(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[HttpsReleases]:
    with https_releases(tmp_path) as releases:
        yield releases


def _updater_command(state_root: Path, url: str, *ca_files: Path) -> list[str]:
    """The detached release check, as a start spawns it."""
    return [sys.executable, "-m", "opencode_sandbox.images.release_check", str(state_root), url, *map(str, ca_files)]


def _private_mount_namespace() -> list[str]:
    """A prefix that runs a command in its own mount namespace, where it may bind-mount files."""
    if shutil.which("unshare") is None:
        pytest.skip("the unshare command (util-linux) is needed")
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix[1:1] = ["--user", "--map-root-user"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a private mount namespace here: {probe.stderr.strip()}")
    return prefix


def test_the_release_check_trusts_a_ca_installed_in_the_system_store(
    endpoint: HttpsReleases, tmp_path: Path
) -> None:
    """The check runs where the system bundle holds the proxy's CA, as after `update-ca-certificates`.

    The bundle is replaced in a private mount namespace only: the machine's own store is untouched.
    """
    if not SYSTEM_BUNDLE.is_file():
        pytest.skip(f"no system CA bundle at {SYSTEM_BUNDLE}")
    prefix = _private_mount_namespace()
    bundle = tmp_path / "system-bundle-with-proxy-ca.crt"
    bundle.write_bytes(SYSTEM_BUNDLE.read_bytes() + b"\n" + endpoint.ca_pem.read_bytes())

    def check(state_root: Path, with_proxy_ca: bool) -> subprocess.CompletedProcess[str]:
        install = 'mount --bind "$1" "$2" && ' if with_proxy_ca else ""
        script = install + 'shift 2 && exec "$@"'
        return subprocess.run(
            [*prefix, "sh", "-c", script, "sh", str(bundle), str(SYSTEM_BUNDLE),
             *_updater_command(state_root, endpoint.url)],
            capture_output=True, text=True, timeout=60, check=False,
        )

    without = check(tmp_path / "state-without", with_proxy_ca=False)
    assert "certificate not trusted" in without.stderr, "the test CA must be unknown to the plain system store"
    assert load_state(tmp_path / "state-without").latest_version is None

    installed = check(tmp_path / "state-with", with_proxy_ca=True)
    assert installed.returncode == 0, installed.stderr
    assert installed.stderr == ""
    assert load_state(tmp_path / "state-with").latest_version == RELEASE_VERSION


def test_a_configured_extra_ca_certificate_is_trusted(endpoint: HttpsReleases) -> None:
    version = resolve_opencode_version(None, endpoint.url, npm_url=endpoint.url,
                                       extra_ca_certificates=[endpoint.ca_pem])
    assert version == RELEASE_VERSION


def test_an_untrusted_proxy_is_named_with_what_to_do(endpoint: HttpsReleases) -> None:
    with pytest.raises(SandboxError) as failure:
        resolve_opencode_version(None, endpoint.url, npm_url=endpoint.url)
    assert f"{endpoint.url}: certificate not trusted (unable to get local issuer certificate)" in str(failure.value)
    assert failure.value.hint is not None
    assert "extra-ca-certificates" in failure.value.hint
    assert "update-ca-certificates" in failure.value.hint


def test_the_detached_check_trusts_the_ca_files_it_is_given(endpoint: HttpsReleases, tmp_path: Path) -> None:
    state_root = tmp_path / "state"
    result = subprocess.run(_updater_command(state_root, endpoint.url, endpoint.ca_pem),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert result.stderr == ""
    assert load_state(state_root).latest_version == RELEASE_VERSION


def _app_trusting(endpoint: HttpsReleases, root: Path) -> App:
    """An application configured with the endpoint and, in `extra-ca-certificates`, its CA."""
    app = make_app(FakeRuntime(), root)
    app.settings = load_settings([], {
        "OPENCODE_SANDBOX_EXTRA_CA_CERTIFICATES": str(endpoint.ca_pem),
        "OPENCODE_SANDBOX_RELEASES_URL": endpoint.url,
    }, {})
    return app


def test_a_start_passes_the_configured_ca_to_the_background_check(endpoint: HttpsReleases, tmp_path: Path) -> None:
    app = _app_trusting(endpoint, tmp_path)
    UpdateCheck(app).start()
    deadline = time.monotonic() + 30
    while load_state(app.paths.state_dir).latest_version is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert load_state(app.paths.state_dir).latest_version == RELEASE_VERSION


def test_a_first_run_looks_the_version_up_with_the_configured_ca(endpoint: HttpsReleases, tmp_path: Path) -> None:
    app = _app_trusting(endpoint, tmp_path)
    assert opencode_version_for_run(app, upgrade_to=None) == RELEASE_VERSION


@pytest.mark.docker
def test_build_looks_the_version_up_with_the_configured_ca(endpoint: HttpsReleases, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    config = tmp_path / "config"
    (config / "opencode-sandbox").mkdir(parents=True)
    (config / "opencode-sandbox" / "config.yaml").write_text(  # the user's own: the checkout may set neither
        f"extra-ca-certificates: [{endpoint.ca_pem}]\nreleases-url: {endpoint.url}\n"
    )
    result = run_cli("build", "--dry-run", cwd=project, env={"XDG_CONFIG_HOME": str(config)})
    assert result.returncode == 0, result.stderr
    assert "/latest" in endpoint.hits


def test_an_extra_ca_file_that_is_no_certificate_is_named(endpoint: HttpsReleases, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pem"
    broken.write_bytes(fake_pem("not a certificate"))
    with pytest.raises(UsageError) as failure:
        resolve_opencode_version(None, endpoint.url, npm_url=endpoint.url, extra_ca_certificates=[broken])
    assert failure.value.message.startswith(f"{broken} holds a certificate that cannot be used: ")
    assert endpoint.hits == []
