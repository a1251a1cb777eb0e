"""Pairs a DPO trainer would train on wrongly, which the spec writes without a word and the preference
export therefore says out loud (ours, beside DECISIONS 12's warnings):

* a chosen side cut by the reply token cap (``finish_reason: "length"``): ``export_dataset`` warns of
  such rows (spec 5.6 item 2) because a model trained on them learns to stop mid-thought; as the
  chosen side of a pair, DPO pushes the model towards that reply just the same;
* a TRL pair whose rejected side started from other messages than its chosen side: the TRL prompt is
  the chosen side's (spec 4.1, E66), so the rejected reply is scored as the answer to a context it
  never saw;
* a side that is a crashed rollout (``final_text`` starting ``<agent error``, spec 1.1): DPO pushes that
  side's text up or down, though the model never produced it (the error text, or a run the crash cut
  short);
* a pair whose chosen and rejected replies are the same (what DPO scores: the assistant text and tool
  calls after the prompt, as written): the grader scored one reply both ways, and DPO gets no signal;
* a pair whose chosen reply is empty (no assistant text after strip_think, e.g. a reply that was only a
  ``<think>`` block, and no tool call): DPO pushes the model towards saying nothing.
"""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

LENGTH_CUT = "cut by the reply token cap"
OTHER_CONTEXT = "rejected side from other messages than the chosen side"
CRASHED = "a side that is a crashed rollout"
AGENT_ERROR = "<agent error: RuntimeError: tool crashed>"
SAME_REPLY = "the same reply as chosen and rejected"
EMPTY_CHOSEN = "an empty chosen reply"


def _side(prompt, text, *, user=None, **extra):
    steps = ([{"user": user}] if user else []) + [{"text": text}]
    return {"prompt": prompt, "steps": steps, "final_text": text, **extra}


def _pair(chosen, rejected):
    return {"prompt": chosen["prompt"], "chosen": chosen, "rejected": rejected, "margin": 1.0}


def _warnings(report, needle):
    return [w for w in report.get("warnings", []) if needle in w]


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_chosen_side_cut_by_the_token_cap_is_exported_with_a_warning(tmp_path, fmt):
    cut = _pair(_side("Refund A", "Let me check the order and then I will", finish_reason="length"),
                _side("Refund A", "No.", finish_reason="stop"))
    fine = _pair(_side("Refund B", "Refunded B.", finish_reason="stop"), _side("Refund B", "No."))
    out = tmp_path / f"pairs.{fmt}.jsonl"
    report = wai.export_preference([cut, fine], out, system_prompt="SYS", format=fmt)
    assert report["pairs"] == 2 and len(_lines(out)) == 2  # exported, as the spec writes them
    (said,) = _warnings(report, LENGTH_CUT)
    assert said.startswith("1 of 2 pairs have a chosen side cut by the reply token cap (finish_reason 'length')")


def test_a_rejected_side_cut_by_the_token_cap_is_no_chosen_side_cut(tmp_path):
    pair = _pair(_side("Refund A", "Refunded A."), _side("Refund A", "Let me", finish_reason="length"))
    report = wai.export_preference([pair], tmp_path / "pairs.jsonl")
    assert not _warnings(report, LENGTH_CUT)


def test_a_trl_pair_whose_rejected_side_had_another_user_turn_says_so(tmp_path):
    """Spec E66: the TRL prompt is the chosen side's, and the rejected side's own first user turns are
    lost; its reply "No." answered "order 9", and DPOTrainer scores it as the answer to "order 7"."""
    other = _pair(_side("Refund", "Refunded order 7.", user="order 7"), _side("Refund", "No.", user="order 9"))
    same = _pair(_side("Refund", "Refunded order 7.", user="order 7"), _side("Refund", "No.", user="order 7"))
    out = tmp_path / "pairs.trl.jsonl"
    report = wai.export_preference([other, same], out, system_prompt="SYS", format="trl")
    first, second = _lines(out)
    assert first["prompt"] == second["prompt"] == [
        {"role": "system", "content": "SYS"}, {"role": "user", "content": "Refund"},
        {"role": "user", "content": "order 7"}]  # the spec's shape, unchanged
    (said,) = _warnings(report, OTHER_CONTEXT)
    assert said.startswith("1 of 2 pairs start the rejected side from other messages than the chosen side")
    # the openai format keeps each side's own context: nothing to say there
    openai = wai.export_preference([other, same], tmp_path / "pairs.openai.jsonl", system_prompt="SYS")
    assert not _warnings(openai, OTHER_CONTEXT)


