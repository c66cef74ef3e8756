"""The pure parts of a VM's network holder: its arguments and how a VM is matched with it."""

from __future__ import annotations

from opencode_sandbox.runtime.docker.network_holder import (
    holder_name,
    holder_of,
    is_holder_of,
    joined_current_namespace,
    run_args,
)

SLUG = "a-0123456789abcd"
VM = f"opencode-sandbox-vm-{SLUG}"
HOLDER_ID = "b775a6817d0ee75a62e5d11714fe47cec964713ea1f9242a56a489dee407dc20"


def vm_document(mode: str, started: str = "2026-12-04T10:00:00.5Z") -> dict[str, object]:
    return {"Name": f"/{VM}", "HostConfig": {"NetworkMode": mode}, "State": {"StartedAt": started}}


def holder_document(started: str = "2026-12-04T10:00:00.123456789Z", holder_id: str = HOLDER_ID) -> dict[str, object]:
    return {"Name": f"/{holder_name(SLUG)}", "Id": holder_id, "State": {"Status": "running", "StartedAt": started}}


def test_the_holder_publishes_the_vms_ports_and_keeps_only_net_admin() -> None:
    args = run_args(SLUG, "opencode-sandbox/netfilter:latest", f"opencode-sandbox-net-{SLUG}", (4096, 3000),
                    {3000: 8080}, {"opencode-sandbox-proxy": "172.30.0.2"}, {"org.opencode-sandbox.owner-uid": "1001"})
    joined = " ".join(args)
    assert args[:5] == ["run", "--detach", "--pull=never", "--name", holder_name(SLUG)]
    assert f"--network opencode-sandbox-net-{SLUG}" in joined
    assert "--cap-drop ALL --cap-add NET_ADMIN --security-opt no-new-privileges --read-only" in joined
    assert [args[index + 1] for index, arg in enumerate(args) if arg == "--publish"] == [
        "127.0.0.1::4096/tcp", "127.0.0.1:8080:3000/tcp"]
    assert "--add-host opencode-sandbox-proxy:172.30.0.2" in joined
    assert "org.opencode-sandbox.kind=network-holder" in args and "org.opencode-sandbox.owner-uid=1001" in args
    assert args[-4:] == ["--entrypoint", "sleep", "opencode-sandbox/netfilter:latest", "infinity"]


def test_a_vm_joins_its_holder_by_the_id_the_engine_recorded() -> None:
    joined = vm_document(f"container:{HOLDER_ID}")
    assert holder_of(joined) == holder_name(SLUG)
    assert holder_of(vm_document(f"opencode-sandbox-net-{SLUG}")) is None, "a VM with a network of its own"
    assert holder_of({**joined, "Name": "/someone-else"}) is None
    assert is_holder_of(joined, holder_document())
    assert not is_holder_of(joined, holder_document(holder_id="c" * 64)), "a holder made again is another one"


def test_a_vm_running_since_before_its_holder_started_again_sits_in_the_old_namespace() -> None:
    joined = f"container:{HOLDER_ID}"
    assert joined_current_namespace(vm_document(joined, "2026-12-04T10:00:00.5Z"), holder_document())
    assert not joined_current_namespace(vm_document(joined, "2026-12-04T09:59:59.9Z"), holder_document())
    assert not joined_current_namespace(vm_document(joined, "0001-01-01T00:00:00Z"), holder_document())
    assert not joined_current_namespace(vm_document("container:" + "c" * 64), holder_document())
