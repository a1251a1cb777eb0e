"""Spec section 9, 'Leak check': E55..E61 (spec 6.2, 6.3, Appendix B; DECISIONS 13, 14)."""
from __future__ import annotations

import pytest

import whileai_pipeline.simulations as wai

NEEDLE = "the parcel was lost by the carrier"


def test_e55_needle_of_exactly_12_normalized_chars_is_checked_and_leaks():
    # "Abcdef   GHIJK" normalizes to "abcdef ghijk" (12 chars)
    row = {"prompt": "q", "steps": [{"text": "We saw ABCDEF ghijk today."}], "privileged": {"reference": "Abcdef   GHIJK"}}
    rep = wai.leak_report([row])
    assert rep == {
        "n_rows": 1,
        "n_checked": 1,
        "n_leaked": 1,
        "rate": 1.0,
        "checked": True,
        "leaked": [{"scenario_id": None, "rollout_index": None, "field": "reference", "needle": "abcdef ghijk"}],
        "summary": "checked 1 of 1 rows: 1 quoted privileged context (100%)",
    }
    assert list(rep.keys()) == ["n_rows", "n_checked", "n_leaked", "rate", "checked", "leaked", "summary"]


def test_e55_needle_of_11_normalized_chars_not_checkable():
    # "Abcdef  GHIJ" normalizes to "abcdef ghij" (11 chars)
    row = {"prompt": "q", "steps": [{"text": "We saw abcdef ghij today."}], "privileged": {"reference": "Abcdef  GHIJ"}}
    rep = wai.leak_report([row])
    assert (rep["n_rows"], rep["n_checked"], rep["n_leaked"], rep["rate"], rep["checked"]) == (1, 0, 0, 0.0, False)
    assert rep["leaked"] == []
    assert rep["summary"].startswith("checked 0 of 1 rows: none carried privileged context")


def test_e55_min_len_argument():
    row = {"prompt": "q", "steps": [{"text": "We saw abcdef ghij today."}], "privileged": {"reference": "Abcdef  GHIJ"}}
    rep = wai.leak_report([row], min_len=11)
    assert (rep["n_checked"], rep["n_leaked"]) == (1, 1)


def test_e56_whitespace_and_case_normalized_hidden_state_field():
    row = {
        "prompt": "where?",
        "steps": [{"text": "Your order delayed in   TRANSIT"}],
        "final_text": "",
        "scenario_id": "s9",
        "rollout_index": 2,
        "privileged": {"hidden_state": {"world_state": "order delayed in transit"}},
    }
    rep = wai.leak_report([row])
    assert rep["n_leaked"] == 1
    assert rep["leaked"] == [
        {"scenario_id": "s9", "rollout_index": 2, "field": "hidden_state.world_state", "needle": "order delayed in transit"}
    ]


def test_e57_needle_split_over_two_assistant_turns():
    row = {
        "messages": [
            {"role": "user", "content": "where is it?"},
            {"role": "assistant", "content": "Sorry, the parcel was"},
            {"role": "assistant", "content": "lost by the carrier."},
        ],
        "privileged": {"reference": NEEDLE},
    }
    rep = wai.leak_report([row])
    assert (rep["n_checked"], rep["n_leaked"]) == (1, 1)
    assert rep["leaked"][0]["field"] == "reference"


def test_e57_needle_split_between_final_text_and_first_assistant_turn():
    row = {
        "messages": [
            {"role": "user", "content": "where is it?"},
            {"role": "assistant", "content": "lost by the carrier."},
        ],
        "final_text": "Sorry, the parcel was",
        "privileged": {"reference": NEEDLE},
    }
    rep = wai.leak_report([row])
    assert (rep["n_checked"], rep["n_leaked"]) == (1, 1)


def test_e58_needle_only_in_user_turn_tool_args_or_result_not_leaked():
    rows = [
        {"prompt": "Was " + NEEDLE + "?", "steps": [{"text": "I will check."}], "privileged": {"reference": NEEDLE}},
        {
            "prompt": "where?",
            "steps": [{"tool": "t", "arguments": {"note": NEEDLE}, "result": "ok"}, {"text": "Done."}],
            "privileged": {"reference": NEEDLE},
        },
        {
            "prompt": "where?",
            "steps": [{"tool": "t", "arguments": {}, "result": NEEDLE}, {"text": "Done."}],
            "privileged": {"reference": NEEDLE},
        },
        {
            "messages": [
                {"role": "user", "content": NEEDLE},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "t", "arguments": {"n": NEEDLE}}}]},
                {"role": "tool", "content": NEEDLE},
                {"role": "assistant", "content": "Done."},
            ],
            "privileged": {"reference": NEEDLE},
        },
    ]
    rep = wai.leak_report(rows)
    assert (rep["n_rows"], rep["n_checked"], rep["n_leaked"], rep["checked"]) == (4, 4, 0, True)
    assert rep["leaked"] == []
    assert rep["summary"] == "checked 4 of 4 rows: no reply quoted its privileged context"


def test_e59_needle_in_opener_leaks():
    row = {
        "opener": "Hi! Heads up: the parcel was lost by the carrier.",
        "prompt": "hello",
        "steps": [],
        "final_text": "",
        "privileged": {"reference": NEEDLE},
    }
    rep = wai.leak_report([row])
    assert rep["n_leaked"] == 1
    assert rep["leaked"][0]["needle"] == NEEDLE


def test_e60_rubric_only_string_privileged_numeric_hidden_ignored():
    rows = [
        {"prompt": "q", "final_text": NEEDLE, "privileged": {"rubric": {"must": NEEDLE}}},
        {"prompt": "q", "final_text": NEEDLE, "privileged": NEEDLE},
        {
            "prompt": "q",
            "final_text": "123456789012345 true",
            "privileged": {"hidden_state": {"count": 123456789012345, "flag": True, "none": None}},
        },
    ]
    rep = wai.leak_report(rows)
    assert (rep["n_rows"], rep["n_checked"], rep["n_leaked"], rep["checked"]) == (3, 0, 0, False)
    assert rep["leaked"] == []


def test_e61_leaked_list_capped_at_20_and_needles_at_80_chars():
    needle = "a" * 100
    rows = [
        {
            "prompt": "q",
            "steps": [{"text": "x " + needle + " y"}],
            "scenario_id": f"s{i}",
            "rollout_index": i,
            "privileged": {"reference": needle},
        }
        for i in range(25)
    ]
    rep = wai.leak_report(rows)
    assert (rep["n_rows"], rep["n_checked"], rep["n_leaked"], rep["rate"]) == (25, 25, 25, 1.0)
    assert len(rep["leaked"]) == 20
    assert [e["scenario_id"] for e in rep["leaked"]] == [f"s{i}" for i in range(20)]
    assert all(e["needle"] == "a" * 80 for e in rep["leaked"])
    assert rep["summary"] == "checked 25 of 25 rows: 25 quoted privileged context (100%)"


def test_e61_export_refuses_and_carries_report_d14():
    needle = "a" * 100
    rows = [
        {"prompt": "q", "steps": [{"text": needle}], "scenario_id": f"s{i}", "privileged": {"reference": needle}}
        for i in range(25)
    ]
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(rows)
    assert str(ei.value).startswith("privileged_leak:")
    leaks = ei.value.report["privileged_leaks"]
    assert (leaks["n_checked"], leaks["n_leaked"], len(leaks["leaked"])) == (25, 25, 20)
