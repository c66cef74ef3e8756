from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.core.naming import BASE_IMAGE, BASE_IMAGE_DIND
from opencode_sandbox.errors import UsageError
from opencode_sandbox.images.compose import (
    base_dockerfile,
    check_final_user,
    effective_dockerfile,
    packaged_file,
    project_dockerfile_path,
)
from opencode_sandbox.images.dockerfile import external_bases, parse_instructions, parse_stages

BASE = "FROM opencode-sandbox/runner-base:latest\n"


def write_project_dockerfile(project: Path, text: str) -> Path:
    path = project_dockerfile_path(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_default_dockerfile_is_one_from_line(tmp_path: Path) -> None:
    effective = effective_dockerfile(tmp_path, dind=False)
    assert effective.text == f"FROM {BASE_IMAGE}\n"
    assert effective.source is None
    assert effective_dockerfile(tmp_path, dind=True).text == f"FROM {BASE_IMAGE_DIND}\n"


def test_project_dockerfile_wins_over_dind_default(tmp_path: Path) -> None:
    path = write_project_dockerfile(tmp_path, BASE + "RUN echo hi\n")
    effective = effective_dockerfile(tmp_path, dind=True)
    assert effective.text == BASE + "RUN echo hi\n"
    assert effective.source == path
    assert effective.context_dir == path.parent


def test_missing_project_folder_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="project folder not found"):
        effective_dockerfile(tmp_path / "absent", dind=False)


def test_dockerfile_that_is_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    project_dockerfile_path(tmp_path).mkdir(parents=True)
    with pytest.raises(UsageError, match="is a directory") as raised:
        effective_dockerfile(tmp_path, dind=False)
    assert raised.value.hint


def test_unreadable_dockerfile_is_a_usage_error(tmp_path: Path) -> None:
    path = write_project_dockerfile(tmp_path, BASE)
    path.write_bytes(b"\xff\xfe FROM x")
    with pytest.raises(UsageError, match="not UTF-8") as raised:
        effective_dockerfile(tmp_path, dind=False)
    assert str(path) in raised.value.message


def test_dangling_dockerfile_symlink_is_reported(tmp_path: Path) -> None:
    path = project_dockerfile_path(tmp_path)
    path.parent.mkdir()
    path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="not found"):
        effective_dockerfile(tmp_path, dind=False)


def test_wrong_user_error_names_the_file(tmp_path: Path) -> None:
    path = write_project_dockerfile(tmp_path, BASE + "USER root\nRUN apt-get update\n")
    with pytest.raises(UsageError) as raised:
        effective_dockerfile(tmp_path, dind=False)
    assert str(path) in raised.value.message
    assert "USER root" in raised.value.message
    assert "USER dev" in (raised.value.hint or "")


@pytest.mark.parametrize(
    "text",
    [
        BASE,
        BASE + "RUN true\n",
        BASE + "USER root\nRUN apt-get update\nUSER dev\n",
        BASE + "USER root\nUSER dev:dev\n",
        BASE + "user root\nuser dev\n",
        BASE + "USER root\n# USER root\nUSER dev\n# trailing comment\n",
        BASE + "USER root\nRUN echo \\\n  USER root\nUSER dev\n",
        BASE + "USER root\nUSER \\\n  dev\n",
        f"FROM {BASE_IMAGE_DIND}\nUSER root\nRUN x\nUSER dev\n",
        "FROM debian:trixie-slim AS tools\nUSER root\n" + BASE + "COPY --from=tools /x /y\n",
        "FROM debian:trixie-slim\nRUN useradd dev\nUSER dev\n",
        BASE + "USER root\nFROM debian AS other\nFROM opencode-sandbox/runner-base:latest\n",
        "FROM opencode-sandbox/runner-base:latest AS base\nRUN x\nFROM base\nRUN y\n",
        "# escape=`\n" + BASE + "USER root\nRUN echo `\n  hi\nUSER dev\n",
        "ARG BASE=opencode-sandbox/runner-base:latest\nFROM ${BASE}\nRUN true\n",
    ],
)
def test_dockerfiles_ending_as_dev_are_accepted(text: str) -> None:
    check_final_user(text, "Dockerfile")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (BASE + "USER root\n", "USER root"),
        (BASE + "USER 1000\n", "USER 1000"),
        (BASE + "USER 1000:1000\n", "USER 1000:1000"),
        (BASE + "USER dev:root\n", "USER dev:root"),
        (BASE + "USER developer\n", "USER developer"),
        (BASE + "USER dev\nRUN x\nUSER root\n", "USER root"),
        (BASE + "USER root\nRUN echo \\\n  USER dev\n", "USER root"),
        ("FROM debian:trixie-slim\nRUN true\n", "does not set a user"),
        ("FROM opencode-sandbox/runner-base:latest AS b\nUSER root\nFROM b\nRUN y\n", "USER root"),
        (BASE + "USER dev\nFROM debian:trixie-slim\n", "does not set a user"),
        ("# only a comment\n", "no FROM"),
        ("", "no FROM"),
    ],
)
def test_dockerfiles_not_ending_as_dev_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as raised:
        check_final_user(text, "/p/.opencode-sandbox/Dockerfile")
    assert fragment in raised.value.message
    assert "/p/.opencode-sandbox/Dockerfile" in raised.value.message
    assert raised.value.hint


def test_instructions_join_continuations_and_skip_comments() -> None:
    text = "# comment\nFROM x\nRUN a \\\n  # inner comment\n\n  && b\nENV A=1\n"
    instructions = parse_instructions(text)
    assert [(i.keyword, i.arguments, i.line) for i in instructions] == [
        ("FROM", "x", 2),
        ("RUN", "a && b", 3),
        ("ENV", "A=1", 7),
    ]


def test_external_bases_leave_out_stages_and_scratch() -> None:
    text = (
        "ARG V=12\nFROM golang:${V} AS build\nFROM scratch AS empty\n"
        "FROM --platform=linux/amd64 opencode-sandbox/runner-base:latest\nCOPY --from=build /a /a\n"
        "FROM build\n"
    )
    assert external_bases(parse_stages(text)) == ["golang:12", "opencode-sandbox/runner-base:latest"]


def test_packaged_dockerfiles_are_readable() -> None:
    base = base_dockerfile(dind=False)
    dind = base_dockerfile(dind=True)
    assert base.splitlines()[2] == "FROM debian:trixie-slim"
    assert "ENV OPENCODE_DISABLE_AUTOUPDATE=true" in base
    assert "LABEL org.opencode-sandbox.opencode-version=" in base
    assert f"FROM {BASE_IMAGE}" in dind
    assert 'LABEL org.opencode-sandbox.dind="true"' in dind
    for text in (base, dind):
        check_final_user(text, "packaged")
        assert parse_instructions(text)[-1].arguments == "dev"
    assert packaged_file("opencode-sandbox-start-docker").startswith("#!/bin/sh")


def test_base_dockerfile_trusts_cas_before_first_https_step() -> None:
    instructions = parse_instructions(base_dockerfile(dind=False))
    first_https = next(n for n, i in enumerate(instructions) if "https://" in i.arguments)
    copy_ca = next(n for n, i in enumerate(instructions) if i.keyword == "COPY" and "ca-certificates/" in i.arguments)
    update = next(n for n, i in enumerate(instructions) if "update-ca-certificates" in i.arguments)
    assert copy_ca < update < first_https
