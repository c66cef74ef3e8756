"""Whose a docker object is, from its owner label and this user's record."""

from __future__ import annotations

import pytest

from opencode_sandbox.core.naming import LABEL_OWNER_UID, managed_labels, owner_labels
from opencode_sandbox.core.ownership import Claim, HostUser, judge, owned_by_another, owner_uid

SLUG = "web-0123456789abcd"
ME = 1001


def never_asked() -> bool:
    raise AssertionError("a labelled object needs no record")


def test_a_labelled_object_is_judged_by_its_label_alone() -> None:
    assert judge({**managed_labels(SLUG), **owner_labels(ME)}, ME, never_asked) is Claim.MINE
    assert judge({**managed_labels(SLUG), **owner_labels(0)}, ME, never_asked) is Claim.OTHERS
    assert judge({LABEL_OWNER_UID: "not-a-uid"}, ME, never_asked) is Claim.OTHERS


@pytest.mark.parametrize(("recorded", "claim"), [(True, Claim.INHERITED), (False, Claim.UNKNOWN)])
def test_an_unlabelled_object_is_this_users_only_when_recorded_here(recorded: bool, claim: Claim) -> None:
    assert judge(managed_labels(SLUG), ME, lambda: recorded) is claim


def test_only_mine_and_inherited_objects_may_be_used() -> None:
    assert [claim for claim in Claim if claim.usable] == [Claim.MINE, Claim.INHERITED]


def test_the_owner_uid_is_read_back_from_the_label() -> None:
    assert owner_uid(owner_labels(0)) == 0
    assert owner_uid(owner_labels(ME)) == ME
    assert owner_uid({}) is None
    assert owner_uid({LABEL_OWNER_UID: "-1"}) is None


def test_owned_by_another_needs_a_label_that_names_someone_else() -> None:
    assert owned_by_another(owner_labels(0), ME)
    assert not owned_by_another(owner_labels(ME), ME)
    assert not owned_by_another(managed_labels(SLUG), ME), "an unlabelled object is judged with the record"


def test_host_users_describe_themselves() -> None:
    assert HostUser(0, "root").describe() == "root (uid 0)"
    assert HostUser(7).describe() == "uid 7"
    assert HostUser(None).describe() == "an unknown host user"
