"""A written row whose tool results do not pair up with its calls says so in the export's warnings.

The rows themselves are the spec's (3.4 as amended by DECISIONS 9): an id-less tool result takes the oldest
call still pending, even one an earlier turn left unanswered (E21), and ids a row brings are kept as they are.
So a result can be shown to the model as the answer to another call, a call id can be used twice, and a
result can answer no call at all. OpenAI refuses such a row and a chat template pairs the wrong result
with a call; the export must say so, not write it without a word.
"""

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.wire import WireStats, to_wire, tool_link_problem

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("a", "b")]
LINKS = "tool results that do not pair up with their calls"


def _call(name, args=None, id=None):
    call = {"function": {"name": name, "arguments": args or {}}}
    if id is not None:
        call["id"] = id
    return call


def _tool(content, id=None):
    message = {"role": "tool", "content": content}
    if id is not None:
        message["tool_call_id"] = id
    return message


def _assistant(*calls, content=""):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def _row(*middle):
    return {"messages": [{"role": "user", "content": "q"}, *middle, {"role": "assistant", "content": "done"}]}


# the spec's own E21: the second turn's result is linked to the first turn's unanswered call
LEFTOVER = _row(_assistant(_call("a"), _call("b")), _tool("ra"), _assistant(_call("a", {"k": 2})), _tool("ra2"))
BROKEN = {
    "leftover_id_taken_by_a_later_turn": LEFTOVER,
    "result_names_no_call": _row(_assistant(_call("a", id="x")), _tool("ra", id="y")),
    "one_id_for_two_calls": _row(_assistant(_call("a", id="x"), _call("b", id="x")), _tool("ra", id="x"),
                                 _tool("rb", id="x")),
    "one_id_reused_by_a_later_turn": _row(_assistant(_call("a", id="x")), _tool("ra", id="x"),
                                          _assistant(_call("b", id="x")), _tool("rb", id="x")),
    "result_before_any_call": _row(_tool("ra")),
    "more_results_than_calls": _row(_assistant(_call("a")), _tool("ra"), _tool("rb")),
}
CLEAN = {
    "parallel_calls_answered_in_order": _row(_assistant(_call("a"), _call("b")), _tool("ra"), _tool("rb")),
    "parallel_calls_answered_by_id_out_of_order": _row(
        _assistant(_call("a", id="p"), _call("b", id="q")), _tool("rb", id="q"), _tool("ra", id="p")),
    "two_turns_each_answered": _row(_assistant(_call("a")), _tool("ra"), _assistant(_call("b")), _tool("rb")),
}


def _export(tmp_path, rows, fmt="openai", **kw):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    report = wai.export_dataset(src, tmp_path / "out.jsonl", system_prompt="S", tools=TOOLS, format=fmt, **kw)
    written = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    return report, written


def _link_warnings(report):
    return [w for w in report.get("warnings", []) if LINKS in w]


def test_the_leftover_id_row_is_the_specs_and_is_named(tmp_path):
    report, (row,) = _export(tmp_path, [LEFTOVER])
    messages = row["messages"]
    # spec E21: call_0001 (b, left unanswered) is taken by the result of the second turn's call_0002 (a)
    assert messages[5] == {"role": "tool", "content": "ra2", "tool_call_id": "call_0001"}
    assert messages[4]["tool_calls"][0]["id"] == "call_0002"
    (warning,) = _link_warnings(report)
    assert warning.startswith("1 of 1 rows have tool results that do not pair up with their calls (first at "
                              "line 1 of the output, messages[4]")


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_links_are_warned(tmp_path, name, fmt):
    report, written = _export(tmp_path, [CLEAN["two_turns_each_answered"], BROKEN[name]], fmt=fmt)
    assert len(written) == 2
    (warning,) = _link_warnings(report)
    assert warning.startswith("1 of 2 rows have tool results that do not pair up with their calls (first at line 2 "
                              "of the output")


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_rows_whose_results_answer_their_calls_are_not_warned(tmp_path, name):
    report, _ = _export(tmp_path, [CLEAN[name]])
    assert not _link_warnings(report)


def test_a_call_the_row_ends_on_is_no_broken_link(tmp_path):
    """An unrolled sample ends on the turn it trains, a call whose result comes later: that is the call to learn."""
    report, written = _export(tmp_path, [CLEAN["two_turns_each_answered"]], unroll=True)
    assert [m.get("tool_calls") is not None for m in written[0]["messages"]][-1]
    assert not _link_warnings(report)


def test_pooled_export_gives_the_same_warning(tmp_path, monkeypatch):
    from whileai_pipeline.core import parallel

    rows = [LEFTOVER if i % 4 == 3 else CLEAN["two_turns_each_answered"] for i in range(80)]
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)  # many chunks even for a small file
    reports = [wai.export_dataset(src, tmp_path / f"out{n}.jsonl", system_prompt="S", tools=TOOLS, workers=n)
               for n in (1, 2)]
    one, two = (_link_warnings(r) for r in reports)
    assert one == two and one[0].startswith("20 of 80 rows have tool results that do not pair up with their calls "
                                            "(first at line 4 of the output, messages[4]")


def _side(row, reward):
    return {**row, "reward": reward}


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("broken_side", ["chosen", "rejected"])
def test_preference_export_names_pairs_with_a_side_whose_results_do_not_pair_up(tmp_path, fmt, broken_side):
    clean = CLEAN["two_turns_each_answered"]
    pair = {"prompt": "q", "chosen": _side(clean, 1.0), "rejected": _side(clean, 0.0), "margin": 1.0}
    broken = dict(pair, **{broken_side: _side(LEFTOVER, 1.0 if broken_side == "chosen" else 0.0)})
    report = wai.export_preference([pair, broken], tmp_path / "dpo.jsonl", system_prompt="S", tools=TOOLS,
                                   format=fmt)
    assert report["pairs"] == 2
    (warning,) = [w for w in report.get("warnings", []) if "do not pair up with its calls" in w]
    assert warning.startswith(f"1 of 2 pairs have a side whose tool results do not pair up with its calls (first at "
                              f"line 2 of the output, {broken_side}")


def test_preference_export_is_quiet_when_every_result_answers_its_call(tmp_path):
    clean = CLEAN["parallel_calls_answered_by_id_out_of_order"]
    pair = {"prompt": "q", "chosen": _side(clean, 1.0), "rejected": _side(CLEAN["two_turns_each_answered"], 0.0)}
    report = wai.export_preference([pair], tmp_path / "dpo.jsonl", system_prompt="S", tools=TOOLS)
    assert not [w for w in report.get("warnings", []) if "pair up" in w]


_ids = st.one_of(st.none(), st.sampled_from(["a", "b", "call_0000", "call_0001"]))
_message = st.one_of(
    st.builds(lambda role: {"role": role, "content": "hi"}, st.sampled_from(["user", "system", "assistant"])),
    st.builds(lambda ids: {"role": "assistant", "content": "", "tool_calls": [_call("a", id=i) for i in ids]},
              st.lists(_ids, min_size=1, max_size=3)),
    st.builds(lambda i: _tool("ok", i), _ids),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_message, max_size=8), st.sampled_from(["", "S"]))
def test_to_wire_flags_every_conversation_the_exact_check_refuses(messages, system):
    """The export reads the written messages for the warning only when ``to_wire`` flagged them as it linked
    them (``WireStats.unlinked``, a cost of nothing per row): the flag must be up for every conversation the
    exact check finds a problem in, or a broken row would go unnamed."""
    stats = WireStats()
    written = to_wire(messages, system=system, stats=stats)
    if tool_link_problem(written) is not None:
        assert stats.unlinked, written
