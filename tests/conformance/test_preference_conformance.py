"""Differential conformance of preference data against whileai 0.105.

* ``build_preference_pairs`` on both sides over the same scored rows: pair lists and reports equal.
* ``judge_pairs`` with deterministic offline judges: annotated pairs and reports equal.
* ``export_preference`` over the (reference-built) pairs, some with ``tie`` fields, through
  format x drop_ties; the reference's output turned into the DECISIONS prediction.
"""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance_settings import CONFORMANCE, REF_SKIP_REASON

ref = pytest.importorskip("whileai.simulations", reason=REF_SKIP_REASON)

import conformance_harness as H  # noqa: E402
import conformance_strategies as S  # noqa: E402
from conformance_checks import (  # noqa: E402
    D6_NO_SYSTEM,
    D6_NO_TOOLS,
    check_build_preference_pairs,
    check_export_preference,
)

import whileai_pipeline.simulations as ours  # noqa: E402

pytestmark = pytest.mark.conformance

TOOL_SCHEMAS = [{"type": "function", "function": {"name": "refund", "parameters": {"type": "object"}}}]

pref_contexts = st.fixed_dictionaries(
    {
        "system_prompt": st.sampled_from([None, "You are the shop assistant.", ""]),
        "tools": st.sampled_from([None, TOOL_SCHEMAS, []]),
        "strip_think": st.booleans(),
        "validate": st.sampled_from([False, False, True]),
    }
)


def _ref_pairs(rows, knobs):
    """Pairs built by the reference only (pair building itself is compared by its own test, so a
    difference there does not hide differences in the exporter / judge)."""
    return [dict(p) for p in ref.build_preference_pairs(H.deep(rows), **knobs)[0]]


@CONFORMANCE
@given(rows=S.scored_rows_for_pairs(), knobs=S.pair_knobs())
def test_build_preference_pairs_matches_reference(rows, knobs):
    check_build_preference_pairs(ref, ours, rows, knobs)


def test_build_preference_pairs_min_margin_error_matches_reference():
    for bad in (0, -1.0):
        H.assert_error_starts_like_reference(lambda m=bad: ref.build_preference_pairs([], min_margin=m),
                                             lambda m=bad: ours.build_preference_pairs([], min_margin=m))


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("drop_ties", [True, False], ids=["drop_ties", "keep_ties"])
@CONFORMANCE
@given(rows=S.scored_rows_for_pairs(), knobs=S.pair_knobs(), ties=st.lists(S.tie_values, max_size=8),
       judge=st.sampled_from([None, None, "judge_longer", "judge_always_a"]), ctx=pref_contexts)
def test_export_preference_matches_reference(fmt, drop_ties, rows, knobs, ties, judge, ctx):
    """End to end: rows -> each side's build_preference_pairs (-> each side's judge_pairs) -> each
    side's export_preference; the pair lists are compared first (see check_build_preference_pairs)."""
    ref_pairs, our_pairs = check_build_preference_pairs(ref, ours, rows, knobs)
    if judge is not None:  # pairwise + tie fields written by judge_pairs (spec 8.5)
        ref_pairs = [dict(p) for p in ref.judge_pairs(ref_pairs, globals()[judge], swap=True)[0]]
        our_pairs = [dict(p) for p in ours.judge_pairs(our_pairs, globals()[judge], swap=True)[0]]
    for pairs in (ref_pairs, our_pairs):
        for p, tie in zip(pairs, ties):
            if tie is not None:
                p["tie"] = tie
    with tempfile.TemporaryDirectory() as d:
        check_export_preference(ref, ours, ref_pairs, Path(d), fmt=fmt, drop_ties=drop_ties,
                                our_source=lambda: H.deep(our_pairs), **ctx)


# ---------------------------------------------------------------------------------- judge_pairs


def judge_longer(a, b):
    la, lb = len(str(a.get("final_text") or "")), len(str(b.get("final_text") or ""))
    return {"winner": "A" if la > lb else "B" if lb > la else "tie", "reason": f"{la} vs {lb}"}


def judge_always_a(a, b):
    return {"winner": "A", "reason": "first is best"}


def judge_string(a, b):
    return 'verdict: {"winner": "b", "reason": "json in text"} done'


def judge_crash(a, b):
    raise RuntimeError("judge is down")


def judge_first_order_only(a, b):
    # answers only when A is the higher-reward row, i.e. in the unswapped order
    if (a.get("reward") or 0) >= (b.get("reward") or 0):
        return {"winner": "A", "reason": "higher reward"}
    raise TimeoutError("slow")


