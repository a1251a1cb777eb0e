"""Spec section 9, 'Conversation rebuild': E1..E11 (spec section 1.4, 3.3, 3.4)."""
from __future__ import annotations

import datetime

import pytest

import whileai_pipeline.simulations as wai


def test_e01_final_dropped_when_last_turn_is_nonblank_assistant():
    row = {"prompt": "hi", "steps": [{"text": "hello"}], "final_text": "bye"}
    assert wai.conversation(row) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    # and the training row built from it carries no "bye"
    rows = wai.training_rows([row])
    assert rows[0]["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    assert rows[0]["loss_mask"] == [0, 1]


def test_e02_final_appended_after_trailing_tool_step():
    row = {"prompt": "hi", "steps": [{"tool": "t", "arguments": {}, "result": "ok"}], "final_text": "done"}
    conv = wai.conversation(row)
    assert conv == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "t", "arguments": {}}]},
        {"role": "tool", "name": "t", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    # spec 1.4: tool message key order role, name, content
    assert list(conv[2].keys()) == ["role", "name", "content"]


def test_e03_whitespace_turn_replaced_by_final():
    row = {"prompt": "hi", "steps": [{"text": "   "}], "final_text": "done"}
    assert wai.conversation(row) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "done"},
    ]


def test_e04_opener_prompt_popped_final_dropped():
    row = {"opener": "Hi, I'm the bot.", "prompt": "I need help", "steps": [], "final_text": "Sure"}
    assert wai.conversation(row) == [{"role": "assistant", "content": "Hi, I'm the bot."}]


def test_e05_trailing_user_steps_popped():
    row = {"prompt": "a", "steps": [{"text": "b"}, {"user": "c"}], "final_text": "x"}
    # trailing user "c" popped; final "x" then dropped (last turn is a non-blank assistant turn)
    assert wai.conversation(row) == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]


def test_e05_trailing_user_kept_and_final_appended_on_agent_error():
    row = {"prompt": "a", "steps": [{"text": "b"}, {"user": "c"}], "final_text": "<agent error: boom>"}
    assert wai.conversation(row) == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "<agent error: boom>"},
    ]


def test_e06_prompt_only_row_keeps_single_user_turn():
    row = {"prompt": "only"}
    assert wai.conversation(row) == [{"role": "user", "content": "only"}]
    rows = wai.training_rows([row])
    assert rows == [
        {
            "messages": [{"role": "user", "content": "only"}],
            "loss_mask": [0],
            "prompt": "only",
            "schema_version": "1",
        }
    ]
    assert list(rows[0].keys()) == ["messages", "loss_mask", "prompt", "schema_version"]


def test_e07_step_with_user_and_tool_gives_only_user_turn():
    row = {
        "prompt": "p",
        "steps": [
            {"user": "u", "tool": "t", "arguments": {"a": 1}, "result": "r", "text": "spoken"},
            {"text": "ok"},
        ],
        "final_text": "",
    }
    assert wai.conversation(row) == [
        {"role": "user", "content": "p"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "ok"},
    ]


def test_e08_falsy_arguments_and_pyjson_results_via_steps():
    row = {
        "prompt": "p",
        "steps": [
            {"tool": "a", "arguments": None, "result": None},
            {"tool": "b", "arguments": "", "result": 5},
            {"tool": "c", "arguments": None, "result": [1, "é"]},
            {"tool": "d", "arguments": None, "result": {"when": datetime.date(2024, 1, 2)}},
        ],
        "final_text": "done",
    }
    conv = wai.conversation(row)
    calls = [m for m in conv if m["role"] == "assistant" and m.get("tool_calls")]
    assert [c["tool_calls"] for c in calls] == [
        [{"name": "a", "arguments": {}}],
        [{"name": "b", "arguments": {}}],
        [{"name": "c", "arguments": {}}],
        [{"name": "d", "arguments": {}}],
    ]
    tool_contents = [m["content"] for m in conv if m["role"] == "tool"]
    # spec 1.4 / E8: PYJSON (ensure_ascii, ", " separators, str() fallback)
    assert tool_contents == ["null", "5", '[1, "\\u00e9"]', '{"when": "2024-01-02"}']

    # The same text reaches the training row (DECISIONS 10 keeps the PYJSON encoding for
    # tool results rebuilt from steps); the wire arguments are "{}".
    out = wai.training_rows([row])[0]["messages"]
    assert [m["content"] for m in out if m["role"] == "tool"] == [
        "null",
        "5",
        '[1, "\\u00e9"]',
        '{"when": "2024-01-02"}',
    ]
    wire_args = [
        c["function"]["arguments"] for m in out if m["role"] == "assistant" for c in m.get("tool_calls", [])
    ]
    assert wire_args == ["{}", "{}", "{}", "{}"]


def test_e09_final_equal_to_earlier_text_not_appended_after_tool_result():
    row = {
        "prompt": "p",
        "steps": [{"text": "Checking."}, {"tool": "t", "arguments": {"a": 1}, "result": "r"}],
        "final_text": "Checking.",
    }
    assert wai.conversation(row) == [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "Checking."},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "t", "arguments": {"a": 1}}]},
        {"role": "tool", "name": "t", "content": "r"},
    ]


def test_e10_final_with_trailing_space_dropped():
    row = {"prompt": "p", "steps": [{"text": "done"}], "final_text": "done "}
    assert wai.conversation(row) == [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "done"},
    ]


def test_e11_empty_row_conversation_is_empty():
    assert wai.conversation({}) == []
    assert wai.conversation({"final_text": "b"}) == [{"role": "assistant", "content": "b"}]


def test_e11_empty_row_training_rows_schema_invalid():
    with pytest.raises(ValueError) as ei:
        wai.training_rows([{}])
    assert str(ei.value).startswith("schema_invalid in training_rows: 0:messages_missing")
    assert isinstance(ei.value, wai.SchemaInvalidError)


def test_e11_empty_row_index_is_output_position():
    good = {"prompt": "p", "steps": [{"text": "a"}]}
    with pytest.raises(ValueError) as ei:
        wai.training_rows([good, {}])
    assert str(ei.value).startswith("schema_invalid in training_rows: 1:messages_missing")


def test_e11_empty_row_with_system_prompt_gives_system_only():
    rows = wai.training_rows([{}], system_prompt="SYS")
    assert rows == [
        {
            "messages": [{"role": "system", "content": "SYS"}],
            "loss_mask": [0],
            "schema_version": "1",
        }
    ]
