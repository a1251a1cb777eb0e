"""Spec section 9, 'Content, roles, think': E25..E29 (spec 3.4, 3.6; DECISIONS 10)."""
from __future__ import annotations

import whileai_pipeline.simulations as wai


def _msgs(messages, **kw):
    return wai.training_rows([{"messages": messages}], **kw)[0]["messages"]


def test_e25_none_content_empty_and_numbers_json_text_d10():
    # Spec: None / 0 / 0 all become "". DECISIONS 10: None -> "", every other non-string value
    # becomes json.dumps text, so 0 -> "0" and False -> "false".
    msgs = _msgs(
        [
            {"role": "user", "content": 0},
            {"role": "assistant", "content": None},
            {"role": "tool", "content": 0},
            {"role": "user", "content": False},
            {"role": "assistant", "content": "ok"},
        ]
    )
    assert msgs == [
        {"role": "user", "content": "0"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "0"},
        {"role": "user", "content": "false"},
        {"role": "assistant", "content": "ok"},
    ]


def test_e25_missing_content_is_empty_string_d10():
    msgs = _msgs([{"role": "user", "content": "u"}, {"role": "assistant"}])
    assert msgs == [{"role": "user", "content": "u"}, {"role": "assistant", "content": ""}]


def test_e26_list_content_is_json_not_repr_d10():
    msgs = _msgs([{"role": "user", "content": ["multi", "modal"]}, {"role": "assistant", "content": "ok"}])
    # Spec: "['multi', 'modal']" (Python repr). DECISIONS 10: Python json.dumps text.
    assert msgs[0] == {"role": "user", "content": '["multi", "modal"]'}


def test_e27_tool_content_dict_is_json_not_repr_d10():
    msgs = _msgs(
        [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "t", "arguments": {}}}]},
            {"role": "tool", "content": {"ok": True}, "name": "t"},
            {"role": "tool", "content": {"q": "é", "n": None}, "name": "t"},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert msgs[2] == {"role": "tool", "content": '{"ok": true}', "name": "t", "tool_call_id": "call_0000"}
    # DECISIONS 10: same encoding as a tool result rebuilt from steps (non-ASCII escaped)
    assert msgs[3] == {"role": "tool", "content": '{"q": "\\u00e9", "n": null}', "name": "t"}


def test_e27_tool_content_dict_same_text_via_steps_and_messages_d10():
    via_steps = wai.training_rows(
        [{"prompt": "u", "steps": [{"tool": "t", "arguments": {}, "result": {"ok": True}}], "final_text": "done"}]
    )[0]["messages"]
    assert [m["content"] for m in via_steps if m["role"] == "tool"] == ['{"ok": true}']


def test_e28_unknown_roles_and_non_dict_messages_dropped():
    rows = wai.training_rows(
        [
            {
                "messages": [
                    {"role": "user", "content": "u"},
                    {"role": "function", "content": "f"},
                    {"role": "developer", "content": "d"},
                    "junk",
                    5,
                    None,
                    {"role": "assistant", "content": "a"},
                ]
            }
        ]
    )
    assert rows[0]["messages"] == [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    assert rows[0]["loss_mask"] == [0, 1]


def test_e29_think_variants_stripped_from_assistant_only():
    cases = [
        ("<think>a</think>b", "b"),
        ("<THINK>a</Think>  b", "b"),
        ("x <think>a</think> y", "x y"),
        ("a<think>1\n2</think>\n\nb", "ab"),
        ("<think>1</think>a<think>2</think>b", "ab"),
        ("<think>oops", "<think>oops"),
        ("  pad  ", "pad"),
    ]
    messages = [{"role": "user", "content": "<think>u</think>q"}]
    messages += [{"role": "assistant", "content": raw} for raw, _ in cases]
    messages += [{"role": "tool", "content": "<think>t</think> r "}]
    msgs = _msgs(messages)
    assert msgs[0] == {"role": "user", "content": "<think>u</think>q"}
    assert [m["content"] for m in msgs[1:-1]] == [want for _, want in cases]
    assert msgs[-1]["content"] == "<think>t</think> r "


def test_e29_strip_think_false_leaves_content_untouched():
    msgs = _msgs(
        [{"role": "user", "content": "u"}, {"role": "assistant", "content": "  <think>a</think>b  "}],
        strip_think=False,
    )
    assert msgs[1] == {"role": "assistant", "content": "  <think>a</think>b  "}
