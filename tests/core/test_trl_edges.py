"""TRL shapes (spec 4.1, DECISIONS 16) on inputs that hand-made mutants of ``core/trl.py`` showed no other
test reached. Expected values are written out from the spec, not computed by the library."""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

OPENER_ONLY = {"opener": "Hi, I'm the bot.", "prompt": "I need help", "steps": [], "final_text": "Sure"}  # E4


def test_completion_rows_need_an_assistant_turn_after_index_0():
    """DECISIONS 16: with mask_mode="final" a TRL row whose only assistant turn is message 0 (E4: the opener,
    no system prompt) has no prompt to condition on: dropped and counted."""
    report = wai.export_dataset([OPENER_ONLY, {"prompt": "p", "final_text": "a"}], format="trl", mask_mode="final")
    assert (report["n"], report["no_completion_dropped"]) == (1, 1)


def test_with_a_system_prompt_the_opener_is_a_completion():
    """The same row with a system prompt: the opener is message 1, so the row is kept (contrast E65)."""
    (row,) = wai.to_trl(wai.training_rows([OPENER_ONLY], system_prompt="SYS"), kind="completion")
    assert row["prompt"] == [{"role": "system", "content": "SYS"}]
    assert row["completion"] == [{"role": "assistant", "content": "Hi, I'm the bot."}]


def test_a_prompt_that_is_no_string_is_not_moved_to_prompt_text():
    """Spec 4.1: ``prompt`` is removed; only a non-empty string is re-added as ``prompt_text``."""
    rows = [{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}], "prompt": prompt}
            for prompt in (123, ["u"], "", "ask")]
    out = wai.to_trl(rows)
    assert [("prompt" in row, row.get("prompt_text")) for row in out] == [(False, None)] * 3 + [(False, "ask")]


def test_a_tool_call_function_that_is_no_object_is_refused_with_its_row():
    """Spec 4.1: a truthy non-object ``function`` makes the copy fail with a ValueError (ours names the row);
    a list that ``dict()`` could read (``["ab"]`` -> ``{"a": "b"}``) must not slip through as a function."""
    good = {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}
    for function in ("lookup", ["ab"]):
        bad = {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": function}]}]}
        with pytest.raises(wai.BadRowError, match=r"index 1 of the rows given: tool call function must be an object"):
            wai.to_trl([good, bad])


def test_trl_rows_carry_no_loss_mask(tmp_path):
    """DECISIONS 16: TRL SFT rows carry no ``loss_mask`` (SFTTrainer reads none), in either TRL shape."""
    rows = [{"prompt": "p", "steps": [{"text": "a"}], "final_text": "a", "reward": 1}]
    for mask_mode in ("assistant", "final"):
        out = tmp_path / f"{mask_mode}.jsonl"
        wai.export_dataset(rows, out, format="trl", mask_mode=mask_mode)
        (line,) = out.read_text(encoding="utf-8").splitlines()
        assert "loss_mask" not in json.loads(line)
    (row,) = wai.to_trl(wai.training_rows(rows))
    assert row["messages"] == [{"role": "user", "content": "p"}, {"role": "assistant", "content": "a"}]
    assert "loss_mask" not in row


def test_completion_rows_split_at_the_last_assistant_turn():
    """DECISIONS 16: prompt = the messages before the last assistant turn, completion = that turn and after."""
    messages = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"},
                {"role": "tool", "content": "t"}]
    (row,) = wai.to_trl([{"messages": messages, "loss_mask": [0, 0, 0, 1, 0]}], kind="completion")
    assert row == {"prompt": messages[:3], "completion": messages[3:]}


def test_a_training_row_without_messages_gets_an_empty_list():
    """Spec 4.1: every TRL training row has its ``messages``; the prompt moves to ``prompt_text``."""
    assert wai.to_trl([{"prompt": "p", "reward": 1}]) == [{"reward": 1, "messages": [], "prompt_text": "p"}]


ENDS_ON_ASSISTANT = {"prompt": "Where is ORD-1?", "final_text": "On its way.",
                     "steps": [{"tool": "lookup", "arguments": {"id": "ORD-1"}, "result": {"status": "shipped"}},
                               {"text": "On its way."}]}
