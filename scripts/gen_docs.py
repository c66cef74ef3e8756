"""Writes the reference parts of docs/commands.md and docs/configuration.md from the code.

Run `python scripts/gen_docs.py` after changing a command, a flag or a configuration key;
a test fails while the documents and the code disagree.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

from opencode_sandbox.cli.main import cli
from opencode_sandbox.config.keys import KEYS
from opencode_sandbox.config.render import render_value

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- generated: begin -->"
END = "<!-- generated: end -->"


def _command_rows(command: click.Command, path: list[str]) -> list[str]:
    lines: list[str] = []
    name = " ".join(["opencode-sandbox", *path])
    usage = " ".join(command.collect_usage_pieces(click.Context(command)))
    lines.append(f"### `{name}`\n")
    lines.append(f"`{name} {usage}`\n".replace(" `", "`").replace("  ", " "))
    lines.append(inspect.cleandoc(command.help or "") + "\n")
    options = [p for p in command.params if isinstance(p, click.Option)]
    if options:
        lines.append("| flag | meaning |")
        lines.append("| --- | --- |")
        for option in options:
            flags = ", ".join(f"`{opt}`" for opt in option.opts + option.secondary_opts)
            lines.append(f"| {flags} | {(option.help or '').replace('|', '/')} |")
        lines.append("")
    if isinstance(command, click.Group):
        for sub_name, sub in sorted(command.commands.items()):
            lines.extend(_command_rows(sub, [*path, sub_name]))
    return lines


def commands_reference() -> str:
    return "\n".join(_command_rows(cli, [])).rstrip() + "\n"


def configuration_reference() -> str:
    lines = ["| key | default | environment variable | meaning |", "| --- | --- | --- | --- |"]
    for key in KEYS:
        default = render_value(key, key.default)
        lines.append(f"| `{key.name}` | `{default}` | `{key.env_variable}` | {key.help} |")
    return "\n".join(lines) + "\n"


def splice(document: Path, generated: str) -> str:
    text = document.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{generated}{END}{tail}"


TARGETS = {
    ROOT / "docs" / "commands.md": commands_reference,
    ROOT / "docs" / "configuration.md": configuration_reference,
}


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for document, produce in TARGETS.items():
        updated = splice(document, produce())
        if document.read_text(encoding="utf-8") != updated:
            stale.append(document)
            if not check:
                document.write_text(updated, encoding="utf-8")
    if check and stale:
        print("out of date: " + ", ".join(str(p) for p in stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
