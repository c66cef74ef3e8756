"""The VM a run asks for: what in it makes an existing VM be recreated."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core import naming
from opencode_sandbox.core.lifecycle import VmAction, fingerprint, plan_vm
from opencode_sandbox.runtime.types import RuntimeKind, SandboxInfo, SandboxStatus
from opencode_sandbox.services.image_step import ReadyImage
from opencode_sandbox.services.run import RunLifecycle
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app

IMAGE = ReadyImage("opencode-sandbox/runner-spec-0123456789abcd:c0ffee", "sha256:" + "1" * 64,
                   {"PATH": "/usr/bin:/bin"}, "1.0.0", False)
HOME = "opencode-sandbox-home-spec-0123456789abcd-20300101000000"


def lifecycle(runtime: RuntimeKind, root: Path) -> RunLifecycle:
    app = make_app(FakeRuntime(runtime), root)
    app.settings = load_settings([], {}, {"runtime": runtime.value})
    return RunLifecycle(app)


def labelled_before_mirrored_modes(run: RunLifecycle, root: Path) -> str:
    """The fingerprint a VM was labelled with before the checkout mirrored its modes."""
    settings = run.app.settings
    return fingerprint({
        "runtime": settings.runtime.value,
        "cpus": settings.cpus,
        "memory_mib": settings.memory_mib,
        "env": IMAGE.env,
        "mounts": [["volume", HOME, "/home/dev"], ["bind", str(root), "/workspace"]],
        "ports": [4096],
        "dev_identity": [os.getuid(), os.getgid()],
    })


def stopped_vm(name: str) -> SandboxInfo:
    now = datetime.now(UTC)
    return SandboxInfo(name, SandboxStatus.STOPPED, IMAGE.reference, now, now)


def test_a_microvm_from_before_mirrored_modes_is_recreated_once(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.MICROSANDBOX, tmp_path)
    current = run._spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]
    vm = stopped_vm(run.vm)
    older = plan_vm(vm.status, IMAGE.digest, IMAGE.digest, labelled_before_mirrored_modes(run, tmp_path), current)
    assert older.action is VmAction.RECREATE
    assert plan_vm(vm.status, IMAGE.digest, IMAGE.digest, current, current).action is VmAction.START


def test_a_docker_vm_keeps_its_fingerprint(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.DOCKER, tmp_path)
    current = run._spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]
    assert current == labelled_before_mirrored_modes(run, tmp_path)
