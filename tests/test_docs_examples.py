"""The user guides: every example command parses through the real command line, every
configuration snippet loads, every quoted message and prompt is one the code prints, and
every error message listed in troubleshooting still exists in the source."""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from opencode_sandbox.cli.main import cli
from opencode_sandbox.config.loader import load_settings, read_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SOURCE = ROOT / "src" / "opencode_sandbox"
GUIDES = ["getting-started.md", "runtimes.md", "lifecycle.md", "troubleshooting.md"]
ERROR_TYPES = {"SandboxError", "UsageError", "ConfigError", "NotAvailableYet", "RuntimeUnavailable", "BootFailed",
               "VmDidNotBoot", "NotFound", "NotOurs", "OwnedByAnother"}


@pytest.fixture(autouse=True)
def console_level() -> Iterator[None]:
    """Examples with `--log-level` change the process's one console: restore it for other tests."""
    from opencode_sandbox.cli import main as cli_main

    level = cli_main._console.level
    yield
    cli_main._console.level = level


def blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / name).read_text(), flags=re.DOTALL)


def example_commands(name: str) -> list[list[str]]:
    commands = []
    for block in blocks(name, "sh"):
        for line in block.splitlines():
            words = shlex.split(line.split("#", 1)[0])
            if words[:1] == ["opencode-sandbox"]:
                commands.append(words[1:])
    return commands


def with_help(args: list[str]) -> list[str]:
    """`--help` where the command line reads it: before a `--`, after which it would be an argument."""
    if "--" in args:
        index = args.index("--")
        return [*args[:index], "--help"]
    return [*args, "--help"]


def resolve(args: list[str]) -> list[str]:
    """The command path of an example (global flags dropped, the default `run` added)."""
    if not args:
        return []
    group = cli
    path: list[str] = []
    words = list(args)
    while words:
        word = words.pop(0)
        if word in ("--runtime", "--log-level"):
            words.pop(0)
            continue
        if word.startswith("-") and not path:
            if word in ("-y", "--yes", "-q", "--quiet", "--version"):
                continue
            return ["run"]
        commands = getattr(group, "commands", None)
        if commands is None or word not in commands:
            break
        path.append(word)
        group = commands[word]
    return path or ["run"]


