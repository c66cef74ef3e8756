"""The scripted model provider speaks each agent's provider API well enough for the real agent
to work through it, on the host: Claude Code through Anthropic's Messages API, Codex through
OpenAI's Responses API, Gemini CLI through the Gemini API, Qwen Code through chat completions, pi
through the chat-completions API of a provider of its `models.json`.
Each agent edits a file of a checkout with its own tool, and its key reaches the server as that
API carries it."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from opencode_sandbox.core.agents import pi
from opencode_sandbox.core.agents.profile import AGENT_EVENT
from tests.fixtures.agents import claude_code_binary, codex_binary, gemini_binary, pi_binary, qwen_code_binary
from tests.fixtures.model_server import MODEL_ID, PROVIDER_ID, ModelServer, Reply, ToolCall, step

__all__ = ["claude_code_binary", "codex_binary", "gemini_binary", "pi_binary", "qwen_code_binary"]

KEY = "sk-scripted-0123456789"
WRITTEN = "hello from the agent\n"


def agent_environment(home: Path, prefixes: tuple[str, ...], **settings: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}
    return {**environment, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), **settings}


def checkout(tmp_path: Path) -> tuple[Path, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    return work, home


def tool_turns(server: ModelServer) -> list[dict[str, Any]]:
    """The requests that offered tools: the agent's own turns (a title request offers none)."""
    return [request for request in server.requests if request.get("tools")]


