"""Reading the home probe's output, and the diagnosis of a failed `opencode serve` start."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.dev_home import (
    GENERIC_HINT,
    REBUILD_HINT,
    BlockedFolder,
    HomeProbe,
    diagnose_start_failure,
    home_problem,
    read_probe,
)

VOLUME = "opencode-sandbox-home-demo-0123456789abcd-20300101000000"
USABLE = HomeProbe((1001, 1001), "/usr/local/bin/opencode", None)
FOREIGN = HomeProbe((1001, 1001), "/usr/local/bin/opencode", BlockedFolder("/home/dev", (1000, 1000), "755"))


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("", None),
        ("sh: 1: id: not found\n", None),
        ("probe:dev 1001 1001\nprobe:opencode /usr/local/bin/opencode\n", USABLE),
        ("probe:dev 1001 1001\nprobe:opencode /usr/local/bin/opencode\nprobe:blocked /home/dev 1000 1000 755\n",
         FOREIGN),
        ("probe:dev 0 0\nprobe:opencode \n", HomeProbe((0, 0), "", None)),
        ("noise\nprobe:dev 1001 1001\nprobe:opencode /x/opencode\nprobe:blocked /home/dev/.local 0 0 700\n",
         HomeProbe((1001, 1001), "/x/opencode", BlockedFolder("/home/dev/.local", (0, 0), "700"))),
        ("probe:dev x y\nprobe:opencode /o\nprobe:blocked /home/dev ? ? 755\n", HomeProbe(None, "/o", None)),
    ],
)
def test_read_probe(output: str, expected: HomeProbe | None) -> None:
    assert read_probe(output) == expected


def test_a_home_of_another_owner_names_both_owners_and_the_volume() -> None:
    problem = home_problem(FOREIGN, VOLUME)
    assert problem is not None
    assert problem.reason == ("dev cannot write its home: /home/dev belongs to uid 1000, gid 1000 (mode 755) "
                              "and dev is uid 1001, gid 1001")
    assert VOLUME in problem.hint
    assert "`opencode-sandbox stop`" in problem.hint
    assert "`opencode-sandbox volume migrate`" in problem.hint
    assert "`opencode-sandbox volume reset`" in problem.hint


def test_a_home_dev_owns_but_may_not_write_names_its_mode() -> None:
    probe = HomeProbe((1001, 1001), "/o", BlockedFolder("/home/dev/.local", (1001, 1001), "555"))
    problem = home_problem(probe, None)
    assert problem is not None
    assert problem.reason == "dev cannot write its home: /home/dev/.local belongs to dev but its mode is 555"
    assert problem.hint.startswith("its home volume has files dev cannot use")


@pytest.mark.parametrize("probe", [None, USABLE, HomeProbe((0, 0), "", None)])
def test_no_home_problem_without_a_blocked_folder(probe: HomeProbe | None) -> None:
    assert home_problem(probe, VOLUME) is None


# (start output, probe) -> (reason starts with, hint)
START_FAILURES = [
    ("mkdir: cannot create directory '/home/dev/.local': Permission denied", FOREIGN,
     "dev cannot write its home: /home/dev belongs to uid 1000", "home"),
    # an unusable home hides an opencode installed under it: the home is the cause to fix
    ("opencode: not found on the PATH", FOREIGN._replace(opencode=""), "dev cannot write its home", "home"),
    ("opencode: not found on the PATH", USABLE._replace(opencode=""), "opencode is not on dev's PATH", REBUILD_HINT),
    ("setsid: command not found", USABLE, "setsid: command not found", GENERIC_HINT),
    ("", USABLE, "it failed without a message", GENERIC_HINT),
    ("sh: 1: cannot fork", None, "sh: 1: cannot fork", GENERIC_HINT),
]


@pytest.mark.parametrize(("output", "probe", "reason", "hint"), START_FAILURES)
def test_diagnose_start_failure(output: str, probe: HomeProbe | None, reason: str, hint: str) -> None:
    diagnosis = diagnose_start_failure(output, probe, VOLUME)
    assert diagnosis.reason.startswith(reason)
    if hint == "home":
        assert VOLUME in diagnosis.hint and "volume migrate" in diagnosis.hint
    else:
        assert diagnosis.hint == hint
