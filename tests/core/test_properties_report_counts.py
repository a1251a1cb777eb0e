"""Report counts add up against the file written, and every way of feeding an export gives the same bytes.

Rows come from the conformance strategies (malformed arguments, ``messages`` rows, think blocks, long tool
output, privileged blocks, rewards of every kind), with lines that are JSON but not objects mixed in.
"""

import hashlib
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.jsonl import dumps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import conformance_strategies as S  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TOOLS = [{"type": "function", "function": {"name": n}} for n in S.TOOLS_NAMES]
NOT_OBJECTS = [b"7", b'"text"', b"[1, 2]", b"null"]
WRITTEN = ("path", "sha256", "elapsed_seconds")


def _write(path, lines):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _messages(row):
    return row["prompt"] + row["completion"] if "completion" in row else row["messages"]


@SETTINGS
@given(rows=S.row_lists(min_size=0, max_size=8), junk=st.lists(st.sampled_from(NOT_OBJECTS), max_size=2),
       fmt=st.sampled_from(["openai", "trl"]), mask_mode=st.sampled_from(["assistant", "final"]), unroll=st.booleans(),
       cap=st.sampled_from([None, 40, 0, -1]), strip_think=st.booleans(),
       system_prompt=st.sampled_from([None, "SYS", ""]), tools=st.sampled_from([None, TOOLS, []]))
def test_sft_report_counts_add_up_to_the_file(tmp_path_factory, rows, junk, fmt, mask_mode, unroll, cap, strip_think,
                                              system_prompt, tools):
    tmp = tmp_path_factory.mktemp("sft")
    lines = [dumps(r) for r in rows] + junk
    src = _write(tmp / "run.jsonl", lines)
    opts = dict(mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=cap, strip_think=strip_think,
                system_prompt=system_prompt, tools=tools)
    try:
        report = wai.export_dataset(src, tmp / "out.jsonl", format=fmt, validate=False, **opts)
    except wai.SchemaInvalidError:  # a row with an empty conversation and no system prompt: nothing is written
        assert not (tmp / "out.jsonl").exists()
        return
    data = (tmp / "out.jsonl").read_bytes()
    out = [json.loads(line) for line in data.splitlines()]
    assert report["sha256"] == hashlib.sha256(data).hexdigest()
    assert (report["rows_read"], report["rows_skipped"]) == (len(lines), len(junk))
    assert report["n"] == report["n_written"] == len(out)
    # every training row is written or dropped (TRL completion rows need an assistant turn after index 0)
    entries = wai.training_rows(list(wai.read_jsonl(src)), **opts) if unroll else [r for r in rows]
    dropped = report.get("no_completion_dropped", 0)
    assert report["n"] + dropped == len(entries)
    if fmt == "openai" or not (unroll or mask_mode == "final"):
        assert dropped == 0
    assert sum(report["rewards"].values()) == report["n"]
    messages = [_messages(r) for r in out]
    assert report["trained_messages"] + report["masked_messages"] == sum(map(len, messages))
    if fmt == "openai":
        assert all(len(r["loss_mask"]) == len(r["messages"]) for r in out)
        assert report["trained_messages"] == sum(sum(r["loss_mask"]) for r in out)
    else:
        assert not any("loss_mask" in r for r in out)
    calls = sum(len(m.get("tool_calls") or ()) for ms in messages for m in ms)
    assert report["tool_call_roundtrip"]["checked"] == calls
    assert report["with_system"] == sum(bool(ms) and ms[0]["role"] == "system" for ms in messages)
    assert report["with_tools"] == sum(bool(r.get("tools")) for r in out)
    assert report["tool_output_truncated"] == sum(r.get("tool_output_truncated", 0) for r in out)
    assert report["tool_output_chars_cut"] == sum(r.get("tool_output_chars_cut", 0) for r in out)
    assert report["groups"] == len({r["group_id"] for r in out if "group_id" in r})


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=S.row_lists(min_size=1, max_size=12), junk=st.booleans(), fmt=st.sampled_from(["openai", "trl"]),
       mask_mode=st.sampled_from(["assistant", "final"]), unroll=st.booleans(), cap=st.sampled_from([None, 40]),
       validate=st.booleans())
