"""Differential conformance of ``export_dataset`` against whileai 0.105.

Hypothesis-generated trajectories (tools, multi-turn, think blocks, opener, long tool output,
privileged blocks, repeated prompts, rewards incl. 0.5/None/NaN/bools, malformed arguments,
``messages`` rows) go through every combination of format x mask_mode x unroll x strip_think.
The reference's parsed output is turned into what DECISIONS.md predicts by the named ``dN_*``
transforms in conformance_harness.py; anything else that differs fails.
"""

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance_settings import CONFORMANCE, REF_SKIP_REASON

ref = pytest.importorskip("whileai.simulations", reason=REF_SKIP_REASON)

import conformance_strategies as S  # noqa: E402
from conformance_checks import check_export_dataset  # noqa: E402

import whileai_pipeline.simulations as ours  # noqa: E402

pytestmark = pytest.mark.conformance

GRID = [
    (fmt, mask_mode, unroll, strip_think)
    for fmt in ("openai", "trl")
    for mask_mode in ("assistant", "final")
    for unroll in (False, True)
    for strip_think in (True, False)
]

TOOL_SCHEMAS = [
    {"type": "function", "function": {"name": "lookup", "description": "Look up an order.",
                                      "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "refund", "description": "Refund an order by its reference.",
                                      # a legitimate schema property named like a blocked key (open question Q3)
                                      "parameters": {"type": "object", "properties": {"reference": {"type": "string"}}}}},
]

export_contexts = st.fixed_dictionaries(
    {
        "system_prompt": st.sampled_from([None, "You are the shop assistant. Be brief.", "", "   ", "Système : réponds en français."]),
        "tools": st.sampled_from([None, TOOL_SCHEMAS, TOOL_SCHEMAS[:1], []]),
        "cap": st.sampled_from([None, None, 40, 0, -3, 2.7, "25"]),
        # mostly validate=False (compare everything); sometimes True (both gates must agree)
        "validate": st.sampled_from([False, False, False, True]),
    }
)


@pytest.mark.parametrize(
    "fmt,mask_mode,unroll,strip_think", GRID,
    ids=[f"{f}-{m}-{'unroll' if u else 'flat'}-{'strip' if s else 'keep'}" for f, m, u, s in GRID],
)
@CONFORMANCE
@given(rows=S.row_lists(min_size=1, max_size=6), ctx=export_contexts)
def test_export_dataset_matches_reference(fmt, mask_mode, unroll, strip_think, rows, ctx):
    with tempfile.TemporaryDirectory() as d:
        check_export_dataset(
            ref, ours, rows, Path(d), fmt=fmt, mask_mode=mask_mode, unroll=unroll, strip_think=strip_think,
            system_prompt=ctx["system_prompt"], tools=ctx["tools"], cap=ctx["cap"], validate=ctx["validate"],
        )


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("unroll", [False, True])
@CONFORMANCE
@given(rows=S.row_lists(min_size=1, max_size=4))
def test_export_dataset_validate_true_matches_reference(fmt, unroll, rows):
    """validate=True everywhere: both refuse with the same leading token (after DECISIONS 3's stricter
    round-trip), or both export the same rows."""
    with tempfile.TemporaryDirectory() as d:
        check_export_dataset(
            ref, ours, rows, Path(d), fmt=fmt, mask_mode="assistant", unroll=unroll, strip_think=True,
            system_prompt="You are the shop assistant.", tools=TOOL_SCHEMAS, cap=None, validate=True,
        )


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("unroll", [False, True], ids=["flat", "unroll"])
@CONFORMANCE
@given(rows=st.lists(S.trajectory_rows(shapes=["messages"]), min_size=1, max_size=4), ctx=export_contexts,
       mask_mode=st.sampled_from(["assistant", "final"]))
def test_export_dataset_messages_rows_matches_reference(fmt, unroll, rows, ctx, mask_mode):
    """Rows that already hold ``messages`` (explicit / missing / falsy tool-call ids, tool messages
    with and without ``tool_call_id``, non-string content, dropped roles): where DECISIONS 9 (id
    linking) and 10 (JSON content) apply."""
    with tempfile.TemporaryDirectory() as d:
        check_export_dataset(
            ref, ours, rows, Path(d), fmt=fmt, mask_mode=mask_mode, unroll=unroll, strip_think=True,
            system_prompt=ctx["system_prompt"], tools=ctx["tools"], cap=ctx["cap"], validate=ctx["validate"],
        )


