"""Spec section 9, 'Preference': E62..E70 (spec 4.1, 7.3, 7.6, 8.2; DECISIONS 12, 14, 16)."""
from __future__ import annotations

import pytest

import whileai_pipeline.simulations as wai


def _side(prompt, text):
    return {"prompt": prompt, "steps": [{"text": text}], "final_text": text}


def _pair(prompt="Refund A", good="Refunded.", bad="No.", **extra):
    pair = {"prompt": prompt, "chosen": _side(prompt, good), "rejected": _side(prompt, bad)}
    pair.update(extra)
    return pair


def _tool_side(prompt, arguments, text="Refunded."):
    return {
        "prompt": prompt,
        "steps": [{"tool": "refund", "arguments": arguments, "result": {"ok": True}}, {"text": text}],
        "final_text": text,
    }


# ---------------------------------------------------------------- E62
def test_e62_all_tied_pairs_refused_by_default(tmp_path):
    out = tmp_path / "pref.jsonl"
    pairs = [_pair(tie=True), _pair(prompt="Refund B", tie=True)]
    with pytest.raises(ValueError) as ei:
        wai.export_preference(pairs, out)
    assert str(ei.value).startswith("no_preference_pairs:")
    assert isinstance(ei.value, wai.NoPreferencePairsError)
    assert not out.exists()


def test_e62_all_tied_pairs_validate_false_gives_empty_report_no_file(tmp_path):
    out = tmp_path / "pref.jsonl"
    pairs = [_pair(tie=True), _pair(prompt="Refund B", tie="no")]  # any truthy tie counts
    rep = wai.export_preference(pairs, out, validate=False)
    assert rep["pairs"] == 0
    assert rep["format"] == "openai"
    assert rep["ties_dropped"] == 2
    assert "path" in rep and rep["path"] is None
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- E63
def test_e63_drop_ties_false_exports_tied_pairs(tmp_path, read_jsonl_out):
    pairwise = {
        "winner": "tie",
        "position_consistent": False,
        "swapped": True,
        "reasons": ["A", "A"],
        "judge": "always_a",
    }
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference([_pair(tie=True, pairwise=pairwise)], out, drop_ties=False)
    assert rep["pairs"] == 1
    assert "ties_dropped" not in rep
    assert rep["path"] == str(out)
    (line,) = read_jsonl_out(out)
    assert line["tie"] is True
    assert line["pairwise"] == pairwise
    keys = list(line.keys())
    assert keys[:3] == ["prompt", "chosen", "rejected"]
    assert keys.index("tie") < keys.index("pairwise") < keys.index("schema_version")
    assert keys[-1] == "schema_version"


# ---------------------------------------------------------------- E64
def test_e64_pairwise_winner_rejected_exported_unchanged(tmp_path, read_jsonl_out):
    pairwise = {"winner": "rejected", "position_consistent": True, "swapped": True, "reasons": ["B", "A"], "judge": "j"}
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference([_pair(tie=False, pairwise=pairwise)], out)
    assert rep["pairs"] == 1
    (line,) = read_jsonl_out(out)
    assert line["tie"] is False
    assert line["pairwise"] == pairwise
    # sides never swapped
    assert line["chosen"] == [{"role": "user", "content": "Refund A"}, {"role": "assistant", "content": "Refunded."}]
    assert line["rejected"] == [{"role": "user", "content": "Refund A"}, {"role": "assistant", "content": "No."}]


# ---------------------------------------------------------------- E65
def _opener_pair():
    chosen = {
        "opener": "Hi, I'm the bot.",
        "prompt": "help",
        "steps": [{"text": "Sure, done."}],
        "final_text": "Sure, done.",
    }
    return {"prompt": "help", "chosen": chosen, "rejected": _side("help", "No.")}


def test_e65_trl_opener_first_pair_dropped_without_system(tmp_path, read_jsonl_out):
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference([_opener_pair(), _pair()], out, format="trl")
    assert rep["pairs"] == 1
    assert rep["format"] == "trl"
    assert rep["no_completion_dropped"] == 1
    (line,) = read_jsonl_out(out)
    assert line["prompt"] == [{"role": "user", "content": "Refund A"}]


def test_e65_trl_opener_first_pair_kept_with_system(tmp_path, read_jsonl_out):
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference([_opener_pair(), _pair()], out, format="trl", system_prompt="SYS")
    assert rep["pairs"] == 2
    assert "no_completion_dropped" not in rep
    first, second = read_jsonl_out(out)
    assert first["prompt"] == [{"role": "system", "content": "SYS"}]
    assert first["chosen"] == [
        {"role": "assistant", "content": "Hi, I'm the bot."},
        {"role": "user", "content": "help"},
        {"role": "assistant", "content": "Sure, done."},
    ]
    assert first["rejected"] == [{"role": "assistant", "content": "No."}]
    assert second["prompt"] == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "Refund A"}]