def judge_weird(a, b):
    return 42


JUDGES = [judge_longer, judge_always_a, judge_string, judge_crash, judge_first_order_only, judge_weird]


@pytest.mark.parametrize("judge", JUDGES, ids=[j.__name__ for j in JUDGES])
@CONFORMANCE
@given(rows=S.scored_rows_for_pairs(), swap=st.booleans())
def test_judge_pairs_matches_reference(judge, rows, swap):
    pairs = _ref_pairs(rows, {"max_pairs_per_prompt": 5})
    rp, rrep = ref.judge_pairs(H.deep(pairs), judge, swap=swap)
    op, orep = ours.judge_pairs(H.deep(pairs), judge, swap=swap)
    ctx = f"pairs: {H.short(pairs, 3000)}"
    H.assert_same(H.nan_safe(H.deep(list(rp))), H.nan_safe(H.deep(list(op))), "judged pairs", ctx)
    H.assert_same(H.nan_safe(dict(rrep)), H.nan_safe(dict(orep)), "judge_pairs report", ctx)


ANSWERS = [
    {"winner": "A\n", "reason": "padded"}, {"winner": " a "}, {"winner": "tie "}, {"winner": "C"},
    {"winner": "B", "reason": ""}, {"winner": "A", "reason": None}, {"winner": "A", "reason": 7},
    {"winner": "B", "reason": {1, 2}}, {"winner": "A", "reason": float("nan")},
    "winner: tied", "winner: abc", "WINNER:**A**", "winner=tie", "'winner': 'b'", 'the "winner": "B"',
    '{"reason": "r"} winner: A', '{"winner": "B", "reason": "json"}', "no verdict here", 42, None,
]


@pytest.mark.parametrize("answer", ANSWERS, ids=[repr(a)[:30] for a in ANSWERS])
def test_judge_answers_of_every_shape_read_like_the_reference(answer):
    """Spec 8.5's verdict parsing and ``reasons`` on the answers an LLM judge really gives (padding,
    markdown, prose); a review found ours stricter on some and looser on others."""
    pairs = _ref_pairs([{"prompt": "p", "final_text": "yes!", "reward": 1.0},
                        {"prompt": "p", "final_text": "no", "reward": 0.0}], {})
    assert pairs

    def judge(a, b):
        return answer

    rp, rrep = ref.judge_pairs(H.deep(pairs), judge, swap=True)
    op, orep = ours.judge_pairs(H.deep(pairs), judge, swap=True)
    assert [p["pairwise"]["reasons"] for p in op] == [[str(r) for r in p["pairwise"]["reasons"]] for p in rp]
    for p in list(rp) + list(op):
        p["pairwise"]["reasons"] = [str(r) for r in p["pairwise"]["reasons"]]  # a set's order, NaN != NaN
    H.assert_same(H.nan_safe(H.deep(list(rp))), H.nan_safe(H.deep(list(op))), "judged pairs", repr(answer))
    H.assert_same(H.nan_safe(dict(rrep)), H.nan_safe(dict(orep)), "judge_pairs report", repr(answer))


def test_judge_pairs_rejects_non_pairs_like_reference():
    bad = [{"chosen": {"prompt": "a"}, "rejected": {"prompt": "a"}}, {"chosen": {"prompt": "a"}}]
    H.assert_error_starts_like_reference(lambda: ref.judge_pairs(bad, judge_longer),
                                         lambda: ours.judge_pairs(bad, judge_longer))


# ---------------------------------------------------------------------------------- targeted cases


def _pair(chosen, rejected, **extra):
    p = {"prompt": chosen.get("prompt"), "chosen": chosen, "rejected": rejected}
    p.update(extra)
    return p


REFUND_CALL = {"tool": "refund", "arguments": {"id": "A"}, "result": {"ok": True}}


def test_d6_preference_warns_without_tools_or_system():
    """DECISIONS 6: "warns when a row with tool calls is exported with no tools or no system prompt".
    Read literally this covers export_preference too (its report also carries system_prompt_source)."""
    pairs = [_pair({"prompt": "Refund A", "steps": [REFUND_CALL], "final_text": "Refunded."},
                   {"prompt": "Refund A", "steps": [], "final_text": "No."})]
    rep = ours.export_preference(H.deep(pairs), validate=False)
    warnings = rep.get("warnings", [])
    assert any(D6_NO_TOOLS.match(w) or "tool schema" in w for w in warnings), (
        f"DECISIONS 6: no warning about tool calls exported without tools: {warnings}"
    )
    assert any(D6_NO_SYSTEM.match(w) or "system prompt" in w for w in warnings), (
        f"DECISIONS 6: no warning about tool calls exported without a system prompt: {warnings}"
    )


