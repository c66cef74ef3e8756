"""The layer that puts a terminal agent (Claude Code, Codex, pi, Crush) on top of the project's image:
the agent from npm at a pinned version, the program its hooks call, and its hooks' settings.

opencode, the default agent, is in the base image; a project image built for another agent is the
project's image with this layer on top, so the project's own Dockerfile stays as it is.
"""

from __future__ import annotations

import shlex

from opencode_sandbox.core.agents import AgentProfile
from opencode_sandbox.core.agents.profile import AGENT_EVENT
from opencode_sandbox.core.naming import LABEL_AGENT, LABEL_AGENT_VERSION
from opencode_sandbox.images.compose import packaged_file

EVENT_PROGRAM = "opencode-sandbox-agent-event"


def agent_dockerfile(base_reference: str, profile: AgentProfile, version: str) -> tuple[str, dict[str, str]]:
    """The layer's Dockerfile on `base_reference`, and the files its build context needs by name."""
    packaged = {EVENT_PROGRAM: packaged_file(EVENT_PROGRAM)}
    copies = [f"COPY {EVENT_PROGRAM} {AGENT_EVENT}"]
    for number, (path, content) in enumerate(profile.image_files, start=1):
        name = f"agent-file-{number}"
        packaged[name] = content
        copies.append(f"COPY {name} {path}")
    modes = " ".join(shlex.quote(path) for path, _ in profile.image_files)
    packages = " ".join(shlex.quote(name) for name in profile.system_packages)
    lines = [
        f"FROM {base_reference}",
        "USER root",
        f"RUN for tool in npm tmux; do command -v $tool >/dev/null || {{ echo \"{profile.title} needs $tool, which "
        "this image lacks: build the project image from opencode-sandbox/runner-base\" >&2; exit 1; }; done; "
        + (f"apt-get update && apt-get install -y --no-install-recommends {packages} "
           "&& rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log && "
           if packages else "")
        + f"npm install --global --no-fund --no-audit --omit=dev --allow-scripts={shlex.quote(profile.package)} "
        f"{shlex.quote(f'{profile.package}@{version}')} "
        f"&& npm cache clean --force && rm -rf /root/.npm /tmp/* && {profile.command} --version",
        *copies,
        f"RUN chmod 0755 {AGENT_EVENT}" + (f" && chmod 0644 {modes}" if modes else ""),
        *(f"ENV {name}={shlex.quote(value)}" for name, value in profile.environment),
        f"LABEL {LABEL_AGENT}={profile.name} {LABEL_AGENT_VERSION}={version}",
        "USER dev",
        "",
    ]
    return "\n".join(lines), packaged
