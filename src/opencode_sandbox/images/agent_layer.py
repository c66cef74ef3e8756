"""The layer that puts a terminal agent (every agent but opencode, one of the user's own too) on top
of the project's image: the Debian packages it looks for, the agent from npm at a pinned version (or
as its install script installs it), the program its hooks call, and its hooks' settings.

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
INSTALL_SCRIPT = "agent-install"
"""In the build context: the install script of an agent of the user's own, run from a file so that
it may span lines without becoming instructions of the Dockerfile."""


def agent_dockerfile(base_reference: str, profile: AgentProfile, version: str) -> tuple[str, dict[str, str]]:
    """The layer's Dockerfile on `base_reference`, and the files its build context needs by name."""
    packaged = {EVENT_PROGRAM: packaged_file(EVENT_PROGRAM)}
    copies = [f"COPY {EVENT_PROGRAM} {AGENT_EVENT}"]
    for number, (path, content) in enumerate(profile.image_files, start=1):
        name = f"agent-file-{number}"
        packaged[name] = content
        copies.append(f"COPY {name} {path}")
    modes = " ".join(shlex.quote(path) for path, _ in profile.image_files)
    if profile.install:
        packaged[INSTALL_SCRIPT] = profile.install
        version = ""
    lines = [
        f"FROM {base_reference}",
        "USER root",
        *([f"COPY {INSTALL_SCRIPT} /tmp/{INSTALL_SCRIPT}"] if profile.install else []),
        f"RUN {_install(profile, version)} && {_installed_check(profile)}",
        *copies,
        f"RUN chmod 0755 {AGENT_EVENT}" + (f" && chmod 0644 {modes}" if modes else ""),
        *(f"ENV {name}={shlex.quote(value)}" for name, value in profile.environment),
        f"LABEL {LABEL_AGENT}={profile.name} {LABEL_AGENT_VERSION}={shlex.quote(version)}",
        "USER dev",
        "",
    ]
    return "\n".join(lines), packaged


def _install(profile: AgentProfile, version: str) -> str:
    """The shell command that installs the agent, after checking the image has what it needs."""
    needed = "tmux" if profile.install else "npm tmux"
    check = (f"for tool in {needed}; do command -v $tool >/dev/null || {{ echo {shlex.quote(profile.title)}\" needs "
             "$tool, which this image lacks: build the project image from opencode-sandbox/runner-base\" >&2; "
             "exit 1; }; done")
    if profile.install:
        return f"{check}; sh -e /tmp/{INSTALL_SCRIPT} && rm -rf /tmp/* /root/.npm"
    packages = " ".join(shlex.quote(name) for name in profile.system_packages)
    debian = (f"apt-get update && apt-get install -y --no-install-recommends {packages} "
              "&& rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log && "
              if packages else "")
    return (f"{check}; {debian}npm install --global --no-fund --no-audit --omit=dev "
            f"--allow-scripts={shlex.quote(profile.package)} {shlex.quote(f'{profile.package}@{version}')} "
            "&& npm cache clean --force && rm -rf /root/.npm /tmp/*")


def _installed_check(profile: AgentProfile) -> str:
    """Proof that the install gave the image the agent's command: its version, else its place on the PATH."""
    command = shlex.quote(profile.command)
    if profile.version_flag:
        return f"{command} {shlex.quote(profile.version_flag)}"
    return (f"{{ command -v {command} >/dev/null || {{ echo {shlex.quote(profile.title)}\": the install gave no "
            f"\"{command} >&2; exit 1; }}; }}")
