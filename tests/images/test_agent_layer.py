"""The agent's layer: the agent from npm at its version, the Debian packages it looks for before
it, its hooks' files and its environment."""

from __future__ import annotations

from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.images.agent_layer import agent_dockerfile


def test_pis_layer_installs_fd_before_pi_and_its_extension_beside_it() -> None:
    dockerfile, packaged = agent_dockerfile("runner:1", profile_of("pi"), "0.73.1")
    [install] = [line for line in dockerfile.splitlines() if "npm install" in line]
    assert install.index("apt-get install -y --no-install-recommends fd-find") < install.index("npm install")
    assert " @mariozechner/pi-coding-agent@0.73.1 " in install
    assert install.endswith("pi --version")
    assert "COPY agent-file-1 /etc/opencode-sandbox/pi/activity.ts" in dockerfile
    assert packaged["agent-file-1"] == profile_of("pi").image_files[0][1]
    assert "ENV PI_SKIP_VERSION_CHECK=1" in dockerfile


def test_an_agent_that_needs_no_debian_package_runs_no_apt() -> None:
    for name in ("claude-code", "codex", "crush"):
        dockerfile, _ = agent_dockerfile("runner:1", profile_of(name), "1.0.0")
        assert "apt-get" not in dockerfile, name
        assert f"--allow-scripts={profile_of(name).package}" in dockerfile, "Crush's install script fetches its program"
