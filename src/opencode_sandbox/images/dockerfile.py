"""Reading a Dockerfile's instructions and stages, as Docker's own parser sees them."""

from __future__ import annotations

import re

from opencode_sandbox.core.records import Record

_DIRECTIVE_RE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$")
_VARIABLE_RE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|(?P<plain>[A-Za-z_]\w*))"
)


class Instruction(Record):
    keyword: str
    """Upper case, e.g. `FROM`, `USER`."""
    arguments: str
    line: int
    """1-based line where the instruction starts."""


class Stage(Record):
    base: str
    """The image (or earlier stage) named by FROM, with global ARG defaults substituted."""
    name: str | None
    line: int
    instructions: tuple[Instruction, ...] = ()


def _escape_character(lines: list[str]) -> str:
    for line in lines:
        match = _DIRECTIVE_RE.match(line.strip())
        if not match:
            break
        if match.group(1).lower() == "escape" and match.group(2) in ("\\", "`"):
            return match.group(2)
    return "\\"


def parse_instructions(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comment lines dropped."""
    lines = text.splitlines()
    escape = _escape_character(lines)
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if not parts and (not stripped or stripped.startswith("#")):
            continue
        if parts and (not stripped or stripped.startswith("#")):
            continue  # comments and blank lines inside a continued instruction
        if not parts:
            start = number
        body = raw.rstrip()
        if body.endswith(escape):
            parts.append(body[: -len(escape)])
            continue
        parts.append(body)
        instructions.append(_instruction(" ".join(p.strip() for p in parts), start))
        parts = []
    if parts:
        instructions.append(_instruction(" ".join(p.strip() for p in parts), start))
    return [instruction for instruction in instructions if instruction.keyword]


def _instruction(joined: str, line: int) -> Instruction:
    keyword, _, arguments = joined.strip().partition(" ")
    return Instruction(keyword=keyword.upper(), arguments=arguments.strip(), line=line)


def substitute(value: str, variables: dict[str, str]) -> str:
    """Expand `$NAME`, `${NAME}`, `${NAME:-word}` and `${NAME:+word}` from known variables."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain")
        current = variables.get(name, "")
        if match.group("op") == "-":
            return current or match.group("word")
        if match.group("op") == "+":
            return match.group("word") if current else ""
        return current

    return _VARIABLE_RE.sub(replace, value)


def _global_args(instructions: list[Instruction]) -> dict[str, str]:
    variables: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.arguments.partition("=")
            variables[name.strip()] = default.strip().strip("\"'")
    return variables


def parse_stages(text: str) -> list[Stage]:
    instructions = parse_instructions(text)
    variables = _global_args(instructions)
    stages: list[Stage] = []
    current: Stage | None = None
    body: list[Instruction] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            if current is not None:
                stages.append(Stage(current.base, current.name, current.line, tuple(body)))
            words = [w for w in instruction.arguments.split() if not w.startswith("--")]
            base = substitute(words[0], variables) if words else ""
            name = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else None
            current = Stage(base=base, name=name, line=instruction.line)
            body = []
        elif current is not None:
            body.append(instruction)
    if current is not None:
        stages.append(Stage(current.base, current.name, current.line, tuple(body)))
    return stages


def external_bases(stages: list[Stage]) -> list[str]:
    """Images the build starts from, without `scratch` and references to earlier stages."""
    seen: list[str] = []
    names: set[str] = set()
    for stage in stages:
        base = stage.base
        if base and base.lower() != "scratch" and base.lower() not in names and base not in seen:
            seen.append(base)
        if stage.name:
            names.add(stage.name)
    return seen
