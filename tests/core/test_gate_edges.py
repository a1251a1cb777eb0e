"""The two data gates and the scrub on inputs the spec names but no other test reached (found by hand-made
mutants of ``core/gates.py``). Every expected value is written out from EXPORT_SPEC.md (sections 4.2, 6.2,
6.3) or DECISIONS.md (3, 8, 10, 16), never computed by the code under test."""
from __future__ import annotations

import collections
import json

import pytest
from hypothesis import given, settings, strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.gates import scrub

BLOCKED = {"privileged", "principle", "hidden_state", "reference", "rubric", "vector"}  # DECISIONS 8
NEEDLE = "the parcel was lost by the carrier"


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ------------------------------------------------------------ leak gate: what counts as a reply (spec 6.2)


def test_words_said_with_a_tool_call_are_a_reply():
    """Spec 1.4 step 4.3: a tool step's ``text`` is the content of the assistant message that makes the
    call, and spec 6.2 searches the content of every assistant message."""
    row = {
        "prompt": "where is my parcel?",
        "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "ok",
                   "text": "Sorry, the parcel was lost by the carrier; let me check the refund."}],
        "final_text": "",
        "privileged": {"reference": NEEDLE},
    }
    report = wai.leak_report([row])
    assert (report["n_checked"], report["n_leaked"]) == (1, 1)
    assert report["leaked"] == [{"scenario_id": None, "rollout_index": None, "field": "reference", "needle": NEEDLE}]


def test_an_empty_messages_list_means_the_conversation_is_rebuilt():
    """Spec 6.2: the messages are the row's ``messages`` *if it is a non-empty list*, else
    ``conversation(row)``; an empty list hides nothing."""
    row = {
        "messages": [],
        "prompt": "where is my parcel?",
        "steps": [{"text": "Sorry, the parcel was lost by the carrier."}],
        "privileged": {"reference": NEEDLE},
    }
    report = wai.leak_report([row])
    assert (report["n_checked"], report["n_leaked"]) == (1, 1)


def test_content_parts_are_searched_through_their_strings():
    """DECISIONS 10: non-string content is exported as JSON text, which escapes what is not ASCII
    (``\\u00e9``); a quote with an accent must still be found in the strings the parts hold."""
    row = {
        "messages": [
            {"role": "user", "content": "où est mon colis ?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hélas, le colis a été perdu par le transporteur."}]},
        ],
        "privileged": {"reference": "Le colis a été perdu"},
    }
    report = wai.leak_report([row])
    assert report["leaked"] == [
        {"scenario_id": None, "rollout_index": None, "field": "reference", "needle": "le colis a été perdu"}
    ]


def test_content_that_is_an_object_is_searched_as_the_json_text_exported():
    """DECISIONS 10: an object content is trained as its JSON text, keys included; a key that spells the
    hidden world state is a quote of it."""
    row = {
        "messages": [
            {"role": "user", "content": "status?"},
            {"role": "assistant", "content": {"refund_pending_manual_review": True}},
        ],
        "scenario_id": "s1",
        "rollout_index": 3,
        "privileged": {"hidden_state": {"world_state": "refund_pending_manual_review"}},
    }
    report = wai.leak_report([row])
    assert report["leaked"] == [{"scenario_id": "s1", "rollout_index": 3, "field": "hidden_state.world_state",
                                 "needle": "refund_pending_manual_review"}]


def test_leak_rate_is_rounded_to_four_places():
    """Spec 6.3: ``rate = round(n_leaked / n_checked, 4)``; summary gives it as a whole percent."""
    rows = [{"prompt": "q", "final_text": "Sorry, " + NEEDLE + "." if i == 0 else "On its way.",
             "privileged": {"reference": NEEDLE}} for i in range(3)]
    report = wai.leak_report(rows)
    assert (report["n_checked"], report["n_leaked"], report["rate"]) == (3, 1, 0.3333)
    assert report["summary"] == "checked 3 of 3 rows: 1 quoted privileged context (33%)"


# ------------------------------------------------------------ round-trip gate: counting (spec 4.2)


def _call(arguments):
    return {"id": "c", "type": "function", "function": {"name": "t", "arguments": arguments}}


def test_every_invalid_call_counts_and_its_row_is_listed_once():
    """Spec 4.2: each invalid call adds 1 to ``invalid``; a row with any invalid call is listed once."""
    row = {"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [_call("{a: 1}"), _call('{"a": 1}'), _call("[1, 2]")]},
    ]}
    report = wai.tool_call_roundtrip([{"messages": []}, row])
    assert (report["checked"], report["invalid"], report["rows"]) == (3, 2, [1])


def test_rows_list_stops_at_the_first_twenty():
    """Spec 4.2 / Appendix A: ``rows`` lists the offending row indices, ascending, first 20 only."""
    rows = [{"messages": [{"role": "assistant", "content": "", "tool_calls": [_call("not json")]}]}
            for _ in range(21)]
    report = wai.tool_call_roundtrip(rows)
    assert (report["checked"], report["invalid"]) == (21, 21)
    assert report["rows"] == list(range(20))


