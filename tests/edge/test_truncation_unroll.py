"""Spec section 9, 'Truncation and unroll': E30..E36 (spec 3.7, 3.10, 5.5; DECISIONS 11)."""
from __future__ import annotations

import pytest

import whileai_pipeline.simulations as wai


def _tool_row(result, **extra):
    row = {"prompt": "p", "steps": [{"tool": "t", "arguments": {}, "result": result}], "final_text": "done"}
    row.update(extra)
    return row


def _tool_contents(row):
    return [m["content"] for m in row["messages"] if m["role"] == "tool"]


# ---------------------------------------------------------------- E30
def test_e30_cap_4_cuts_and_counts():
    rows = wai.training_rows([_tool_row("0123456789")], max_tool_output_chars=4)
    row = rows[0]
    assert _tool_contents(row) == ["0123\n[... 6 chars of tool output truncated]"]
    assert row["tool_output_truncated"] == 1
    assert row["tool_output_chars_cut"] == 6
    assert list(row.keys())[:4] == ["messages", "tool_output_truncated", "tool_output_chars_cut", "loss_mask"]


def test_e30_export_report_totals():
    rep = wai.export_dataset([_tool_row("0123456789")], max_tool_output_chars=4)
    assert rep["max_tool_output_chars"] == 4
    assert rep["tool_output_truncated"] == 1
    assert rep["tool_output_chars_cut"] == 6


# ---------------------------------------------------------------- E31
def test_e31_cap_equal_to_length_untouched():
    row = wai.training_rows([_tool_row("abcd")], max_tool_output_chars=4)[0]
    assert _tool_contents(row) == ["abcd"]
    assert "tool_output_truncated" not in row
    assert "tool_output_chars_cut" not in row


def test_e31_cap_zero_gives_marker_only():
    row = wai.training_rows([_tool_row("abc")], max_tool_output_chars=0)[0]
    assert _tool_contents(row) == ["\n[... 3 chars of tool output truncated]"]
    assert (row["tool_output_truncated"], row["tool_output_chars_cut"]) == (1, 3)


def test_e31_negative_cap_marks_empty_output():
    row = wai.training_rows([_tool_row("")], max_tool_output_chars=-3)[0]
    assert _tool_contents(row) == ["\n[... 0 chars of tool output truncated]"]
    assert (row["tool_output_truncated"], row["tool_output_chars_cut"]) == (1, 0)


def test_e31_float_cap_truncated_to_int():
    row = wai.training_rows([_tool_row("abcdef")], max_tool_output_chars=2.7)[0]
    assert _tool_contents(row) == ["ab\n[... 4 chars of tool output truncated]"]
    assert (row["tool_output_truncated"], row["tool_output_chars_cut"]) == (1, 4)


def test_e31_string_cap_converted():
    row = wai.training_rows([_tool_row("abcdef")], max_tool_output_chars="3")[0]
    assert _tool_contents(row) == ["abc\n[... 3 chars of tool output truncated]"]
    assert (row["tool_output_truncated"], row["tool_output_chars_cut"]) == (1, 3)
    rep = wai.export_dataset([_tool_row("abcdef")], max_tool_output_chars="3")
    assert rep["max_tool_output_chars"] == "3"  # the argument as passed


def test_e31_lengths_in_code_points():
    row = wai.training_rows([_tool_row("ééééé")], max_tool_output_chars=2)[0]
    assert _tool_contents(row) == ["éé\n[... 3 chars of tool output truncated]"]


# ---------------------------------------------------------------- E32
def test_e32_unroll_counts_per_sample_d11():
    # [user, assistant(call), tool(cut), assistant "done"]: sample 1 ends before the tool message.
    samples = wai.training_rows([_tool_row("0123456789")], unroll=True, max_tool_output_chars=4)
    assert len(samples) == 2
    assert "tool_output_truncated" not in samples[0]
    assert "tool_output_chars_cut" not in samples[0]
    assert (samples[1]["tool_output_truncated"], samples[1]["tool_output_chars_cut"]) == (1, 6)
    # Spec reports 2 and 12; DECISIONS 11: totals are true.
    rep = wai.export_dataset([_tool_row("0123456789")], unroll=True, max_tool_output_chars=4)
    assert rep["n"] == 2
    assert rep["tool_output_truncated"] == 1
    assert rep["tool_output_chars_cut"] == 6


