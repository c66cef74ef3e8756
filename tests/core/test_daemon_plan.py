"""`plan_daemon`: every combination of what it decides on, against one table."""

from __future__ import annotations

import itertools

import pytest

from opencode_sandbox.core.lifecycle import DaemonAction, DaemonFacts, DaemonPlan, plan_daemon

ANY = object()
UNASKED = None
LEAVE, CHECK_HEALTH, CHECK_PROCESS, ASK_RESTART, WAIT, KEEP, START, RESTART = (
    DaemonAction.LEAVE, DaemonAction.CHECK_HEALTH, DaemonAction.CHECK_PROCESS, DaemonAction.ASK_RESTART,
    DaemonAction.WAIT, DaemonAction.KEEP, DaemonAction.START, DaemonAction.RESTART,
)

# booted, wait, config changed, other clients, healthy, restart approved, serve running, came up -> action.
# The first row that matches a combination is its answer.
TABLE: list[tuple[tuple[object, ...], DaemonAction]] = [
    ((ANY, False, ANY, ANY, ANY, ANY, ANY, ANY), LEAVE),
    ((True, ANY, ANY, ANY, ANY, ANY, ANY, ANY), START),
    ((False, ANY, ANY, ANY, UNASKED, ANY, ANY, ANY), CHECK_HEALTH),
    ((False, ANY, False, ANY, True, ANY, ANY, ANY), KEEP),
    ((False, ANY, True, 0, True, ANY, ANY, ANY), RESTART),
    ((False, ANY, True, 1, True, UNASKED, ANY, ANY), ASK_RESTART),
    ((False, ANY, True, 1, True, True, ANY, ANY), RESTART),
    ((False, ANY, True, 1, True, False, ANY, ANY), KEEP),
    ((False, ANY, True, ANY, False, ANY, ANY, ANY), RESTART),
    ((False, ANY, False, ANY, False, ANY, UNASKED, ANY), CHECK_PROCESS),
    ((False, ANY, False, ANY, False, ANY, False, ANY), RESTART),
    ((False, True, False, ANY, False, ANY, True, UNASKED), WAIT),
    ((False, True, False, ANY, False, ANY, True, True), KEEP),
    ((False, True, False, ANY, False, ANY, True, False), RESTART),
]
ANSWERS = (UNASKED, True, False)
COMBINATIONS = list(itertools.product((False, True), (False, True), (False, True), (0, 1), ANSWERS, ANSWERS,
                                      ANSWERS, ANSWERS))
QUESTIONS = {CHECK_HEALTH: "healthy", ASK_RESTART: "restart_approved", CHECK_PROCESS: "serve_running",
             WAIT: "came_up"}


def expected(combination: tuple[object, ...]) -> tuple[int, DaemonAction]:
    for index, (pattern, action) in enumerate(TABLE):
        if all(wanted is ANY or wanted == value for wanted, value in zip(pattern, combination, strict=True)):
            return index, action
    raise AssertionError(f"no row of the table covers {combination}")


def facts(combination: tuple[object, ...]) -> DaemonFacts:
    return DaemonFacts(*combination)  # type: ignore[arg-type]


def plan(combination: tuple[object, ...]) -> DaemonPlan:
    return plan_daemon(facts(combination))


def test_each_combination_gets_the_action_of_its_row() -> None:
    wrong = [(combination, plan(combination).action, expected(combination)[1]) for combination in COMBINATIONS
             if plan(combination).action is not expected(combination)[1]]
    assert wrong == []
    assert all(plan(combination).reason for combination in COMBINATIONS)


def test_every_row_of_the_table_is_some_combinations_answer() -> None:
    assert {expected(combination)[0] for combination in COMBINATIONS} == set(range(len(TABLE)))


def test_a_question_is_never_asked_twice() -> None:
    for combination in COMBINATIONS:
        action = plan(combination).action
        if action in QUESTIONS:
            assert getattr(facts(combination), QUESTIONS[action]) is None, combination


@pytest.mark.parametrize("start", [(booted, wait, changed, others)
                                   for booted, wait, changed, others in itertools.product(
                                       (False, True), (False, True), (False, True), (0, 1))])
@pytest.mark.parametrize("answer", [True, False])
def test_answering_every_question_ends_in_a_decision(start: tuple[bool, bool, bool, int], answer: bool) -> None:
    """Every question answered alike: at most four questions, then keep, start or restart."""
    facts = DaemonFacts(*start)
    for _ in range(5):
        action = plan_daemon(facts).action
        if action in QUESTIONS:
            facts = facts._replace(**{QUESTIONS[action]: answer})
        else:
            assert action in (KEEP, START, RESTART, LEAVE)
            return
    raise AssertionError(f"no decision for {start} with every answer {answer}")


def test_a_booted_vm_never_waits_for_an_answer_from_it() -> None:
    assert {plan(c).action for c in COMBINATIONS if c[0] and c[1]} == {START}


def test_a_shell_never_touches_the_server() -> None:
    assert {plan(c).action for c in COMBINATIONS if not c[1]} == {LEAVE}


def test_an_attached_client_is_never_cut_off_without_asking() -> None:
    for combination in COMBINATIONS:
        if combination[0] is False and combination[3] == 1 and combination[4] is True:
            assert plan(combination).action is not RESTART or combination[5] is True, combination
