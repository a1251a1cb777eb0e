"""The leak gate must read the replies the file is trained on, not only the raw rows.

Spec 6.2 searches each assistant turn's raw content (so a quote the export strips inside a
``<think>`` block still counts, conservatively). These are the ways a quote reached the written,
trained text while the gate searched something else and passed: a ``<think>`` block inside the
quote, which ``strip_think`` removes so the two halves join in the file, and ``messages`` given as a
tuple, which the export writes but the gate replaced by a conversation rebuilt from prompt and steps.
"""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

NEEDLE = "report it missing and do not act"
# strip_think leaves "Sure: report it missing and do not act."
SPLIT = "Sure: report it missing <think>the grader said so</think>and do not act."


def _row(messages=None, **extra):
    row = {"prompt": "where is order 42?", "scenario_id": "s1", "rollout_index": 0,
           "privileged": {"reference": NEEDLE}, **extra}
    if messages is not None:
        row["messages"] = messages
    return row


def _assistant_texts(path):
    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for key in ("messages", "chosen", "completion"):
            for m in json.loads(line).get(key) or ():
                if m.get("role") == "assistant":
                    texts.append(m["content"])
    return texts


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------ a think block inside the quote


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_quote_split_by_a_stripped_think_block_is_refused(tmp_path, fmt):
    src = _write(tmp_path / "run.jsonl", [_row([{"role": "user", "content": "where is order 42?"},
                                                {"role": "assistant", "content": SPLIT}])])
    out = tmp_path / "sft.jsonl"
    # what the file would train on: the think block is gone, and the quote is whole
    wai.export_dataset(src, out, format=fmt, validate=False)
    assert any(NEEDLE in t for t in _assistant_texts(out))
    out.unlink()
    with pytest.raises(ValueError, match="^privileged_leak: 1 of 1 rows"):
        wai.export_dataset(src, out, format=fmt)
    assert not out.exists()


def test_a_quote_split_by_a_think_block_in_a_step_and_the_final_text_is_refused(tmp_path):
    row = _row(steps=[{"text": "<think>plan</think>Checking."}], final_text=SPLIT)
    report = wai.export_dataset([row], validate=False)
    assert report["privileged_leaks"]["n_leaked"] == 1


def test_a_think_block_spanning_two_content_parts_is_seen_as_the_export_writes_it(tmp_path):
    """DECISIONS 10: parts are exported as their JSON text, and strip_think then removes the block that
    opens in one part and closes in the next, joining the halves of the quote."""
    parts = [{"type": "text", "text": "report it missing <think>"}, {"type": "text", "text": "</think>and do not act"}]
    src = _write(tmp_path / "run.jsonl", [_row([{"role": "user", "content": "q"},
                                                {"role": "assistant", "content": parts}])])
    out = tmp_path / "sft.jsonl"
    wai.export_dataset(src, out, validate=False)
    assert any(NEEDLE in t for t in _assistant_texts(out))
    out.unlink()
    with pytest.raises(ValueError, match="^privileged_leak:"):
        wai.export_dataset(src, out)
    assert not out.exists()


def test_with_strip_think_off_the_split_quote_is_not_in_the_file_and_not_refused(tmp_path):
    """The file keeps the think block, so no reply holds the quote whole: nothing to refuse."""
    src = _write(tmp_path / "run.jsonl", [_row([{"role": "user", "content": "q"},
                                                {"role": "assistant", "content": SPLIT}])])
    out = tmp_path / "sft.jsonl"
    report = wai.export_dataset(src, out, strip_think=False)
    assert report["privileged_leaks"]["n_leaked"] == 0
    assert not any(NEEDLE in t for t in _assistant_texts(out))


def test_a_quote_inside_a_think_block_is_still_refused_as_the_spec_says(tmp_path):
    """Spec 6.2 searches the raw content: the stripped text is searched as well, never instead."""
    row = _row([{"role": "user", "content": "q"},
                {"role": "assistant", "content": f"<think>the grader says {NEEDLE}</think>Let me check."}])
    with pytest.raises(ValueError, match="^privileged_leak:"):
        wai.export_dataset([row], tmp_path / "sft.jsonl")


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_chosen_reply_split_by_a_stripped_think_block_is_refused(tmp_path, fmt):
    chosen = _row([{"role": "user", "content": "q"}, {"role": "assistant", "content": SPLIT}], reward=1.0)
    rejected = _row([{"role": "user", "content": "q"}, {"role": "assistant", "content": "Refunded."}], reward=0.0)
    pair = {"prompt": "q", "chosen": chosen, "rejected": rejected}
    out = tmp_path / "dpo.jsonl"
    wai.export_preference([pair], out, format=fmt, validate=False)
    assert any(NEEDLE in t for t in _assistant_texts(out))
    out.unlink()
    with pytest.raises(ValueError, match="^privileged_leak: 1 of 1 chosen"):
        wai.export_preference([pair], out, format=fmt)
    assert not out.exists()


