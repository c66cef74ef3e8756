"""The microsandbox backend against the real msb (temporary MSB_HOME) and Docker engine.

Everything up to a VM boot runs here; boot paths are marked `kvm` and skip where microVMs
cannot boot.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from opencode_sandbox.core.naming import (
    LABEL_MANAGED,
    home_volume_name,
    managed_labels,
    runner_image,
    vm_name,
)
from opencode_sandbox.errors import (
    BootFailed,
    NotFound,
    NotOurs,
    RuntimeUnavailable,
    SandboxError,
)
from opencode_sandbox.runtime.base import Runtime
from opencode_sandbox.runtime.microsandbox import backend as microsandbox_backend
from opencode_sandbox.runtime.microsandbox.backend import MicrosandboxRuntime
from opencode_sandbox.runtime.microsandbox.cli import locate_msb
from opencode_sandbox.runtime.microsandbox.kvm import KvmCheck, probe_kvm
from opencode_sandbox.runtime.microsandbox.volume_files import OVERRIDE_STAT
from opencode_sandbox.runtime.types import Mount, MountKind, RuntimeKind, SandboxSpec

pytestmark = [pytest.mark.msb, pytest.mark.docker]

RUNNER_DOCKERFILE = """\
FROM debian:trixie-slim
LABEL org.opencode-sandbox.managed=true
RUN useradd -m -u 1000 -s /bin/sh dev \\
 && mkdir -p /home/dev/.config/tool \\
 && echo secret > /home/dev/.config/tool/token \\
 && chmod 600 /home/dev/.config/tool/token \\
 && ln -s .config/tool/token /home/dev/token-link \\
 && ln -s /etc/hostname /home/dev/absolute-link \\
 && chown -R dev:dev /home/dev \\
 && printf 'x' > /home/dev/root-setuid && chmod 4750 /home/dev/root-setuid \\
 && mkdir /home/dev/shared && chown 1234:4321 /home/dev/shared && chmod 2775 /home/dev/shared