def test_workers_a_file_and_a_list_give_the_same_export(tmp_path_factory, rows, junk, fmt, mask_mode, unroll, cap,
                                                         validate):
    """One process, worker processes over many small chunks, and the rows as a list: the same bytes and
    report, or the same error."""
    tmp = tmp_path_factory.mktemp("pool")
    lines = [dumps(r) for r in rows]
    if junk:
        lines[len(lines) // 2:len(lines) // 2] = [b"[1, 2]", b""]
    src = _write(tmp / "run.jsonl", lines)
    opts = dict(format=fmt, mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=cap, validate=validate,
                system_prompt="SYS", tools=TOOLS)

    def export(source, name, **more):
        out = tmp / name
        try:
            report = wai.export_dataset(source, out, **opts, **more)
        except ValueError as exc:
            return type(exc).__name__, str(exc).replace(str(out), "OUT")
        return {k: v for k, v in report.items() if k not in WRITTEN}, out.read_bytes()

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(parallel, "CHUNK_BYTES", 512)
        one, two = export(src, "one.jsonl", workers=1), export(src, "two.jsonl", workers=2)
    finally:
        mp.undo()
    assert one == two
    listed = export([json.loads(line) for line in lines if line], "list.jsonl")
    if isinstance(one[0], dict):
        assert listed[1] == one[1]
        assert {k: v for k, v in listed[0].items() if k not in ("source_path", "source_sha256")} == {
            k: v for k, v in one[0].items() if k not in ("source_path", "source_sha256")}
    else:
        assert listed[0] == one[0]


@SETTINGS
@given(rows=S.scored_rows_for_pairs(), ties=st.lists(S.tie_values, max_size=8),
       junk=st.lists(st.sampled_from(NOT_OBJECTS), max_size=2), fmt=st.sampled_from(["openai", "trl"]),
       drop_ties=st.booleans(), system_prompt=st.sampled_from([None, "SYS"]))
def test_preference_report_counts_add_up_to_the_file(tmp_path_factory, rows, ties, junk, fmt, drop_ties, system_prompt):
    tmp = tmp_path_factory.mktemp("dpo")
    pairs, _ = wai.build_preference_pairs(rows, max_pairs_per_prompt=3, min_margin=0.25)
    for pair, tie in zip(pairs, ties):
        pair["tie"] = tie
    lines = [dumps(p) for p in pairs] + junk
    src = _write(tmp / "pairs.jsonl", lines)
    try:
        report = wai.export_preference(src, tmp / "out.jsonl", format=fmt, validate=False, drop_ties=drop_ties,
                                       system_prompt=system_prompt)
    except wai.SchemaInvalidError:  # a side with an empty conversation and no system prompt
        assert not (tmp / "out.jsonl").exists()
        return
    assert (report["rows_read"], report["rows_skipped"]) == (len(lines), len(junk))
    ties_dropped = sum(1 for p in pairs if p.get("tie")) if drop_ties else 0
    assert report.get("ties_dropped", 0) == ties_dropped
    assert report["pairs"] + ties_dropped + report.get("no_completion_dropped", 0) == len(pairs)
    if fmt == "openai":
        assert "no_completion_dropped" not in report
    if not report["pairs"]:
        assert report["path"] is None and not (tmp / "out.jsonl").exists()
        return
    data = (tmp / "out.jsonl").read_bytes()
    out = [json.loads(line) for line in data.splitlines()]
    assert report["pairs"] == report["n_written"] == len(out)
    assert report["sha256"] == hashlib.sha256(data).hexdigest()
    sides = [side for row in out for side in (row["chosen"], row["rejected"])]
    prompts = [row["prompt"] for row in out if isinstance(row["prompt"], list)]
    assert report["tool_call_roundtrip"]["checked"] == sum(
        len(m.get("tool_calls") or ()) for messages in sides + prompts for m in messages)
