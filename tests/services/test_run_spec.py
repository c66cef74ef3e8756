"""The VM a run asks for: what in it makes an existing VM be recreated."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_sandbox.config.loader import load_settings
from opencode_sandbox.core import naming
from opencode_sandbox.core.egress import EgressPolicy, Profile
from opencode_sandbox.core.lifecycle import VmAction, fingerprint, plan_vm
from opencode_sandbox.errors import UsageError
from opencode_sandbox.runtime.docker.description import SECCOMP_PROFILE_DIGEST
from opencode_sandbox.runtime.types import Mount, MountKind, RuntimeKind, SandboxInfo, SandboxSpec, SandboxStatus
from opencode_sandbox.services.image_step import ReadyImage
from opencode_sandbox.services.start.pipeline import Start
from opencode_sandbox.services.start.spec import sandbox_spec, vm_shape
from tests.fakes.runtime import FakeRuntime
from tests.services.app_fakes import make_app, messages

IMAGE = ReadyImage("opencode-sandbox/runner-spec-0123456789abcd:c0ffee", "sha256:" + "1" * 64,
                   {"PATH": "/usr/bin:/bin"}, "1.0.0", False)
HOME = "opencode-sandbox-home-spec-0123456789abcd-20300101000000"


class StartOf(Start):
    """A start whose checks and spec run on their own."""

    host_mounts: tuple[Mount, ...] = ()

    def check(self) -> None:
        self.host_mounts = self._check().host_mounts

    def spec(self, image: ReadyImage, home: str) -> SandboxSpec:
        shape = vm_shape(self.app, self.host_mounts, self.git_layout)
        return sandbox_spec(self.app, shape, image, home, self.git_layout is not None)


def lifecycle(runtime: RuntimeKind, root: Path, **flags: str) -> StartOf:
    app = make_app(FakeRuntime(runtime), root)
    app.settings = load_settings([], {}, {"runtime": runtime.value, **flags})
    return StartOf(app)


def labelled_before_network_policy(run: Start, root: Path) -> str:
    """The fingerprint a VM was labelled with before it had a network policy."""
    values = labelled_values_before_mirrored_modes(run, root)
    if run.app.settings.runtime is RuntimeKind.MICROSANDBOX:
        values["checkout_modes"] = "mirrored"
    return fingerprint(values)


def labelled_before_mirrored_modes(run: Start, root: Path) -> str:
    """The fingerprint a VM was labelled with before the checkout mirrored its modes."""
    return fingerprint(labelled_values_before_mirrored_modes(run, root))


def labelled_values_before_mirrored_modes(run: Start, root: Path) -> dict[str, object]:
    settings = run.app.settings
    return {
        "runtime": settings.runtime.value,
        "cpus": settings.cpus,
        "memory_mib": settings.memory_mib,
        "env": IMAGE.env,
        "mounts": [["volume", HOME, "/home/dev"], ["bind", str(root), "/workspace"]],
        "ports": [4096],
        "dev_identity": [os.getuid(), os.getgid()],
    }


def stopped_vm(name: str) -> SandboxInfo:
    now = datetime.now(UTC)
    return SandboxInfo(name, SandboxStatus.STOPPED, IMAGE.reference, now, now)


CONFINED = {"dev": "never-root", "pids_limit": 4096, "seccomp": SECCOMP_PROFILE_DIGEST}
BEFORE_SECCOMP = {"dev": "never-root", "pids_limit": 4096}


def test_a_container_from_before_its_confinement_is_recreated_once(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.DOCKER, tmp_path)
    current = run.spec(IMAGE, HOME)
    assert current.pids_limit == 4096 and current.privileged is False
    before = fingerprint({**labelled_values_before_mirrored_modes(run, tmp_path),
                          "network": EgressPolicy(Profile.PUBLIC).fingerprint_value()})
    vm = stopped_vm(run.vm)
    label = current.labels[naming.LABEL_FINGERPRINT]
    assert plan_vm(vm.status, IMAGE.digest, IMAGE.digest, before, label).action is VmAction.RECREATE
    assert plan_vm(vm.status, IMAGE.digest, IMAGE.digest, label, label).action is VmAction.START
    run.app.settings = run.app.settings._replace(pids_limit=512)
    assert run.spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT] != label, "a new limit recreates the container"


def test_a_container_from_before_its_seccomp_profile_is_recreated_once(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.DOCKER, tmp_path)
    label = run.spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]
    before = fingerprint({**labelled_values_before_mirrored_modes(run, tmp_path),
                          "network": EgressPolicy(Profile.PUBLIC).fingerprint_value(), "confinement": BEFORE_SECCOMP,
                          "namespace": "network-holder"})
    assert plan_vm(SandboxStatus.RUNNING, IMAGE.digest, IMAGE.digest, before, label).action is VmAction.RECREATE


def test_a_container_with_a_network_of_its_own_is_recreated_once_in_a_network_holder(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.DOCKER, tmp_path)
    label = run.spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]
    before = fingerprint({**labelled_values_before_mirrored_modes(run, tmp_path),
                          "network": EgressPolicy(Profile.PUBLIC).fingerprint_value(),
                          "confinement": BEFORE_SECCOMP})
    assert plan_vm(SandboxStatus.STOPPED, IMAGE.digest, IMAGE.digest, before, label).action is VmAction.RECREATE


def test_a_microvm_from_before_mirrored_modes_is_recreated_once(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.MICROSANDBOX, tmp_path)
    current = run.spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]
    vm = stopped_vm(run.vm)
    older = plan_vm(vm.status, IMAGE.digest, IMAGE.digest, labelled_before_mirrored_modes(run, tmp_path), current)
    assert older.action is VmAction.RECREATE
    assert plan_vm(vm.status, IMAGE.digest, IMAGE.digest, current, current).action is VmAction.START


def test_a_vm_from_before_the_network_policy_is_recreated_once(tmp_path: Path) -> None:
    for kind in RuntimeKind:
        run = lifecycle(kind, tmp_path)
        current = run.spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]
        older = labelled_before_network_policy(run, tmp_path)
        assert plan_vm(SandboxStatus.STOPPED, IMAGE.digest, IMAGE.digest, older, current).action is VmAction.RECREATE


def test_the_spec_carries_the_effective_policy(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.DOCKER, tmp_path, network="none")
    assert run.spec(IMAGE, HOME).network == EgressPolicy(Profile.NONE)


def test_a_policy_change_recreates_the_vm_and_rule_order_does_not(tmp_path: Path) -> None:
    def labelled(**flags: str) -> str:
        return lifecycle(RuntimeKind.DOCKER, tmp_path, **flags).spec(IMAGE, HOME).labels[naming.LABEL_FINGERPRINT]

    public = labelled()
    assert labelled(network="public") == public
    for changed in (labelled(network="none"), labelled(network="all"), labelled(**{"egress-deny": "10.1.0.0/16"})):
        assert plan_vm(SandboxStatus.RUNNING, IMAGE.digest, IMAGE.digest, public, changed).action is VmAction.RECREATE
    in_order = labelled(**{"egress-deny": "10.1.0.0/16,10.2.0.0/16"})
    assert in_order == labelled(**{"egress-deny": "10.2.0.0/16,10.1.0.0/16"})


def test_all_is_said_aloud_at_every_start_and_dind_is_refused_on_docker(tmp_path: Path) -> None:
    open_network = lifecycle(RuntimeKind.DOCKER, tmp_path, network="all")
    open_network.check()
    assert "network: all: the VM reaches everything this host reaches" in messages(open_network.app)
    quiet = lifecycle(RuntimeKind.DOCKER, tmp_path)
    quiet.check()
    assert "network:" not in messages(quiet.app)
    lifecycle(RuntimeKind.DOCKER, tmp_path, network="allowlist").check()
    lifecycle(RuntimeKind.MICROSANDBOX, tmp_path, network="allowlist").check()
    with pytest.raises(UsageError, match="Docker-in-Docker"):
        lifecycle(RuntimeKind.DOCKER, tmp_path, dind="true").check()
    lifecycle(RuntimeKind.DOCKER, tmp_path, dind="true", network="all").check()


CA = ("-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n")


def test_the_extra_certificates_go_to_the_runtime_only_when_it_intercepts_the_vms_https(tmp_path: Path) -> None:
    extra = tmp_path / "corporate.pem"
    extra.write_text(CA)
    flags = {"trust-host-ca": "false", "extra-ca-certificates": str(extra)}
    for runtime in (RuntimeKind.DOCKER, RuntimeKind.MICROSANDBOX):
        intercepted = lifecycle(runtime, tmp_path, network="allowlist", **flags).spec(IMAGE, HOME)
        assert intercepted.ca_certificates == (CA.encode(),)
        assert intercepted.ca_certificate_files == (str(extra),)
        direct = lifecycle(runtime, tmp_path, network="public", **flags).spec(IMAGE, HOME)
        assert (direct.ca_certificates, direct.ca_certificate_files) == ((), ())


def test_mounts_and_ports_reach_the_spec_and_a_change_of_either_recreates_the_vm(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "link").symlink_to(shared)
    checkout = tmp_path / "checkout"
    checkout.mkdir()

    def spec(**flags: object) -> SandboxSpec:
        run = lifecycle(RuntimeKind.DOCKER, checkout)
        run.app.settings = load_settings([], {}, {"runtime": "docker", **flags})
        run.check()
        return run.spec(IMAGE, HOME)

    plain = spec()
    assert plain.published_ports == (4096,) and plain.host_ports == {}
    assert plain.labels[naming.LABEL_FINGERPRINT] == fingerprint(
        {**labelled_values_before_mirrored_modes(lifecycle(RuntimeKind.DOCKER, checkout), checkout),
         "network": EgressPolicy(Profile.PUBLIC).fingerprint_value(),
         "confinement": CONFINED, "namespace": "network-holder"})  # unchanged without mounts or ports
    mounted = spec(mounts=[f"{tmp_path / 'link'}:/mnt/shared"], ports=["3000", "8080:80"])
    assert mounted.mounts[2:] == (Mount(MountKind.BIND, str(shared), "/mnt/shared", True),)  # the link resolved
    assert mounted.published_ports == (4096, 3000, 80) and mounted.host_ports == {80: 8080}
    labels = [plain, mounted, spec(mounts=[f"{shared}:/mnt/shared:rw"], ports=["3000", "8080:80"]),
              spec(mounts=[f"{shared}:/mnt/shared"], ports=["3000", "8081:80"]),
              spec(mounts=[f"{shared}:/mnt/shared"], ports=["3000"])]
    fingerprints = [each.labels[naming.LABEL_FINGERPRINT] for each in labels]
    assert len(set(fingerprints)) == len(fingerprints)
    assert spec(mounts=[f"{shared}:/mnt/shared"], ports=["3000", "8080:80"]).labels == mounted.labels


def test_a_mount_whose_path_passes_through_a_folder_the_vm_may_write_is_refused(tmp_path: Path) -> None:
    checkout, shared, elsewhere = tmp_path / "checkout", tmp_path / "shared", tmp_path / "elsewhere"
    for folder in (checkout / "data", shared / "inner", elsewhere):
        folder.mkdir(parents=True)
    (checkout / "to-elsewhere").symlink_to(elsewhere)  # what the VM would put in place of a folder
    (tmp_path / "to-checkout").symlink_to(checkout)
    refused = {
        "inside the checkout": [f"{checkout / 'data'}:/mnt/data"],
        "a link the checkout holds": [f"{checkout / 'to-elsewhere'}:/mnt/data"],
        "a link to the checkout on the way": [f"{tmp_path / 'to-checkout' / 'data'}:/mnt/data"],
        "inside a mount with :rw": [f"{shared}:/mnt/shared:rw", f"{shared / 'inner'}:/mnt/inner"],
    }
    for case, mounts in refused.items():
        run = lifecycle(RuntimeKind.DOCKER, checkout)
        run.app.settings = load_settings([], {}, {"runtime": "docker", "mounts": mounts})
        with pytest.raises(UsageError) as caught:
            run.check()
        assert "which the VM may write" in caught.value.message, case
        assert run.app.runtime.calls == [], case  # type: ignore[attr-defined]
    run = lifecycle(RuntimeKind.DOCKER, checkout)
    run.app.settings = load_settings([], {}, {"runtime": "docker", "mounts": [
        f"{shared}:/mnt/shared", f"{shared / 'inner'}:/mnt/inner", f"{elsewhere}:/mnt/elsewhere:rw"]})
    run.check()  # read-only mounts may nest; a folder outside every writable one is fine
    assert [mount.source for mount in run.host_mounts] == [str(shared), str(shared / "inner"), str(elsewhere)]


def test_a_missing_mount_source_stops_the_start_before_anything_runs(tmp_path: Path) -> None:
    run = lifecycle(RuntimeKind.DOCKER, tmp_path)
    run.app.settings = load_settings([], {}, {"runtime": "docker", "mounts": [f"{tmp_path}/absent:/mnt/x"]})
    with pytest.raises(UsageError) as caught:
        run.check()
    assert caught.value.message == (f"mount '{tmp_path}/absent:/mnt/x' (flag --mounts): {tmp_path}/absent does not "
                                    "exist on this host")
    assert run.app.runtime.calls == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("runtime", [RuntimeKind.DOCKER, RuntimeKind.MICROSANDBOX])
def test_the_guarded_paths_that_exist_are_read_only_and_part_of_the_fingerprint(
    runtime: RuntimeKind, tmp_path: Path,
) -> None:
    from opencode_sandbox.runtime.types import Mount, MountKind

    (tmp_path / ".opencode-sandbox").mkdir()
    run = lifecycle(runtime, tmp_path)
    before = run.spec(IMAGE, HOME)
    assert [mount for mount in before.mounts if mount.readonly] == [
        Mount(MountKind.BIND, str(tmp_path / ".opencode-sandbox"), "/workspace/.opencode-sandbox", True),
    ]
    (tmp_path / ".envrc").write_text("export A=1\n")
    after = lifecycle(runtime, tmp_path).spec(IMAGE, HOME)  # the next run
    assert after.labels[naming.LABEL_FINGERPRINT] != before.labels[naming.LABEL_FINGERPRINT]


@pytest.mark.parametrize("runtime", [RuntimeKind.DOCKER, RuntimeKind.MICROSANDBOX])
def test_the_guarded_paths_the_review_found_below_the_top_are_read_only_too_up_to_a_limit(
    runtime: RuntimeKind, tmp_path: Path,
) -> None:
    from opencode_sandbox.services.guard.reviews import review
    from opencode_sandbox.services.start.spec import BELOW_READ_ONLY_LIMIT

    for index in range(BELOW_READ_ONLY_LIMIT + 4):
        (tmp_path / "packages" / f"p{index:02}").mkdir(parents=True)
        (tmp_path / "packages" / f"p{index:02}" / ".envrc").write_text("export A=1\n")
    (tmp_path / "zsite" / ".vscode").mkdir(parents=True)
    (tmp_path / "zsite" / ".vscode" / "tasks.json").write_text("{}\n")
    run = lifecycle(runtime, tmp_path)
    review(run.app, vm_may_write_after=True)  # what a start does before it asks for the VM
    read_only = [mount.target for mount in run.spec(IMAGE, HOME).mounts if mount.readonly and mount.source != str(
        tmp_path)]
    below = [target for target in read_only if target.startswith(("/workspace/packages/", "/workspace/zsite/"))]
    assert len(below) == BELOW_READ_ONLY_LIMIT
    assert "/workspace/zsite/.vscode" in below, "the shallowest first"


def _git(cwd: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.mark.parametrize("runtime", [RuntimeKind.DOCKER, RuntimeKind.MICROSANDBOX])
def test_a_git_checkout_gets_a_git_directory_of_its_own_and_only_the_hosts_objects_read_only(
    runtime: RuntimeKind, tmp_path: Path,
) -> None:
    from opencode_sandbox.core.vm_git import HOST_OBJECTS, VM_GIT_DIR

    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "commit", "-q", "--allow-empty", "-m", "init")
    (root / ".git" / "hooks").mkdir(exist_ok=True)
    run = lifecycle(runtime, root)
    spec = run.spec(IMAGE, HOME)
    state = str(run.project_dir / "git")
    git_mounts = [mount for mount in spec.mounts if ".git" in mount.target or mount.target == HOST_OBJECTS]
    assert git_mounts == [Mount(MountKind.BIND, state, "/workspace/.git"),
                          Mount(MountKind.BIND, str(root / ".git" / "objects"), HOST_OBJECTS, True)]
    assert not any(mount.source.startswith(str(root / ".git")) and not mount.readonly for mount in spec.mounts)
    assert spec.labels[naming.LABEL_GIT] == naming.GIT_OWN

    tree = tmp_path / "tree"
    _git(root, "worktree", "add", "-q", str(tree))
    worktree_spec = lifecycle(runtime, tree).spec(IMAGE, HOME)
    assert [(mount.target, mount.readonly) for mount in worktree_spec.mounts
            if ".git" in mount.target or mount.target.startswith("/opt/")] == [
        (VM_GIT_DIR, False), ("/workspace/.git", True), (HOST_OBJECTS, True)]


@pytest.mark.parametrize("runtime", [RuntimeKind.DOCKER, RuntimeKind.MICROSANDBOX])
def test_the_isolated_vm_mounts_nothing_of_the_checkout_and_a_switch_recreates_it(
        tmp_path: Path, runtime: RuntimeKind) -> None:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".envrc").write_text("use nix\n")
    shared = lifecycle(runtime, root)
    isolated = lifecycle(runtime, root, workspace="isolated")
    shared_spec, isolated_spec = shared.spec(IMAGE, HOME), isolated.spec(IMAGE, HOME)
    assert any(mount.source == str(root) for mount in shared_spec.mounts), "the shared mode mounts the checkout"
    assert [(mount.kind, mount.target) for mount in isolated_spec.mounts] == [
        (MountKind.VOLUME, "/home/dev"), (MountKind.VOLUME, "/workspace")]
    assert isolated_spec.mounts[1].source == naming.work_volume_name(isolated.slug)
    assert not any(str(root) in mount.source or str(isolated.project_dir) in mount.source
                   for mount in isolated_spec.mounts), "nothing of the checkout or its git directory is mounted"
    assert isolated_spec.labels[naming.LABEL_WORKSPACE] == "isolated"
    assert naming.LABEL_GIT not in isolated_spec.labels, "the shared mode's sync never reads this VM"
    assert shared_spec.labels[naming.LABEL_FINGERPRINT] != isolated_spec.labels[naming.LABEL_FINGERPRINT]