def test_e32_unroll_two_cut_tools_split_across_samples_d11():
    row = {
        "prompt": "p",
        "steps": [
            {"tool": "a", "arguments": {}, "result": "0123456789"},
            {"text": "mid"},
            {"tool": "b", "arguments": {}, "result": "abcdefgh"},
        ],
        "final_text": "done",
    }
    # messages: user, asst(call a), tool a, asst mid, asst(call b), tool b, asst done
    samples = wai.training_rows([row], unroll=True, max_tool_output_chars=4)
    got = [(s.get("tool_output_truncated", 0), s.get("tool_output_chars_cut", 0)) for s in samples]
    assert got == [(0, 0), (1, 6), (1, 6), (2, 10)]
    rep = wai.export_dataset([row], unroll=True, max_tool_output_chars=4)
    assert (rep["tool_output_truncated"], rep["tool_output_chars_cut"]) == (4, 22)


# ---------------------------------------------------------------- E33
def test_e33_unroll_row_without_assistant_is_one_plain_sample():
    samples = wai.training_rows([{"prompt": "only", "scenario_id": "s"}], unroll=True)
    assert samples == [
        {
            "messages": [{"role": "user", "content": "only"}],
            "loss_mask": [0],
            "prompt": "only",
            "scenario_id": "s",
            "schema_version": "1",
        }
    ]
    assert "unroll" not in samples[0]
    assert "lineage" not in samples[0]


# ---------------------------------------------------------------- E34
def test_e34_unroll_source_without_prompt_scenario_rollout():
    samples = wai.training_rows(
        [{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}], unroll=True
    )
    expected = {
        "messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
        "loss_mask": [0, 1],
        "unroll": {"turn": 1, "turns": 1},
        "lineage": {"unrolled_from": {"prompt_sha1": "da39a3ee5e6b", "rollout_index": None}},
        "schema_version": "1",
    }
    assert samples == [expected]
    assert list(samples[0].keys()) == list(expected.keys())


def test_e34_unroll_source_with_prompt_scenario_rollout():
    samples = wai.training_rows(
        [{"prompt": "Hello", "steps": [{"text": "hi"}], "scenario_id": "s", "rollout_index": 3}], unroll=True
    )
    assert samples[0]["lineage"] == {
        "unrolled_from": {"prompt_sha1": "f7ff9e8b7bb2", "rollout_index": 3, "scenario_id": "s"}
    }


# ---------------------------------------------------------------- E35
_SRC = {"prompt_sha1": "f7ff9e8b7bb2", "rollout_index": None}


@pytest.mark.parametrize("lineage", ["abc", 5, [["k", "v"]]])
def test_e35_non_dict_lineage_d11(lineage):
    # Spec: "abc" -> ValueError, 5 -> TypeError, [["k","v"]] -> {"k": "v", ...}.
    # DECISIONS 11 (read literally): any non-dict lineage is kept under "source_lineage".
    row = {"prompt": "Hello", "steps": [{"text": "a"}, {"text": "b"}], "lineage": lineage}
    samples = wai.training_rows([row], unroll=True)
    assert len(samples) == 2
    for s in samples:
        assert s["lineage"] == {"source_lineage": lineage, "unrolled_from": _SRC}
    assert [s["unroll"] for s in samples] == [{"turn": 1, "turns": 2}, {"turn": 2, "turns": 2}]


def test_e35_dict_lineage_gains_unrolled_from():
    row = {"prompt": "Hello", "steps": [{"text": "a"}], "lineage": {"parent": "x"}}
    samples = wai.training_rows([row], unroll=True)
    assert samples[0]["lineage"] == {"parent": "x", "unrolled_from": _SRC}
    assert row["lineage"] == {"parent": "x"}  # the source row is not mutated


# ---------------------------------------------------------------- E36
def _two_turn_row():
    return {
        "prompt": "p",
        "scenario_id": "s",
        "messages": [
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "a2"},
        ],
    }


@pytest.mark.parametrize("mode", ["assistant", "final"])
def test_e36_unroll_ignores_mask_mode(mode):
    rep = wai.export_dataset([_two_turn_row(), _two_turn_row()], unroll=True, mask_mode=mode)
    assert rep["mask_mode"] == "final (unrolled)"
    assert rep["unrolled"] is True
    assert rep["groups"] == 0
    assert rep["n"] == 4
    assert rep["trained_messages"] == 4
    assert rep["masked_messages"] == 8
    samples = wai.training_rows([_two_turn_row(), _two_turn_row()], unroll=True, mask_mode=mode)
    assert [s["loss_mask"] for s in samples] == [[0, 1], [0, 0, 0, 1], [0, 1], [0, 0, 0, 1]]
    for s in samples:
        for key in ("group_id", "k", "n0", "n1", "reward_mean", "reward_std"):
            assert key not in s
