"""A TRL export writes tool-call arguments that ``to_wire`` encoded from a JSON object as that text
(``wire.ObjectTexts``) instead of decoding and encoding them again. The rows, the gate counts and the
bytes must be what decoding gives, for every kind of argument value a row can hold."""

import datetime
import json
from unittest import mock

import numpy
import orjson
import pytest
from hypothesis import example, given, settings, strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import preference, sft, trl
from whileai_pipeline.core.jsonl import write_jsonl
from whileai_pipeline.core.wire import ObjectTexts, to_wire

KEYS = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans(), st.none(),
                 st.sampled_from(["1", "true", "null", "\ud800"]))
LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2 ** 70), 2 ** 70), st.floats(), st.text(max_size=8),
    st.sampled_from(["a\ud800", '{"a": 1}', '"{\\"b\\": 2}"', "NaN", "{bad", "12345678901234567890123",
                     1e300, -0.0, 2 ** 64 - 1, -(2 ** 63), {1, 2}, datetime.date(2026, 11, 30), b"\xffraw"]),
)
VALUE = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=10)


def _encoded(value, times):
    for _ in range(times):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError):
            break
    return value


def _row(arguments):
    return {"prompt": "p", "final_text": "done", "reward": 1.0, "steps": [
        {"tool": "lookup", "arguments": arguments, "result": "r"}, {"text": "a"},
        {"tool": "lookup", "arguments": {"id": 7, "q": [1.5, None]}, "result": "r2"}]}


def _outcomes(raw, plans, texts):
    with mock.patch.object(sft, "ObjectTexts", ObjectTexts if texts else (lambda: None)):
        return sft._sft_outcomes(raw, plans)


PLANS = {
    "training": dict(mask_mode="assistant", unroll=False),
    "completion": dict(mask_mode="final", unroll=False),
    "unrolled": dict(mask_mode="assistant", unroll=True),
}


@settings(max_examples=400, deadline=None)
@example(value={1: "int key", "1": "str key"}, times=0, shape="training", both=False)
@example(value={"x": float("nan")}, times=0, shape="training", both=True)
@example(value={"n": 2 ** 70}, times=1, shape="completion", both=False)
@example(value={"s": "a\ud800"}, times=0, shape="unrolled", both=True)
@given(value=VALUE, times=st.integers(0, 5), shape=st.sampled_from(sorted(PLANS)), both=st.booleans())
def test_outcomes_equal_the_decoding_path(value, times, shape, both):
    formats = ["openai", "trl"] if both else ["trl"]
    plans = sft._plans(formats, "sys", None, True, PLANS[shape]["mask_mode"], PLANS[shape]["unroll"], None,
                       json_rows=True)
    raw = _row(_encoded(value, times))
    assert _outcomes(raw, plans, True) == _outcomes(raw, plans, False)


@settings(max_examples=200, deadline=None)
@example(value={1: "int key", "1": "str key"}, times=0, formats=("trl",), tools=False)
@example(value={"x": float("nan")}, times=1, formats=("openai", "trl"), tools=True)
@given(value=VALUE, times=st.integers(0, 5), formats=st.sampled_from([("trl",), ("openai", "trl"), ("trl", "openai")]),
       tools=st.booleans())
def test_pair_outcomes_equal_the_decoding_path(value, times, formats, tools):
    plans = [preference._PairPlan("sys", [{"type": "function"}] if tools else None, True, False, fmt, json_rows=True)
             for fmt in formats]
    chosen = _row(_encoded(value, times))
    item = {"prompt": "p", "chosen": chosen, "rejected": {**chosen, "final_text": "worse"}, "margin": 0.5}
    with mock.patch.object(preference, "ObjectTexts", lambda: None):
        slow = preference._pair_outcomes(item, plans)
    assert preference._pair_outcomes(item, plans) == slow


