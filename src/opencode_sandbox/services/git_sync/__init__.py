"""The host's side of the git sync with the VM's own git directory: git run so that nothing the VM
wrote configures it (`host_git`), the VM's bundle copied within a bound (`bundle_copy`), its
branches judged and held where they could make the host run something (`held`), and the host's
checked-out branch moved by comparing object data with the work tree (`fast_forward`).
`services/vm_git.py` drives them."""