USER dev
"""
FOREIGN_DOCKERFILE = "FROM debian:trixie-slim\nLABEL purpose=look-alike\n"


def _slug() -> str:
    return f"t{uuid.uuid4().hex[:6]}-{uuid.uuid4().hex[:14]}"


def _docker_build(tag: str, dockerfile: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(dockerfile)
    subprocess.run(["docker", "build", "-q", "-t", tag, str(folder)], check=True, capture_output=True)


@dataclass(frozen=True)
class Images:
    runner: str
    foreign: str


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Images]:
    runner = runner_image(_slug(), "c" + uuid.uuid4().hex[:11])
    foreign = f"opencode-sandbox-runner-{_slug()}:look-alike"
    folder = tmp_path_factory.mktemp("images")
    try:
        _docker_build(runner, RUNNER_DOCKERFILE, folder / "runner")
        _docker_build(foreign, FOREIGN_DOCKERFILE, folder / "foreign")
        yield Images(runner, foreign)
    finally:
        subprocess.run(["docker", "rmi", "-f", runner, foreign], capture_output=True, check=False)


def msb(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(locate_msb()), *args], capture_output=True, text=True, check=check)


def msb_json(*args: str) -> list[dict[str, object]]:
    return list(json.loads(msb(*args, "--format", "json", check=True).stdout))


@pytest.fixture
def runtime() -> Iterator[MicrosandboxRuntime]:
    assert "MSB_HOME" in os.environ  # the autouse fixture's temporary runtime home
    backend = MicrosandboxRuntime()
    yield backend
    for sandbox in msb_json("list"):
        msb("remove", "--force", "--quiet", str(sandbox["name"]))
    for volume in msb_json("volume", "list"):
        msb("volume", "remove", "--quiet", str(volume["name"]))
    for image in msb_json("image", "list"):
        msb("image", "remove", "--force", "--quiet", str(image["reference"]))


def docker_image_id(reference: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_backend_satisfies_the_runtime_interface(runtime: MicrosandboxRuntime) -> None:
    as_interface: Runtime = runtime
    assert as_interface.kind is RuntimeKind.MICROSANDBOX
    assert runtime.version().count(".") == 2


def test_availability_follows_the_kvm_probe() -> None:
    broken = MicrosandboxRuntime(kvm_probe=lambda: KvmCheck(False, "no vmx flag", "enable it"))
    with pytest.raises(RuntimeUnavailable) as raised:
        broken.check_available()
    assert "no vmx flag" in raised.value.message
    assert raised.value.hint == "enable it"
    MicrosandboxRuntime(kvm_probe=lambda: KvmCheck(True)).check_available()


def test_a_missing_msb_is_reported_as_unavailable(tmp_path: Path) -> None:
    from opencode_sandbox.runtime.microsandbox.cli import MsbCli

    backend = MicrosandboxRuntime(cli=MsbCli(tmp_path / "no-msb"))
    with pytest.raises(RuntimeUnavailable) as raised:
        backend.check_available()
    assert raised.value.hint


def test_load_streams_the_docker_image_and_skips_an_identical_one(
    runtime: MicrosandboxRuntime, images: Images, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = runtime.load_image(images.runner)
    assert loaded.reference == images.runner
    assert loaded.digest == docker_image_id(images.runner)
    assert loaded.labels[LABEL_MANAGED] == "true"
    assert [image.reference for image in runtime.list_images()] == [images.runner]

    def must_not_load(archive: object, reference: str, command: list[str]) -> None:
        raise AssertionError(f"{reference} was streamed again")

    monkeypatch.setattr(microsandbox_backend, "_load_archive", must_not_load)
    again = runtime.load_image(images.runner)
    assert again.digest == loaded.digest
    assert again.created_at == loaded.created_at


def test_a_missing_docker_image_is_not_found(runtime: MicrosandboxRuntime, unique: str) -> None:
    with pytest.raises(NotFound):
        runtime.load_image(f"opencode-sandbox/runner-{unique}:missing")
    assert msb_json("image", "list") == []


def test_foreign_images_are_neither_listed_nor_removed(runtime: MicrosandboxRuntime, images: Images) -> None:
    runtime.load_image(images.runner)
    subprocess.run(
        f"docker save {images.foreign} | {locate_msb()} load --quiet",
        shell=True,
        check=True,
        capture_output=True,
    )
    assert [image.reference for image in runtime.list_images()] == [images.runner]
    with pytest.raises(NotOurs):
        runtime.remove_image(images.foreign)
    assert images.foreign in {str(image["reference"]) for image in msb_json("image", "list")}

    runtime.remove_image(images.runner)
    assert runtime.list_images() == []
    with pytest.raises(NotFound):
        runtime.remove_image(images.runner)


def test_volumes_are_created_listed_and_removed(runtime: MicrosandboxRuntime) -> None:
    slug = _slug()
    name = home_volume_name(slug)
    created = runtime.create_volume(name, managed_labels(slug))
    assert created.name == name
    assert created.kind == "dir"
    assert created.labels == managed_labels(slug)
    assert created.created_at is not None and created.created_at.tzinfo is not None
    assert runtime.get_volume(name) == created
    assert runtime.list_volumes() == [created]

    with pytest.raises(SandboxError) as duplicate:
        runtime.create_volume(name, managed_labels(slug))
    assert "already exists" in duplicate.value.message

    runtime.remove_volume(name)
    assert runtime.get_volume(name) is None
    assert runtime.list_volumes() == []
    with pytest.raises(NotFound):
        runtime.remove_volume(name)


def test_foreign_volumes_are_never_listed_or_removed(runtime: MicrosandboxRuntime) -> None:
    name = home_volume_name(_slug())
    msb("volume", "create", "--quiet", name, check=True)
    assert runtime.list_volumes() == []
    with pytest.raises(NotOurs):
        runtime.get_volume(name)
    with pytest.raises(NotOurs):
        runtime.remove_volume(name)
    with pytest.raises(NotOurs):
        runtime.fill_volume_from_image(name, "debian:trixie-slim")
    with pytest.raises(NotOurs):
        runtime.create_volume(name, managed_labels("x"))
    assert name in {str(volume["name"]) for volume in msb_json("volume", "list")}


Entry = tuple[int, int, int, str | None, tuple[int, int, int] | None]


def _guest_stat(path: Path) -> tuple[int, int, int] | None:
    """The (uid, gid, mode) the guest sees, from msb's extended attribute; None without one."""
    try:
        value = os.getxattr(path, OVERRIDE_STAT, follow_symlinks=False)
    except OSError:
        return None
    version, uid, gid, mode, _ = struct.unpack("<IIIII", value)
    assert version == 1
    return uid, gid, mode


def _tree(folder: Path) -> dict[str, Entry]:
    """Relative path -> (host uid, gid, mode, symlink target, guest stat) below `folder`."""
    entries: dict[str, Entry] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        target = os.readlink(path) if path.is_symlink() else None
        entries[str(path.relative_to(folder))] = (info.st_uid, info.st_gid, info.st_mode, target, _guest_stat(path))
    return entries


def _volume_folder(name: str) -> Path:
    for line in msb("volume", "inspect", name, check=True).stdout.splitlines():
        if line.startswith("Path:"):
            return Path(line.partition(":")[2].strip())
    raise AssertionError(f"no path for volume {name}")


