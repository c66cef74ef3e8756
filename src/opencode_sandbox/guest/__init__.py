"""What this tool runs inside a VM, as named operations: the agent's server, the home, the
provisioning archive, Docker-in-Docker. `operations.py` names them; `shell.py` carries them out
through a runtime's `exec`."""