ENDS_ON_TOOL = {"prompt": "Where is ORD-2?",  # the run stopped after the call: no reply to its result
                "steps": [{"text": "Let me look.", "tool": "lookup", "arguments": {"id": "ORD-2"},
                           "result": {"status": "lost"}}]}
ENDS_ON_USER = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
                             {"role": "user", "content": "thanks, bye"}]}


def test_completions_that_go_on_after_the_last_assistant_turn_are_counted_in_a_warning(tmp_path):
    """DECISIONS 16: a completion is the last assistant turn and what follows, and TRL trains every message
    of a completion: a run that ends on a tool result or a user turn teaches the model those words as its
    own. The report said nothing of it (the report's ``trained`` count only); now a warning counts them.
    Unrolled samples each end on their assistant turn: nothing to warn of there."""
    options = {"mask_mode": "final"}
    rows = [ENDS_ON_ASSISTANT, ENDS_ON_TOOL, ENDS_ON_USER]
    report = wai.export_dataset(rows, tmp_path / "out.jsonl", format="trl", **options)
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    going_on = [r for r in written if len(r["completion"]) > 1]
    assert [[m["role"] for m in r["completion"]] for r in going_on] == [["assistant", "tool"], ["assistant", "user"]]
    (warning,) = [w for w in report["warnings"] if "after their last assistant turn" in w]
    assert warning.startswith(f"2 of {len(written)} rows go on after their last assistant turn"), warning
    quiet = wai.export_dataset([ENDS_ON_ASSISTANT], tmp_path / "quiet.jsonl", format="trl", **options)
    assert not [w for w in quiet.get("warnings", []) if "after their last assistant turn" in w]
    openai = wai.export_dataset(rows, tmp_path / "o.jsonl", format="openai", **options)
    assert not [w for w in openai.get("warnings", []) if "after their last assistant turn" in w]
    unrolled = wai.export_dataset(rows, tmp_path / "u.jsonl", format="trl", unroll=True)
    samples = [json.loads(line) for line in (tmp_path / "u.jsonl").read_text().splitlines()]
    assert samples and all(len(r["completion"]) == 1 for r in samples)
    assert not [w for w in unrolled.get("warnings", []) if "after their last assistant turn" in w]


TWO_REPLIES = {"prompt": "Where is ORD-3?", "final_text": "Shipped.",
               "steps": [{"text": "Let me look.", "tool": "lookup", "arguments": {"id": "ORD-3"},
                          "result": {"status": "shipped"}}, {"text": "Shipped."}]}
ONE_REPLY = {"prompt": "hi", "final_text": "Hello!", "steps": [{"text": "Hello!"}]}


@pytest.mark.parametrize("options,expected", [({"mask_mode": "final"}, 1), ({"unroll": True}, 1),
                                              ({"mask_mode": "assistant"}, 0)])
def test_an_openai_export_that_masks_replies_warns_that_openai_trains_them(tmp_path, options, expected):
    """OpenAI's fine-tuning reads a message's ``weight``, never ``loss_mask``: an openai file whose
    loss_mask leaves an assistant turn out (mask_mode="final", or an unrolled sample's earlier turns)
    trains that turn when uploaded as it is. validate warned (loss_mask_ignored); the export's report
    said nothing."""
    report = wai.export_dataset([TWO_REPLIES, ONE_REPLY], tmp_path / "out.jsonl", **options)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    masked_replies = [r for r in rows if any(m["role"] == "assistant" and not bit
                                             for m, bit in zip(r["messages"], r["loss_mask"]))]
    assert len(masked_replies) == expected  # from the rows as written, not from the report
    found = [w for w in report.get("warnings", []) if "OpenAI fine-tuning reads only" in w]
    if expected:
        (warning,) = found
        assert warning.startswith(f"{expected} of {len(rows)} rows leave assistant turns out of loss_mask"), warning
    else:
        assert found == []
    trl = wai.export_dataset([TWO_REPLIES, ONE_REPLY], tmp_path / "t.jsonl", format="trl", **options)
    assert not [w for w in trl.get("warnings", []) if "OpenAI fine-tuning reads only" in w]