def test_a_rejected_reply_split_by_a_stripped_think_block_counts_as_quoting(tmp_path):
    chosen = _row([{"role": "user", "content": "q"}, {"role": "assistant", "content": "I checked."}], reward=1.0)
    rejected = _row([{"role": "user", "content": "q"}, {"role": "assistant", "content": SPLIT}], reward=0.0)
    report = wai.export_preference([{"prompt": "q", "chosen": chosen, "rejected": rejected}], tmp_path / "dpo.jsonl")
    assert report["privileged_leaks"]["rejected_quoting"] == 1


# ------------------------------------------------------------ messages given as a tuple


def test_messages_given_as_a_tuple_are_searched_as_they_are_exported(tmp_path):
    messages = ({"role": "user", "content": "q"}, {"role": "assistant", "content": f"I will {NEEDLE}."})
    row = _row(messages)
    out = tmp_path / "sft.jsonl"
    wai.export_dataset([dict(row)], out, validate=False)
    assert any(NEEDLE in t for t in _assistant_texts(out))  # the export writes the tuple's turns
    out.unlink()
    with pytest.raises(ValueError, match="^privileged_leak: 1 of 1 rows"):
        wai.export_dataset([dict(row)], out)
    assert not out.exists()
    assert wai.leak_report([row])["n_leaked"] == 1


def test_a_chosen_side_with_tuple_messages_is_searched(tmp_path):
    chosen = _row(({"role": "user", "content": "q"}, {"role": "assistant", "content": f"I will {NEEDLE}."}))
    rejected = _row([{"role": "user", "content": "q"}, {"role": "assistant", "content": "Refunded."}])
    with pytest.raises(ValueError, match="^privileged_leak: 1 of 1 chosen"):
        wai.export_preference([{"prompt": "q", "chosen": chosen, "rejected": rejected}], tmp_path / "dpo.jsonl")


# ------------------------------------------------------------ what reference_match calls a repeat


REFERENCE = "lookup first; the order has not shipped, so cancelling it is allowed"


@pytest.mark.parametrize("reply", [
    "Lookup first: the order has not shipped, so cancelling it is allowed.",  # other punctuation
    "lookup first — the order has not shipped so cancelling it is allowed!",
    # full width (NFKC)
    "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in "lookup first; the order has not shipped, so "
            "cancelling it is allowed"),
    "LOOKUP FIRST; THE ORDER HAS NOT SHIPPED, SO CANCELLING IT IS ALLOWED!",
])
def test_a_reply_reference_match_pays_for_repeating_the_reference_is_refused(tmp_path, reply):
    """README (scorers): reference_match "suits short references; a long reference sentence that the reply
    repeats is also what the leak gate refuses". reference_match calls a reply a repeat when the reference
    is a run of its whole words once both are normalized (NFKC, case-folded, punctuation to spaces), so
    the gate must refuse each such reply: with ``sft_rows: pass`` these are exactly the rows exported."""
    from whileai_pipeline.core.scoring import resolve_scorer

    row = {"prompt": "cancel ORD-1", "scenario_id": "s1", "rollout_index": 0, "steps": [{"text": "Checking."}],
           "final_text": reply, "privileged": {"reference": REFERENCE}}
    scored = resolve_scorer("reference_match").score_row(row)
    assert scored["reward"] == 1.0
    out = tmp_path / "sft.jsonl"
    with pytest.raises(ValueError, match="^privileged_leak: 1 of 1 rows"):
        wai.export_dataset([scored], out)
    assert not out.exists()
    assert wai.leak_report([scored])["leaked"] == [
        {"scenario_id": "s1", "rollout_index": 0, "field": "reference", "needle": REFERENCE}]


def test_the_words_of_the_reference_in_another_order_or_inside_other_words_are_no_repeat(tmp_path):
    """Whole words in the reference's order, as reference_match reads a repeat: nothing looser (a verbatim
    quote is still found inside other words, spec 6.2)."""
    for reply in ["the order has not shipped; lookup first, so cancelling it is allowed",
                  "lookup first: the order has not shipped, so cancelling it is allowedly"]:
        row = {"prompt": "q", "final_text": reply, "privileged": {"reference": REFERENCE}}
        assert wai.leak_report([row])["n_leaked"] == 0, reply


def test_a_reference_that_is_mostly_punctuation_is_not_matched_loosely():
    """Loosely, "a.b.c.d.e.f." is "a b c d e f" (11 characters): shorter than a needle may be, so only its
    exact text counts."""
    row = {"prompt": "q", "final_text": "see a, b, c, d, e, f", "privileged": {"reference": "a.b.c.d.e.f."}}
    assert wai.leak_report([row])["n_leaked"] == 0
    assert wai.leak_report([{**row, "final_text": "see A.B.C.D.E.F. now"}])["n_leaked"] == 1


def test_leak_report_names_the_rows_an_export_refuses_for_a_split_quote():
    """The refusal says to drop the rows ``leak_report(...)['leaked']`` names: it must name this one too
    (exports strip think blocks by default)."""
    row = _row([{"role": "user", "content": "q"}, {"role": "assistant", "content": SPLIT}])
    assert wai.leak_report([row])["leaked"] == [
        {"scenario_id": "s1", "rollout_index": 0, "field": "reference", "needle": NEEDLE}]
