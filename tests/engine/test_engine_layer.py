"""The image engine sits below the code that uses it: `images/`, `runtime/` and `services/`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opencode_sandbox

PACKAGE = Path(opencode_sandbox.__file__).parent
ABOVE_THE_ENGINE = ("images", "runtime", "services", "cli", "state", "ui", "daemon", "config")


def imported_modules(folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        modules: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules |= {alias.name for alias in node.names}
        found[path.relative_to(PACKAGE).as_posix()] = modules
    return found


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("engine", ABOVE_THE_ENGINE),
    ("images", ("runtime", "services", "cli")),
])
def test_no_import_goes_up(folder: str, forbidden: tuple[str, ...]) -> None:
    wrong = {
        module: sorted(name for name in names if name.split(".")[1:2] and name.split(".")[1] in forbidden
                       and name.startswith("opencode_sandbox."))
        for module, names in imported_modules(PACKAGE / folder).items()
    }
    assert {module: names for module, names in wrong.items() if names} == {}
