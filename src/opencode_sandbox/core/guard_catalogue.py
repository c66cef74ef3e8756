"""What the guard covers by default, and what it does not: each file of a checkout that a tool on
the host runs or applies without a deliberate command, with the tool and how it runs it.

The guard watches each path in every folder of the checkout (`guard.GUARDED_BELOW`), since these
tools look in the folder they run in; a folder counts with everything in it."""

from __future__ import annotations

from opencode_sandbox.core.records import Record


class Guarded(Record):
    path: str
    tool: str
    how: str


_INSTRUCTIONS = "the agent's instructions, followed with your permissions"
_DIRENV_LOADS = "an approved `.envrc` loads it at `cd` with no new approval"

CATALOGUE: tuple[Guarded, ...] = (
    Guarded(".envrc", "direnv", "runs in your shell at `cd` once approved"),
    Guarded(".envrc.local", "direnv", f"`source_env_if_exists`: {_DIRENV_LOADS}"),
    Guarded(".env", "direnv, dotenv loaders", f"`dotenv`: {_DIRENV_LOADS}; a `PATH` or `NODE_OPTIONS` in it runs code"),
    Guarded(".env.local", "direnv, dotenv loaders", f"`dotenv_if_exists`: {_DIRENV_LOADS}"),
    Guarded("flake.nix", "direnv, nix", f"`use flake`: {_DIRENV_LOADS}; its `shellHook` runs in your shell"),
    Guarded("flake.lock", "direnv, nix", "names the inputs `use flake` fetches and evaluates"),
    Guarded("shell.nix", "direnv, nix", f"`use nix`: {_DIRENV_LOADS}; its `shellHook` runs in your shell"),
    Guarded("default.nix", "direnv, nix", "`use nix` evaluates it when there is no `shell.nix`"),
    Guarded("mise.toml", "mise", "`[hooks]` and `env._.source` run at `cd` in a trusted folder"),
    Guarded(".mise.toml", "mise", "as `mise.toml`"),
    Guarded("mise.local.toml", "mise", "as `mise.toml`"),
    Guarded(".mise.local.toml", "mise", "as `mise.toml`"),
    Guarded(".config/mise.toml", "mise", "as `mise.toml`"),
    Guarded(".config/mise", "mise", "as `mise.toml`"),
    Guarded(".tool-versions", "asdf, mise", "chooses the tool binary every command of the tool runs"),
    Guarded(".vscode", "VS Code", "`tasks.json` runs at folder open, `launch.json` at F5, `mcp.json` starts "
            "servers, `settings.json` names terminal profiles and tool paths"),
    Guarded(".devcontainer", "VS Code Dev Containers", "`initializeCommand` runs on the host"),
    Guarded(".devcontainer.json", "VS Code Dev Containers", "`initializeCommand` runs on the host"),
    Guarded(".idea", "JetBrains IDEs", "run configurations, tool paths and the workspace's settings"),
    Guarded(".zed", "Zed", "`settings.json` names the language server binary run when a file opens; `tasks.json`"),
    Guarded(".cursor", "Cursor", "`mcp.json` starts MCP servers; `rules/` are the agent's instructions"),
    Guarded(".cursorrules", "Cursor", _INSTRUCTIONS),
    Guarded(".gemini", "Gemini CLI", "`settings.json` hooks run commands, it starts MCP servers and a tool "
            "discovery command; `.env` sets its environment; agents, commands and skills"),
    Guarded("GEMINI.md", "Gemini CLI", _INSTRUCTIONS),
    Guarded(".qwen", "Qwen Code", "`settings.json` hooks run commands, it starts MCP servers; `.env` sets its "
            "environment; agents, commands and skills"),
    Guarded("QWEN.md", "Qwen Code", _INSTRUCTIONS),
    Guarded(".claude", "Claude Code", "`settings.json` hooks run commands; agents, commands and skills"),
    Guarded(".mcp.json", "Claude Code", "starts the MCP servers it names"),
    Guarded("CLAUDE.md", "Claude Code", _INSTRUCTIONS),
    Guarded("CLAUDE.local.md", "Claude Code", _INSTRUCTIONS),
    Guarded("AGENTS.md", "Codex, opencode and other agents", _INSTRUCTIONS),
    Guarded(".codex", "Codex", "its project configuration: MCP servers, profiles"),
    Guarded(".pi", "pi", "`extensions/` are programs it loads at every start; settings, prompts, skills and its "
            "system prompt"),
    Guarded("crushrc", "Crush", "a shell script it runs at every start"),
    Guarded(".crushrc", "Crush", "as `crushrc`"),
    Guarded("crush.json", "Crush", "a `$(...)` in any value runs at every start; its hooks, MCP and LSP servers"),
    Guarded(".crush.json", "Crush", "as `crush.json`"),
    Guarded("CRUSH.md", "Crush", _INSTRUCTIONS),
    Guarded(".crush/commands", "Crush", "the project's commands: prompts it sends with your permissions"),
    Guarded(".crush/skills", "Crush", "the project's skills: the agent's instructions"),
    Guarded(".factory", "Factory Droid", "`settings.json` hooks run commands, `mcp.json` starts MCP servers; droids, "
            "commands and skills"),
    Guarded(".clinerules", "Cline", "`hooks/` run at each turn and tool call; rules are the agent's instructions"),
    Guarded(".cline", "Cline", "`hooks/` run at each turn and tool call; skills and workflows"),
    Guarded(".github/hooks", "GitHub Copilot CLI", "the hooks it runs in a trusted folder"),
    Guarded(".github/copilot", "GitHub Copilot CLI", "`settings.json` hooks run commands"),
    Guarded(".github/copilot-instructions.md", "GitHub Copilot CLI", _INSTRUCTIONS),
    Guarded(".opencode", "opencode", "plugins are programs; agents, commands and tools"),
    Guarded("opencode.json", "opencode", "MCP servers, plugins and formatters it runs"),
    Guarded("opencode.jsonc", "opencode", "as `opencode.json`"),
    Guarded(".pre-commit-config.yaml", "pre-commit", "the hooks it runs at every commit"),
    Guarded(".husky", "husky", "the hooks it runs at every commit"),
    Guarded("lefthook.yml", "lefthook", "the hooks it runs at every commit"),
    Guarded(".lefthook.yml", "lefthook", "as `lefthook.yml`"),
    Guarded("lefthook-local.yml", "lefthook", "as `lefthook.yml`"),
    Guarded(".lefthook-local.yml", "lefthook", "as `lefthook.yml`"),
    Guarded(".gitmodules", "git", "`git submodule update` fetches and checks out what it names"),
    Guarded(".yarnrc.yml", "Yarn", "`yarnPath` runs a JavaScript file at every `yarn`"),
    Guarded(".yarnrc", "Yarn 1", "`yarn-path` runs a JavaScript file at every `yarn`"),
    Guarded(".yarn/releases", "Yarn", "the file `yarnPath` usually names"),
    Guarded(".yarn/plugins", "Yarn", "plugins load at every `yarn`"),
    Guarded(".npmrc", "npm, pnpm", "`script-shell` and `node-options` run code at every install or script"),
    Guarded(".pnpmfile.cjs", "pnpm", "runs at every install"),
    Guarded(".mvn", "Maven", "`extensions.xml` loads core extensions, `jvm.config` and `maven.config` at every "
            "build, the IDE's import included; the wrapper's properties"),
    Guarded("gradle/wrapper", "Gradle wrapper", "names and holds the Gradle that runs, at the IDE's import too"),
    Guarded(".cargo/config.toml", "Cargo", "`build.rustc-wrapper` and target runners run at every build, "
            "rust-analyzer's too"),
    Guarded(".cargo/config", "Cargo", "as `.cargo/config.toml`"),
    Guarded("rust-toolchain.toml", "rustup", "chooses the toolchain, by a path too, that every cargo runs"),
    Guarded("rust-toolchain", "rustup", "as `rust-toolchain.toml`"),
    Guarded(".opencode-sandbox", "opencode-sandbox", "the next run applies its configuration and builds its "
            "Dockerfile on the host"),
)

NOT_COVERED: tuple[Guarded, ...] = (
    Guarded("package.json", "npm, pnpm, Yarn", "its scripts run when you run them (`npm test`, `npm install` of "
            "the project): read what the agent changed before you do"),
    Guarded("Makefile", "make", "runs when you run `make`"),
    Guarded("conftest.py, tests", "pytest and other test runners", "run when you run the tests"),
    Guarded("pyproject.toml, setup.py, build.gradle, pom.xml, Cargo.toml, build.rs", "build tools",
            "run when you build; an IDE's import of a Gradle or Maven project builds too"),
    Guarded(".gitattributes", "git", "names filters and diff drivers, which run only when your own git "
            "configuration defines them"),
    Guarded("a crowded folder in a guarded folder", "opencode, any", "a folder of more than 2,000 entries or "
            "64 MiB, such as `.opencode/node_modules` (what plugins import), is recorded whole: a change inside it "
            "is not seen, only one that makes or removes it"),
    Guarded("files a guarded file calls", "any", "a hook or MCP entry that runs `./scripts/x.sh` or "
            "`node tools/mcp.js` runs what is there: guard such a file with `guarded-paths`"),
)
"""What a user runs deliberately, named so the documents say what the guard leaves to them."""
