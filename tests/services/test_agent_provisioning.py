"""What a terminal agent's VM gets of the user's configuration: the files its profile names, never
the logins beside them, and the checkout's own folder for the agent on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.core.agents import profile_of
from opencode_sandbox.services import provisioning


@pytest.mark.parametrize(("agent", "folder", "logins"), [
    ("gemini", ".gemini", ("oauth_creds.json", "google_accounts.json", "mcp-oauth-tokens.json")),
    ("qwen-code", ".qwen", ("oauth_creds.json",)),
])
def test_the_users_configuration_goes_without_the_logins_and_the_checkouts_folder_goes_over_it(
        tmp_path: Path, agent: str, folder: str, logins: tuple[str, ...]) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    instructions = "GEMINI.md" if agent == "gemini" else "QWEN.md"
    for name in ("settings.json", instructions, "commands/review.toml", "skills/lint/SKILL.md", "agents/doc.md",
                 *logins):
        (home / folder / name).parent.mkdir(parents=True, exist_ok=True)
        (home / folder / name).write_text(f"the user's {name}\n")
    own = project / ".opencode-sandbox" / agent
    (own / "commands").mkdir(parents=True)
    (own / "settings.json").write_text("the checkout's settings\n")
    (own / "commands" / "release.toml").write_text("the checkout's command\n")
    files = provisioning.collect_files(provisioning.agent_sources(profile_of(agent), home, project)).files
    assert {target: content.data.decode() for target, content in files.items()} == {
        f"{folder}/settings.json": "the checkout's settings\n",
        f"{folder}/{instructions}": f"the user's {instructions}\n",
        f"{folder}/commands/review.toml": "the user's commands/review.toml\n",
        f"{folder}/commands/release.toml": "the checkout's command\n",
        f"{folder}/skills/lint/SKILL.md": "the user's skills/lint/SKILL.md\n",
        f"{folder}/agents/doc.md": "the user's agents/doc.md\n",
    }
