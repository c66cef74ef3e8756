from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_reference_docs_match_the_code() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_opens_with_the_two_setup_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    block = lines[lines.index("```sh") + 1 : lines.index("```")]
    assert [line.split("#")[0].strip() for line in block] == [
        "pip install . && opencode-sandbox",
        "bash scripts/test.sh",
    ]
    assert (ROOT / ".ci" / "run").read_text().count("scripts/test.sh") == 1


def test_the_state_files_table_is_the_one_the_layout_generates() -> None:
    from opencode_sandbox.state_layout import table

    assert table() in (ROOT / "docs" / "design.md").read_text()
