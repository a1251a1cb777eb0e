"""Spec section 9, 'Arguments and ids': E12..E24 (spec 3.4, 3.5, 4.2; DECISIONS 2, 3, 9)."""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

TOOL = {"type": "function", "function": {"name": "lookup"}}


def _call_row(arguments):
    """A messages row whose single tool call carries `arguments` untouched (no steps rebuild)."""
    return {
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}],
            },
            {"role": "tool", "content": "r", "tool_call_id": "c1"},
            {"role": "assistant", "content": "done"},
        ]
    }


def _step_row(arguments):
    return {"prompt": "p", "steps": [{"tool": "t", "arguments": arguments, "result": "r"}], "final_text": "done"}


def _wire_args(row):
    return [
        c["function"]["arguments"]
        for m in row["messages"]
        if m.get("role") == "assistant"
        for c in (m.get("tool_calls") or [])
    ]


def _enc(value, times):
    for _ in range(times):
        value = json.dumps(value)
    return value


# ---------------------------------------------------------------- E12
def test_e12_nonascii_dict_args_compact_utf8_d2():
    # Spec 3.13 worked example; DECISIONS 2 replaces ARGJSON by compact JSON with UTF-8.
    row = {
        "prompt": "p",
        "steps": [{"tool": "lookup", "arguments": {"id": 7, "q": "é"}, "result": {"ok": True}}],
        "final_text": "done",
        "reward": 1,
        "scenario_id": "s1",
        "rollout_index": 0,
        "task_id": "T",
        "privileged": {"reference": "xx"},
    }
    rows = wai.training_rows([row], system_prompt="SYS", tools=[TOOL])
    expected = {
        "messages": [
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": "p"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_0000",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"id":7,"q":"é"}'},
                    }
                ],
            },
            # DECISIONS 10: tool result rebuilt from steps keeps PYJSON
            {"role": "tool", "content": '{"ok": true}', "name": "lookup", "tool_call_id": "call_0000"},
            {"role": "assistant", "content": "done"},
        ],
        "loss_mask": [0, 0, 1, 0, 1],
        "tools": [TOOL],
        "reward": 1,
        "prompt": "p",
        "scenario_id": "s1",
        "schema_version": "1",
    }
    assert rows == [expected]
    assert list(rows[0].keys()) == list(expected.keys())
    assert list(rows[0]["messages"][3].keys()) == ["role", "content", "name", "tool_call_id"]
    assert list(rows[0]["messages"][2]["tool_calls"][0].keys()) == ["id", "type", "function"]


def test_e12_exported_file_is_utf8_not_escaped_d1_d2(tmp_path, read_jsonl_out):
    row = {
        "prompt": "p",
        "steps": [{"tool": "lookup", "arguments": {"id": 7, "q": "é"}, "result": "ok"}],
        "final_text": "done",
        "reward": 1,
    }
    out = tmp_path / "out.jsonl"
    wai.export_dataset([row], out, tools=[TOOL])
    raw = out.read_bytes()
    assert "é".encode("utf-8") in raw
    assert b"\\u00e9" not in raw
    lines = read_jsonl_out(out)
    assert _wire_args(lines[0]) == ['{"id":7,"q":"é"}']


# ---------------------------------------------------------------- E13
def test_e13_string_encoded_args_unwrapped_up_to_three_passes_d2():
    inner = '{"a":1,"b":2}'  # written compact, so "verbatim" and "compact" agree
    rows = wai.training_rows(
        [
            _step_row(_enc({"a": 1}, 2)),
            _step_row(_enc({"a": 1}, 3)),
            _step_row(_enc(inner, 3)),  # object encoded 4 times in all
        ]
    )
    assert [_wire_args(r) for r in rows] == [['{"a":1}'], ['{"a":1}'], ['{"a":1,"b":2}']]
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (3, 0, [])


def test_e13_five_times_encoded_is_invalid():
    inner = '{"a":1,"b":2}'
    five = _enc(inner, 4)  # object encoded 5 times in all
    rows = wai.training_rows([_step_row(five)])
    # three decodes leave a JSON string literal, written verbatim
    assert _wire_args(rows[0]) == [_enc(inner, 1)]
    assert _wire_args(rows[0]) == ['"{\\"a\\":1,\\"b\\":2}"']
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (1, 1, [0])
    with pytest.raises(ValueError) as ei:
        wai.export_dataset([_step_row(five)])
    assert str(ei.value).startswith("tool_call_roundtrip_invalid:")