def test_roundtrip_reads_the_completion_of_a_prompt_completion_row():
    """Spec 10.2 (0.106, taken by DECISIONS 16): the gate reads ``prompt`` + ``completion`` rows."""
    row = {
        "prompt": [{"role": "user", "content": "go"}],
        "completion": [{"role": "assistant", "content": "", "tool_calls": [_call("{a: 1}")]},
                       {"role": "tool", "content": "ok", "tool_call_id": "c"}],
    }
    report = wai.tool_call_roundtrip([row], format="trl")
    assert (report["checked"], report["invalid"], report["rows"]) == (1, 1, [0])


def test_trl_final_mask_export_refuses_a_bad_call_in_the_completion(tmp_path):
    """DECISIONS 16: with ``mask_mode="final"`` a TRL row is prompt/completion, the last assistant turn (a
    call whose arguments are no JSON) being the completion; DECISIONS 3 / spec 5.4: the gate refuses it."""
    row = {"messages": [
        {"role": "user", "content": "look up order 7"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "lookup", "arguments": "{id: 7}"}}]},
        {"role": "tool", "content": "shipped"},
    ]}
    out = tmp_path / "train.jsonl"
    with pytest.raises(ValueError) as caught:
        wai.export_dataset([row], out, format="trl", mask_mode="final")
    assert str(caught.value).startswith("tool_call_roundtrip_invalid: 1 of 1 tool calls")
    assert not out.exists()


# ------------------------------------------------------------ scrub (DECISIONS 8)


def _expected_scrub(value):
    """DECISIONS 8 written out: drop blocked keys from every mapping at any depth, lists/tuples element-wise."""
    if isinstance(value, dict):
        return {k: _expected_scrub(v) for k, v in value.items() if k not in BLOCKED}
    if isinstance(value, (list, tuple)):
        return [_expected_scrub(v) for v in value]
    return value


def _keys_anywhere(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _keys_anywhere(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _keys_anywhere(v)


KEYS = st.sampled_from(sorted(BLOCKED) + ["a", "judge", "parent", "notes"])
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
NESTED = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(KEYS, inner, max_size=4),
        st.dictionaries(KEYS, inner, max_size=4).map(collections.OrderedDict),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(NESTED)
def test_scrub_leaves_no_blocked_key_at_any_depth_and_keeps_the_rest(value):
    scrubbed = scrub(value)
    assert BLOCKED.isdisjoint(_keys_anywhere(scrubbed))
    as_lists = json.loads(json.dumps(scrubbed))  # tuples -> lists, OrderedDict -> dict, for the comparison
    assert as_lists == json.loads(json.dumps(_expected_scrub(value)))


def test_scrub_removes_a_blocked_key_whose_value_also_holds_one():
    assert scrub({"privileged": {"reference": "r", "note": "n"}, "ok": 1}) == {"ok": 1}
    assert scrub([[{"vector": [0.1], "a": ({"rubric": 1, "b": 2},)}]]) == [[{"a": ({"b": 2},)}]]


def test_export_drops_vector_and_rubric_nested_in_carried_lineage(tmp_path):
    """DECISIONS 8: no exported row carries ``vector`` or ``rubric`` at any depth of its metadata."""
    row = {"prompt": "p", "final_text": "done", "reward": 1,
           "lineage": {"judge": {"vector": [0.1, 0.2], "rubric": {"must": "x"}, "name": "j"}}}
    out = tmp_path / "train.jsonl"
    wai.export_dataset([row], out)
    (written,) = _lines(out)
    assert written["lineage"] == {"judge": {"name": "j"}}


# ------------------------------------------------------------ round-trip gate on TRL rows read from a file


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


TWO_CALLS = [
    {"role": "user", "content": "look up orders 7 and 8"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "lookup", "arguments": {"id": 7}}},  # an object: a valid call
        {"function": {"name": "lookup", "arguments": "{id: 8}"}},  # not JSON: invalid in both formats (E14)
    ]},
    {"role": "tool", "content": "shipped"},
    {"role": "tool", "content": "lost"},
    {"role": "assistant", "content": "7 shipped, 8 is lost."},
]


def test_trl_export_of_a_file_counts_a_bad_call_beside_a_good_one(tmp_path):
    """Spec 4.2 / E14: of the two calls one is invalid, whatever the other call is or how the row was read."""
    source = _write_jsonl(tmp_path / "run.jsonl", [{"messages": TWO_CALLS}])
    report = wai.export_dataset(source, tmp_path / "train.jsonl", format="trl", validate=False)
    assert (report["tool_call_roundtrip"]["checked"], report["tool_call_roundtrip"]["invalid"]) == (2, 1)
    with pytest.raises(ValueError, match=r"^tool_call_roundtrip_invalid: 1 of 2 tool calls"):
        wai.export_dataset(source, tmp_path / "refused.jsonl", format="trl")
    assert not (tmp_path / "refused.jsonl").exists()


def test_trl_preference_export_of_a_file_counts_a_bad_call_beside_a_good_one(tmp_path):
    """Spec 7.3 step 7: side indices, chosen of pair 0 is row 0."""
    pair = {"prompt": "look up orders 7 and 8", "chosen": {"messages": TWO_CALLS},
            "rejected": {"messages": [TWO_CALLS[0], {"role": "assistant", "content": "No."}]}}
    source = _write_jsonl(tmp_path / "pairs.jsonl", [pair])
    report = wai.export_preference(source, tmp_path / "dpo.jsonl", format="trl", validate=False)
    rt = report["tool_call_roundtrip"]
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (2, 1, [0])
