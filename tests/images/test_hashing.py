from __future__ import annotations

from pathlib import Path

import pytest

from opencode_sandbox.errors import UsageError
from opencode_sandbox.images.certificates import CaCertificate, collect_ca_certificates
from opencode_sandbox.images.context import context_files, write_build_context
from opencode_sandbox.images.dockerignore import is_ignored, parse_dockerignore
from opencode_sandbox.images.hashing import SHORT_HASH_LENGTH, content_hash, short_hash
from tests.images.certs import fake_pem

DOCKERFILE = "FROM opencode-sandbox/runner-base:latest\nCOPY tools/ /opt/tools/\n"
BASE_ID = "sha256:" + "a" * 64


def project_folder(tmp_path: Path) -> Path:
    folder = tmp_path / ".opencode-sandbox"
    (folder / "tools").mkdir(parents=True)
    (folder / "Dockerfile").write_text(DOCKERFILE)
    (folder / "tools" / "setup.sh").write_text("echo setup\n")
    return folder


def hash_of(
    folder: Path,
    *,
    dockerfile: str = DOCKERFILE,
    base_id: str = BASE_ID,
    version: str = "1.0.0",
    certificates: list[CaCertificate] | None = None,
) -> str:
    return content_hash(
        dockerfile=dockerfile,
        context=context_files(folder),
        base_image_ids={"opencode-sandbox/runner-base:latest": base_id},
        opencode_version=version,
        ca_certificates=certificates or [],
    )


def test_unchanged_inputs_keep_the_hash(tmp_path: Path) -> None:
    folder = project_folder(tmp_path)
    first = hash_of(folder)
    assert len(first) == 64
    assert hash_of(folder) == first
    (folder / "tools" / "setup.sh").touch()
    assert hash_of(folder) == first


def test_every_kind_of_change_changes_the_hash(tmp_path: Path) -> None:
    folder = project_folder(tmp_path)
    original = hash_of(folder)
    ca = CaCertificate("extra-a.crt", fake_pem("a"), tmp_path / "a.crt")
    variants = {
        "dockerfile": hash_of(folder, dockerfile=DOCKERFILE + "RUN true\n"),
        "base image": hash_of(folder, base_id="sha256:" + "b" * 64),
        "opencode version": hash_of(folder, version="1.0.1"),
        "ca certificate": hash_of(folder, certificates=[ca]),
    }
    (folder / "tools" / "setup.sh").write_text("echo changed\n")
    variants["context file content"] = hash_of(folder)
    (folder / "tools" / "setup.sh").write_text("echo setup\n")
    assert hash_of(folder) == original
    (folder / "tools" / "setup.sh").chmod(0o755)
    variants["executable bit"] = hash_of(folder)
    (folder / "tools" / "setup.sh").chmod(0o644)
    (folder / "tools" / "new.txt").write_text("x")
    variants["added file"] = hash_of(folder)
    (folder / "tools" / "new.txt").rename(folder / "tools" / "renamed.txt")
    variants["renamed file"] = hash_of(folder)
    for kind, value in variants.items():
        assert value != original, kind
    assert len(set(variants.values())) == len(variants)


def test_ca_certificate_order_does_not_matter(tmp_path: Path) -> None:
    folder = project_folder(tmp_path)
    a = CaCertificate("a.crt", fake_pem("a"), tmp_path)
    b = CaCertificate("b.crt", fake_pem("b"), tmp_path)
    assert hash_of(folder, certificates=[a, b]) == hash_of(folder, certificates=[b, a])


def test_ignored_files_and_launcher_config_do_not_change_the_hash(tmp_path: Path) -> None:
    folder = project_folder(tmp_path)
    (folder / ".dockerignore").write_text("*.log\ncache/\n")
    original = hash_of(folder)
    (folder / "build.log").write_text("noise")
    (folder / "cache").mkdir()
    (folder / "cache" / "blob").write_text("noise")
    (folder / "config.yaml").write_text("cpus: 4\n")
    assert hash_of(folder) == original
    assert [item.relative for item in context_files(folder)] == [".dockerignore", "tools/setup.sh"]