def test_a_trl_pair_whose_sides_bring_different_system_messages_says_so(tmp_path):
    def side(system, reply, reward):
        return {"prompt": "Refund A", "reward": reward, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": "Refund A"},
            {"role": "assistant", "content": reply}]}

    pair = _pair(side("Be helpful.", "Refunded.", 1), side("Be curt.", "No.", 0))
    out = tmp_path / "pairs.trl.jsonl"
    report = wai.export_preference([pair], out, format="trl")
    (line,) = _lines(out)
    assert line["prompt"][0] == {"role": "system", "content": "Be helpful."}
    assert _warnings(report, OTHER_CONTEXT)


def test_trl_pairs_of_one_conversation_say_nothing_of_their_context(tmp_path):
    pairs = [_pair(_side("Refund A", "Refunded."), _side("Refund A", "No.")),
             _pair(_side("Refund B", "Refunded.", user="now"), _side("Refund B", "No.", user="now"))]
    report = wai.export_preference(pairs, tmp_path / "pairs.trl.jsonl", format="trl")
    assert report["pairs"] == 2
    assert not _warnings(report, OTHER_CONTEXT)


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_side_that_is_a_crashed_rollout_is_exported_with_a_warning(tmp_path, fmt):
    rejected_crashed = _pair(_side("Refund A", "Refunded A."), _side("Refund A", AGENT_ERROR))
    chosen_crashed = _pair({"prompt": "Refund B", "steps": [{"text": "Checking order B."}], "final_text": AGENT_ERROR},
                           _side("Refund B", "No."))  # the error text is dropped (spec 1.4 step 9): still a crash
    fine = _pair(_side("Refund C", "Refunded C."), _side("Refund C", "No."))
    out = tmp_path / f"pairs.{fmt}.jsonl"
    report = wai.export_preference([fine, rejected_crashed, chosen_crashed], out, system_prompt="SYS", format=fmt)
    _, first, _ = _lines(out)  # exported, as the spec writes them
    assert first["rejected"][-1] == {"role": "assistant", "content": AGENT_ERROR}
    (said,) = _warnings(report, CRASHED)
    # the first is named, so that it can be looked at (the pair's line in the file written)
    assert said.startswith("2 of 3 pairs have a side that is a crashed rollout (final_text '<agent error: ...>'; "
                           "first at line 2 of the output): ")


def test_a_reply_that_only_mentions_an_agent_error_is_no_crashed_rollout(tmp_path):
    pair = _pair(_side("Refund A", "Refunded A."), _side("Refund A", "The log said <agent error> earlier."))
    report = wai.export_preference([pair], tmp_path / "pairs.jsonl")
    assert not _warnings(report, CRASHED)


