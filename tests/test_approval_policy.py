"""The approval policy (kplan_airflow.approval_policy.decide) as a pure function: who must look at a plan, and
the reasons the approval shows, worked out by hand for each DAG's kind of policy."""

from __future__ import annotations

import pytest
from kplan_airflow.approval_policy import NOT_EMPTIED, Policy, decide, level_rank

GIB = 1 << 30
NIGHTLY = Policy(max_moves=50, max_bytes=10 * GIB, max_risk="low")


@pytest.mark.parametrize(("require", "skip", "review"), [
    (None, False, True), (None, True, False), ("", True, False),      # the deployment decides
    ("True", True, True), (True, False, True), ("false", False, False), (False, True, False),
])
def test_without_limits_every_plan_is_reviewed_unless_told_otherwise(require, skip, review):
    d = decide(Policy(require_approval=require), moves=500, nbytes=None, risk_after="critical", skip_review=skip)
    assert d.review is review
    assert d.reason == ("every plan of this DAG is reviewed" if review else None)
    assert d.shown is None   # no auto-approve limits: nothing to explain on the approval


def test_a_plan_within_every_limit_is_applied_without_a_person():
    d = decide(NIGHTLY, moves=50, nbytes=10 * GIB, risk_after="low", skip_review=False)
    assert (d.review, d.reason, d.shown) == (False, None, None)
    # skip_review is the drain's setting: it does not loosen the nightly limits
    assert decide(NIGHTLY, moves=51, nbytes=0, risk_after="low", skip_review=True).review


def test_every_limit_passed_over_is_named():
    d = decide(NIGHTLY, moves=51, nbytes=10 * GIB + 1, risk_after="medium", skip_review=False)
    assert d.reason == d.shown == ("51 replica moves is over the auto-approve limit of 50; 10.0 GiB to move is over "
                                   "the auto-approve limit of 10.0 GiB; risk after the plan is MEDIUM (auto-approve "
                                   "up to LOW)")


def test_unknown_bytes_or_an_unknown_risk_never_pass_a_limit():
    d = decide(NIGHTLY, moves=1, nbytes=None, risk_after=None, skip_review=False)
    assert d.reason == ("bytes to move unknown (auto-approve needs them within 10.0 GiB); risk after the plan is "
                        "NONE (auto-approve up to LOW)")
    assert [level_rank(x) for x in ("low", "medium", "high", "critical", None, "weird")] == [0, 1, 2, 3, 4, 4]
    # templated values arrive as strings; an empty one is no limit
    d = decide(Policy(max_moves="10", max_bytes="", max_risk=None), moves=11, nbytes=None, risk_after=None,
               skip_review=False)
    assert d.reason == "11 replica moves is over the auto-approve limit of 10"


def test_a_drain_that_would_not_empty_its_brokers_is_always_seen():
    d = decide(NIGHTLY, moves=1, nbytes=1, risk_after="low", skip_review=False, drain_empties=False)
    assert (d.reason, d.shown) == (NOT_EMPTIED, NOT_EMPTIED)
    d = decide(Policy(), moves=1, nbytes=1, risk_after="low", skip_review=True, drain_empties=False)
    assert (d.reason, d.shown) == (NOT_EMPTIED, None)
    d = decide(Policy(), moves=1, nbytes=1, risk_after="low", skip_review=False, drain_empties=False)
    assert d.reason == f"every plan of this DAG is reviewed; {NOT_EMPTIED}"