@pytest.mark.parametrize("lineage", ["imported", 5, [["k", "v"]], "", 0, [], {"parent": "s1"}],
                         ids=["str", "int", "pairs", "empty-str", "zero", "empty-list", "dict"])
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_d11_nondict_lineage_unroll(tmp_path, lineage, fmt):
    """E35 / DECISIONS 11: with unroll the reference crashes on a truthy non-dict lineage (and turns a
    list of pairs into a dict); ours wraps any truthy non-dict as {"source_lineage": ..., "unrolled_from": ...}.
    A row without assistant turns keeps its lineage as it was. Falsy values behave as in the reference."""
    rows = [
        {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "ok"},
                                                  {"text": "It shipped."}], "final_text": "It shipped.",
         "lineage": lineage, "scenario_id": "s1", "rollout_index": 2},
        {"prompt": "hello", "lineage": lineage},  # no assistant turn: one plain sample
    ]
    check_export_dataset(ref, ours, rows, tmp_path, fmt=fmt, mask_mode="assistant", unroll=True, strip_think=True,
                         system_prompt="S", tools=None, cap=None, validate=False)


def test_d16_report_counts_written_rows_only(tmp_path):
    """DECISIONS 16 drops TRL prompt/completion rows without an assistant turn after index 0. Every
    report number describes the rows written (spec 5.5 computes them from the output rows), so a group
    whose rows were all dropped is not counted in ``groups`` (open question Q2 in the suite's report)."""
    rows = [
        {"prompt": "Where is order 7?", "opener": "Hi, I'm the shop bot.", "final_text": "Hi, I'm the shop bot.",
         "reward": 0},
        {"prompt": "Where is order 7?", "opener": "Hi, I'm the shop bot.", "final_text": "Hi, I'm the shop bot.",
         "reward": 1},
        {"prompt": "Refund order A", "steps": [{"text": "Done."}], "final_text": "Done.", "reward": 1},
    ]
    check_export_dataset(ref, ours, rows, tmp_path, fmt="trl", mask_mode="final", unroll=False, strip_think=True,
                         system_prompt=None, tools=None, cap=None, validate=False)


def test_d16_unrolled_dropped_rows_take_their_truncation_out_once(tmp_path):
    """DECISIONS 11 and 16 together: with unroll the truncation totals are the written samples' own counts, so
    a TRL sample dropped for having no assistant turn is not taken out of them a second time (the harness
    predicted -2 where the export rightly reports 0)."""
    rows = [
        {"messages": [{"role": "user", "content": "Look it up."},
                      {"role": "tool", "name": "lookup", "content": "a long tool output"},
                      {"role": "tool", "name": "lookup", "content": "another long output"}]},
        {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "shipped"},
                                                  {"text": "It shipped."}], "final_text": "It shipped."},
    ]
    check_export_dataset(ref, ours, rows, tmp_path, fmt="trl", mask_mode="assistant", unroll=True, strip_think=True,
                         system_prompt="S", tools=None, cap=0, validate=False)


def test_d2_big_integer_beside_a_float_spelled_two_ways(tmp_path):
    """DECISIONS 2: openai arguments are compact orjson text, its float spelling (1e-7) kept when an integer
    beyond 64 bits, which orjson cannot write as a number, is written with all its digits beside it (the
    harness predicted Python's 1e-07 there). TRL rows keep arguments as objects, and warn of such an integer."""
    rows = [{"prompt": "Where is order 7?",
             "steps": [{"tool": "lookup", "arguments": {"id": 10 ** 20, "amount": 1e-07}, "result": "shipped"},
                       {"text": "It shipped."}], "final_text": "It shipped."}]
    check_export_dataset(ref, ours, rows, tmp_path, fmt="openai", mask_mode="assistant", unroll=False,
                         strip_think=True, system_prompt="S", tools=None, cap=None, validate=False)
