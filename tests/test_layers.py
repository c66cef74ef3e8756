"""The layers of docs/design.md, held by the import contracts in pyproject.toml (import-linter)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import opencode_sandbox

REPOSITORY = Path(__file__).resolve().parent.parent
PACKAGE = Path(opencode_sandbox.__file__).parent
"""The package as installed: the checkout's sources, or the wheel where only the tests are copied."""
LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))")


def lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """The contracts checked against the package found in `package_parent`."""
    return subprocess.run(
        [sys.executable, "-c", LINT, str(REPOSITORY / "pyproject.toml")],
        cwd=package_parent, env={"PYTHONPATH": str(package_parent), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_every_import_follows_the_layers() -> None:
    result = lint(PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_module_of_the_package_has_a_layer() -> None:
    import tomllib

    config = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(contract["layers"] for contract in config if contract["type"] == "layers")
    named = {name.strip().removeprefix("opencode_sandbox.") for layer in layers for name in re.split(r"[|:]", layer)}
    top = {path.stem for path in PACKAGE.iterdir()
           if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()}
    assert top - {"__main__"} <= named, sorted(top - named)


@pytest.mark.parametrize(
    ("module", "wrong_import"),
    [
        ("services/stopping.py", "import opencode_sandbox.cli.main"),
        ("state/files.py", "import opencode_sandbox.cli.actions"),
        ("core/slug.py", "import opencode_sandbox.runtime.select"),
        ("core/units.py", "import opencode_sandbox.ui.console"),
        ("core/naming.py", "import opencode_sandbox.state.files"),
        ("core/digest.py", "import opencode_sandbox.images.dockerfile"),
        ("runtime/microsandbox/kvm.py", "import opencode_sandbox.ui.progress"),
        ("daemon/health.py", "import opencode_sandbox.app"),
        ("engine/docker.py", "import opencode_sandbox.runtime.types"),
        ("engine/base.py", "import opencode_sandbox.images.hashing"),
        ("images/builder.py", "import opencode_sandbox.runtime.types"),
        ("core/egress.py", "import opencode_sandbox.core.secrets"),
        ("services/doctor.py", "import opencode_sandbox.runtime.microsandbox.kvm"),
        ("services/start/checks.py", "import opencode_sandbox.runtime.docker.nft_ruleset"),
        ("config/keys.py", "import opencode_sandbox.runtime.docker.description"),
        ("collector.py", "import opencode_sandbox.state.files"),
    ],
)
def test_an_import_against_the_layers_breaks_the_contract(module: str, wrong_import: str, tmp_path: Path) -> None:
    copy = tmp_path / "opencode_sandbox"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = copy / module
    source.write_text(source.read_text() + f"\n{wrong_import}\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"\b[1-9] broken", result.stdout), result.stdout  # the layers, and the contracts it crosses
    said = " ".join(result.stdout.split())  # long lines are wrapped
    assert f"{module[:-3].replace('/', '.')} -> {wrong_import.split()[-1]}" in said, result.stdout


BRANCH_ON_A_KIND = re.compile(r"RuntimeKind\.(DOCKER|MICROSANDBOX)\b")


def kind_branches(package: Path) -> list[str]:
    """Each place above `runtime/` that names one runtime kind: what it asks belongs to the runtime."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "runtime":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BRANCH_ON_A_KIND.search(line):
                found.append(f"{path.relative_to(package)}:{number}: {line.strip()}")
    return found


def test_above_the_runtimes_no_code_names_one_kind(tmp_path: Path) -> None:
    assert kind_branches(PACKAGE) == []
    copy = tmp_path / "opencode_sandbox"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / "services" / "listing.py"
    planted.write_text(planted.read_text() + "\nDOCKER_ONLY = RuntimeKind.DOCKER\n")
    assert kind_branches(copy) == ["services/listing.py:" + str(len(planted.read_text().splitlines()))
                                   + ": DOCKER_ONLY = RuntimeKind.DOCKER"]
