"""How the tool runs git on the host."""

from __future__ import annotations

NOTHING_RUNS = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "submodule.recurse=false",
    "-c", "diff.ignoreSubmodules=all",
    "-c", "protocol.allow=never",
)
"""Settings for every git the tool runs on the host, over a repository whose work tree the VM
writes: git enters no submodule's folder (whose repository's `core.fsmonitor` would run), runs no
hook (`core.hooksPath` is often a folder of the checkout, and `update-ref` runs
`reference-transaction`) and no fsmonitor, and reaches no remote."""
