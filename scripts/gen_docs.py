"""Writes the reference parts of docs/commands.md, docs/configuration.md and docs/security.md from the code.

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
from opencode_sandbox.core.guard_catalogue import CATALOGUE, NOT_COVERED, Guarded

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


def checkout_reference() -> str:
    lines = ["| key | in the checkout's `.opencode-sandbox/config.yaml` |", "| --- | --- |"]
    for key in KEYS:
        if not key.in_checkout:
            rule = "refused: only your own files, the environment and flags set it"
        elif key.checkout_refusal is not None:
            rule = key.checkout_note
        else:
            rule = "any value"
        lines.append(f"| `{key.name}` | {rule} |")
    return "\n".join(lines) + "\n"


def _guarded_rows(entries: tuple[Guarded, ...], first: str) -> str:
    lines = [f"| {first} | tool | how it runs on the host |", "| --- | --- | --- |"]
    lines += [f"| `{entry.path}` | {entry.tool} | {entry.how} |" if "," not in entry.path and " " not in entry.path
              else f"| {entry.path} | {entry.tool} | {entry.how} |" for entry in entries]
    return "\n".join(lines) + "\n"


def guarded_reference() -> str:
    return _guarded_rows(CATALOGUE, "guarded path")


def not_covered_reference() -> str:
    return _guarded_rows(NOT_COVERED, "not guarded")


def splice(text: str, generated: str, part: str) -> str:
    begin, end = (BEGIN, END) if not part else (f"<!-- generated {part}: begin -->", f"<!-- generated {part}: end -->")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{generated}{end}{tail}"


TARGETS = [  # a document, the name of its generated part ("" for the first), what goes there
    (ROOT / "docs" / "commands.md", "", commands_reference),
    (ROOT / "docs" / "configuration.md", "", configuration_reference),
    (ROOT / "docs" / "configuration.md", "checkout", checkout_reference),
    (ROOT / "docs" / "security.md", "guarded", guarded_reference),
    (ROOT / "docs" / "security.md", "not-guarded", not_covered_reference),
]


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for document in dict.fromkeys(document for document, _, _ in TARGETS):
        updated = document.read_text(encoding="utf-8")
        for target, part, produce in TARGETS:
            if target == document:
                updated = splice(updated, produce(), part)
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
