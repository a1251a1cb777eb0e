"""Spec section 9, 'Pair building and judging': E71..E76 (spec 8.2, 8.4, 8.5)."""
from __future__ import annotations

import pytest

import whileai_pipeline.simulations as wai


def _row(text, reward, prompt="Refund order A", **extra):
    row = {"prompt": prompt, "steps": [{"text": text}], "final_text": text, "reward": reward}
    row.update(extra)
    return row


# ---------------------------------------------------------------- E71
def test_e71_invalid_rewards_and_non_ok_judge_status_excluded():
    a = _row("bool", True)
    b = _row("nan", float("nan"))
    c = _row("too high", 1.5)
    d = _row("timed out", 1, judge_status="timeout")
    e = _row("fail", 0)
    f = _row("pass!", 1)  # judge_status missing counts as "ok"
    pairs, report = wai.build_preference_pairs([a, b, c, d, e, f])
    # If True, 1.5 or the timeout row were eligible they would rank before f (score >= 1.0,
    # earlier in input) and be chosen.
    assert len(pairs) == 1
    assert pairs[0]["chosen"] is f or pairs[0]["chosen"] == f
    assert pairs[0]["rejected"] is e or pairs[0]["rejected"] == e
    assert (pairs[0]["chosen_score"], pairs[0]["rejected_score"], pairs[0]["margin"]) == (1.0, 0.0, 1.0)
    assert report["pairs"] == 1


def test_e71_only_excluded_rows_give_no_pairs():
    rows = [
        _row("bool", True),
        _row("nan", float("nan")),
        _row("too high", 1.5),
        _row("errored", 1, judge_status="error"),
        _row("string", "1"),
        _row("none", None),
        _row("fail", 0),
    ]
    pairs, report = wai.build_preference_pairs(rows)
    assert pairs == []
    assert report["pairs"] == 0
    assert report["prompts_with_contrast"] == 0
    assert report["note"] == (
        "pairs require the same prompt to have two rollouts whose rewards differ by at least 1.0; "
        "raise rollouts_per_request to create contrast"
    )


# ---------------------------------------------------------------- E72
def test_e72_equal_length_distance_earlier_ranked_candidate_wins():
    chosen = _row("abcde", 1)  # 5 chars
    longer = _row("abcdefg", 0)  # 7 chars, distance 2, earlier in ranked order
    shorter = _row("abc", 0)  # 3 chars, distance 2
    pairs, _ = wai.build_preference_pairs([chosen, longer, shorter])
    assert len(pairs) == 1
    assert pairs[0]["chosen"]["final_text"] == "abcde"
    assert pairs[0]["rejected"]["final_text"] == "abcdefg"
    assert pairs[0]["length_delta"] == -2


# ---------------------------------------------------------------- E73
@pytest.mark.parametrize("margin", [0, 0.0, -1])
def test_e73_non_positive_min_margin_raises(margin):
    with pytest.raises(ValueError) as ei:
        wai.build_preference_pairs([_row("a", 1), _row("b", 0)], min_margin=margin)
    assert str(ei.value).startswith("min_margin must be positive")


# ---------------------------------------------------------------- E74
def test_e74_two_passes_two_fails_give_two_disjoint_pairs():
    p1 = _row("aaaa", 1)  # 4 chars
    p2 = _row("bbbbbbbbbb", 1)  # 10 chars
    f1 = _row("cccccccccc", 0)  # 10 chars
    f2 = _row("dddd", 0)  # 4 chars
    pairs, report = wai.build_preference_pairs([p1, p2, f1, f2], max_pairs_per_prompt=5)
    assert [(p["chosen"]["final_text"], p["rejected"]["final_text"]) for p in pairs] == [
        ("aaaa", "dddd"),
        ("bbbbbbbbbb", "cccccccccc"),
    ]
    used = [id(p[side]) for p in pairs for side in ("chosen", "rejected")]
    assert len(set(used)) == 4
    assert report["pairs"] == 2
    assert report["prompts_seen"] == 1
    assert report["prompts_with_contrast"] == 1


# ---------------------------------------------------------------- E75
def _pairs():
    pairs, _ = wai.build_preference_pairs([_row("good", 1), _row("bad", 0)])
    assert len(pairs) == 1
    return pairs


def test_e75_judge_crashing_in_both_orders():
    def boom(a, b):
        raise RuntimeError("judge down")

    pairs, report = wai.judge_pairs(_pairs(), boom)
    pw = pairs[0]["pairwise"]
    assert pw["winner"] is None
    assert pw["position_consistent"] is None
    assert pw["swapped"] is True
    assert pw["judge"] == "boom"
    assert pairs[0]["tie"] is False
    assert report["n"] == 1
    assert report["failed"] == 1
    assert report["swap"] is True


# ---------------------------------------------------------------- E76
def test_e76_judge_answering_only_first_order_wins():
    def first_only(a, b):
        # first order is (A=chosen, B=rejected); the swapped call crashes
        if a["final_text"] == "good":
            return {"winner": "A", "reason": "good is better"}
        raise RuntimeError("no answer")

    pairs, report = wai.judge_pairs(_pairs(), first_only)
    pw = pairs[0]["pairwise"]
    assert pw["winner"] == "chosen"
    assert pw["position_consistent"] is None
    assert pairs[0]["tie"] is False
    assert report["failed"] == 0


def test_e76_answer_only_in_swapped_order_also_wins():
    def second_only(a, b):
        # swapped order is (A=rejected, B=chosen); answering "B" picks chosen
        if a["final_text"] == "bad":
            return '{"winner": "B", "reason": "chosen is better"}'
        raise RuntimeError("no answer")

    pairs, _ = wai.judge_pairs(_pairs(), second_only)
    assert pairs[0]["pairwise"]["winner"] == "chosen"
    assert pairs[0]["pairwise"]["position_consistent"] is None
    assert pairs[0]["tie"] is False
