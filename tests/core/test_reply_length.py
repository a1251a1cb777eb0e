"""``reply_length`` reads a row's assistant turns off its steps without building the conversation;
it must count exactly what the conversation holds."""

from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.conversation import conversation
from whileai_pipeline.core.pairs import reply_length
from whileai_pipeline.core.text import text


def counted_from_conversation(row):
    """The definition: the assistant turns of conversation(row), plus a final_text that is not the last."""
    messages = row.get("messages")
    if not (isinstance(messages, list) and messages):
        messages = conversation(row, tool_text=False)
    total, last = 0, None
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            last = text(message.get("content") or "")
            total += len(last)
    final = text(row.get("final_text") or "")
    return total + len(final) if final and final != last else total


WORDS = st.sampled_from(["", " ", "\n", "ok", "done", "  done ", "<agent error: timeout>", "<think>x</think>"])
LOOSE = st.one_of(WORDS, st.none(), st.integers(-2, 2), st.just(["x"]))  # text() takes anything

STEP = st.one_of(
    st.fixed_dictionaries({"user": LOOSE}),
    st.fixed_dictionaries({"text": LOOSE}),
    st.fixed_dictionaries({"tool": st.sampled_from(["lookup", "", None]), "text": LOOSE,
                           "arguments": st.just({"id": 1}), "result": st.sampled_from(["r", {"a": 1}, None])}),
    st.fixed_dictionaries({"user": LOOSE, "text": LOOSE, "tool": st.sampled_from(["lookup", None])}),
    st.sampled_from([None, "step", 3]),
)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user", "tool", "system"]), "content": LOOSE}),
    st.just("not a message"),
)
ROW = st.fixed_dictionaries({}, optional={
    "opener": LOOSE,
    "prompt": LOOSE,
    "steps": st.one_of(st.lists(STEP, max_size=6), st.just("steps"), st.none(), st.tuples(STEP, STEP)),
    "final_text": LOOSE,
    "messages": st.one_of(st.lists(MESSAGE, max_size=5), st.none(), st.just({})),
})


@settings(max_examples=3000, deadline=None)
@given(ROW)
def test_reply_length_counts_what_the_conversation_holds(row):
    assert reply_length(row) == counted_from_conversation(row)


def test_each_rule_of_the_final_turn():
    spoke = {"text": "hello"}
    call = {"tool": "lookup", "text": "", "arguments": {}}
    cases = [
        ({"prompt": "q", "steps": [spoke], "final_text": "hello"}, 5),  # final is the last turn
        ({"prompt": "q", "steps": [spoke, {"text": "bye"}], "final_text": "hello"}, 13),  # said before, not last
        ({"prompt": "q", "steps": [call], "final_text": "done"}, 4),  # appended after a tool message
        ({"prompt": "q", "steps": [{"text": "hi"}, {"user": "more?"}], "final_text": "done"}, 6),  # user turn dropped
        ({"prompt": "q", "steps": [{"text": "hi"}, {"user": "more?"}], "final_text": "<agent error>"}, 15),
        ({"prompt": "q", "steps": [{"tool": "lookup", "text": " "}, {"text": "  "}], "final_text": "ok"}, 3),
        ({"opener": "hey", "prompt": "q", "final_text": "hey"}, 3),
        ({"prompt": "q", "final_text": " "}, 1),
    ]
    for row, expected in cases:
        assert reply_length(row) == counted_from_conversation(row) == expected, row
