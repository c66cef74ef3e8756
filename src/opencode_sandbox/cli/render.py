"""The one renderer of results: each command's records as a table or text, or as JSON in one
envelope, `{"command": ..., "result": ...}` (docs/commands.md). Tables show local time; JSON
carries UTC timestamps in ISO 8601 and sizes in bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.guard import shown
from opencode_sandbox.core.guard_privileged import PUT_BACK_HINT
from opencode_sandbox.core.naming import slug_of_home_volume, slug_of_image, slug_of_task, slug_of_vm
from opencode_sandbox.core.ports import DAEMON_PORT
from opencode_sandbox.core.units import format_size
from opencode_sandbox.services.network_log import KEPT, why
from opencode_sandbox.ui.console import Console, style
from opencode_sandbox.ui.table import Cell, local_time, render, status_cell

if TYPE_CHECKING:
    from opencode_sandbox.core.egress import EgressPolicy
    from opencode_sandbox.runtime.types import Refusal, SandboxInfo, VolumeInfo
    from opencode_sandbox.services.doctor import DoctorReport
    from opencode_sandbox.services.guard.reviews import GuardStatus
    from opencode_sandbox.services.listing import RunnerImage
    from opencode_sandbox.services.secrets import Lookup


def render_sandboxes(sandboxes: Sequence[SandboxInfo], output_format: str, names: bool, color: bool,
                     sessions: Mapping[str, bool | None] | None = None) -> str:
    """`sessions`: whether each running terminal agent's session runs (None: the VM could not tell)."""
    from opencode_sandbox.core.agents import agent_in_labels

    if names:
        return "\n".join(info.name for info in sandboxes)
    sessions = sessions or {}
    if output_format == "json":
        return envelope("list", [
            {
                "name": info.name,
                "project": slug_of_vm(info.name) or slug_of_task(info.name),
                "agent": agent_in_labels(info.labels),
                "workspace": workspace_of(info.labels),
                "session_running": sessions.get(info.name),
                "image": info.image,
                "status": info.status.value,
                "created": iso_time(info.created_at),
                "last_activity": iso_time(info.last_activity_at),
            }
            for info in sandboxes
        ])
    shown = {True: "running", False: "none", None: "unknown"}
    rows: list[list[str | Cell]] = [
        [info.name, agent_in_labels(info.labels), workspace_of(info.labels),
         shown[sessions[info.name]] if info.name in sessions else "-",
         info.image or "-", status_cell(info.status.value), local_time(info.created_at)]
        for info in sandboxes
    ]
    return render(["NAME", "AGENT", "WORKSPACE", "SESSION", "IMAGE", "STATUS", "CREATED"], rows, color)


def workspace_of(labels: Mapping[str, str]) -> str:
    from opencode_sandbox.core.naming import LABEL_WORKSPACE
    from opencode_sandbox.core.workspace import ISOLATED, SHARED

    return ISOLATED if labels.get(LABEL_WORKSPACE) == ISOLATED else SHARED


def render_volumes(volumes: Sequence[VolumeInfo], output_format: str) -> str:
    volumes = sorted(volumes, key=lambda info: info.name)
    if output_format == "json":
        return envelope("volume list", [
            {
                "name": info.name,
                "project": slug_of_home_volume(info.name),
                "kind": info.kind,
                "size_bytes": info.size_bytes,
                "created": iso_time(info.created_at),
            }
            for info in volumes
        ])
    rows = [[info.name, info.kind or "-", _size(info.size_bytes), local_time(info.created_at)] for info in volumes]
    return render(["NAME", "KIND", "SIZE", "CREATED"], rows, color=False)


def short_digest(digest: str) -> str:
    algorithm, _, hexdigits = digest.partition(":")
    return f"{algorithm}:{hexdigits[:12]}" if hexdigits else (digest[:12] or "-")


def render_images(images: Sequence[RunnerImage], output_format: str) -> str:
    if output_format == "json":
        return envelope("image list", [
            {
                "reference": row.image.reference,
                "project": slug_of_image(row.image.reference),
                "digest": row.image.digest,
                "size_bytes": row.image.size_bytes,
                "created": iso_time(row.image.created_at),
                "loaded": row.loaded,
            }
            for row in images
        ])
    rows = [[row.image.reference, short_digest(row.image.digest), _size(row.image.size_bytes),
             local_time(row.image.created_at), "yes" if row.loaded else "no"] for row in images]
    return render(["REFERENCE", "DIGEST", "SIZE", "CREATED", "LOADED"], rows, color=False)


def _size(size_bytes: int | None) -> str:
    return format_size(size_bytes) if size_bytes is not None else "-"


