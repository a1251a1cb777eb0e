"""Conversation rebuild, wire conversion and loss masks on inputs that hand-made mutants of
``core/conversation.py``, ``core/wire.py`` and ``core/masks.py`` showed no other test reached. Expected
values are written out from EXPORT_SPEC.md (1.4, 1.5, 3.4, 3.8, 4.2), not computed by the library."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

import whileai_pipeline.simulations as wai

# ------------------------------------------------------------ conversation (spec 1.4, 1.5)


def test_blank_final_is_appended_after_a_tool_result_even_when_a_blank_turn_matches_it():
    """Spec 1.4 step 7: ``already`` holds only assistant contents that are not blank, so a blank
    final_text matches no turn (step 8), and after a tool result it is appended (step 10)."""
    row = {"prompt": "p", "steps": [{"tool": "t", "arguments": {}, "result": "ok", "text": "  "}], "final_text": "  "}
    assert wai.conversation(row) == [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "  ", "tool_calls": [{"name": "t", "arguments": {}}]},
        {"role": "tool", "name": "t", "content": "ok"},
        {"role": "assistant", "content": "  "},
    ]


def test_final_that_only_differs_by_a_space_from_an_earlier_turn_is_appended_after_a_tool_result():
    """Spec 1.4 step 8 matches exactly (no trimming): "done " is not "done", and the conversation ends
    on a tool result, so step 10 appends it (contrast E9, an exact match, and E10, a non-blank last turn)."""
    row = {"prompt": "p", "steps": [{"text": "done"}, {"tool": "t", "arguments": {}, "result": "ok"}],
           "final_text": "done "}
    assert wai.conversation(row) == [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "done"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "t", "arguments": {}}]},
        {"role": "tool", "name": "t", "content": "ok"},
        {"role": "assistant", "content": "done "},
    ]


def test_tool_trace_is_ignored_when_the_row_has_steps():
    """Spec 1.5: ``tool_trace`` is ignored when ``steps`` are present."""
    row = {"prompt": "p", "steps": [{"text": "hi"}],
           "tool_trace": [{"tool": "lookup", "input": {"id": 7}, "output": "shipped"}]}
    (out,) = wai.training_rows([row])
    assert out["messages"] == [{"role": "user", "content": "p"}, {"role": "assistant", "content": "hi"}]
    assert out["loss_mask"] == [0, 1]


def test_tool_trace_gives_the_steps_of_a_row_without_any():
    """Spec 1.5 + 3.4: each trace element is a tool step; its call gets ``call_0000``."""
    row = {"prompt": "p", "tool_trace": [{"tool": "lookup", "input": {"id": 7}, "output": "shipped"}]}
    (out,) = wai.training_rows([row])
    assert out["messages"] == [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0000", "type": "function", "function": {"name": "lookup", "arguments": '{"id":7}'}}]},
        {"role": "tool", "content": "shipped", "name": "lookup", "tool_call_id": "call_0000"},
    ]


# ------------------------------------------------------------ round-trip gate, dict encoding (spec 4.2)


def test_trl_gate_refuses_a_json_string_even_when_it_encodes_an_object():
    """Spec 4.2: for ``dict`` (trl) the value is taken as is: a JSON string is invalid even if it
    encodes an object. The openai gate parses the same string and accepts it."""
    row = {"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "t", "arguments": '{"a": 1}'}}]}]}
    trl = wai.tool_call_roundtrip([row], format="trl")
    assert (trl["checked"], trl["invalid"], trl["rows"], trl["encoding"]) == (1, 1, [0], "dict")
    openai = wai.tool_call_roundtrip([row], format="openai")
    assert (openai["checked"], openai["invalid"], openai["encoding"]) == (1, 0, "json_string")


# ------------------------------------------------------------ wire: existing system messages (spec 3.4)


def test_a_system_message_in_the_input_is_kept_after_the_new_one():
    """Spec 3.4: existing system messages are kept too (E53: a re-export duplicates them)."""
    row = {"messages": [{"role": "system", "content": "OLD"}, {"role": "user", "content": "u"},
                        {"role": "assistant", "content": "a"}]}
    (out,) = wai.training_rows([row], system_prompt="NEW")
    assert out["messages"] == [
        {"role": "system", "content": "NEW"},
        {"role": "system", "content": "OLD"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    assert out["loss_mask"] == [0, 0, 0, 1]


# ------------------------------------------------------------ loss_mask (spec 3.8)


def test_final_mask_keeps_the_last_assistant_turn_not_the_first():
    """Spec 3.8's own example: ``[user, assistant, "x", assistant]`` final -> ``[0, 0, 0, 1]``."""
    messages = [{"role": "user"}, {"role": "assistant"}, "x", {"role": "assistant"}]
    assert wai.loss_mask(messages, mode="final") == [0, 0, 0, 1]
    assert wai.loss_mask(messages) == [0, 1, 0, 1]


ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer"])
MESSAGES = st.lists(st.one_of(ROLES.map(lambda role: {"role": role, "content": ""}), st.just("x"), st.none()),
                    max_size=12)


@settings(max_examples=200, deadline=None)
@given(MESSAGES)
def test_masks_have_one_entry_per_message_and_final_keeps_only_the_last_assistant(messages):
    """Spec 3.8 as invariants: one 0/1 per message, 1 exactly on the assistant objects; ``final`` has a
    single 1, at the highest assistant index, or none without an assistant."""
    assistant = [i for i, m in enumerate(messages) if isinstance(m, dict) and m["role"] == "assistant"]
    every = wai.loss_mask(messages)
    assert len(every) == len(messages)
    assert [i for i, bit in enumerate(every) if bit] == assistant
    assert set(every) <= {0, 1}
    final = wai.loss_mask(messages, mode="final")
    assert len(final) == len(messages)
    assert [i for i, bit in enumerate(final) if bit] == assistant[-1:]
