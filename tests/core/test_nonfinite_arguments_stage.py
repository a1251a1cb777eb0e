"""Tool-call arguments holding NaN or an infinity survive a stage file as text (``nonfinite_arguments_as_text``):
the exports read back the same calls and the round-trip gate reaches the same verdict as on the run itself."""

import copy
import math

import orjson
import pytest

import whileai_pipeline as wai
from whileai_pipeline.core.wire import nonfinite_arguments_as_text

NAN_ARGS = {"order_id": math.nan, "limits": [1, math.inf, {"low": -math.inf}]}
BASE = {"prompt": "Where is order 7?", "final_text": "It shipped.", "reward": 1}
ROWS = {
    "steps": dict(BASE, steps=[{"tool": "lookup", "arguments": NAN_ARGS, "result": "ok"},
                               {"tool": "lookup", "arguments": {"order_id": 7}, "result": "ok"}]),
    "tool_trace": dict(BASE, tool_trace=[{"tool": "lookup", "input": NAN_ARGS, "output": "ok"}]),
    "loose_calls": dict(BASE, messages=[
        {"role": "user", "content": "Where is order 7?"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "lookup", "arguments": NAN_ARGS}]},
        {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "It shipped."}]),
    "envelope_calls": dict(BASE, messages=[
        {"role": "user", "content": "Where is order 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": NAN_ARGS}},
            {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": {"order_id": 8}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "It shipped."}]),
    "bare_nan": dict(BASE, steps=[{"tool": "lookup", "arguments": math.nan, "result": "ok"}]),
}


def _through_a_stage_file(row):
    """The row as the scored stage writes it and the next stage reads it (orjson: NaN would become null)."""
    return orjson.loads(orjson.dumps(nonfinite_arguments_as_text(copy.deepcopy(row))))


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("shape", sorted(ROWS))
def test_a_stage_file_keeps_what_the_round_trip_gate_refuses(tmp_path, shape, fmt):
    row = ROWS[shape]
    direct = wai.export_dataset([copy.deepcopy(row)], tmp_path / "direct.jsonl", format=fmt, validate=False)
    staged = wai.export_dataset([_through_a_stage_file(row)], tmp_path / "staged.jsonl", format=fmt, validate=False)
    assert direct["tool_call_roundtrip"]["invalid"] >= 1
    assert staged["tool_call_roundtrip"] == direct["tool_call_roundtrip"]
    assert (tmp_path / "staged.jsonl").read_bytes() == (tmp_path / "direct.jsonl").read_bytes()
    with pytest.raises(wai.RoundtripInvalidError):
        wai.export_dataset([_through_a_stage_file(row)], tmp_path / "refused.jsonl", format=fmt)
    # without the text, the stage file would have made the calls pass: what the pipeline published
    nulled = orjson.loads(orjson.dumps(copy.deepcopy(row)))
    assert wai.export_dataset([nulled], format=fmt, validate=False)["tool_call_roundtrip"]["invalid"] == 0


def test_finite_arguments_and_other_keys_are_left_as_they_are():
    row = dict(BASE, steps=[{"tool": "lookup", "arguments": {"order_id": 7.5}, "result": math.nan,
                             "text": "x"}], reward=math.nan)
    assert nonfinite_arguments_as_text(copy.deepcopy(row))["steps"][0]["arguments"] == {"order_id": 7.5}
    kept = nonfinite_arguments_as_text(copy.deepcopy(row))
    assert math.isnan(kept["reward"]) and math.isnan(kept["steps"][0]["result"])  # not arguments: DECISIONS 1's


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("shape", ["steps", "loose_calls", "envelope_calls"])  # a pair's sides leave tool_trace out
def test_a_pairs_file_keeps_what_the_round_trip_gate_refuses(tmp_path, shape, fmt):
    """build_pairs_file gives build_preference_pairs' pairs (API_CONTRACT): a pairs file is a stage file too, and
    a run's NaN arguments written as null there made the DPO export of the file pass calls that the export of
    the pairs in memory refuses."""
    import json

    from whileai_pipeline.core.pairs import build_pairs_file

    rows = [dict(ROWS[shape], reward=1), dict(ROWS[shape], reward=0, final_text="No idea.")]
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(row) + "\n" for row in rows))  # NaN/Infinity tokens, as Python writes them
    pairs, _ = wai.build_preference_pairs(copy.deepcopy(rows))
    build_pairs_file(run, tmp_path / "pairs.jsonl")
    direct = wai.export_preference(pairs, tmp_path / "direct.jsonl", format=fmt, validate=False)
    from_file = wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "file.jsonl", format=fmt, validate=False)
    assert direct["tool_call_roundtrip"]["invalid"] >= 1
    assert from_file["tool_call_roundtrip"] == direct["tool_call_roundtrip"]
    assert (tmp_path / "file.jsonl").read_bytes() == (tmp_path / "direct.jsonl").read_bytes()
    with pytest.raises(wai.RoundtripInvalidError):
        wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "refused.jsonl", format=fmt)
