"""DECISIONS 9 generates ``call_NNNN`` ids only for calls that bring none. A generated id must not be one
the conversation's own calls already use: two calls with one id make the openai file invalid (OpenAI's
rules, and this project's validator: ``tool_call_id_duplicate``) and leave the tool results ambiguous.
Expected ids are written out by hand."""
from __future__ import annotations

import json

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.openai_format import validate_file


def _call(id_=None):
    call = {"type": "function", "function": {"name": "lookup", "arguments": {"id": 1}}}
    if id_:
        call["id"] = id_
    return call


def _ids(path):
    (row,) = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    calls = [c["id"] for m in row["messages"] for c in m.get("tool_calls") or []]
    links = [(m["content"], m.get("tool_call_id")) for m in row["messages"] if m["role"] == "tool"]
    return calls, links


def _row(first, second):
    return {"scenario_id": "ids", "reward": 1, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [first]},
        {"role": "tool", "content": "r1", **({"tool_call_id": first["id"]} if "id" in first else {})},
        {"role": "assistant", "content": "", "tool_calls": [second]},
        {"role": "tool", "content": "r2", **({"tool_call_id": second["id"]} if "id" in second else {})},
        {"role": "assistant", "content": "done"}]}


def test_a_generated_id_skips_an_id_the_row_brought_earlier(tmp_path):
    out = tmp_path / "sft.openai.jsonl"
    wai.export_dataset([_row(_call("call_0000"), _call())], out, system_prompt="S")
    assert _ids(out) == (["call_0000", "call_0001"], [("r1", "call_0000"), ("r2", "call_0001")])
    problems = [p for p in validate_file(out, "openai")["problems"] if p["severity"] == "error"]
    assert problems == []


def test_a_generated_id_skips_an_id_the_row_brings_later(tmp_path):
    out = tmp_path / "sft.openai.jsonl"
    wai.export_dataset([_row(_call(), _call("call_0000"))], out, system_prompt="S")
    assert _ids(out) == (["call_0001", "call_0000"], [("r1", "call_0001"), ("r2", "call_0000")])
    problems = [p for p in validate_file(out, "openai")["problems"] if p["severity"] == "error"]
    assert problems == []
