"""Output has one way out: below `cli/`, no module prints or picks a standard stream of its own.
Services hand results and messages to the console the command line made; `cli/render.py`
renders results."""

from __future__ import annotations

import io
import re
import shutil
import tokenize
from pathlib import Path

import opencode_sandbox

PACKAGE = Path(opencode_sandbox.__file__).parent
OWN_PROCESSES = {
    "runtime/docker/proxy_addon.py": "mitmproxy's addon in the egress proxy's container: its stdout is the "
                                     "container's log, which the runtime reads",
    "runtime/microsandbox/sdk_worker.py": "a worker process: its stdout is its answer to the parent",
    "images/release_check.py": "the detached release check: its stderr goes nowhere unless a person runs it",
}
"""Modules that run as programs of their own, whose standard output is a channel to this tool."""
TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT,
               *(getattr(tokenize, name) for name in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                 if hasattr(tokenize, name))}
"""Tokens of text and comments (f-strings have tokens of their own from Python 3.12 on)."""
PRINTING = re.compile(r"(?<![.\w])print\(|\bclick\.(echo|secho|prompt|confirm)\b|\becho=|\bsys\.(stdout|stderr)\b")


def printing_lines(package: Path) -> list[str]:
    """Each line below `cli/` that writes to a terminal itself (string literals, such as a script
    run in a container, do not count)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith("cli/") or relative == "launcher.py" or relative in OWN_PROCESSES:
            continue
        code: dict[int, str] = {}
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type not in TEXT_TOKENS:
                code[token.start[0]] = code.get(token.start[0], "") + token.string
        found += [f"{relative}:{number}: {text.strip()}" for number, text in sorted(code.items())
                  if PRINTING.search(text)]
    return found


def test_no_module_below_the_command_line_prints() -> None:
    assert printing_lines(PACKAGE) == []
    assert all((PACKAGE / module).is_file() for module in OWN_PROCESSES)


def test_the_check_finds_a_print_and_a_stream_but_not_a_script(tmp_path: Path) -> None:
    copy = tmp_path / "opencode_sandbox"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / "services" / "prune.py"
    planted.write_text(planted.read_text() + '\nprint("pruned")\nSCRIPT = "import sys; sys.stdout.write(1)"\n'
                                             "OUT = sys.stderr\n")
    lines = printing_lines(copy)
    assert [line.split(": ", 1)[1] for line in lines] == ["print()", "OUT=sys.stderr"]
