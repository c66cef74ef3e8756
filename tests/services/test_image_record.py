"""The record that lets a start skip the full image check when none of its inputs changed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.config.settings import Settings
from opencode_sandbox.core.naming import BASE_IMAGE, BASE_IMAGE_DIND, LABEL_OPENCODE_VERSION
from opencode_sandbox.project import Project
from opencode_sandbox.services import image_record
from opencode_sandbox.services.image_record import CheckedImage, inputs_signature, recall, remember
from opencode_sandbox.state_layout import ProjectLayout
from tests.fakes.image_engine import FakeEngineImage, FakeImageEngine

REFERENCE = "opencode-sandbox/runner-app-0123456789abcd:0123456789abcdef"
IMAGE_ID = "sha256:" + "a" * 64


class FakeEngine(FakeImageEngine):
    """The base image and the recorded project image, as the record's two questions see them."""

    def __init__(self) -> None:
        super().__init__()
        self.add_image(BASE_IMAGE)
        self.tags[REFERENCE] = IMAGE_ID
        self.images[IMAGE_ID] = FakeEngineImage(IMAGE_ID, {LABEL_OPENCODE_VERSION: "1.2.3"},
                                                {"PATH": "/usr/bin", "LANG": "C.UTF-8"}, {})


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Project, Path, FakeEngine]:
    root = tmp_path / "project"
    (root / ".opencode-sandbox").mkdir(parents=True)
    (root / ".opencode-sandbox" / "Dockerfile").write_text("FROM opencode-sandbox/runner-base:latest\n")
    host_ca = tmp_path / "host-ca"
    host_ca.mkdir()
    monkeypatch.setattr(image_record, "HOST_CA_DIR", host_ca)
    return Project("app-0123456789abcd", root, None, True), tmp_path / "state", FakeEngine()


def settings(**flags: Any) -> Settings:
    return load_settings([], {}, {name.replace("_", "-"): value for name, value in flags.items()})


def signature(project: Project, engine: FakeEngine, version: str = "1.2.3", **flags: Any) -> str:
    return inputs_signature(engine, project, settings(**flags), version)


def touch_later(path: Path) -> None:
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))


def test_the_same_inputs_give_the_same_signature(setup: tuple[Project, Path, FakeEngine]) -> None:
    project, _, engine = setup
    assert signature(project, engine) == signature(project, engine)


def test_every_input_changes_the_signature(setup: tuple[Project, Path, FakeEngine], tmp_path: Path) -> None:
    project, _, engine = setup
    seen = {signature(project, engine)}

    def changed() -> None:
        current = signature(project, engine)
        assert current not in seen
        seen.add(current)

    dockerfile = project.config_dir / "Dockerfile"
    dockerfile.write_text("FROM opencode-sandbox/runner-base:latest\nRUN true\n")
    changed()
    touch_later(dockerfile)
    changed()
    (project.config_dir / "tools").mkdir()
    changed()
    (project.config_dir / "tools" / "setup.sh").write_text("echo\n")
    changed()
    (image_record.HOST_CA_DIR / "corp.crt").write_text("certificate\n")
    changed()
    engine.add_image(BASE_IMAGE, labels={"rebuilt": "yes"})
    changed()
    assert signature(project, engine, version="1.2.4") not in seen
    assert signature(project, engine, dind=True) not in seen
    extra = tmp_path / "extra.crt"
    extra.write_text("one\n")
    with_extra = signature(project, engine, extra_ca_certificates=[str(extra)])
    assert with_extra not in seen
    extra.write_text("two, longer\n")
    assert signature(project, engine, extra_ca_certificates=[str(extra)]) != with_extra



def test_the_dind_base_counts_only_for_a_project_that_uses_it(setup: tuple[Project, Path, FakeEngine]) -> None:
    project, _, engine = setup
    engine.add_image(BASE_IMAGE_DIND)
    plain, dind = signature(project, engine), signature(project, engine, dind=True)
    engine.add_image(BASE_IMAGE_DIND, labels={"rebuilt": "yes"})
    assert signature(project, engine) == plain
    assert signature(project, engine, dind=True) != dind
    engine.add_image(BASE_IMAGE, labels={"rebuilt": "yes"})
    assert signature(project, engine) != plain

def test_a_linked_dockerfile_counts_with_its_target(setup: tuple[Project, Path, FakeEngine], tmp_path: Path) -> None:
    project, _, engine = setup
    target = tmp_path / "shared.Dockerfile"
    target.write_text("FROM opencode-sandbox/runner-base:latest\n")
    dockerfile = project.config_dir / "Dockerfile"
    dockerfile.unlink()
    dockerfile.symlink_to(target)
    before = signature(project, engine)
    target.write_text("FROM opencode-sandbox/runner-base:latest\nRUN true\n")
    assert signature(project, engine) != before


def test_host_certificates_count_only_when_trusted(setup: tuple[Project, Path, FakeEngine]) -> None:
    project, _, engine = setup
    before = signature(project, engine, trust_host_ca=False)
    (image_record.HOST_CA_DIR / "corp.crt").write_text("certificate\n")
    assert signature(project, engine, trust_host_ca=False) == before


def test_a_recorded_image_is_recalled_with_what_the_engine_says_of_it(
    setup: tuple[Project, Path, FakeEngine],
) -> None:
    project, state, engine = setup
    current = signature(project, engine)
    remember(state, current, CheckedImage(REFERENCE, IMAGE_ID, {}, None, {}, built=True))
    recalled = recall(engine, state, current)
    assert recalled == CheckedImage(REFERENCE, IMAGE_ID, {"PATH": "/usr/bin", "LANG": "C.UTF-8"}, "1.2.3",
                                    {LABEL_OPENCODE_VERSION: "1.2.3"}, built=False)


@pytest.mark.parametrize("case", ["other signature", "image gone", "image replaced", "no record", "corrupt record"])
def test_anything_else_asks_for_the_full_check(setup: tuple[Project, Path, FakeEngine], case: str) -> None:
    project, state, engine = setup
    current = signature(project, engine)
    remember(state, current, CheckedImage(REFERENCE, IMAGE_ID, {}, None, {}))
    asked = current
    if case == "other signature":
        asked = "0" * 64
    elif case == "image gone":
        engine.remove_image(REFERENCE)
    elif case == "image replaced":
        engine.add_image(REFERENCE, labels={"rebuilt": "yes"})
    elif case == "no record":
        ProjectLayout(state).image_check.unlink()
    else:
        ProjectLayout(state).image_check.write_text("{ not json: [")
    assert recall(engine, state, asked) is None