def test_copies_kept_for_review_do_not_change_the_hash(tmp_path: Path) -> None:
    folder = project_folder(tmp_path)
    original = hash_of(folder)
    kept = folder / "guard" / "20300101T000000Z" / ".git" / "hooks"
    kept.mkdir(parents=True)
    (kept / "pre-commit").write_text("#!/bin/sh\n")
    assert hash_of(folder) == original
    assert [item.relative for item in context_files(folder)] == ["tools/setup.sh"]


def test_short_hash_has_a_fixed_length() -> None:
    full = "0123456789abcdef" * 4
    assert short_hash(full) == full[:SHORT_HASH_LENGTH]
    assert 12 <= SHORT_HASH_LENGTH <= 16


@pytest.mark.parametrize(
    ("patterns", "path", "ignored"),
    [
        ("*.log", "a.log", True),
        ("*.log", "dir/a.log", False),
        ("**/*.log", "dir/a.log", True),
        ("**/*.log", "a.log", True),
        ("cache", "cache/deep/file", True),
        ("/cache/", "cache/file", True),
        ("cache\n!cache/keep", "cache/keep", False),
        ("cache\n!cache/keep", "cache/other", True),
        ("!a.txt\n*.txt", "a.txt", True),
        ("*.txt\n!a.txt", "a.txt", False),
        ("# comment\n\n", "x", False),
        ("dir/?.md", "dir/a.md", True),
        ("dir/?.md", "dir/ab.md", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
    ],
)
def test_dockerignore_rules(patterns: str, path: str, ignored: bool) -> None:
    assert is_ignored(path, parse_dockerignore(patterns)) is ignored


def test_host_certificates_are_split_and_deduplicated(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "bundle.crt").write_bytes(fake_pem("one") + b"junk\n" + fake_pem("two"))
    (host / "sub" / "copy.crt").write_bytes(fake_pem("one"))
    (host / "der.crt").write_bytes(b"\x30\x82\x01\x0a binary")
    (host / "note.txt").write_bytes(fake_pem("three"))
    found = collect_ca_certificates(True, [], host_dir=host)
    assert sorted(c.pem for c in found) == sorted([fake_pem("one"), fake_pem("two")])
    assert all(c.file_name.endswith(".crt") for c in found)
    assert collect_ca_certificates(False, [], host_dir=host) == []


def test_extra_certificates_are_added(tmp_path: Path) -> None:
    extra = tmp_path / "corp.pem"
    extra.write_bytes(fake_pem("corp"))
    found = collect_ca_certificates(False, [extra], host_dir=tmp_path / "none")
    assert [c.pem for c in found] == [fake_pem("corp")]
    assert found[0].source == extra


@pytest.mark.parametrize("kind", ["missing", "not pem", "garbage in pem armour", "directory"])
def test_bad_extra_certificate_is_a_usage_error_naming_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "corp.pem"
    if kind == "not pem":
        path.write_text("hello")
    elif kind == "garbage in pem armour":
        path.write_text("-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n")
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(UsageError) as raised:
        collect_ca_certificates(False, [path], host_dir=tmp_path / "none")
    assert str(path) in raised.value.message
    assert raised.value.hint


def test_build_context_layout(tmp_path: Path) -> None:
    folder = project_folder(tmp_path)
    (folder / "tools" / "setup.sh").chmod(0o755)
    (folder / "link").symlink_to("tools/setup.sh")
    target = tmp_path / "context"
    target.mkdir()
    ca = CaCertificate("host-x.crt", fake_pem("x"), tmp_path)
    write_build_context(target, "FROM x\n", context_files(folder), [ca], {"script": "#!/bin/sh\n"})
    assert (target / "Dockerfile").read_text() == "FROM x\n"
    assert (target / "tools" / "setup.sh").read_text() == "echo setup\n"
    assert (target / "tools" / "setup.sh").stat().st_mode & 0o111
    assert (target / "link").is_symlink()
    assert (target / "ca-certificates" / "host-x.crt").read_bytes() == fake_pem("x")
    assert (target / "script").read_text() == "#!/bin/sh\n"