def test_claude_code_edits_a_file_through_the_scripted_messages_api(claude_code_binary: Path, tmp_path: Path) -> None:
    work, home = checkout(tmp_path)
    target = work / "hello.txt"
    steps = [step(ToolCall("Write", {"file_path": str(target), "content": WRITTEN})), step(Reply("Wrote hello.txt."))]
    with ModelServer.start(steps, "127.0.0.1", "127.0.0.1") as server:
        env = agent_environment(home, ("ANTHROPIC", "CLAUDE"), ANTHROPIC_API_KEY=KEY,
                                ANTHROPIC_BASE_URL=server.url.removesuffix("/v1"), DISABLE_AUTOUPDATER="1",
                                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        done = subprocess.run([str(claude_code_binary), "-p", "Write hello.txt", "--permission-mode", "acceptEdits",
                               "--model", MODEL_ID], cwd=work, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Wrote hello.txt." in done.stdout
        assert target.read_text() == WRITTEN, "the agent's own Write tool made the file"
        turns = tool_turns(server)
        assert len(turns) == 2 and all(turn.get("stream") for turn in turns)
        results = [block for message in turns[1]["messages"] for block in message.get("content", [])
                   if isinstance(block, dict) and block.get("type") == "tool_result"]
        assert [result["tool_use_id"] for result in results] == ["toolu_scripted_1"], "the tool's result came back"
        sent = [key for key in server.api_keys if key]
        assert len(sent) >= len(turns) and set(sent) == {KEY}, "the key travels in x-api-key"


def test_codex_edits_a_file_through_the_scripted_responses_api(codex_binary: Path, tmp_path: Path) -> None:
    work, home = checkout(tmp_path)
    command = f"printf '{WRITTEN.strip()}\\n' > hello.txt"
    steps = [step(ToolCall("exec_command", {"cmd": command, "workdir": str(work)})), step(Reply("Wrote hello.txt."))]
    with ModelServer.start(steps, "127.0.0.1", "127.0.0.1") as server:
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(
            f'model = "{MODEL_ID}"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\nname = "Scripted"\n'
            f'base_url = "{server.url}"\nenv_key = "OPENAI_API_KEY"\nwire_api = "responses"\n')
        env = agent_environment(home, ("OPENAI", "CODEX"), OPENAI_API_KEY=KEY)
        done = subprocess.run([str(codex_binary), "exec", "--dangerously-bypass-approvals-and-sandbox",
                               "Write hello.txt"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
        assert "Wrote hello.txt." in done.stdout
        assert (work / "hello.txt").read_text() == WRITTEN, "the agent's own exec_command tool made the file"
        turns = tool_turns(server)
        assert len(turns) == 2 and all(turn.get("stream") for turn in turns)
        outputs = [item for item in turns[1]["input"] if item.get("type") == "function_call_output"]
        assert [output["call_id"] for output in outputs] == ["call_scripted_1"], "the command's result came back"
        assert set(server.authorizations) == {f"Bearer {KEY}"}, "the key travels as a bearer token"


def gemini_call(server: ModelServer, method: str, body: dict[str, Any], query: str = "",
                headers: dict[str, str] | None = None) -> bytes:
    root = server.url.removesuffix("/v1")
    request = urllib.request.Request(f"{root}/v1beta/models/{MODEL_ID}:{method}{query}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=10) as response:
        data: bytes = response.read()
    return data


def test_the_gemini_api_answers_with_a_function_call_streamed_or_whole_and_counts_tokens() -> None:
    call = ToolCall("write_file", {"file_path": "a.txt", "content": "x"})
    tools = [{"functionDeclarations": [{"name": "write_file"}]}]
    with ModelServer.start([step(call), step(Reply("Done."))], "127.0.0.1", "127.0.0.1") as server:
        streamed = gemini_call(server, "streamGenerateContent", {"contents": [], "tools": tools}, "?alt=sse",
                               {"x-goog-api-key": KEY})
        [event] = [line.removeprefix(b"data: ") for line in streamed.split(b"\n\n") if line.strip()]
        [candidate] = json.loads(event)["candidates"]
        assert candidate["content"]["parts"] == [{"functionCall": {"name": "write_file", "args": call.arguments}}]
        whole = json.loads(gemini_call(server, "generateContent", {"contents": [], "tools": tools}, f"?key={KEY}"))
        assert whole["candidates"][0]["content"]["parts"] == [{"text": "Done."}]
        assert json.loads(gemini_call(server, "countTokens", {"contents": []}))["totalTokens"] > 0
        untooled = json.loads(gemini_call(server, "generateContent", {"contents": []}))
        assert untooled["candidates"][0]["content"]["parts"] == [{"text": "Scripted session"}], "the script waits"
        assert server.google_keys == [KEY, KEY, "", ""], "the header, else the query's key"


def test_gemini_cli_edits_a_file_through_the_scripted_gemini_api(gemini_binary: Path, tmp_path: Path) -> None:
    work, home = checkout(tmp_path)
    target = work / "hello.txt"
    steps = [step(ToolCall("write_file", {"file_path": str(target), "content": WRITTEN})),
             step(Reply("Wrote hello.txt."))]
    with ModelServer.start(steps, "127.0.0.1", "127.0.0.1") as server:
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}}))
        env = agent_environment(home, ("GEMINI", "GOOGLE"), GEMINI_API_KEY=KEY, GEMINI_CLI_TRUST_WORKSPACE="true",
                                GOOGLE_GEMINI_BASE_URL=server.url.removesuffix("/v1"), GEMINI_MODEL=MODEL_ID)
        done = subprocess.run([str(gemini_binary), "-p", "Write hello.txt", "--approval-mode", "auto_edit"],
                              cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
        assert "Wrote hello.txt." in done.stdout
        assert target.read_text() == WRITTEN, "the agent's own write_file tool made the file"
        turns = tool_turns(server)
        assert len(turns) == 2
        responses = [part["functionResponse"] for content in turns[1]["contents"] for part in content["parts"]
                     if "functionResponse" in part]
        assert [response["name"] for response in responses] == ["write_file"], "the tool's result came back"
        sent = [key for key in server.google_keys if key]
        assert len(sent) >= len(turns) and set(sent) == {KEY}, "the key travels in x-goog-api-key"


def test_qwen_code_edits_a_file_through_scripted_chat_completions(qwen_code_binary: Path, tmp_path: Path) -> None:
    work, home = checkout(tmp_path)
    target = work / "hello.txt"
    steps = [step(ToolCall("write_file", {"file_path": str(target), "content": WRITTEN})),
             step(Reply("Wrote hello.txt."))]
    with ModelServer.start(steps, "127.0.0.1", "127.0.0.1") as server:
        (home / ".qwen").mkdir()
        (home / ".qwen" / "settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "openai"}}, "model": {"name": MODEL_ID},
            "general": {"enableAutoUpdate": False}, "ui": {"enableFollowupSuggestions": False}}))
        env = agent_environment(home, ("OPENAI", "QWEN", "DASHSCOPE"), OPENAI_API_KEY=KEY, OPENAI_BASE_URL=server.url)
        done = subprocess.run([str(qwen_code_binary), "-p", "Write hello.txt", "--approval-mode", "auto-edit"],
                              cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
        assert "Wrote hello.txt." in done.stdout
        assert target.read_text() == WRITTEN, "the agent's own write_file tool made the file"
        turns = tool_turns(server)
        assert len(turns) == 2 and all(turn.get("stream") for turn in turns)
        results = [message for message in turns[1]["messages"] if message.get("role") == "tool"]
        assert [result["tool_call_id"] for result in results] == ["call_scripted_1"], "the tool's result came back"
        assert set(filter(None, server.authorizations)) == {f"Bearer {KEY}"}, "the key travels as a bearer token"


def test_pi_edits_a_file_through_the_scripted_chat_completions_and_its_extension_reports_the_turn(
        pi_binary: Path, tmp_path: Path) -> None:
    """The image's extension, with a program that records the states in place of the image's."""
    work, home = checkout(tmp_path)
    target = work / "hello.txt"
    states = tmp_path / "states"
    recorder = tmp_path / "record-state"
    recorder.write_text(f'#!/bin/sh\ncat >/dev/null\necho "$1" >>{states}\n')
    recorder.chmod(0o755)
    extension = tmp_path / "activity.ts"
    extension.write_text(pi.ACTIVITY_EXTENSION.replace(AGENT_EVENT, str(recorder)))
    steps = [step(ToolCall("write", {"path": str(target), "content": WRITTEN})), step(Reply("Wrote hello.txt."))]
    with ModelServer.start(steps, "127.0.0.1", "127.0.0.1") as server:
        (home / ".pi" / "agent").mkdir(parents=True)
        (home / ".pi" / "agent" / "models.json").write_text(json.dumps({"providers": {PROVIDER_ID: {
            "baseUrl": server.url, "api": "openai-completions", "apiKey": "OPENAI_API_KEY",
            "models": [{"id": MODEL_ID}]}}}))
        env = agent_environment(home, ("OPENAI", "PI_"), OPENAI_API_KEY=KEY, PI_OFFLINE="1")
        done = subprocess.run([str(pi_binary), "--extension", str(extension), "--provider", PROVIDER_ID,
                               "--model", MODEL_ID, "-p", "Write hello.txt"], cwd=work, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
        assert "Wrote hello.txt." in done.stdout
        assert target.read_text() == WRITTEN, "the agent's own write tool made the file"
        turns = tool_turns(server)
        assert len(turns) == 2 and all(turn.get("stream") for turn in turns)
        results = [message for message in turns[1]["messages"] if message.get("role") == "tool"]
        assert [result["tool_call_id"] for result in results] == ["call_scripted_1"], "the tool's result came back"
        assert set(server.authorizations) == {f"Bearer {KEY}"}, "the key travels as a bearer token"
    assert states.read_text().split() == ["idle", "busy", "busy", "waiting", "ended"]
