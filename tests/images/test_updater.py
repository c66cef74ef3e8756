from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from opencode_sandbox.errors import SandboxError, UsageError
from opencode_sandbox.images.updater import (
    UpdateAction,
    agent_update,
    baked_agent_version,
    baked_version,
    check_for_update,
    is_newer,
    load_state,
    record_agent_shown,
    record_baked_agent_version,
    record_baked_version,
    record_shown,
    refresh_latest,
    resolve_agent_version,
    resolve_opencode_version,
    state_path,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b'{"tag_name": "v1.5.0"}'
    delay_s: float = 0.0


@dataclass
class ReleasesServer:
    url: str
    replies: dict[str, Reply] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def reply(self, path: str = "/latest", **kwargs: object) -> str:
        self.replies[path] = Reply(**kwargs)  # type: ignore[arg-type]
        return self.url + path


@pytest.fixture
def server() -> Iterator[ReleasesServer]:
    state = ReleasesServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits.append(self.path)
            reply = state.replies.get(self.path, Reply(status=404, body=b"{}"))
            if reply.delay_s:
                state.release.wait(reply.delay_s)
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def state_root(tmp_path: Path) -> Path:
    return tmp_path / "state" / "opencode-sandbox"


def test_newer_version_is_offered_once(server: ReleasesServer, state_root: Path) -> None:
    url = server.reply()
    first = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW)
    assert first.action is UpdateAction.OFFER_REBUILD
    assert (first.latest_version, first.baked_version, first.checked) == ("1.5.0", "1.4.0", True)
    record_shown(state_root, first)
    later = NOW + timedelta(days=3)
    again = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=later)
    assert again.checked is True
    assert again.action is UpdateAction.NOTHING
    assert load_state(state_root).offered == ("1.5.0",)
    server.reply(body=b'{"tag_name": "v1.6.0"}')
    newest = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=later + timedelta(days=1))
    assert (newest.action, newest.latest_version) == (UpdateAction.OFFER_REBUILD, "1.6.0")


def test_non_interactive_gets_a_notice_once(server: ReleasesServer, state_root: Path) -> None:
    url = server.reply(body=b'{"version": "2.0.0"}')
    decision = check_for_update(state_root, "1.0.0", interactive=False, releases_url=url, now=NOW)
    assert decision.action is UpdateAction.NOTICE
    record_shown(state_root, decision)
    assert check_for_update(state_root, "1.0.0", interactive=False, releases_url=url, now=NOW).action is (
        UpdateAction.NOTHING
    )
    # The notice does not use up the interactive offer.
    assert check_for_update(state_root, "1.0.0", interactive=True, releases_url=url, now=NOW).action is (
        UpdateAction.OFFER_REBUILD
    )


def test_endpoint_is_asked_at_most_once_per_24_hours(server: ReleasesServer, state_root: Path) -> None:
    url = server.reply()
    assert check_for_update(state_root, "1.5.0", interactive=True, releases_url=url, now=NOW).checked
    for offset in (timedelta(minutes=1), timedelta(hours=23, minutes=59)):
        decision = check_for_update(state_root, "1.5.0", interactive=True, releases_url=url, now=NOW + offset)
        assert decision.checked is False
        assert decision.action is UpdateAction.NOTHING
    assert len(server.hits) == 1
    assert check_for_update(
        state_root, "1.5.0", interactive=True, releases_url=url, now=NOW + timedelta(hours=24)
    ).checked
    assert len(server.hits) == 2
    assert load_state(state_root).last_check == NOW + timedelta(hours=24)


def test_within_the_window_the_recorded_latest_still_decides(server: ReleasesServer, state_root: Path) -> None:
    url = server.reply()
    check_for_update(state_root, "1.5.0", interactive=True, releases_url=url, now=NOW)
    decision = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW + timedelta(hours=1))
    assert (decision.checked, decision.action) == (False, UpdateAction.OFFER_REBUILD)
    assert len(server.hits) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=500, body=b"oops"),
        Reply(status=404, body=b"{}"),
        Reply(body=b"{not json"),
        Reply(body=b'{"tag_name": "nightly"}'),
        Reply(body=b'["v1.5.0"]'),
    ],
    ids=["500", "404", "malformed-json", "not-a-version", "not-an-object"],
)
def test_failed_check_does_not_start_the_window(server: ReleasesServer, state_root: Path, reply: Reply) -> None:
    server.replies["/latest"] = reply
    url = server.url + "/latest"
    failed = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW)
    assert (failed.checked, failed.action) == (False, UpdateAction.NOTHING)
    assert load_state(state_root).last_check is None
    server.reply()
    retried = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW + timedelta(minutes=5))
    assert (retried.checked, retried.action) == (True, UpdateAction.OFFER_REBUILD)
    assert len(server.hits) == 2