def test_d12_chosen_leak_refused_rejected_leak_counted(tmp_path):
    """DECISIONS 12 on a hand-made pair: the reference exports both; ours refuses the chosen leak under
    validate=True, counts rejected quoting separately, and exports with validate=False."""
    secret = "the entity does not exist: report it missing and do not act"
    leak_chosen = _pair(
        {"prompt": "Find X", "final_text": f"As I was told: {secret}", "privileged": {"reference": secret}, "scenario_id": "s1"},
        {"prompt": "Find X", "final_text": "No idea.", "privileged": {"reference": secret}},
        margin=1.0,
    )
    leak_rejected = _pair(
        {"prompt": "Find Y", "final_text": "It does not exist.", "privileged": {"reference": secret}},
        {"prompt": "Find Y", "final_text": secret.upper(), "privileged": {"reference": secret}},
    )
    r = ref.export_preference(H.deep([leak_chosen, leak_rejected]), tmp_path / "r.jsonl", system_prompt="S")
    assert r["pairs"] == 2 and "privileged_leaks" not in r  # the reference has no preference leak gate
    with pytest.raises(ValueError) as e:
        ours.export_preference(H.deep([leak_chosen, leak_rejected]), tmp_path / "o.jsonl", system_prompt="S")
    assert H.leading_token(e.value) == "privileged_leak"
    assert not (tmp_path / "o.jsonl").exists()
    rep = ours.export_preference(H.deep([leak_chosen, leak_rejected]), tmp_path / "o.jsonl", system_prompt="S",
                                 validate=False)
    pl = rep["privileged_leaks"]
    assert (pl["n_checked"], pl["n_leaked"], pl["rejected_quoting"]) == (2, 1, 1)
    assert pl["leaked"] == [{"scenario_id": "s1", "rollout_index": None, "field": "reference",
                             "needle": secret[:80]}]
    # only a rejected-side quote: exported under validate=True, named in a warning
    rep = ours.export_preference(H.deep([leak_rejected]), tmp_path / "o2.jsonl", system_prompt="S")
    assert rep["privileged_leaks"]["rejected_quoting"] == 1 and rep["privileged_leaks"]["n_leaked"] == 0
    assert any("rejected" in w for w in rep.get("warnings", []))


def test_d8_pair_lineage_scrubbed(tmp_path):
    """DECISIONS 8: blocked keys leave pair metadata (lineage at any depth), never the conversation."""
    chosen = {"prompt": "Refund A", "steps": [{"tool": "refund", "arguments": {"reference": "R-1"},
                                               "result": {"hidden_state": "kept"}}],
              "final_text": "Done.", "lineage": {"source": "grade", "privileged": {"reference": "r"},
                                                 "deep": [{"rubric": 1, "ok": 2}]}}
    rejected = {"prompt": "Refund A", "final_text": "No.", "lineage": {"vector": [1.0]}}
    pairs = [_pair(chosen, rejected, lineage={"chosen": chosen["lineage"], "rejected": rejected["lineage"]})]
    ref.export_preference(H.deep(pairs), tmp_path / "r.jsonl", system_prompt="S")
    ours.export_preference(H.deep(pairs), tmp_path / "o.jsonl", system_prompt="S")
    r_row = json.loads((tmp_path / "r.jsonl").read_text())
    o_row = json.loads((tmp_path / "o.jsonl").read_text())
    assert r_row["lineage"]["chosen"]["privileged"]  # the reference carries it
    assert o_row["lineage"] == {"chosen": {"source": "grade", "deep": [{"ok": 2}]}, "rejected": {}}
    args = json.loads(o_row["chosen"][2]["tool_calls"][0]["function"]["arguments"])
    assert args == {"reference": "R-1"} and o_row["chosen"][3]["content"] == '{"hidden_state": "kept"}'


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("falsy", [0, False], ids=["zero", "False"])
def test_falsy_system_prompt_with_tool_calls_matches_reference(tmp_path, fmt, falsy):
    """Spec 7.3 step 3: ``text(system_prompt or "")``, so 0 / False is no system prompt, and DECISIONS 6
    then warns about tool calls exported without one. The check used to predict a system prompt "0"."""
    pairs = [_pair({"prompt": "Refund A", "steps": [REFUND_CALL], "final_text": "Refunded."},
                   {"prompt": "Refund A", "final_text": "No."}, margin=1.0)]
    check_export_preference(ref, ours, pairs, tmp_path, fmt=fmt, drop_ties=True, system_prompt=falsy,
                            tools=TOOL_SCHEMAS, strip_think=True, validate=True)


