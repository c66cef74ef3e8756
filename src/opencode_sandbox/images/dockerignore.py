"""`.dockerignore` matching with Docker's rules: last match wins, `!` re-includes, `**`."""

from __future__ import annotations

import posixpath
import re

from opencode_sandbox.core.records import Record


class IgnorePattern(Record):
    regex: re.Pattern[str]
    negated: bool


def _translate(pattern: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            index += 2
            if pattern.startswith("/", index):
                index += 1
                out.append("(?:.*/)?")
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", index + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1 : end].replace("\\", "\\\\")
                if body.startswith("^"):
                    body = "!" + body[1:]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                index = end
        elif char == "\\" and index + 1 < len(pattern):
            index += 1
            out.append(re.escape(pattern[index]))
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def parse_dockerignore(text: str) -> list[IgnorePattern]:
    patterns: list[IgnorePattern] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:].strip()
        line = posixpath.normpath(line.lstrip("/")) if line.strip("/") else ""
        if not line or line == ".":
            continue
        patterns.append(IgnorePattern(re.compile(_translate(line) + r"\Z"), negated))
    return patterns


def is_ignored(relative_path: str, patterns: list[IgnorePattern]) -> bool:
    """Whether a context path (posix, relative) is excluded; a matched folder excludes all below."""
    parts = relative_path.split("/")
    candidates = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    ignored = False
    for pattern in patterns:
        if any(pattern.regex.match(candidate) for candidate in candidates):
            ignored = not pattern.negated
    return ignored