def test_object_arguments_are_written_as_their_text_not_decoded(tmp_path):
    """The substitution really happens: with decoding switched off for everything but the texts
    ``to_wire`` wrote, an export of object arguments is still complete and equal."""
    rows = [_row({"id": i, "q": "x" * i}) for i in range(4)]
    write_jsonl(tmp_path / "run.jsonl", rows)
    write_jsonl(tmp_path / "pairs.jsonl",
                [{"prompt": "p", "chosen": rows[i], "rejected": rows[i + 1], "margin": 0.5} for i in range(3)])
    rows, pairs = tmp_path / "run.jsonl", tmp_path / "pairs.jsonl"  # JSONL sources: JSON's own types only
    want, want_dpo = tmp_path / "want.jsonl", tmp_path / "want-dpo.jsonl"
    wai.export_dataset(rows, want, format="trl")
    wai.export_preference(pairs, want_dpo, format="trl")
    calls = []
    real = trl.decode_arguments

    def counting(arguments):
        calls.append(arguments)
        return real(arguments)

    got, got_dpo = tmp_path / "got.jsonl", tmp_path / "got-dpo.jsonl"
    with mock.patch.object(trl, "decode_arguments", counting):
        wai.export_dataset(rows, got, format="trl")
        wai.export_preference(pairs, got_dpo, format="trl")
    assert calls == []
    assert got.read_bytes() == want.read_bytes()
    assert got_dpo.read_bytes() == want_dpo.read_bytes()
    assert got_dpo.read_bytes().count(b'"arguments":{"id":') == 2 * 3 * 2  # two calls a side, three pairs
    assert orjson.loads(got.read_bytes().splitlines()[0])["messages"][1]["tool_calls"][0]["function"]["arguments"] \
        == {"id": 0, "q": ""}


def test_only_texts_encoded_from_an_object_are_kept():
    objects = ObjectTexts()
    wire = to_wire([{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "a", "arguments": {"id": 1}}},
        {"function": {"name": "b", "arguments": "{not json"}},
        {"function": {"name": "c", "arguments": {"x": float("inf")}}},
        {"function": {"name": "d", "arguments": {1: "int key"}}},
        {"function": {"name": "e", "arguments": [1, 2]}},
        {"function": {"name": "f", "arguments": None}},
    ]}], objects=objects)
    texts = [call["function"]["arguments"] for call in wire[0]["tool_calls"]]
    assert texts == ['{"id":1}', "{not json", '{"x":Infinity}', '{"1":"int key"}', "[1,2]", "{}"]
    assert objects.texts == {'{"id":1}', "{}"}


@pytest.mark.parametrize("fmt_list", [["trl"], ["openai", "trl"]])
@pytest.mark.parametrize("shape", sorted(PLANS))
def test_a_row_nested_deeper_than_orjson_writes_is_written_with_decoded_arguments(tmp_path, fmt_list, shape):
    """Past 255 levels ``dumps`` falls back to Python's json, which cannot write a Fragment: the
    arguments are decoded after all (``ObjectTexts.undo``), and the file equals the decoding path's."""
    deep = []
    for _ in range(300):
        deep = [deep]
    rows = tmp_path / "run.jsonl"
    write_jsonl(rows, [{**_row({"id": 1}), "world_state": deep}, _row({"id": 2})])
    options = dict(mask_mode=PLANS[shape]["mask_mode"], unroll=PLANS[shape]["unroll"], tools=[{"type": "function"}])
    outputs = {fmt: tmp_path / f"{fmt}-fast.jsonl" for fmt in fmt_list}
    undone = []
    real_undo = ObjectTexts.undo

    def counting_undo(self):
        undone.append(len(self.placed))
        real_undo(self)

    with mock.patch.object(ObjectTexts, "undo", counting_undo):
        wai.export_datasets(rows, outputs, **options)
    assert undone and all(undone)  # the deep row's Fragments were decoded after all
    with mock.patch.object(sft, "ObjectTexts", lambda: None):
        slow = {fmt: tmp_path / f"{fmt}-slow.jsonl" for fmt in fmt_list}
        wai.export_datasets(rows, slow, **options)
    for fmt in fmt_list:
        assert outputs[fmt].read_bytes() == slow[fmt].read_bytes()
    first = json.loads(outputs["trl"].read_bytes().splitlines()[0])
    messages = first.get("messages") or first["prompt"] + first["completion"]
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)


