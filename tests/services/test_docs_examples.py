"""The pruning and volume docs: every example command exists with the flags it shows, and the
output they quote is what the code prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from opencode_sandbox.cli.main import cli
from opencode_sandbox.services.prune import Counts, summary_line
from opencode_sandbox.services.volumes import OLD_MOUNT

DOCS = Path(__file__).resolve().parents[2] / "docs"


def example_commands(name: str) -> list[list[str]]:
    text = (DOCS / name).read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line.split("#", 1)[0])
            if words[:1] == ["opencode-sandbox"]:
                commands.append(words[1:])
    return commands


@pytest.mark.parametrize("doc", ["pruning.md", "volumes.md"])
def test_every_example_command_parses(doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    commands = example_commands(doc)
    assert len(commands) >= 6
    for args in commands:
        result = CliRunner().invoke(cli, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage: " in result.output, args


def test_the_quoted_output_is_what_prune_prints() -> None:
    text = (DOCS / "pruning.md").read_text()
    assert summary_line(Counts(1, 1, 0, 1), dry_run=False) in text
    assert summary_line(Counts(1, 1, 0, 1), dry_run=True) in " ".join(text.split())
    assert "To prune (unused for more than 7d):" in text


def test_the_volume_docs_name_the_mounts_the_code_uses() -> None:
    text = (DOCS / "volumes.md").read_text()
    assert f"read-only at `{OLD_MOUNT}`" in text