def test_offline_check_retries_next_time(server: ReleasesServer, state_root: Path) -> None:
    offline = "http://127.0.0.1:9/latest"
    decision = check_for_update(state_root, "1.4.0", interactive=True, releases_url=offline, now=NOW)
    assert (decision.checked, decision.action) == (False, UpdateAction.NOTHING)
    assert not state_path(state_root).exists()
    url = server.reply()
    assert check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW).checked


def test_slow_endpoint_times_out(server: ReleasesServer, state_root: Path) -> None:
    url = server.reply(delay_s=5.0)
    decision = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW, timeout_s=0.3)
    assert (decision.checked, decision.action) == (False, UpdateAction.NOTHING)
    assert load_state(state_root).last_check is None


def test_corrupt_state_warns_and_starts_fresh(server: ReleasesServer, state_root: Path) -> None:
    state_root.mkdir(parents=True)
    state_path(state_root).write_text("last_check: [unclosed\n")
    url = server.reply()
    decision = check_for_update(state_root, "1.4.0", interactive=True, releases_url=url, now=NOW)
    assert decision.warnings and "corrupt" in decision.warnings[0]
    assert decision.action is UpdateAction.OFFER_REBUILD
    assert load_state(state_root).latest_version == "1.5.0"


def test_state_file_is_private_and_written_atomically(server: ReleasesServer, state_root: Path) -> None:
    check_for_update(state_root, "1.4.0", interactive=True, releases_url=server.reply(), now=NOW)
    record_baked_version(state_root, "1.4.0")
    assert stat.S_IMODE(state_root.stat().st_mode) == 0o700
    assert stat.S_IMODE(state_path(state_root).stat().st_mode) == 0o600
    assert sorted(p.name for p in state_root.iterdir()) == ["updater.yaml"]
    assert baked_version(state_root) == "1.4.0"
    assert load_state(state_root).latest_version == "1.5.0"


def test_baked_version_from_state_is_used_when_none_is_given(server: ReleasesServer, state_root: Path) -> None:
    record_baked_version(state_root, "1.0.0")
    decision = check_for_update(state_root, None, interactive=True, releases_url=server.reply(), now=NOW)
    assert (decision.baked_version, decision.action) == ("1.0.0", UpdateAction.OFFER_REBUILD)


def test_resolve_prefers_pinned_then_releases_then_npm(server: ReleasesServer) -> None:
    releases = server.reply("/releases", body=b'{"tag_name": "v3.1.0"}')
    npm = server.reply("/npm", body=json.dumps({"name": "opencode-ai", "version": "3.0.9"}).encode())
    assert resolve_opencode_version("v2.0.0", releases, npm) == "2.0.0"
    assert resolve_opencode_version(None, releases, npm) == "3.1.0"
    server.reply("/releases", status=500)
    assert resolve_opencode_version(None, releases, npm) == "3.0.9"


def test_resolve_fails_clearly_when_nothing_answers(server: ReleasesServer) -> None:
    releases = server.reply("/releases", status=503)
    npm = server.reply("/npm", body=b"garbage")
    with pytest.raises(SandboxError) as raised:
        resolve_opencode_version(None, releases, npm)
    assert "--opencode-version" in (raised.value.hint or "")


def test_resolve_refuses_a_malformed_pinned_version() -> None:
    with pytest.raises(UsageError, match="not an opencode version"):
        resolve_opencode_version("latest-ish")


@pytest.mark.parametrize(
    ("candidate", "current", "newer"),
    [
        ("1.10.0", "1.9.9", True),
        ("1.2.3", "1.2.3", False),
        ("1.2.3", "1.2.3-beta.1", True),
        ("1.2.3-beta.1", "1.2.3", False),
        ("0.9.0", "1.0.0", False),
        ("1.0.0", None, True),
    ],
)
def test_version_ordering(candidate: str, current: str | None, newer: bool) -> None:
    assert is_newer(candidate, current) is newer


