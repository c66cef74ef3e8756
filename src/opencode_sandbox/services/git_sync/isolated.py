"""The git sync of the isolated mode: the VM's work tree lives in a volume of its own, so nothing
of either side's git directory is shared, and every object crosses as a pack or a bundle on an
exec's standard streams (a runtime on another machine needs nothing more).

What the VM sends is data: its refs as text (validated), its objects in a bundle that the host's
git checks object by object (`index-pack --strict`) before any ref points at them. Its branches
become `refs/sandbox/heads/*` (held as in the shared mode when they change a file the host runs),
and a commit of its whole work tree, committed and not, becomes `refs/sandbox/wip/<branch>`. The
host's branch never moves to the VM's commits here: the work tree is the user's, and `apply`
alone brings the VM's work into it."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence

from opencode_sandbox.core.vm_git import HOST_PREFIX, is_object_id, parse_refs, valid_ref
from opencode_sandbox.core.workspace import WIP_PREFIX, WORK_TARGET
from opencode_sandbox.services.git_sync import host_git
from opencode_sandbox.services.git_sync.host_git import SYNC_TIMEOUT_S, GitSyncError
from opencode_sandbox.services.git_sync.work_tree import pack_of
from opencode_sandbox.services.vm_git import FAST_FORWARD, Syncer, SyncReport, host_ref_updates
from opencode_sandbox.state.files import ensure_private_dir
from opencode_sandbox.state_layout import ProjectLayout

BUNDLE_OUTPUT_LIMIT = 96 << 20
"""The most of a bundle's text (base64) one sync reads from the VM: about 72 MiB of objects. Past
it the sync says so and brings nothing; the VM's work stays in the VM."""
VM_WIP = "refs/remotes/opencode-sandbox/wip"
"""The VM's own name for its work tree's commit (a name a bundle's header may carry)."""

REFS_SCRIPT = r"""
set -eu
cd "$1"
branch=$(git symbolic-ref -q --short HEAD || echo HEAD)
if [ "$2" != work-tree ]; then
  printf 'branch %s\nwip -\n' "$branch"
  exec git for-each-ref --format='%(objectname) %(refname)' refs/heads refs/remotes/host
fi
index=$(mktemp)
trap 'rm -f "$index"' EXIT
cp "$(git rev-parse --git-path index)" "$index" 2>/dev/null || rm -f "$index"
if parent=$(git rev-parse -q --verify 'HEAD^{commit}'); then set -- -p "$parent"; else set --; fi
export GIT_AUTHOR_NAME=opencode-sandbox GIT_AUTHOR_EMAIL=vm@opencode-sandbox.invalid \
  GIT_COMMITTER_NAME=opencode-sandbox GIT_COMMITTER_EMAIL=vm@opencode-sandbox.invalid \
  GIT_AUTHOR_DATE='@0 +0000' GIT_COMMITTER_DATE='@0 +0000'
GIT_INDEX_FILE=$index git add -A --ignore-errors >/dev/null 2>&1 || true
if tree=$(GIT_INDEX_FILE=$index git write-tree) &&
   wip=$(git commit-tree "$tree" "$@" -m "opencode-sandbox: the VM's work tree") &&
   git update-ref refs/remotes/opencode-sandbox/wip "$wip"; then
  printf 'branch %s\nwip %s\n' "$branch" "$wip"
else
  printf 'branch %s\nwip -\n' "$branch"
fi
git for-each-ref --format='%(objectname) %(refname)' refs/heads refs/remotes/host
"""
"""In the VM: with `work-tree`, a commit of the whole work tree (the same one while nothing
changes: its dates are fixed; a file git cannot read is left out of it); then its checked-out
branch, that commit (`-` without, or when it could not be made) and its refs."""

BUNDLE_SCRIPT = r"""
set -eu
cd "$1"
shift
known=$(mktemp)
trap 'rm -f "$known"' EXIT
while IFS= read -r id; do
  if git cat-file -e "$id^{commit}" 2>/dev/null; then echo "^$id"; fi
done >"$known"
{ for ref in "$@"; do echo "$ref"; done; cat "$known"; } | git bundle create -q - --stdin | base64 -w0
"""
"""In the VM: a bundle of the named refs without what the host already has, as base64."""

