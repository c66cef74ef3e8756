"""`python -m opencode_sandbox.images.release_check STATE_ROOT RELEASES_URL [CA_FILE...]`: one quiet
release check, a program of its own. A start runs it detached, its output going nowhere; a person
who runs it by hand sees on standard error why it failed. The CA files are the configured
`extra-ca-certificates`."""

from __future__ import annotations

import sys
from pathlib import Path

from opencode_sandbox.images.updater import refresh_latest


def _tell(message: str) -> None:
    sys.stderr.write(f"{message}\n")


def main(arguments: list[str]) -> int:
    if len(arguments) < 2:
        return 2
    refresh_latest(Path(arguments[0]), arguments[1], warn=_tell,
                   extra_ca_certificates=[Path(argument) for argument in arguments[2:]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