def _calling(call_id, reply):
    return {"prompt": "Refund A", "messages": [
        {"role": "user", "content": "Refund A"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "refund", "arguments": '{"order": "A"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "ok"},
        {"role": "assistant", "content": reply}]}


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_pair_whose_sides_give_the_same_reply_is_exported_with_a_warning(tmp_path, fmt):
    same = _pair(_side("Refund A", "Refunded A."), _side("Refund A", "Refunded A."))
    # the same call and words; only the ids the rows brought differ (no chat template reads them as the reply)
    same_calls = _pair(_calling("call_1", "Done."), _calling("call_9", "Done."))
    # the same once think blocks are stripped (strip_think=True, the default): what is written is the same
    same_thought = _pair(_side("Refund C", "<think>refund it</think>Refunded C."),
                         _side("Refund C", "<think>hm, no</think>Refunded C."))
    fine = _pair(_side("Refund D", "Refunded D."), _side("Refund D", "No."))
    other_call = _pair(_calling("call_1", "Done."), _calling("call_1", "Done!"))
    out = tmp_path / f"pairs.{fmt}.jsonl"
    report = wai.export_preference([fine, same, same_calls, same_thought, other_call], out, system_prompt="SYS",
                                   format=fmt)
    assert len(_lines(out)) == 5  # exported, as the spec writes them
    (said,) = _warnings(report, SAME_REPLY)
    assert said.startswith("3 of 5 pairs have the same reply as chosen and rejected (the same assistant text and "
                           "tool calls after the prompt, as written; first at line 2 of the output): ")


def test_replies_that_differ_in_what_is_written_are_not_the_same(tmp_path):
    thought = _pair(_side("Refund C", "<think>refund it</think>Refunded C."),
                    _side("Refund C", "<think>hm, no</think>Refunded C."))
    def later(reply):  # the same first turn; the replies part after the user's second message
        return {"prompt": "Refund A", "steps": [{"text": "Checking."}, {"user": "and?"}, {"text": reply}]}

    later = _pair(later("Done."), later("No."))
    report = wai.export_preference([thought, later], tmp_path / "pairs.jsonl", strip_think=False)
    assert report["pairs"] == 2
    assert not _warnings(report, SAME_REPLY)


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_pair_whose_chosen_reply_is_empty_is_exported_with_a_warning(tmp_path, fmt):
    thought_only = _pair(_side("Refund A", "<think>I should refund order A.</think>"), _side("Refund A", "No."))
    blank = _pair(_side("Refund B", "   "), _side("Refund B", "No."))
    calls = _pair(_calling("call_1", ""), _side("Refund A", "No."))  # no words, but a call: a reply
    fine = _pair(_side("Refund C", "Refunded C."), _side("Refund C", "<think>no</think>"))  # the rejected is empty
    out = tmp_path / f"pairs.{fmt}.jsonl"
    report = wai.export_preference([calls, thought_only, blank, fine], out, system_prompt="SYS", format=fmt)
    _, first, second, _ = _lines(out)  # exported, as the spec writes them
    for line in (first, second):
        assert line["chosen"][-1] == {"role": "assistant", "content": ""}
    (said,) = _warnings(report, EMPTY_CHOSEN)
    assert said.startswith("2 of 4 pairs have an empty chosen reply (no assistant text after strip_think, e.g. a "
                           "reply that was only a <think> block, and no tool call; first at line 2 of the output): ")


def test_a_chosen_think_block_kept_by_strip_think_false_is_no_empty_reply(tmp_path):
    pair = _pair(_side("Refund A", "<think>I should refund order A.</think>"), _side("Refund A", "No."))
    report = wai.export_preference([pair], tmp_path / "pairs.jsonl", strip_think=False)
    assert not _warnings(report, EMPTY_CHOSEN)


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_side_with_a_system_message_later_on_does_not_open_with_two(tmp_path, fmt):
    """Given the system prompt, a side whose own system message comes between later turns still opens with one
    system turn: only a side (a TRL pair's prompt) that opens with its own under the one given is counted."""
    note = {"role": "system", "content": "The customer's identity is verified."}

    def side(reply, opening=()):
        return {"prompt": "Where is order 7?", "messages": [*opening, {"role": "user", "content": "Where is order 7?"},
                                                            {"role": "assistant", "content": "Let me look."}, note,
                                                            {"role": "user", "content": "And now?"},
                                                            {"role": "assistant", "content": reply}]}

    later = _pair(side("It shipped on Monday."), side("No idea."))
    report = wai.export_preference([later], tmp_path / "later.jsonl", format=fmt, system_prompt="You track orders.")
    assert not _warnings(report, "two system turns"), report.get("warnings")
    own = {"role": "system", "content": "Own rules."}
    opening = _pair(side("It shipped on Monday.", [own]), side("No idea.", [own]))
    report = wai.export_preference([later, opening], tmp_path / "both.jsonl", format=fmt,
                                   system_prompt="You track orders.")
    assert [w for w in _warnings(report, "two system turns") if w.startswith("1 of 2 pairs")], report.get("warnings")