RECEIVE_SCRIPT = r"""
set -eu
cd "$1"
IFS= read -r size
if [ "$size" -gt 0 ]; then head -c "$size" | git index-pack --stdin --fix-thin >/dev/null; fi
git update-ref --stdin
sh -c "$2" fast-forward "$3" "$4"
"""
"""In the VM: the host's objects (a pack of `size` bytes), its branches as `refs/remotes/host/*`,
then the VM's branch moved on where it only gains."""


class IsolatedSyncer(Syncer):
    """`Syncer` with every crossing on the exec's streams, and the work tree's commit besides."""

    wip_branch = ""
    wip = ""
    with_work_tree = True

    def sync(self) -> SyncReport:
        try:
            report = super().sync()
        finally:  # the work tree's commit comes whatever became of the branches
            self._bring_in_wip()
        return report

    def _vm_refs(self) -> tuple[dict[str, str], str]:
        what = "work-tree" if self.with_work_tree else "refs"
        result = self.runtime.exec(self.vm, ["sh", "-c", REFS_SCRIPT, "refs", WORK_TARGET, what],
                                   timeout_s=SYNC_TIMEOUT_S)
        if result.exit_code != 0:
            raise GitSyncError(f"reading the VM's branches failed: {result.stderr.strip()[-300:]}")
        lines = result.stdout.splitlines()
        said = dict(line.partition(" ")[::2] for line in lines[:2])
        branch, wip = said.get("branch", ""), said.get("wip", "")
        self.wip_branch = branch if branch == "HEAD" or valid_ref(f"refs/heads/{branch}") else ""
        self.wip = wip if is_object_id(wip, self._object_format) else ""
        rest = "\n".join(lines[2:])
        return ({**parse_refs(rest, self._object_format, "refs/heads/"),
                 **parse_refs(rest, self._object_format, HOST_PREFIX)}, "")

    def _bring_in_wip(self) -> None:
        if not self.wip_branch or not self.wip:
            return
        name = WIP_PREFIX + self.wip_branch
        current = host_git.text(self.found.root, "rev-parse", "-q", "--verify", name)
        if current == self.wip:
            return
        if self.wip not in self._host_has([self.wip]):
            fetched = self._fetch_bundle([VM_WIP], self._known())
            if fetched.get(VM_WIP) != self.wip:
                return
        host_git.run(self.found.root, "update-ref", "-m", "opencode-sandbox: the VM's work tree", name, self.wip)
        self.log(f"{name} is now {self.wip[:12]}")

    def _known(self) -> list[str]:
        return [*self._host_refs("refs/heads/").values(), *self._host_refs("refs/sandbox/").values()]

    def _fetch_bundle(self, branches: Sequence[str], known: Sequence[str]) -> dict[str, str]:
        made = self.runtime.exec(self.vm, ["sh", "-c", BUNDLE_SCRIPT, "bundle", WORK_TARGET, *branches],
                                 stdin="".join(f"{each}\n" for each in sorted(set(known))).encode(),
                                 timeout_s=SYNC_TIMEOUT_S, output_limit=BUNDLE_OUTPUT_LIMIT)
        if made.exit_code != 0:
            raise GitSyncError(f"the VM could not bundle its commits: {made.stderr.strip()[-300:]}")
        try:
            data = base64.b64decode(made.stdout.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise GitSyncError("the VM's bundle is not base64") from None
        ensure_private_dir(self.project_dir)
        copy = ProjectLayout(self.project_dir).incoming_bundle()
        copy.write_bytes(data)
        copy.chmod(0o600)
        try:
            return self._index_bundle(copy, branches)
        finally:
            copy.unlink(missing_ok=True)

    def _fast_forward_host(self) -> str:
        return ""  # the host's work tree is the user's: `apply` alone brings the VM's work into it

    def _send_host_heads(self, host_heads: Mapping[str, str], vm_refs: Mapping[str, str]) -> str:
        lines = host_ref_updates(host_heads, vm_refs)
        if not lines:
            return ""
        vm_has = self._host_has(list(vm_refs.values()))
        tips = sorted({object_id for object_id in host_heads.values() if object_id not in vm_has})
        pack = pack_of(self.found.root, tips, sorted(vm_has)) if tips else b""
        result = self.runtime.exec(
            self.vm, ["sh", "-c", RECEIVE_SCRIPT, "receive", WORK_TARGET, FAST_FORWARD, HOST_PREFIX,
                      "opencode-sandbox: fast-forward to the host's commits"],
            stdin=f"{len(pack)}\n".encode() + pack + "".join(lines).encode(), timeout_s=SYNC_TIMEOUT_S)
        return self._vm_took_host_heads(result, len(lines))
