"""`bench/warm_start.py` in the isolated workspace: the VM works on its own work tree, seeded from the
checkout, and a start brings nothing of the VM's unless the host's refs moved. Same targets.

Run: .venv/bin/python bench/warm_start_isolated.py [ROUNDS]. The last line is the warm ratio.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.warm_start import main

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10, workspace="isolated")
