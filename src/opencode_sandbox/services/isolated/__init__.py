"""The isolated workspace mode's host side: the VM works on a git work tree of its own, and its work
reaches the host only as git data, `refs/sandbox/wip/<branch>` (a commit of its whole work tree,
whose content is the VM's to make) against `refs/sandbox/base/<branch>` (what the host's work tree
already holds of it). `changes` reads what differs and how it stands on the host, `diff_view`
shows it, `apply` brings it into the host's work tree and moves the base."""