def iso_time(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment is not None else None


def envelope(command: str, result: object) -> str:
    """Every `--format json` output: the command, and its result under one key (docs/commands.md)."""
    return json.dumps({"command": command, "result": result}, indent=2)


def _what(guest: int) -> str:
    return "opencode serve" if guest == DAEMON_PORT else ""


def render_ports(name: str, ports: dict[int, int] | None, output_format: str) -> str:
    if ports is None:
        return envelope("ports", []) if output_format == "json" else (
            f"{name} is stopped: its ports are published only while it runs. Start it with `opencode-sandbox` "
            "or `opencode-sandbox shell`.")
    if output_format == "json":
        return envelope("ports", [{"guest_port": guest, "host_address": "127.0.0.1", "host_port": host,
                                    "url": f"http://127.0.0.1:{host}", "what": _what(guest)}
                                   for guest, host in sorted(ports.items())])
    rows = [[str(guest), f"127.0.0.1:{host}", f"http://127.0.0.1:{host}", _what(guest)]
            for guest, host in sorted(ports.items())]
    return render(["GUEST PORT", "HOST", "URL", "WHAT"], rows, color=False)


def render_refusals(name: str, found: Sequence[Refusal] | None, policy: EgressPolicy, output_format: str) -> str:
    if found is None:
        return envelope("network log", []) if output_format == "json" else (
            f"{name} is stopped: what its network policy refuses is recorded only while it runs, anew at each "
            "start. Run the agent again (`opencode-sandbox`) and look while the VM runs.")
    if output_format == "json":
        return envelope("network log", [
            {
                "destination": refusal.destination,
                "protocol": refusal.protocol,
                "port": refusal.port,
                "attempts": refusal.attempts,
                "last_seen": iso_time(refusal.last_seen),
                "reason": why(policy, refusal),
            }
            for refusal in found
        ])
    if not found:
        return f"Nothing refused by {name}'s network policy ({policy.describe()}): {KEPT}."
    rows = [[local_time(refusal.last_seen), _where(refusal), str(refusal.attempts), why(policy, refusal)]
            for refusal in found]
    table = render(["LAST SEEN", "DESTINATION", "ATTEMPTS", "WHY"], rows, color=False)
    return f"{table}\n{name}, network {policy.describe()}: {KEPT}."


def _where(refusal: Refusal) -> str:
    host = f"[{refusal.destination}]" if ":" in refusal.destination else refusal.destination
    port = f":{refusal.port}" if refusal.port is not None else ""
    return f"{host}{port}/{refusal.protocol}"


def render_status(found: GuardStatus, output_format: str) -> str:
    vm_made = found.by_vm or found.moved or found.held or found.privileged or found.unrecorded or found.held_branches
    if output_format == "json":
        return envelope("guard status", {
            "recorded": found.recorded,
            "state": "changed" if vm_made else "clean",
            "vm_may_write": found.vm_may_write,
            "guarded": list(found.paths),
            "changed": [change.as_mapping() for change in found.by_vm],
            "changed_on_host": [change.as_mapping() for change in found.on_host],
            "moved_aside": list(found.moved),
            "put_back": list(found.held),
            "privileged": [{**each.as_mapping(), "told": each.line()} for each in found.privileged],
            "privileged_not_yet_caught": [each.as_mapping() for each in found.unrecorded],
            "git": list(found.git),
            "held_branches": list(found.held_branches),
        })
    lines = [f"guarded: {', '.join(found.paths)}, any git directory below the checkout, and any privileged "
             "file or device node the VM makes there"]
    git = [f"git: {line}" for line in (*found.held_branches, *found.git)]
    if not found.recorded:
        return "\n".join([*lines, "state: not recorded yet (the next run, shell or serve records it)", *git])
    if not vm_made:
        lines.append("state: clean")
    elif not found.by_vm:
        lines.append("state: the VM changed what the host runs while it ran (made harmless, listed below)")
    else:
        lines.append("state: changed while a VM ran (the next run, shell, detach or stop asks to keep or revert):")
        lines += [f"  {change.headline()}" for change in found.by_vm]
    if found.on_host:
        lines.append("changed on the host (yours, kept; recorded as they are at the next start):")
        lines += [f"  {change.headline()}" for change in found.on_host]
    if found.moved:
        lines.append("git directories the VM made, moved aside while it ran:")
        lines += [f"  {shown(line)}" for line in found.moved]
    if found.held:
        lines.append("files the VM changed while it ran, put back as they were (its versions kept where shown):")
        lines += [f"  {shown(line)}" for line in found.held]
    return "\n".join([*lines, *_privileged_lines(found), *git])


def render_report(report: DoctorReport, console: Console) -> None:
    """The checks as results, one a line with its fix; the verdict for the runtime last."""
    out = console.out
    for check in report.checks:
        needed = report.runtime in check.required_for
        mark = style("ok  ", "green", out) if check.ok else (
            style("FAIL", "red", out) if needed else style("warn", "yellow", out))
        console.result(f"{mark} {check.name:<7} {check.detail}")
        if not check.ok and check.fix:
            console.result(f"     {'':<7} fix: {check.fix}")
    host_failures = [check.name for check in report.failures if not check.of_project]
    project_failures = [check.name for check in report.failures if check.of_project]
    if host_failures:
        console.error(f"the {report.runtime} runtime cannot work on this host ({', '.join(host_failures)})",
                      "apply the fixes above, then run `opencode-sandbox doctor` again")
        return
    console.result(f"The {report.runtime} runtime can work on this host.")
    if project_failures:
        console.error(f"this project's VM cannot work as it is ({', '.join(project_failures)})",
                      "apply the fixes above, then run `opencode-sandbox doctor` again")


def _privileged_lines(found: GuardStatus) -> list[str]:
    lines: list[str] = []
    if found.privileged:
        lines.append(f"privileged entries the VM made ({PUT_BACK_HINT}):")
        lines += [f"  {each.line()}" for each in found.privileged]
    if found.unrecorded:
        lines.append("privileged entries that appeared while the VM may write, neutralised at the next round:")
        lines += [f"  {shown(each.path)}: {each.traits()} (owner uid {each.uid}, mode {each.mode:04o})"
                  for each in found.unrecorded]
    return lines


def render_secrets(lookup: Lookup, output_format: str) -> str:
    if output_format == "json":
        return envelope("secrets list", [{"name": secret.name, "hosts": secret.host_texts,
                                          "headers": list(secret.headers), "source": lookup.sources[secret.name]}
                                         for secret in lookup.secrets])
    if not lookup.secrets:
        return "No secrets are set (the `secrets` setting; see `opencode-sandbox secrets import`)."
    return render(["NAME", "HOSTS", "HEADERS", "SOURCE"],
                  [[secret.name, ", ".join(secret.host_texts), ", ".join(secret.headers) or "any",
                    lookup.sources[secret.name]] for secret in lookup.secrets], color=False)