# ---------------------------------------------------------------- E14
def test_e14_invalid_json_string_kept_verbatim_and_gate_refuses(tmp_path):
    rows = wai.training_rows([_step_row("{a: 1}")])
    assert _wire_args(rows[0]) == ["{a: 1}"]
    rt_openai = wai.tool_call_roundtrip(rows, format="openai")
    assert (rt_openai["checked"], rt_openai["invalid"], rt_openai["rows"]) == (1, 1, [0])
    assert rt_openai["encoding"] == "json_string"
    rt_trl = wai.tool_call_roundtrip(wai.to_trl(rows), format="trl")
    assert (rt_trl["checked"], rt_trl["invalid"], rt_trl["rows"]) == (1, 1, [0])
    assert rt_trl["encoding"] == "dict"

    out = tmp_path / "out.jsonl"
    for fmt in ("openai", "trl"):
        with pytest.raises(ValueError) as ei:
            wai.export_dataset([_step_row("{a: 1}")], out, format=fmt)
        assert str(ei.value).startswith("tool_call_roundtrip_invalid:")
        assert isinstance(ei.value, wai.RoundtripInvalidError)
        assert isinstance(ei.value, wai.GateError)
        # DECISIONS 14: the gate error carries the full report
        assert ei.value.report["tool_call_roundtrip"]["invalid"] == 1
        assert ei.value.report["tool_call_roundtrip"]["rows"] == [0]
    assert not out.exists()


# ---------------------------------------------------------------- E15
def test_e15_empty_string_args_in_messages_row_invalid():
    rows = wai.training_rows([_call_row("")])
    assert _wire_args(rows[0]) == [""]
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (1, 1, [0])
    # contrast E8: via steps "" becomes {}
    via_steps = wai.training_rows([_step_row("")])
    assert _wire_args(via_steps[0]) == ["{}"]
    assert wai.tool_call_roundtrip(via_steps)["invalid"] == 0


# ---------------------------------------------------------------- E16
def test_e16_falsy_and_null_args_become_empty_object():
    values = [None, "null", [], 0, False, {}]
    rows = wai.training_rows([_call_row(v) for v in values])
    assert [_wire_args(r) for r in rows] == [["{}"]] * 6
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (6, 0, [])


# ---------------------------------------------------------------- E17
def test_e17_non_object_args_are_invalid():
    values = [[1, 2], "[1, 2]", 5, "123", "true", '"hello"']
    rows = wai.training_rows([_call_row(v) for v in values])
    assert [_wire_args(r) for r in rows] == [["[1,2]"], ["[1,2]"], ["5"], ["123"], ["true"], ["hello"]]
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (6, 6, [0, 1, 2, 3, 4, 5])


# ---------------------------------------------------------------- E18
def test_e18_nan_arguments_invalid_under_strict_gate_d3(tmp_path):
    # Spec: passes the gate. DECISIONS 3: the gate parses strict JSON, NaN inside arguments is invalid.
    rows = wai.training_rows([_step_row({"x": float("nan")})])
    (wire,) = _wire_args(rows[0])
    assert isinstance(wire, str)
    assert "NaN" in wire
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (1, 1, [0])
    out = tmp_path / "out.jsonl"
    with pytest.raises(ValueError) as ei:
        wai.export_dataset([_step_row({"x": float("nan")})], out)
    assert str(ei.value).startswith("tool_call_roundtrip_invalid:")
    assert not out.exists()


def test_e18_nan_in_string_arguments_invalid_under_strict_gate_d3():
    rows = wai.training_rows([_call_row('{"x": NaN}'), _call_row('{"x": Infinity}')])
    rt = wai.tool_call_roundtrip(rows)
    assert (rt["checked"], rt["invalid"], rt["rows"]) == (2, 2, [0, 1])