def test_each_terminal_agent_an_image_was_built_with_is_checked_in_the_same_round(
        server: ReleasesServer, state_root: Path) -> None:
    record_baked_agent_version(state_root, "claude-code", "2.1.0")
    server.reply("/@anthropic-ai/claude-code/latest", body=b'{"version": "2.2.0"}')
    assert refresh_latest(state_root, server.reply(), now=NOW, npm_registry=server.url)
    state = load_state(state_root)
    assert state.agent_latest == (("claude-code", "2.2.0"),) and state.latest_version == "1.5.0"
    assert "/@openai/codex/latest" not in server.hits, "an agent no image has is not looked up"
    action, latest, baked = agent_update(state, "claude-code", interactive=True)
    assert (action, latest, baked) == (UpdateAction.OFFER_REBUILD, "2.2.0", "2.1.0")
    record_agent_shown(state_root, "claude-code", "2.2.0", action)
    assert agent_update(load_state(state_root), "claude-code", interactive=True)[0] is UpdateAction.NOTHING
    assert agent_update(load_state(state_root), "claude-code", interactive=False)[0] is UpdateAction.NOTICE
    assert agent_update(load_state(state_root), "codex", interactive=True)[0] is UpdateAction.NOTHING


def test_an_agent_whose_registry_fails_keeps_what_was_known(server: ReleasesServer, state_root: Path) -> None:
    record_baked_agent_version(state_root, "codex", "0.170.0")
    warnings: list[str] = []
    assert refresh_latest(state_root, server.reply(), now=NOW, npm_registry=server.url, warn=warnings.append)
    assert load_state(state_root).agent_latest == () and warnings == ["Codex update check failed: "
                                                                      f"{server.url}/@openai/codex/latest: HTTP 404"]
    assert baked_agent_version(state_root, "codex") == "0.170.0"
    record_baked_agent_version(state_root, "codex", "0.171.0")
    assert load_state(state_root).agent_versions == (("codex", "0.171.0"),)


def test_an_agent_version_is_pinned_as_given_or_refused() -> None:
    assert resolve_agent_version("Codex", "@openai/codex", "v0.171.0") == "0.171.0"
    with pytest.raises(UsageError, match="not a Codex version"):
        resolve_agent_version("Codex", "@openai/codex", "latest")


def test_the_release_check_asks_npm_about_an_agent_of_the_users_own_by_the_package_its_image_has(
        server: ReleasesServer, state_root: Path) -> None:
    """The check runs in a process of its own that reads no configuration: the state file says which
    package the user's agent was installed from."""
    record_baked_agent_version(state_root, "grok-of-mine", "0.0.33", package="@vibe-kit/grok-cli")
    record_baked_agent_version(state_root, "gone-agent", "1.0.0")  # neither a profile nor a package: not asked
    server.reply("/@vibe-kit/grok-cli/latest", body=b'{"version": "0.0.34"}')
    warnings: list[str] = []
    assert refresh_latest(state_root, server.reply(), now=NOW, npm_registry=server.url, warn=warnings.append)
    state = load_state(state_root)
    assert state.agent_latest == (("grok-of-mine", "0.0.34"),) and warnings == []
    assert agent_update(state, "grok-of-mine", interactive=True)[:2] == (UpdateAction.OFFER_REBUILD, "0.0.34")


def test_the_baked_version_of_an_agent_whose_package_changed_is_forgotten(state_root: Path) -> None:
    record_baked_agent_version(state_root, "mine", "1.2.0", package="first-agent")
    assert baked_agent_version(state_root, "mine", package="first-agent") == "1.2.0"
    assert baked_agent_version(state_root, "mine", package="@other/agent") is None
    assert baked_agent_version(state_root, "mine") == "1.2.0"
    record_baked_agent_version(state_root, "mine", "0.3.0", package="@other/agent")
    assert load_state(state_root).agent_packages == (("mine", "@other/agent"),)
    assert baked_agent_version(state_root, "mine", package="@other/agent") == "0.3.0"
