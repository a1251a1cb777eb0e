"""``dumps_reusing`` (a row's tools serialized once per export) writes the bytes ``dumps`` writes,
including where ``dumps`` falls back for values orjson refuses; and both exporters give the same file
and report with it as without it."""

import datetime

import pytest
from hypothesis import example, given, settings, strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import jsonl
from whileai_pipeline.core.jsonl import dumps, dumps_reusing

LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2 ** 70), 2 ** 70), st.floats(),
                 st.text(), st.sampled_from([{1, 2}, b"\xffraw", datetime.date(2026, 11, 29), 1.5j]))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=4), st.integers(), st.booleans(), st.none(),
                              st.sampled_from([0, 1, "0", "1", "true", "null", 2 ** 64, str(2 ** 64)])), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=600, deadline=None)
@example(tools=[{-(2 ** 63) - 1: None}], other={"": {False: None}}, tools_first=False)  # found by hypothesis
@example(tools=[2 ** 70], other={"k": {1: "int key", "1": "str key"}}, tools_first=True)  # keys that print alike
@given(tools=st.lists(VALUE, min_size=1, max_size=4), other=st.dictionaries(st.text(max_size=5), VALUE, max_size=4),
       tools_first=st.booleans())
def test_equals_dumps_of_the_row(tools, other, tools_first):
    other.pop("tools", None)  # the encoded bytes are those of this row's own tools
    row = {"tools": tools, **other} if tools_first else {**other, "tools": tools}
    expected = dumps(row)
    assert dumps_reusing(dict(row), "tools", dumps(list(tools))) == expected


def test_the_fallback_for_a_huge_integer_changes_nothing_else_in_the_row():
    """orjson refuses integers beyond 64 bits, so ``dumps`` falls back for the whole row; the other keys
    and values are still written as orjson writes them (a bool key as ``false``, 2**63 as a number),
    and the big integer keeps every digit, as a number."""
    assert dumps({False: 1, None: 2, 1.5: 3, "n": 2 ** 63, "big": 2 ** 64}) == \
        b'{"false":1,"null":2,"1.5":3,"n":9223372036854775808,"big":18446744073709551616}'
    assert dumps({False: 1, None: 2, 1.5: 3, "n": 2 ** 63}) == b'{"false":1,"null":2,"1.5":3,"n":9223372036854775808}'


def test_a_row_without_the_key_or_without_encoded_bytes_is_plain_dumps():
    row = {"messages": [{"role": "user", "content": "hi"}]}
    assert dumps_reusing(dict(row), "tools", b'[{"x":1}]') == dumps(row)
    with_tools = {**row, "tools": [{"type": "function"}]}
    assert dumps_reusing(dict(with_tools), "tools", None) == dumps(with_tools)


def test_the_encoded_bytes_are_what_is_written():
    """The substitution really happens (else the tests above would pass with plain dumps)."""
    assert dumps_reusing({"a": 1, "tools": [1]}, "tools", b'["stand-in"]') == b'{"a":1,"tools":["stand-in"]}'


TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find an order \u00e9",
                                             "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]


def _run(tmp_path):
    rows = []
    for g in range(3):
        for k in range(4):
            rows.append({"prompt": f"task {g}", "rollout_index": k, "reward": k / 3,
                         "steps": [{"tool": "lookup", "arguments": {"id": f"o{g}{k}"}, "result": {"ok": k}},
                                   {"text": f"done {g}.{k} " + "x" * (k + 1) * 40}],
                         "final_text": f"done {g}.{k} " + "x" * (k + 1) * 40})
    path = tmp_path / "run.jsonl"
    jsonl.write_jsonl(path, rows)
    return path


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_exports_are_the_same_bytes_as_with_plain_dumps(tmp_path, monkeypatch, fmt):
    run = _run(tmp_path)
    pairs = tmp_path / "pairs.jsonl"
    from whileai_pipeline.core.pairs import build_pairs_file
    build_pairs_file(run, pairs)

    def both(tag):
        sft = wai.export_dataset(run, tmp_path / f"sft-{tag}.jsonl", system_prompt="sys", tools=TOOLS, format=fmt)
        dpo = wai.export_preference(str(pairs), tmp_path / f"dpo-{tag}.jsonl", system_prompt="sys", tools=TOOLS,
                                    format=fmt)
        return sft, dpo

    fast = both("fast")
    import whileai_pipeline.core.preference as preference
    import whileai_pipeline.core.sft as sft

    def plain(row, key, encoded, undo=None):
        return dumps(row)

    monkeypatch.setattr(sft, "dumps_reusing", plain)
    monkeypatch.setattr(preference, "dumps_reusing", plain)
    import whileai_pipeline.core.wire as wire
    monkeypatch.setattr(wire, "dumps_reusing", plain)  # TRL rows from a file: ObjectTexts.dumps
    slow = both("slow")
    for a, b in zip(fast, slow):
        assert {k: v for k, v in a.items() if k not in ("path", "elapsed_seconds")} == \
               {k: v for k, v in b.items() if k not in ("path", "elapsed_seconds")}
    for kind in ("sft", "dpo"):
        written = (tmp_path / f"{kind}-fast.jsonl").read_bytes()
        assert written == (tmp_path / f"{kind}-slow.jsonl").read_bytes()
        assert b'"tools":[{"type":"function"' in written


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_row_nested_deeper_than_orjson_writes_keeps_its_tools(tmp_path, fmt):
    """Past orjson's 255 levels ``dumps`` falls back to Python's json, which cannot write an
    ``orjson.Fragment``: the tools are written from their own value there, not as the Fragment's repr."""
    deep = []
    for _ in range(300):
        deep = [deep]
    row = {"tools": TOOLS, "world_state": deep}
    assert dumps_reusing(dict(row), "tools", dumps(TOOLS)) == dumps(row)
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
             "world_state": deep, "reward": 1.0}]
    out = tmp_path / "sft.jsonl"
    wai.export_dataset(rows, out, tools=TOOLS, format=fmt)
    import json
    written = json.loads(out.read_bytes())
    assert written["tools"] == TOOLS
    assert written["world_state"] == deep