@settings(max_examples=400, deadline=None)
@example(value={1: "int key", "1": "str key"}, times=0)
@example(value={"a": {1, 2}, "d": datetime.date(2026, 11, 30)}, times=0)
@example(value={"a": {1, 2}, "d": datetime.date(2026, 11, 30), "b": b"x", "f": float("-inf")}, times=0)
@example(value={"n": numpy.array([0.1, 2.5], dtype=numpy.float32), "i": numpy.int64(3)}, times=0)
@given(value=VALUE, times=st.integers(0, 5))
def test_wire_text_is_what_dumps_writes(value, times):
    """``wire_arguments`` tries plain ``orjson.dumps`` first (to know which texts are canonical): its
    text must stay what ``jsonl.dumps`` (non-string keys, numpy, the ``default`` conversions) writes."""
    from whileai_pipeline.core.jsonl import dumps, jsonable
    from whileai_pipeline.core.wire import decode_arguments, has_nonfinite, lenient_loads, wire_arguments

    raw = _encoded(value, times)
    decoded = decode_arguments(raw)
    if isinstance(decoded, str):
        try:
            decoded = lenient_loads(decoded)
        except ValueError:
            assert wire_arguments(raw) == decoded
            return
    elif not decoded:
        decoded = {}
    if has_nonfinite(decoded):
        assert wire_arguments(raw) == json.dumps(decoded, separators=(",", ":"), ensure_ascii=False, default=jsonable)
    else:
        assert wire_arguments(raw) == dumps(decoded).decode()


@pytest.mark.parametrize("levels", [240, 247, 250, 253])
def test_arguments_nested_nearly_as_deep_as_orjson_writes_equal_the_decoding_path(tmp_path, levels):
    """Arguments orjson writes alone but not at their depth in a TRL row: the decoded row falls back to
    Python's json (``1e-07``), so such a text must not be kept (as a Fragment it would be ``1e-7``)."""
    arguments = {"y": 1e-7}
    for _ in range(levels):
        arguments = {"k": arguments}
    run = tmp_path / "run.jsonl"
    write_jsonl(run, [_row(arguments)])
    wai.export_dataset(run, tmp_path / "fast.jsonl", format="trl")
    with mock.patch.object(sft, "ObjectTexts", lambda: None):
        wai.export_dataset(run, tmp_path / "slow.jsonl", format="trl")
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "slow.jsonl").read_bytes()


@pytest.mark.parametrize("fmt", ["trl", "openai"])
def test_rows_given_in_memory_have_their_arguments_decoded(tmp_path, fmt):
    """Rows in memory may hold what orjson writes unchecked: an ``orjson.Fragment`` of ``NaN`` in the
    arguments must meet the round-trip gate as the NaN it is, in both formats."""
    rows = [_row({"f": orjson.Fragment(b"NaN")})]
    with pytest.raises(wai.RoundtripInvalidError, match="^tool_call_roundtrip_invalid: 1 of 2 tool calls"):
        wai.export_dataset(rows, tmp_path / "out.jsonl", format=fmt)
    pairs = [{"prompt": "p", "chosen": rows[0], "rejected": {**rows[0], "final_text": "worse"}, "margin": 0.5}]
    with pytest.raises(wai.RoundtripInvalidError, match="^tool_call_roundtrip_invalid: 2 of 4 tool calls"):
        wai.export_preference(pairs, tmp_path / "dpo.jsonl", format=fmt)
    assert not list(tmp_path.iterdir())


def test_trl_pairs_with_a_later_user_turn_are_counted_and_warned_about(tmp_path):
    """A TRL side starts at the first assistant turn; a later user turn stays inside it, and DPOTrainer
    scores it as the model's words. The report counts such pairs (TRL only) and says what it costs."""
    multi = {"prompt": "p", "final_text": "done", "reward": 1,
             "steps": [{"text": "a1"}, {"user": "u2"}, {"text": "a2"}]}
    single = {"prompt": "q", "final_text": "fine", "reward": 1, "steps": [{"text": "b1"}]}
    pairs = [{"prompt": r["prompt"], "chosen": r, "rejected": {**r, "final_text": "worse", "reward": 0}, "margin": 1.0}
             for r in (multi, single, multi)]
    trl = wai.export_preference(pairs, tmp_path / "trl.jsonl", format="trl")
    assert trl["user_turns_in_sides"] == 2
    assert [w for w in trl.get("warnings", []) if "user or system turn" in w] == [
        "2 of 3 pairs have a user or system turn inside chosen or rejected (conversations with a later user "
        "message): DPOTrainer scores each side whole, so it counts those words as the model's. Pair single-turn "
        "conversations where that matters."]
    rows = [orjson.loads(line) for line in (tmp_path / "trl.jsonl").read_bytes().splitlines()]
    assert [m["role"] for m in rows[0]["chosen"]] == ["assistant", "user", "assistant"]
    openai = wai.export_preference(pairs, tmp_path / "openai.jsonl", format="openai")
    assert "user_turns_in_sides" not in openai
    assert "user_turns_in_sides" not in wai.export_preference(pairs[1:2], tmp_path / "one.jsonl", format="trl")
