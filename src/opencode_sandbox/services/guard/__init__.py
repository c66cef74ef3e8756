"""The guard: what the VM may not leave in the checkout for the host to run, and the watch that
keeps it so while the VM runs (docs/security.md, Files the host runs)."""
