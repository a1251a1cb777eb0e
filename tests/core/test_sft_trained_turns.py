"""What an SFT export trains that a fine-tuning run would not want, said in the report.

The spec (and the reference) write these rows as they are; the report must then name them, as it names rows with
no assistant turn: the trainer learns exactly what the row holds.
"""

import json
import re

import pytest

import whileai_pipeline.simulations as wai

EMPTY = re.compile(r"^(\d+) of (\d+) rows train an assistant turn with no text and no tool call")


def _warning(report, pattern):
    found = [m for m in (pattern.match(w) for w in report.get("warnings", [])) if m]
    assert len(found) <= 1, report.get("warnings")
    return (int(found[0].group(1)), int(found[0].group(2))) if found else None


# A reasoning agent whose last step was only a <think> block: strip_think leaves an empty reply, and the
# final_text is not used (the last turn was not blank before stripping, spec 1.4 step 9).
THINK_ONLY = {"prompt": "Where is order 7?", "steps": [{"text": "<think>I should answer.</think>"}],
              "final_text": "It shipped.", "reward": 1}
FINE = {"prompt": "Where is order 8?", "steps": [{"text": "It is on its way."}], "final_text": "It is on its way.",
        "reward": 1}
CALL_ONLY = {"prompt": "Where is order 9?", "steps": [{"tool": "lookup", "arguments": {"id": 9}, "result": "ok"}],
             "final_text": "", "reward": 1}


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("kw", [{}, {"mask_mode": "final"}, {"unroll": True}], ids=["assistant", "final", "unroll"])
def test_an_empty_reply_that_is_trained_is_named(tmp_path, fmt, kw):
    out = tmp_path / "out.jsonl"
    report = wai.export_dataset([THINK_ONLY, FINE, CALL_ONLY], out, format=fmt, system_prompt="You track orders.",
                                **kw)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    # the row really trains an empty assistant turn (the spec's conversion, not changed here)
    empty = [r for r in rows if any(m["role"] == "assistant" and not m["content"] and not m.get("tool_calls")
                                    for m in r.get("completion") or r.get("messages"))]
    assert len(empty) == 1
    assert _warning(report, EMPTY) == (1, report["n"]), report.get("warnings")


def test_no_empty_reply_warning_when_every_reply_has_words_or_a_call(tmp_path):
    report = wai.export_dataset([FINE, CALL_ONLY], tmp_path / "out.jsonl", system_prompt="You track orders.")
    assert _warning(report, EMPTY) is None
    # strip_think=False keeps the think block: the turn is not empty
    report = wai.export_dataset([THINK_ONLY], tmp_path / "keep.jsonl", strip_think=False)
    assert _warning(report, EMPTY) is None


def test_trl_final_mode_counts_only_the_turn_trained(tmp_path):
    """An empty turn in the prompt of a prompt/completion row is context, not trained: no warning."""
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "   "},
                        {"role": "user", "content": "hello?"}, {"role": "assistant", "content": "Hi there."}],
           "reward": 1}
    report = wai.export_dataset([row], tmp_path / "trl.jsonl", format="trl", mask_mode="final")
    assert _warning(report, EMPTY) is None
    report = wai.export_dataset([row], tmp_path / "msgs.jsonl", format="trl")
    assert _warning(report, EMPTY) == (1, 1)
