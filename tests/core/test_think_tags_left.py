"""With ``strip_think`` on, a trained reply that still holds a think tag is named in the export's warnings.

Spec 3.6 strips only whole ``<think>...</think>`` blocks: a reply whose opening tag the chat template wrote
(``reasoning</think>answer``, as DeepSeek-R1 and Qwen3 runs often store it) or whose thinking was cut off
(``<think>...`` never closed) is written as it is, reasoning and tag included. The row is the spec's, but the
caller asked for the thinking to be taken out, and the model would learn to say its reasoning and a stray
tag: the export must say so.
"""

import orjson
import pytest

import whileai_pipeline.simulations as wai

LEFT = "still holds a <think> or </think> tag after strip_think"


def _row(reply, *earlier):
    messages = [{"role": "user", "content": "what is 2+2?"}]
    for text in earlier:
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "and so?"}]
    return {"messages": messages + [{"role": "assistant", "content": reply}]}


def _export(tmp_path, rows, **kw):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    report = wai.export_dataset(src, tmp_path / "out.jsonl", system_prompt="S", **kw)
    written = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    return report, written


def _left(report):
    return [w for w in report.get("warnings", []) if LEFT in w]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("reply", [
    "the user adds two and two</think>The answer is 4.",  # the opening tag was the template's
    "<think>the user adds two and two, which",  # thinking cut off
    "<THINK>a</THINK>4</Think>",  # a whole block goes, a stray closing tag stays
])
def test_a_reply_left_with_a_think_tag_is_written_as_the_spec_says_and_named(tmp_path, reply, fmt):
    report, written = _export(tmp_path, [_row("It is 4."), _row(reply)], format=fmt)
    last = written[1]["messages"][-1]["content"]
    assert last.lower().count("think>") >= 1 and last in reply  # the spec's cut: tags left in the row
    (warning,) = _left(report)
    assert warning.startswith("1 of 2 rows train an assistant turn that still holds a <think> or </think> tag after "
                              "strip_think (first at line 2 of the output)")


def test_rows_whose_think_blocks_are_whole_are_not_named(tmp_path):
    report, written = _export(tmp_path, [_row("<think>2+2=4</think>\nIt is 4."), _row("It is 4.")])
    assert written[0]["messages"][-1]["content"] == "It is 4."
    assert not _left(report)


def test_strip_think_off_keeps_the_thinking_on_purpose(tmp_path):
    report, _ = _export(tmp_path, [_row("the user adds two and two</think>The answer is 4.")], strip_think=False)
    assert not _left(report)


def test_a_tag_in_a_turn_the_trainer_does_not_train_is_not_named(tmp_path):
    """A TRL completion row trains its completion only: an earlier reply's tag is context there."""
    rows = [_row("It is 4.", "reasoning</think>Let me see.")]
    report, written = _export(tmp_path, rows, format="trl", mask_mode="final")
    assert "</think>" in orjson.dumps(written[0]["prompt"]).decode()
    assert not _left(report)
    report, _ = _export(tmp_path, rows, format="openai")  # an openai row trains every assistant turn
    assert len(_left(report)) == 1


def test_a_user_turn_with_a_tag_is_not_named(tmp_path):
    row = {"messages": [{"role": "user", "content": "what does </think> mean?"},
                        {"role": "assistant", "content": "It closes a thinking block."}]}
    report, _ = _export(tmp_path, [row])
    assert not _left(report)