# ---------------------------------------------------------------- E66
def test_e66_trl_prefix_taken_from_chosen_side(tmp_path, read_jsonl_out):
    pair = {"prompt": "Refund A", "chosen": _side("Refund A", "Refunded."), "rejected": _side("Refund B please", "No.")}
    out = tmp_path / "pref.jsonl"
    wai.export_preference([pair], out, format="trl")
    (line,) = read_jsonl_out(out)
    assert line["prompt"] == [{"role": "user", "content": "Refund A"}]
    assert line["chosen"] == [{"role": "assistant", "content": "Refunded."}]
    assert line["rejected"] == [{"role": "assistant", "content": "No."}]
    assert "Refund B please" not in out.read_text(encoding="utf-8")


def test_e66_trl_tool_arguments_are_objects(tmp_path, read_jsonl_out):
    pair = {"prompt": "Refund A", "chosen": _tool_side("Refund A", {"id": "A"}), "rejected": _side("Refund A", "No.")}
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference([pair], out, format="trl")
    assert rep["tool_call_roundtrip"]["encoding"] == "dict"
    (line,) = read_jsonl_out(out)
    assert line["prompt"] == [{"role": "user", "content": "Refund A"}]
    assert line["chosen"][0]["tool_calls"][0]["function"]["arguments"] == {"id": "A"}
    assert [m["role"] for m in line["chosen"]] == ["assistant", "tool", "assistant"]


# ---------------------------------------------------------------- E67
@pytest.mark.parametrize("validate", [True, False])
def test_e67_empty_side_schema_invalid_regardless_of_validate(tmp_path, validate):
    out = tmp_path / "pref.jsonl"
    pair = {"prompt": "p", "chosen": {}, "rejected": _side("p", "No.")}
    with pytest.raises(ValueError) as ei:
        wai.export_preference([pair], out, validate=validate)
    assert str(ei.value).startswith("schema_invalid in export_preference: 0:chosen_missing")
    assert not out.exists()


def test_e67_empty_rejected_side_named():
    pair = {"prompt": "p", "chosen": _side("p", "Yes."), "rejected": {}}
    with pytest.raises(ValueError) as ei:
        wai.export_preference([pair], validate=False)
    assert str(ei.value).startswith("schema_invalid in export_preference: 0:rejected_missing")


# ---------------------------------------------------------------- E68
def _e68_pairs():
    return [
        {"prompt": "Refund A", "chosen": _tool_side("Refund A", {"id": "A"}), "rejected": _side("Refund A", "No.")},
        {"prompt": "Refund B", "chosen": _tool_side("Refund B", {"id": "B"}), "rejected": _tool_side("Refund B", "{a: 1}", "Hm.")},
    ]


def test_e68_roundtrip_rows_index_sides(tmp_path):
    rep = wai.export_preference(_e68_pairs(), validate=False)
    rt = rep["tool_call_roundtrip"]
    assert (rt["checked"], rt["invalid"], rt["rows"], rt["encoding"]) == (3, 1, [3], "json_string")
    assert rep["pairs"] == 2


def test_e68_roundtrip_gate_refuses_with_report_d14(tmp_path):
    out = tmp_path / "pref.jsonl"
    with pytest.raises(ValueError) as ei:
        wai.export_preference(_e68_pairs(), out)
    assert str(ei.value).startswith("tool_call_roundtrip_invalid:")
    assert isinstance(ei.value, wai.RoundtripInvalidError)
    assert ei.value.report["tool_call_roundtrip"]["rows"] == [3]
    assert not out.exists()


# ---------------------------------------------------------------- E69
def test_e69_bool_length_delta_and_margin_counted(tmp_path, read_jsonl_out):
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference([_pair(length_delta=True, margin=True)], out)
    assert rep["chosen_longer_frac"] == 1.0
    assert rep["mean_margin"] == 1.0
    (line,) = read_jsonl_out(out)
    assert line["length_delta"] is True
    assert line["margin"] is True


# ---------------------------------------------------------------- E70
def test_e70_length_delta_on_raw_text_with_think_block(tmp_path, read_jsonl_out):
    rows = [
        {"prompt": "Refund A", "steps": [{"text": "<think>hmm</think>Refunded."}],
         "final_text": "<think>hmm</think>Refunded.", "reward": 1},
        {"prompt": "Refund A", "steps": [{"text": "No."}], "final_text": "No.", "reward": 0},
    ]
    pairs, report = wai.build_preference_pairs(rows)
    assert len(pairs) == 1
    assert pairs[0]["length_delta"] == 24
    out = tmp_path / "pref.jsonl"
    rep = wai.export_preference(pairs, out)
    assert rep["pairs"] == 1
    (line,) = read_jsonl_out(out)
    assert line["length_delta"] == 24
    assert line["chosen"][-1] == {"role": "assistant", "content": "Refunded."}
    assert line["rejected"][-1] == {"role": "assistant", "content": "No."}