def test_fill_and_copy_keep_owners_modes_and_symlinks(runtime: MicrosandboxRuntime, images: Images) -> None:
    """msb lets the guest reach only files of the invoking host user: the image's owners and
    modes live in msb's extended attribute, the host files belong to the invoking user."""
    slug = _slug()
    first = home_volume_name(slug)
    runtime.create_volume(first, managed_labels(slug))
    runtime.fill_volume_from_image(first, images.runner)
    folder = _volume_folder(first)
    tree = _tree(folder)
    invoking = (os.getuid(), os.getgid())

    assert {entry[:2] for entry in tree.values()} == {invoking}
    assert tree[".config/tool/token"][4] == (1000, 1000, stat.S_IFREG | 0o600)
    assert stat.S_IMODE(tree[".config/tool/token"][2]) == 0o600
    assert (folder / ".config/tool/token").read_text() == "secret\n"
    assert tree[".config"][4] == (1000, 1000, stat.S_IFDIR | 0o755)
    assert tree["token-link"][3] == ".config/tool/token"
    assert tree["absolute-link"][3] == "/etc/hostname"
    assert tree["root-setuid"][4] == (0, 0, stat.S_IFREG | 0o4750)
    assert tree["shared"][4] == (1234, 4321, stat.S_IFDIR | 0o2775)
    root = _guest_stat(folder)
    assert root is not None and root[:2] == (1000, 1000) and stat.S_ISDIR(root[2])

    with pytest.raises(SandboxError) as not_empty:
        runtime.fill_volume_from_image(first, images.runner)
    assert "not empty" in not_empty.value.message

    second_slug = _slug()
    second = home_volume_name(second_slug)
    runtime.create_volume(second, managed_labels(second_slug))
    target = _volume_folder(second)
    (target / "kept-file").write_text("kept")
    (target / ".config").mkdir()
    (target / ".config" / "other").write_text("other")
    runtime.copy_volume(first, second)
    copied = _tree(target)
    assert {path: entry for path, entry in copied.items() if path in tree} == tree
    assert (target / "kept-file").read_text() == "kept"
    assert (target / ".config" / "other").read_text() == "other"


def test_fill_from_a_missing_image_is_not_found(runtime: MicrosandboxRuntime) -> None:
    slug = _slug()
    name = home_volume_name(slug)
    runtime.create_volume(name, managed_labels(slug))
    with pytest.raises(NotFound):
        runtime.fill_volume_from_image(name, f"opencode-sandbox/runner-{slug}:missing")
    assert list(_volume_folder(name).iterdir()) == []


def _spec(slug: str, image: str, volume: str, workspace: Path) -> SandboxSpec:
    return SandboxSpec(
        name=vm_name(slug),
        image=image,
        cpus=1,
        memory_mib=512,
        env={"GREETING": "hello world", "EQUALS": "a=b"},
        labels=managed_labels(slug),
        mounts=(
            Mount(MountKind.VOLUME, volume, "/home/dev"),
            Mount(MountKind.BIND, str(workspace), "/workspace"),
        ),
        published_ports=(4096,),
    )


def test_creating_from_an_image_that_is_not_loaded_leaves_nothing(runtime: MicrosandboxRuntime, tmp_path: Path) -> None:
    slug = _slug()
    with pytest.raises(BootFailed) as raised:
        runtime.create_sandbox(_spec(slug, f"opencode-sandbox/runner-{slug}:x", "v", tmp_path))
    assert "not loaded" in raised.value.message
    assert msb_json("list") == []


kvm_check = probe_kvm()


@pytest.mark.skipif(kvm_check.ok, reason="microVMs boot on this host")
def test_a_failed_boot_raises_and_leaves_no_record(
    runtime: MicrosandboxRuntime, images: Images, tmp_path: Path
) -> None:
    slug = _slug()
    volume = home_volume_name(slug)
    runtime.load_image(images.runner)
    runtime.create_volume(volume, managed_labels(slug))
    with pytest.raises(BootFailed) as raised:
        runtime.create_sandbox(_spec(slug, images.runner, volume, tmp_path))
    assert vm_name(slug) in raised.value.message
    assert "KVM_EXIT_INTERNAL_ERROR" in raised.value.message or "vmx" in raised.value.message
    assert raised.value.hint is not None and "--runtime docker" in raised.value.hint
    assert msb_json("list") == []
    assert runtime.get_sandbox(vm_name(slug)) is None
    assert runtime.get_volume(volume) is not None  # volumes outlive a failed sandbox


