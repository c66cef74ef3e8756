"""pi (`@mariozechner/pi-coding-agent`), a terminal program in the VM's terminal session.

pi has no hooks but an extension API: an extension the image holds, given to every session with
`--extension`, reports each turn. pi loads an extension named on its command line as it loads the
user's own, without asking, and beside them.
"""

from __future__ import annotations

from opencode_sandbox.core.agents.profile import AGENT_EVENT, AgentProfile, ConfigSource, Credential, SessionKind

EXTENSION = "/etc/opencode-sandbox/pi/activity.ts"
"""In the image: the extension that reports pi's turns."""

_EVENTS = {
    "session_start": "idle",
    "agent_start": "busy",
    "tool_execution_start": "busy",
    "agent_end": "waiting",
}
# Synchronous, so that the states reach the file in the order pi emits them, and `ended` is
# written before pi exits; the program reads its standard input, which is empty here.
ACTIVITY_EXTENSION = (
    'import { spawnSync } from "node:child_process";\n\n'
    "function report(state: string): void {\n"
    f'  spawnSync("{AGENT_EVENT}", [state], {{ stdio: "ignore", timeout: 5000 }});\n'
    "}\n\n"
    "export default function (pi: any): void {\n"
    + "".join(f'  pi.on("{event}", () => report("{state}"));\n' for event, state in _EVENTS.items())
    + '  pi.on("session_shutdown", (event: any) => {\n'
    '    if (event?.reason === "quit") report("ended");\n'
    "  });\n"
    "}\n"
)

_AGENT_FOLDER = ".pi/agent"

PROFILE = AgentProfile(
    name="pi",
    title="pi",
    package="@mariozechner/pi-coding-agent",
    command="pi",
    session=SessionKind.TERMINAL,
    config=tuple(
        ConfigSource(f"{_AGENT_FOLDER}/{name}", f"{_AGENT_FOLDER}/{name}")
        for name in ("settings.json", "models.json", "keybindings.json", "AGENTS.md", "SYSTEM.md",
                     "APPEND_SYSTEM.md", "prompts", "skills", "extensions", "themes")
    ),
    credentials=(
        Credential("ANTHROPIC_API_KEY", ("api.anthropic.com",), ("x-api-key",)),
        Credential("OPENAI_API_KEY", ("api.openai.com",), ("authorization",)),
        Credential("GEMINI_API_KEY", ("generativelanguage.googleapis.com",), ("x-goog-api-key",)),
        Credential("OPENROUTER_API_KEY", ("openrouter.ai",), ("authorization",)),
        Credential("MISTRAL_API_KEY", ("api.mistral.ai",), ("authorization",)),
        Credential("GROQ_API_KEY", ("api.groq.com",), ("authorization",)),
        Credential("XAI_API_KEY", ("api.x.ai",), ("authorization",)),
        Credential("DEEPSEEK_API_KEY", ("api.deepseek.com",), ("authorization",)),
    ),
    hosts=("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com", "openrouter.ai",
           "api.mistral.ai", "api.groq.com", "api.x.ai", "api.deepseek.com",
           # `/login` with a Claude or ChatGPT subscription
           "claude.ai", "platform.claude.com", "auth.openai.com", "chatgpt.com"),
    image_files=((EXTENSION, ACTIVITY_EXTENSION),),
    # pi looks for fd (as `fd` or Debian's `fdfind`) at every start and would download it from GitHub.
    system_packages=("fd-find",),
    # pi never updates itself; this keeps it from asking pi.dev at every start whether a newer one exists.
    environment=(("PI_SKIP_VERSION_CHECK", "1"),),
    default_arguments=("--extension", EXTENSION),
    checkout_config=ConfigSource("pi", _AGENT_FOLDER),
    logins=(".pi/agent/auth.json",),
)
