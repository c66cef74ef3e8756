"""The docker runtime: a container per project, confined, behind an egress proxy or nftables."""
