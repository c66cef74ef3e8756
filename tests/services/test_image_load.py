"""Loading the built runner image into the runtime: only when it is not there yet, as a step."""

from __future__ import annotations

import io

import pytest

from opencode_sandbox.errors import NotFound
from opencode_sandbox.runtime.types import RuntimeKind
from opencode_sandbox.services.image_step import load_into_runtime
from opencode_sandbox.ui.console import Console, LogLevel
from tests.fakes.runtime import FakeNode, FakeRuntime, dev_home_files

IMAGE = "opencode-sandbox/runner-load-0123456789abcd:c0ffee"


def console() -> Console:
    return Console(LogLevel.INFO, stream=io.StringIO())


def shown(on: Console) -> str:
    stream = on.stream
    assert isinstance(stream, io.StringIO)
    return stream.getvalue()


def loads(runtime: FakeRuntime) -> int:
    return sum(1 for operation, _ in runtime.calls if operation == "load_image")


def test_microsandbox_loads_a_new_image_as_a_step() -> None:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    built = runtime.add_docker_image(IMAGE)
    on = console()
    loaded = load_into_runtime(runtime, on, IMAGE)
    assert loaded.loaded_now
    assert loaded.image.digest == built.digest
    assert runtime.images[IMAGE] is built
    assert loads(runtime) == 1
    assert shown(on) == f"Loading {IMAGE} into microsandbox...\n"


def test_an_image_already_loaded_is_neither_loaded_nor_announced() -> None:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    runtime.add_docker_image(IMAGE)
    load_into_runtime(runtime, console(), IMAGE)
    on = console()
    again = load_into_runtime(runtime, on, IMAGE)
    assert not again.loaded_now
    assert again.image.digest == runtime.docker_images[IMAGE].digest
    assert loads(runtime) == 1
    assert shown(on) == ""


def test_a_rebuilt_image_under_the_same_reference_is_loaded_again() -> None:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    runtime.add_docker_image(IMAGE)
    first = load_into_runtime(runtime, console(), IMAGE)
    files = {**dev_home_files(), "/home/dev/new.txt": FakeNode("file", "dev", 0o644, "rebuilt\n")}
    rebuilt = runtime.add_docker_image(IMAGE, files)
    on = console()
    second = load_into_runtime(runtime, on, IMAGE)
    assert second.loaded_now
    assert second.image.digest == rebuilt.digest != first.image.digest
    assert loads(runtime) == 2
    assert "Loading" in shown(on)


def test_the_docker_runtime_runs_built_images_without_a_load() -> None:
    runtime = FakeRuntime(RuntimeKind.DOCKER)
    built = runtime.add_docker_image(IMAGE)
    on = console()
    loaded = load_into_runtime(runtime, on, IMAGE)
    assert (loaded.loaded_now, loaded.image.digest) == (False, built.digest)
    assert loads(runtime) == 0
    assert shown(on) == ""


def test_the_warning_level_loads_silently() -> None:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    runtime.add_docker_image(IMAGE)
    on = Console(LogLevel.WARNING, stream=io.StringIO())
    assert load_into_runtime(runtime, on, IMAGE).loaded_now
    assert shown(on) == ""


def test_an_image_missing_from_the_engine_is_not_found() -> None:
    runtime = FakeRuntime(RuntimeKind.MICROSANDBOX)
    with pytest.raises(NotFound):
        load_into_runtime(runtime, console(), IMAGE)
    assert loads(runtime) == 0
