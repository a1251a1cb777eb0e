"""Messages the chat-completions format has no place for are named in the export's warnings.

The spec drops them (3.4, E28): a turn whose role is not ``system``, ``user``, ``assistant`` or ``tool``
(OpenAI's ``developer``, ShareGPT's ``human`` and ``gpt``, ``Assistant`` in another case), and an item of
``messages`` that is not an object. The rows are written so, as the reference writes them; but the model is then
trained on a conversation without those turns (its instructions, or a reply of its own), and nothing said so.
"""

import orjson
import pytest

import whileai_pipeline.simulations as wai

DROPPED = "hold messages the chat-completions format has no place for"
DROPPED_PAIRS = "have a side holding messages the chat-completions format has no place for"


def _row(*messages, reward=1.0):
    return {"messages": list(messages), "reward": reward}


USER = {"role": "user", "content": "Refund order 7."}
REPLY = {"role": "assistant", "content": "Refunded."}
GOOD = _row(USER, REPLY)
FROM_STEPS = {"prompt": "Refund order 7.", "steps": [{"text": "Refunded."}], "reward": 1.0}
SHAPES = {
    "developer": (_row({"role": "developer", "content": "Answer in French."}, USER, REPLY), "role 'developer'"),
    "sharegpt": (_row({"role": "human", "content": "Refund order 7."}, REPLY), "role 'human'"),
    "capitalized": (_row(USER, {"role": "Assistant", "content": "Checking."}, REPLY), "role 'Assistant'"),
    "no role": (_row({"content": "Refund order 7."}, REPLY), "a message without a role"),
    "not an object": (_row(USER, "Refunded.", REPLY), "a str where a message object goes"),
    "one object": ({"messages": {"role": "user", "content": "hi"}, "reward": 1.0},
                   "'messages' given as a dict, not a list"),
    # OpenAI's older calls: the call is left out and the turn written with no words and no call
    "function_call": (_row(USER, {"role": "assistant", "content": None,
                                  "function_call": {"name": "refund", "arguments": "{\"id\": 7}"}}, REPLY),
                      "an assistant turn's function_call (OpenAI's older form of tool_calls)"),
}


def _said(report, needle):
    return [w for w in report.get("warnings", []) if needle in w]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_an_export_names_rows_whose_messages_it_leaves_out(tmp_path, shape, fmt):
    row, what = SHAPES[shape]
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (GOOD, row, FROM_STEPS)))
    report = wai.export_dataset(src, tmp_path / "out.jsonl", format=fmt, system_prompt="S")
    said = _said(report, DROPPED)
    assert len(said) == 1, report.get("warnings")
    assert said[0].startswith(f"1 of 3 rows {DROPPED}, left out of what is written (first: row 1 of the "
                              f"source, counting from 0: {what})"), said


def test_the_rows_are_written_as_the_spec_reads_them(tmp_path):
    """The warning changes nothing written: the developer turn is left out, the rest is as without it."""
    row, _ = SHAPES["developer"]
    with_it = wai.export_dataset([row], tmp_path / "a.jsonl", system_prompt="S")
    without = wai.export_dataset([GOOD], tmp_path / "b.jsonl", system_prompt="S")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert _said(with_it, DROPPED) and not _said(without, DROPPED)


def test_rows_with_every_message_written_are_not_named(tmp_path):
    system_and_tool = _row({"role": "system", "content": "S2"}, USER,
                           {"role": "assistant", "content": "", "tool_calls": [
                               {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": {}}}]},
                           {"role": "tool", "tool_call_id": "c1", "content": "ok"}, REPLY)
    report = wai.export_dataset([GOOD, FROM_STEPS, system_and_tool], tmp_path / "out.jsonl")
    assert not _said(report, DROPPED), report.get("warnings")


def test_a_pooled_export_names_the_same_row(tmp_path):
    """Worker processes read the rows of a file: the count and the first row are the one-process path's."""
    row, what = SHAPES["developer"]
    rows = [GOOD] * 300 + [row] + [GOOD] * 50 + [row]
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    reports = [wai.export_dataset(src, tmp_path / f"out{n}.jsonl", workers=n) for n in (1, 2)]
    said = [_said(report, DROPPED) for report in reports]
    assert said[0] == said[1] and said[0][0].startswith(
        f"2 of 352 rows {DROPPED}, left out of what is written (first: row 300 of the source, counting from 0: "
        f"{what})"), said
    assert (tmp_path / "out1.jsonl").read_bytes() == (tmp_path / "out2.jsonl").read_bytes()


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_pair_with_such_a_side_is_named(tmp_path, fmt):
    row, what = SHAPES["developer"]
    pairs = [{"prompt": "Refund order 7.", "chosen": GOOD, "rejected": _row(USER, {"role": "assistant",
                                                                                   "content": "No."}),
              "margin": 1.0},
             {"prompt": "Refund order 7.", "chosen": row, "rejected": _row(USER, {"role": "assistant",
                                                                                  "content": "No."}),
              "margin": 1.0}]
    report = wai.export_preference(pairs, tmp_path / "dpo.jsonl", format=fmt, system_prompt="S")
    said = _said(report, DROPPED_PAIRS)
    assert len(said) == 1 and said[0].startswith(
        f"1 of 2 pairs {DROPPED_PAIRS}, left out of what is written (first at line 2 of the output: {what})"), \
        report.get("warnings")