def test_foreign_sandboxes_are_never_listed_or_removed_and_protect_their_volumes(
    runtime: MicrosandboxRuntime, images: Images, tmp_path: Path
) -> None:
    slug = _slug()
    volume = home_volume_name(slug)
    runtime.load_image(images.runner)
    runtime.create_volume(volume, managed_labels(slug))
    look_alike = vm_name(_slug())
    # Boots or fails to boot: either way msb keeps a record. It inherits the runner image's
    # managed label, so only its slug label (not matching its name) tells it apart.
    msb(
        "create", images.runner, "--name", look_alike, "--pull", "never", "--quiet",
        "--label", "org.opencode-sandbox.slug=x", "--mount-named", f"{volume}:/data",
    )  # fmt: skip
    assert look_alike in {str(entry["name"]) for entry in msb_json("list")}

    assert runtime.list_sandboxes() == []
    with pytest.raises(NotOurs):
        runtime.get_sandbox(look_alike)
    for action in (runtime.remove_sandbox, runtime.stop_sandbox, runtime.kill_sandbox):
        with pytest.raises(NotOurs):
            action(look_alike)
    with pytest.raises(SandboxError) as in_use:
        runtime.remove_volume(volume)
    assert look_alike in in_use.value.message
    assert look_alike in {str(entry["name"]) for entry in msb_json("list")}
    assert runtime.get_volume(volume) is not None


def test_operations_on_a_missing_sandbox_are_not_found(runtime: MicrosandboxRuntime) -> None:
    name = vm_name(_slug())
    assert runtime.get_sandbox(name) is None
    for action in (runtime.start_sandbox, runtime.remove_sandbox, runtime.kill_sandbox):
        with pytest.raises(NotFound):
            action(name)
    with pytest.raises(NotFound):
        runtime.host_port(name, 4096)
    with pytest.raises(NotFound):
        runtime.exec(name, ["true"])


@pytest.mark.kvm
@pytest.mark.skipif(not kvm_check.ok, reason=f"microVMs cannot boot here: {kvm_check.cause}")
def test_a_booted_sandbox_runs_commands_and_publishes_its_port(
    runtime: MicrosandboxRuntime, images: Images, tmp_path: Path
) -> None:
    slug = _slug()
    volume = home_volume_name(slug)
    runtime.load_image(images.runner)
    runtime.create_volume(volume, managed_labels(slug))
    runtime.fill_volume_from_image(volume, images.runner)
    (tmp_path / "marker").write_text("from the host\n")
    info = runtime.create_sandbox(_spec(slug, images.runner, volume, tmp_path))
    assert info.status.is_active
    assert [sandbox.name for sandbox in runtime.list_sandboxes()] == [info.name]

    result = runtime.exec(info.name, ["sh", "-c", 'cat marker; echo "$GREETING"; id -un; pwd'])
    assert result.exit_code == 0
    assert result.stdout.split("\n")[:4] == ["from the host", "hello world", "dev", "/workspace"]
    assert runtime.exec(info.name, ["cat", "/home/dev/token-link"]).stdout == "secret\n"
    assert runtime.exec(info.name, ["cat"], stdin=b"piped").stdout == "piped"
    assert runtime.exec(info.name, ["sh", "-c", "exit 7"]).exit_code == 7
    assert runtime.attach(info.name, ["sh", "-c", "exit 5"], tty=False) == 5
    assert 0 < runtime.host_port(info.name, 4096) < 65536

    runtime.stop_sandbox(info.name)
    stopped = runtime.get_sandbox(info.name)
    assert stopped is not None and not stopped.status.is_active
    runtime.start_sandbox(info.name)
    runtime.kill_sandbox(info.name)
    runtime.remove_sandbox(info.name)
    assert runtime.get_sandbox(info.name) is None
    assert runtime.get_volume(volume) is not None


@pytest.mark.parametrize("kind", ["pipe", "in memory"])
def test_the_loader_reads_a_saved_image_from_a_pipe_or_from_memory(kind: str, tmp_path: Path) -> None:
    import io

    payload = os.urandom(300_000)  # more than a pipe holds
    target = tmp_path / "loaded"
    command = ["sh", "-c", f"cat > '{target}'"]
    if kind == "pipe":
        with subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as saver:
            assert saver.stdin is not None and saver.stdout is not None
            feed = saver.stdin

            def write_all() -> None:
                with feed:
                    feed.write(payload)

            writer = threading.Thread(target=write_all)
            writer.start()
            failure = microsandbox_backend._load_archive(saver.stdout, "img", command)
            writer.join()
    else:
        failure = microsandbox_backend._load_archive(io.BytesIO(payload), "img", command)
    assert failure is None
    assert target.read_bytes() == payload
    refused = microsandbox_backend._load_archive(io.BytesIO(payload), "img", ["sh", "-c", "echo no room >&2; exit 3"])
    assert refused is not None and "msb load of img failed: no room" in refused.message
