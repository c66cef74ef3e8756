from __future__ import annotations

import pytest

from opencode_sandbox.cli.render import short_digest
from opencode_sandbox.core.naming import LABEL_CONTENT_HASH
from opencode_sandbox.core.units import format_size
from opencode_sandbox.images.builder import BuildAction, BuildFailed, _step_of, decide

HASH = "f" * 64


@pytest.mark.parametrize(
    ("labels", "rebuild", "action", "reason"),
    [
        (None, False, BuildAction.BUILD, "does not exist"),
        ({}, False, BuildAction.BUILD, "no content hash"),
        ({LABEL_CONTENT_HASH: "0" * 64}, False, BuildAction.BUILD, "changed"),
        ({LABEL_CONTENT_HASH: HASH}, False, BuildAction.SKIP, "up to date"),
        ({LABEL_CONTENT_HASH: HASH}, True, BuildAction.BUILD, "rebuild was requested"),
    ],
)
def test_build_decision(labels: dict[str, str] | None, rebuild: bool, action: BuildAction, reason: str) -> None:
    decided, why = decide(labels, HASH, rebuild)
    assert decided is action
    assert reason in why


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("Step 3/5 : RUN make", "step 3/5: RUN make"),
        ("#7 [2/3] RUN make", "[2/3] RUN make"),
        ("#1 [internal] load build definition", None),
        (" ---> Running in 1234", None),
        ("make: *** [all] Error 2", None),
    ],
)
def test_build_steps_are_recognised(line: str, step: str | None) -> None:
    assert _step_of(line) == step


def test_build_failure_is_one_line_with_the_tail_in_the_hint() -> None:
    log = [f"line {n}" for n in range(40)] + ["", "boom"]
    failure = BuildFailed("opencode-sandbox/runner-x:1", "step 2/2: RUN " + "x" * 200, 1, log)
    assert "\n" not in failure.message
    assert "step 2/2: RUN" in failure.message and failure.message.endswith("(exit code 1)")
    assert len(failure.message) < 200
    assert failure.log_tail[-1] == "boom" and "line 39" in failure.log_tail
    assert "line 10" not in (failure.hint or "")
    assert "previous image" in (failure.hint or "")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (1_503_238_554, "1.4 GiB"),
        (5 * 1024**4, "5.0 TiB"),
    ],
)
def test_sizes_use_binary_units(size: int, text: str) -> None:
    assert format_size(size) == text


def test_digest_is_shortened_to_12_hex() -> None:
    assert short_digest("sha256:" + "0123456789abcdef" * 4) == "sha256:0123456789ab"
