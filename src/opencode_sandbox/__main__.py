from __future__ import annotations

from opencode_sandbox.launcher import main

main()
