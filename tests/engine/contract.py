"""The behaviour every `ImageEngine` promises, as a test base class.

A test module subclasses `ImageEngineContract` and provides the fixtures:
- `engine`: the image engine under test, holding `BASE` (a small local image to build from);
- `unique`: a token for this test's names; the fixture removes, after the test, every image
  labelled with `contract_labels(unique)`.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import IO

import pytest

from opencode_sandbox.engine.base import ImageEngine
from opencode_sandbox.engine.types import BuildOutcome
from opencode_sandbox.errors import NotFound, SandboxError

BASE = "debian:trixie-slim"
LABEL = "org.opencode-sandbox.test-contract"
UNREACHABLE = "127.0.0.1:9/opencode-sandbox-test/absent:latest"


def contract_labels(unique: str) -> dict[str, str]:
    return {LABEL: unique}


def repository(unique: str) -> str:
    return f"opencode-sandbox-test/engine-{unique}"


def build(engine: ImageEngine, folder: Path, tag: str, unique: str, greeting: str,
          lines: list[str] | None = None) -> BuildOutcome:
    """A small image: `BASE` with `/data/hello.txt` holding `greeting`, and an ENV."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "hello.txt").write_text(greeting)
    (folder / "Dockerfile").write_text(f"FROM {BASE}\nCOPY data /data\nENV GREETING={greeting}\n")
    return engine.build(folder, tag=tag, labels=contract_labels(unique), build_args={}, no_cache=False,
                        on_line=(lines if lines is not None else []).append)


def tar_members(stream: IO[bytes]) -> dict[str, bytes | None]:
    """Every entry of a tar stream, read to its end: a file's content, None for anything else."""
    members: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            extracted = archive.extractfile(member) if member.isfile() else None
            members[member.name.rstrip("/")] = extracted.read() if extracted is not None else None
    return members


class ImageEngineContract:
    def test_a_missing_image_is_none_and_left_out(self, engine: ImageEngine, unique: str) -> None:
        missing = f"{repository(unique)}:absent"
        assert engine.inspect_image(missing) is None
        found = engine.inspect_images([missing, BASE])
        assert set(found) == {BASE}
        assert str(found[BASE]["Id"]).startswith("sha256:")

    def test_a_build_streams_its_log_and_tags_what_it_built(self, engine: ImageEngine, unique: str,
                                                            tmp_path: Path) -> None:
        tag = f"{repository(unique)}:one"
        lines: list[str] = []
        outcome = build(engine, tmp_path, tag, unique, "hello", lines)
        assert outcome.exit_code == 0 and outcome.image_id is not None
        assert outcome.image_id.startswith("sha256:")
        assert any("COPY data /data" in line for line in lines)
        document = engine.inspect_image(tag)
        assert document is not None and document["Id"] == outcome.image_id
        assert document["Config"]["Labels"][LABEL] == unique
        assert "GREETING=hello" in document["Config"]["Env"]
        assert engine.inspect_images([outcome.image_id])[outcome.image_id]["Id"] == outcome.image_id

    def test_a_failed_build_leaves_the_tag_as_it_was(self, engine: ImageEngine, unique: str, tmp_path: Path) -> None:
        tag = f"{repository(unique)}:kept"
        first = build(engine, tmp_path / "good", tag, unique, "kept")
        empty = tmp_path / "empty"
        empty.mkdir()
        lines: list[str] = []
        failed = engine.build(empty, tag=tag, labels=contract_labels(unique), build_args={}, no_cache=True,
                              on_line=lines.append)
        assert failed.exit_code != 0 and failed.image_id is None
        assert lines
        document = engine.inspect_image(tag)
        assert document is not None and document["Id"] == first.image_id

    def test_a_tag_is_one_more_name_and_removing_it_keeps_the_image(self, engine: ImageEngine, unique: str,
                                                                    tmp_path: Path) -> None:
        tag, other = f"{repository(unique)}:one", f"{repository(unique)}:other"
        built = build(engine, tmp_path, tag, unique, "tagged")
        engine.tag(tag, other)
        document = engine.inspect_image(other)
        assert document is not None and document["Id"] == built.image_id
        engine.remove_image(other)
        assert engine.inspect_image(other) is None
        assert engine.inspect_image(tag) is not None
        with pytest.raises(NotFound):
            engine.remove_image(other)
        with pytest.raises(NotFound):
            engine.tag(f"{repository(unique)}:absent", other)

    def test_the_listing_holds_labelled_tags_and_the_images_a_rebuild_left_untagged(
        self, engine: ImageEngine, unique: str, tmp_path: Path
    ) -> None:
        tag = f"{repository(unique)}:moving"
        first = build(engine, tmp_path / "a", tag, unique, "first")
        labels = contract_labels(unique)
        assert [(i.image_id, i.reference) for i in engine.list_images(labels, True)] == [(first.image_id, tag)]
        assert engine.list_images(labels, False) == []
        second = build(engine, tmp_path / "b", tag, unique, "second")
        assert second.image_id != first.image_id
        dangling = engine.list_images(labels, False)
        assert [(i.image_id, i.reference) for i in dangling] == [(first.image_id, None)]
        assert dangling[0].created_at is not None
        everything = {(i.image_id, i.reference) for i in engine.list_images(labels, True)}
        assert everything == {(first.image_id, None), (second.image_id, tag)}
        engine.remove_image(str(first.image_id))
        assert engine.list_images(labels, False) == []

    def test_save_streams_the_image_as_an_archive(self, engine: ImageEngine, unique: str, tmp_path: Path) -> None:
        tag = f"{repository(unique)}:saved"
        build(engine, tmp_path, tag, unique, "saved")
        with engine.save(tag) as archive:
            members = tar_members(archive)
        assert "manifest.json" in members
        assert tag in (members["manifest.json"] or b"").decode()
        with pytest.raises(NotFound), engine.save(f"{repository(unique)}:absent") as archive:
            archive.read()

    def test_a_folder_of_an_image_streams_as_an_archive_under_its_own_name(
        self, engine: ImageEngine, unique: str, tmp_path: Path
    ) -> None:
        tag = f"{repository(unique)}:exported"
        build(engine, tmp_path, tag, unique, "exported")
        with engine.export_path(tag, "/data") as archive:
            members = tar_members(archive)
        assert members["data/hello.txt"] == b"exported"
        assert "data" in members
        with pytest.raises(NotFound), engine.export_path(f"{repository(unique)}:absent", "/data") as archive:
            archive.read()

    def test_an_unreachable_base_image_cannot_be_pulled(self, engine: ImageEngine) -> None:
        with pytest.raises(SandboxError, match="cannot pull"):
            engine.pull(UNREACHABLE)
        assert engine.inspect_image(UNREACHABLE) is None

    def test_the_engine_tells_its_version(self, engine: ImageEngine) -> None:
        assert engine.engine_version()