def test_d5_generator_pairs_read_once(tmp_path):
    """DECISIONS 5: a generator of pairs is read once (the reference iterates twice and finds nothing)."""
    pairs = [_pair({"prompt": "Refund A", "final_text": "Refunded."}, {"prompt": "Refund A", "final_text": "No."},
                   margin=1.0, length_delta=6)]
    with tempfile.TemporaryDirectory() as d:
        check_export_preference(ref, ours, pairs, Path(d), fmt="openai", drop_ties=True, system_prompt="S",
                                tools=None, strip_think=True, validate=True,
                                our_source=lambda: (p for p in H.deep(pairs)))


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("only_junk", [False, True], ids=["some", "all"])
def test_entries_that_are_not_objects_are_skipped_and_said(tmp_path, fmt, only_junk):
    """DECISIONS 15 counts entries that are not objects (``rows_skipped``); the spec skips them without a word,
    so a whole JSON array of pairs on one line got "regrade or raise difficulty". Ours warns, and appends it
    to the no-pairs error (DECISIONS 14: after the reference's text)."""
    pair = _pair({"prompt": "Refund A", "final_text": "Refunded."}, {"prompt": "Refund A", "final_text": "No."},
                 margin=1.0)
    pairs = [[pair], None, 7] if only_junk else [[pair], pair, "x"]
    outcome = check_export_preference(ref, ours, pairs, tmp_path, fmt=fmt, drop_ties=True, system_prompt="S",
                                      tools=None, strip_think=True, validate=True)
    assert (outcome == "refused") == only_junk
    if only_junk:
        with pytest.raises(ours.NoPreferencePairsError, match=r"Here 3 of 3 entries are not objects and were "
                                                              r"skipped \(a whole JSON array of pairs"):
            ours.export_preference(pairs, tmp_path / "x.jsonl", format=fmt)


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_sides_with_their_own_system_message_match_reference_and_are_said(tmp_path, fmt):
    """Ours: a side whose messages hold a system message, given the system prompt too, opens with two system
    turns (the spec keeps both); the warning's count is predicted from the rows as written."""
    own = {"role": "system", "content": "Own rules."}
    chosen = {"prompt": "Refund A", "messages": [own, {"role": "user", "content": "Refund A"},
                                                 {"role": "assistant", "content": "Refunded."}]}
    rejected = {"prompt": "Refund A", "messages": [own, {"role": "user", "content": "Refund A"},
                                                   {"role": "assistant", "content": "No."}]}
    plain = {"prompt": "Refund B", "final_text": "Refunded B."}
    pairs = [_pair(chosen, rejected, margin=1.0), _pair(plain, {"prompt": "Refund B", "final_text": "No."}, margin=1.0)]
    for system_prompt in ("You are the shop assistant.", ""):
        out = tmp_path / repr(system_prompt)
        check_export_preference(ref, ours, pairs, out, fmt=fmt, drop_ties=True, system_prompt=system_prompt,
                                tools=None, strip_think=True, validate=True)
    report = ours.export_preference(pairs, None, system_prompt="S", format=fmt)
    assert [w for w in report["warnings"] if w.startswith("1 of 2 pairs have a side that opens with its own system")]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_chosen_calls_to_undeclared_tools_match_reference_and_are_said(tmp_path, fmt):
    """Ours: a chosen side that calls a tool the tools written with it do not declare is counted (DPO pushes it
    up); a rejected side's is not. The count, first name and line are predicted from the rows as written."""
    lookup = {"tool": "lookup", "arguments": {"id": "A"}, "result": {"ok": True}}
    good = {"prompt": "Refund A", "steps": [REFUND_CALL], "final_text": "Refunded."}
    bad = {"prompt": "Refund A", "steps": [lookup], "final_text": "Looked."}
    pairs = [_pair(good, bad, margin=1.0), _pair(bad, good, margin=1.0)]
    check_export_preference(ref, ours, pairs, tmp_path, fmt=fmt, drop_ties=True, system_prompt="S",
                            tools=TOOL_SCHEMAS, strip_think=True, validate=True)
    report = ours.export_preference(pairs, None, system_prompt="S", tools=TOOL_SCHEMAS, format=fmt)
    assert [w for w in report["warnings"] if w.startswith("1 of 2 pairs have a chosen side that calls a tool")]