@pytest.mark.parametrize("doc", GUIDES)
def test_every_example_command_parses(doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    commands = example_commands(doc)
    assert commands, doc
    for args in commands:
        result = CliRunner().invoke(cli, with_help(args))
        assert result.exit_code == 0, (args, result.output)
        if args == ["--version"]:
            assert result.output.startswith("opencode-sandbox, version ")
            continue
        usage = " ".join(result.output.split())
        assert f"Usage: cli {' '.join([*resolve(args), ''])}" in usage, (args, result.output)


def test_example_flags_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--help stops parsing early; check that every flag an example gives is one its command has."""
    monkeypatch.chdir(tmp_path)
    for doc in GUIDES:
        for args in example_commands(doc):
            help_text = CliRunner().invoke(cli, [*resolve(args), "--help"]).output
            if "--" in args:
                args = args[:args.index("--")]
            top = CliRunner().invoke(cli, ["--help"]).output
            for word in args:
                if word.startswith("-") and word != "--":
                    flag = word.split("=", 1)[0]
                    assert flag in help_text or flag in top, (doc, args, flag)


def test_dry_run_examples_run_for_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--runtime", "docker", "version"])
    assert result.exit_code == 0, result.output
    dry_runs = [args for doc in GUIDES for args in example_commands(doc) if {"-n", "--dry-run"} & set(args)]
    assert [args for args in dry_runs if args[0] in ("run", "shell")]


@pytest.mark.parametrize("doc", [*GUIDES, "idle-stop.md"])
def test_every_config_snippet_loads(doc: str, tmp_path: Path) -> None:
    for number, snippet in enumerate(blocks(doc, "yaml")):
        path = tmp_path / f"{number}.yaml"
        path.write_text(snippet)
        values = read_file(path)
        assert values, snippet
        settings = load_settings([path], {}, {})
        for key in values:
            assert settings.sources[key].startswith(str(path)), key


def source_messages() -> set[str]:
    """Every message an error, a doctor check or a console error or warning can carry; `{}` for a value."""

    def render(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(str(part.value) if isinstance(part, ast.Constant) else "{}" for part in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return (render(node.left) or "{}") + (render(node.right) or "{}")
        return None

    found: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else (
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
            argument = None
            if name in ERROR_TYPES or name in ("error", "warn"):
                argument = node.args[0]
            elif name == "Check" and len(node.args) >= 3:
                argument = node.args[2]
            message = render(argument) if argument is not None else None
            if message:
                found.add(message)
    return found


def listed_messages() -> list[str]:
    text = (DOCS / "troubleshooting.md").read_text()
    return [match.strip() for match in re.findall(r"^### `+(.+?)`+$", text, flags=re.MULTILINE)]


def matches(listed: str, template: str) -> bool:
    pattern = "".join(r"\s+" if part.isspace() else ".+" if part == "{}" else re.escape(part)
                      for part in re.split(r"(\{\}|\s+)", template) if part)
    return re.fullmatch(pattern, listed, flags=re.DOTALL) is not None


def test_every_listed_message_exists_in_the_source() -> None:
    templates = source_messages()
    listed = listed_messages()
    assert len(listed) >= 40
    missing = [message for message in listed if not any(matches(message, template) for template in templates)]
    assert missing == []


IMPORTANT = [
    "{}: malformed YAML: {}",
    "{}:{}: unknown key '{}'",
    "{}: invalid value for '{}': {}",
    "unknown environment variable {}",
    "microVMs cannot run here: {}",
    "the Docker engine is not reachable: {}",
    "another opencode-sandbox is still setting up this project (lock {})",
    "opencode attach needs a terminal, and standard input is not one",
    "opencode serve did not answer within {} s in {}; the end of its log:\n{}",
    "opencode serve exited before it answered in {}; the end of its log:\n{}",
    "stopped at your request; nothing was changed",
    "the project's VM {} is {}; its home volume cannot change under it",
    "cannot start opencode serve in {}: {}",
    "{} must end with USER dev: its final stage does not set a user",
    "invalid worktree name '{}'",
]


@pytest.mark.parametrize("template", IMPORTANT)
def test_the_important_messages_are_listed(template: str) -> None:
    assert template in source_messages()
    assert any(matches(message, template) for message in listed_messages()), template


def test_hints_in_the_source_name_commands_that_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    quoted: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        quoted |= set(re.findall(r"`opencode-sandbox ([a-z][a-z -]*?)[`)]", path.read_text()))
    assert quoted
    for command in sorted(quoted):
        words = [word for word in command.split() if not word.startswith("-")]
        result = CliRunner().invoke(cli, with_help(words))
        assert result.exit_code == 0, (command, result.output)
        assert resolve(words) == words, command


def test_quoted_prompts_and_notices_are_what_the_code_prints() -> None:
    lifecycle = " ".join((DOCS / "lifecycle.md").read_text().split())
    run_source = " ".join((SOURCE / "services" / "start" / "vm_step.py").read_text().split())
    for fragment in ("keep it, reset it from the new image, or migrate (new image, your files on top)?",
                     "Keep the running VM for now (defer), apply it now (proceed), or quit?"):
        assert fragment in lifecycle
        assert fragment in run_source.replace('" "', "")
    from opencode_sandbox.runtime.docker.description import NOTICE as DOCKER_NOTICE

    runtimes = (DOCS / "runtimes.md").read_text()
    assert DOCKER_NOTICE.strip() in runtimes


def test_the_report_runs_every_benchmark_and_the_performance_page_lists_them() -> None:
    from bench.report import BENCHMARKS

    scripts = {path.stem for path in (ROOT / "bench").glob("*.py")} - {"__init__", "common", "report"}
    assert {benchmark.script for benchmark in BENCHMARKS} == scripts
    text = (DOCS / "performance.md").read_text()
    for script in scripts:
        assert f"| `{script}`" in text, script
    for command in blocks("performance.md", "sh"):
        for line in command.splitlines():
            script = line.split()[1]
            assert (ROOT / script).is_file(), script


def test_the_report_reads_figures_and_ratios_as_the_benchmarks_print_them() -> None:
    from bench.report import BENCHMARKS, row_of

    warm_output = [
        "case          launcher ms    raw ms   ratio  target",
        "after stop         928.4     395.6    2.35     1.5",
        "warm               432.5      87.1    4.97     2.0",
        "after-stop ratio (launcher / docker start + docker exec): 2.35",
        "warm ratio (launcher / docker exec): 4.97",
    ]
    stopped, running = (row_of(benchmark, warm_output) for benchmark in BENCHMARKS if benchmark.script == "warm_start")
    assert (stopped.figure, stopped.baseline, stopped.ratio) == ("928.4 ms", "395.6 ms", 2.35)
    assert stopped.verdict == "not met"
    assert (running.figure, running.baseline, running.ratio) == ("432.5 ms", "87.1 ms", 4.97)
    image = next(benchmark for benchmark in BENCHMARKS if benchmark.script == "image")
    row = row_of(image, ["no-op ensure_project_image: 4.0 ms (median of 7)",
                         "cached docker build:        95.2 ms (median of 7)", "ratio 0.04"])
    assert (row.figure, row.baseline, row.ratio, row.verdict) == ("4.0 ms", "95.2 ms", 0.04, "met")
    assert row_of(image, None).verdict == "failed"
    interface = next(benchmark for benchmark in BENCHMARKS if benchmark.script == "time_to_interface")
    row = row_of(interface, ["way             median s   rounds: 3", "launcher           9.41",
                             "docker alone       8.80",
                             "time-to-interface ratio (launcher / docker build, run, exec serve, exec attach): 1.07"])
    assert (row.figure, row.baseline, row.ratio, row.verdict) == ("9.41 s", "8.80 s", 1.07, "met")


def test_the_report_counts_a_benchmark_that_cannot_run_on_this_host_as_skipped() -> None:
    from bench.report import BENCHMARKS, row_of

    microvm_rows = [benchmark for benchmark in BENCHMARKS if benchmark.script == "msb_warm_start"]
    assert microvm_rows
    for benchmark in microvm_rows:
        row = row_of(benchmark, ["skipped: microVMs cannot boot here: /dev/kvm does not exist"])
        assert (row.verdict, row.figure) == ("skipped", "microVMs cannot boot here: /dev/kvm does not exist")


def test_the_report_reads_the_microvm_benchmark_as_it_prints() -> None:
    from bench.report import BENCHMARKS, row_of

    output = [
        "case          launcher ms    raw ms   ratio  target",
        "after stop       40210.5   35120.0    1.14     1.5",
        "warm             12040.0    2100.3    5.73     1.5",
        "interface        61000.0   50000.0    1.22     1.2",
        "interface ratio (launcher / msb exec -t attach): 1.22",
        "after-stop ratio (launcher / msb start + msb exec): 1.14",
        "warm ratio (launcher / msb exec): 5.73",
    ]
    stopped, running, interface = (row_of(benchmark, output) for benchmark in BENCHMARKS
                                   if benchmark.script == "msb_warm_start")
    assert (stopped.figure, stopped.baseline, stopped.ratio) == ("40210.5 ms", "35120.0 ms", 1.14)
    assert (running.figure, running.baseline, running.ratio) == ("12040.0 ms", "2100.3 ms", 5.73)
    assert (interface.figure, interface.baseline, interface.ratio) == ("61000.0 ms", "50000.0 ms", 1.22)
    assert (stopped.verdict, running.verdict, interface.verdict) == ("met", "not met", "not met")
    assert interface.within_allowance and not running.within_allowance


def test_the_report_reads_each_agents_added_time_and_its_ratio_against_the_bare_agent() -> None:
    from bench.report import BENCHMARKS, row_of

    from opencode_sandbox.core.agents import PROFILES, SessionKind

    output = [
        "agent         launcher ms  session ms  added ms  target  bare ms  ratio  target   rounds: 5",
        "claude-code         612.0       540.0      72.0      60    520.0   1.18    1.25",
        "codex               410.0       380.0      30.0      60    300.0   1.37    1.25",
        "claude-code added ms (launcher - session alone): 72.0",
        "claude-code ratio (launcher / bare agent): 1.18",
        "codex added ms (launcher - session alone): 30.0",
        "codex ratio (launcher / bare agent): 1.37",
        "worst ratio (launcher / bare agent): 1.37",
    ]
    rows = [row_of(benchmark, output) for benchmark in BENCHMARKS if benchmark.script == "agent_interface"]
    terminal_agents = [profile for profile in PROFILES.values() if profile.session is SessionKind.TERMINAL]
    assert len(rows) == 2 * len(terminal_agents), "two rows for every terminal agent"
    claude_added, claude_ratio, codex_added, codex_ratio = rows[:4]
    assert (claude_added.figure, claude_added.baseline, claude_added.ratio) == ("612.0 ms", "540.0 ms", 72.0)
    assert (claude_ratio.figure, claude_ratio.baseline, claude_ratio.ratio) == ("612.0 ms", "520.0 ms", 1.18)
    assert (claude_added.verdict, claude_ratio.verdict) == ("not met", "met"), "60 ms at most, 1.25 at most"
    assert (codex_added.verdict, codex_ratio.verdict) == ("met", "not met")
    assert all(row.verdict == "failed" for row in rows[4:]), "an agent the output does not name has no figure"


def test_the_agent_benchmark_knows_every_terminal_agent() -> None:
    from bench.agent_interface import AGENTS

    from opencode_sandbox.core.agents import PROFILES, SessionKind
    from tests.fixtures.agents import PINNED_VERSIONS

    terminal_agents = {name for name, profile in PROFILES.items() if profile.session is SessionKind.TERMINAL}
    assert set(AGENTS) == terminal_agents == set(PINNED_VERSIONS)
