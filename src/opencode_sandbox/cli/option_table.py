"""The options of the lines that start sessions, declared once: the global ones, `run`'s and `shell`'s.

`cli/main.py` and `cli/commands_run.py` build their click options from this table, and
`cli/fast_path.py` reads the same lines from it without loading click, so an option added here
is known to both readers. Loading this module loads no part of click.
"""

from __future__ import annotations

from opencode_sandbox.core.egress import Profile
from opencode_sandbox.core.records import Record
from opencode_sandbox.runtime.kind import RuntimeKind
from opencode_sandbox.ui.console import LOG_LEVEL_NAMES

FLAG = "flag"
"""The option takes no value: present means True, absent False."""
TEXT = "text"
INTEGER = "integer"
REPEATED = "repeated"
"""A text option that may be given several times: its values in order, a tuple."""


class Option(Record):
    parameter: str
    """The argument of the command's function that receives the value."""
    spellings: tuple[str, ...]
    help: str
    kind: str = TEXT
    """FLAG, TEXT, INTEGER or REPEATED."""
    choices: tuple[str, ...] = ()
    """The only values accepted, when not empty."""
    metavar: str | None = None

    @property
    def default(self) -> bool | tuple[str, ...] | None:
        return False if self.kind == FLAG else () if self.kind == REPEATED else None


class CommandLine(Record):
    options: tuple[Option, ...]
    rest: str = ""
    """The parameter that receives the words after `--`; empty for the global options."""
    rest_metavar: str = ""

    def by_spelling(self) -> dict[str, Option]:
        return {spelling: option for option in self.options for spelling in option.spellings}


GLOBAL = CommandLine((
    Option("assume_yes", ("-y", "--yes"), "Take the default answer of every prompt.", FLAG),
    Option("quiet", ("-q", "--quiet"), "Print errors only.", FLAG),
    Option("log_level", ("--log-level",),
           "How much to print: error, warning, info (default) or verbose "
           "(also where each setting came from, and tracebacks).",
           choices=tuple(LOG_LEVEL_NAMES)),
    Option("runtime", ("--runtime",),
           "VM runtime: microsandbox (microVMs, default) or docker (shares the host kernel).",
           choices=tuple(kind.value for kind in RuntimeKind)),
))

AGENT_NAMES = ("opencode", "claude-code", "codex", "gemini", "qwen-code", "pi", "crush", "droid", "cline", "copilot")
"""The agents' profiles (`core/agents`), named here so that reading the table loads none of them."""
AGENT_CHOICES = (f"{', '.join(AGENT_NAMES[:-1])} or {AGENT_NAMES[-1]}, or one of your own (config 'agents'); "
                 "default: config 'agent', opencode")
"""What `--agent` accepts: the configuration refuses a name no agent has, as it alone knows the user's own."""
_AGENT = Option("agent", ("--agent",), f"The coding agent to run: {AGENT_CHOICES}.", metavar="NAME")
_ISOLATED = Option("isolated", ("--isolated",),
                   "Work on the VM's own work tree, seeded from this checkout, instead of the checkout itself; "
                   "its work comes back through `diff` and `apply` (default: config 'workspace').", FLAG)
_REBUILD = Option("rebuild", ("-r", "--rebuild"), "Rebuild the runner image from scratch first.", FLAG)
_CPUS = Option("cpus", ("-c", "--cpus"), "Virtual CPUs of the VM (default: config 'cpus', 2).", INTEGER)
_MEMORY = Option("memory", ("-m", "--memory"), "Memory of the VM, such as 4G (default: config 'memory', 4G).",
                 metavar="SIZE")
_NETWORK = Option("network", ("--network",),
                  "Where the VM may connect: public (default: the internet, no private ranges, not the host), "
                  "allowlist, none or all (default: config 'network').",
                  choices=tuple(profile.value for profile in Profile))
_PUBLISH = Option("publish", ("-p", "--publish"),
                  "Publish a guest TCP port on the host's 127.0.0.1, on HOST_PORT or a free port; repeatable, "
                  "added to config 'ports'.", REPEATED, metavar="[HOST_PORT:]GUEST_PORT")

RUN = CommandLine(
    (
        Option("worktree", ("-w", "--worktree"),
               "Attach to the opencode worktree NAME inside the VM, creating it from BASE "
               "(a git ref, default HEAD) when it does not exist.",
               metavar="NAME[:BASE]"),
        _AGENT,
        _ISOLATED,
        _REBUILD,
        Option("dry_run", ("-n", "--dry-run"),
               "Check the inputs as a run would and print what it would do, changing nothing.", FLAG),
        _CPUS,
        _MEMORY,
        _NETWORK,
        _PUBLISH,
        Option("serve_only", ("-s", "--serve-only"),
               "Start the opencode server, print its URL, its credentials and the published ports, and wait "
               "instead of attaching.", FLAG),
    ),
    rest="opencode_args",
    rest_metavar="[-- AGENT_ARGS]...",
)

SHELL = CommandLine(
    (
        Option("root", ("--root",), "Run as root instead of the user dev (on docker: a root without capabilities, "
           "which cannot write the checkout).", FLAG),
        _AGENT,
        _ISOLATED,
        _REBUILD,
        Option("dry_run", ("-n", "--dry-run"),
               "Check the inputs as a start would and print what it would do, changing nothing.", FLAG),
        _CPUS,
        _MEMORY,
        _NETWORK,
        _PUBLISH,
    ),
    rest="command",
    rest_metavar="[-- CMD...]",
)

COMMANDS = {"run": RUN, "shell": SHELL}