# ---------------------------------------------------------------- E19
def test_e19_generated_ids_count_only_idless_calls_d9():
    row = {
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "abc", "type": "function", "function": {"name": "a", "arguments": {}}},
                    {"type": "function", "function": {"name": "b", "arguments": {}}},
                    {"id": "", "type": "function", "function": {"name": "c", "arguments": {}}},
                    "not a dict",
                ],
            },
        ]
    }
    msgs = wai.training_rows([row])[0]["messages"]
    assert msgs[1]["tool_calls"] == [
        {"id": "abc", "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"id": "call_0000", "type": "function", "function": {"name": "b", "arguments": "{}"}},
        {"id": "call_0001", "type": "function", "function": {"name": "c", "arguments": "{}"}},
        {"id": "call_0002", "type": "function", "function": {"name": "", "arguments": "{}"}},
    ]


# ---------------------------------------------------------------- E20
def test_e20_tool_message_with_own_id_consumes_it_d9():
    row = {
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "a", "arguments": {}}},
                    {"function": {"name": "b", "arguments": {}}},
                    {"function": {"name": "c", "arguments": {}}},
                ],
            },
            {"role": "tool", "content": "ra"},
            {"role": "tool", "content": "rb", "tool_call_id": "call_0001"},
            {"role": "tool", "content": "rc"},
            {"role": "assistant", "content": "done"},
        ]
    }
    msgs = wai.training_rows([row])[0]["messages"]
    tools = [m for m in msgs if m["role"] == "tool"]
    # Spec: the third would link to call_0001 again. DECISIONS 9: the explicit id is consumed.
    assert tools == [
        {"role": "tool", "content": "ra", "tool_call_id": "call_0000"},
        {"role": "tool", "content": "rb", "tool_call_id": "call_0001"},
        {"role": "tool", "content": "rc", "tool_call_id": "call_0002"},
    ]


# ---------------------------------------------------------------- E21
def test_e21_leftover_pending_id_links_to_later_result():
    row = {
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "a", "arguments": {}}},
                    {"function": {"name": "b", "arguments": {}}},
                ],
            },
            {"role": "tool", "content": "r1"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "c", "arguments": {}}}]},
            {"role": "tool", "content": "r2"},
            {"role": "tool", "content": "r3"},
            {"role": "assistant", "content": "done"},
        ]
    }
    msgs = wai.training_rows([row])[0]["messages"]
    assert [c["id"] for c in msgs[3]["tool_calls"]] == ["call_0002"]
    assert [m.get("tool_call_id") for m in msgs if m["role"] == "tool"] == ["call_0000", "call_0001", "call_0002"]


# ---------------------------------------------------------------- E22
def test_e22_tool_message_before_any_call_has_no_id():
    row = {
        "messages": [
            {"role": "user", "content": "u"},
            {"role": "tool", "content": "x", "name": "t"},
            {"role": "assistant", "content": "ok"},
        ]
    }
    msgs = wai.training_rows([row])[0]["messages"]
    assert msgs[1] == {"role": "tool", "content": "x", "name": "t"}
    assert "tool_call_id" not in msgs[1]


# ---------------------------------------------------------------- E23
def test_e23_tool_call_id_zero_treated_as_missing():
    row = {
        "messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "a", "arguments": {}}}]},
            {"role": "tool", "content": "r", "tool_call_id": 0},
            {"role": "assistant", "content": "ok"},
        ]
    }
    msgs = wai.training_rows([row])[0]["messages"]
    assert msgs[2] == {"role": "tool", "content": "r", "tool_call_id": "call_0000"}


# ---------------------------------------------------------------- E24
def test_e24_loose_call_given_to_roundtrip_is_invalid():
    rows = [
        {
            "messages": [
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "", "tool_calls": [{"name": "t", "arguments": {"a": 1}}]},
            ]
        }
    ]
    assert wai.tool_call_roundtrip(rows) == {
        "checked": 1,
        "invalid": 1,
        "rows": [0],
        "encoding": "json_string",
        "checked_for": "arguments parse back to a dict from their JSON string (OpenAI wire). "
        "A chat-template trainer needs dicts: export format='trl' for that.",
    }
    assert wai.tool_call_roundtrip(rows, format="trl") == {
        "checked": 1,
        "invalid": 1,
        "rows": [0],
        "encoding": "dict",
        "checked_for": "arguments are dicts, as HF chat templates render them (| tojson).",
    }
