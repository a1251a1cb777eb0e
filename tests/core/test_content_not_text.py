"""A turn whose content is not text is named in the export's warnings.

OpenAI's chat logs give content as a list of parts (``[{"type": "text", "text": "..."}]``). The export writes
non-text content of a system, user or assistant turn as its JSON text (DECISIONS 10; the reference writes its
Python repr), so the model is trained on, or to say, ``[{"type": "text", ...}]``; nothing said so. A tool
result given as an object is a tool's JSON output, as the model sees it at run time: not named.
"""

import orjson
import pytest

import whileai_pipeline.simulations as wai

NOT_TEXT = "hold a turn whose content is not text"
NOT_TEXT_PAIRS = "have a side holding a turn whose content is not text"


def _row(*messages):
    return {"messages": list(messages), "reward": 1.0}


USER = {"role": "user", "content": "Refund order 7."}
REPLY = {"role": "assistant", "content": "Refunded."}
GOOD = _row(USER, REPLY)
PARTS = [{"type": "text", "text": "Refunded."}]
SHAPES = {
    "assistant parts": (_row(USER, {"role": "assistant", "content": PARTS}), "the assistant turn's content is a list"),
    "user parts": (_row({"role": "user", "content": PARTS}, REPLY), "the user turn's content is a list"),
    "system object": (_row({"role": "system", "content": {"text": "Be brief."}}, USER, REPLY),
                      "the system turn's content is a dict"),
    "a number": (_row(USER, {"role": "assistant", "content": 7}), "the assistant turn's content is an int"),
}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": {"id": 7}}}]}
TOOL_OBJECT = _row(USER, CALL, {"role": "tool", "tool_call_id": "c1", "content": {"ok": True}}, REPLY)


def _said(report, needle):
    return [w for w in report.get("warnings", []) if needle in w]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_an_export_names_rows_with_a_turn_whose_content_is_not_text(tmp_path, shape, fmt):
    row, what = SHAPES[shape]
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (GOOD, TOOL_OBJECT, row)))
    report = wai.export_dataset(src, tmp_path / "out.jsonl", format=fmt, system_prompt="S")
    said = _said(report, NOT_TEXT)
    assert len(said) == 1, report.get("warnings")
    assert said[0].startswith(f"1 of 3 rows {NOT_TEXT}, written as its JSON text (first: row 2 of the source, "
                              f"counting from 0: {what})"), said


def test_the_content_is_written_as_before(tmp_path):
    row, _ = SHAPES["assistant parts"]
    wai.export_dataset([row], tmp_path / "out.jsonl")
    written = orjson.loads((tmp_path / "out.jsonl").read_bytes())
    assert written["messages"][-1]["content"] == '[{"type": "text", "text": "Refunded."}]'


def test_text_none_and_tool_objects_are_not_named(tmp_path):
    report = wai.export_dataset([GOOD, TOOL_OBJECT], tmp_path / "out.jsonl")
    assert not _said(report, NOT_TEXT), report.get("warnings")


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_pair_with_such_a_side_is_named(tmp_path, fmt):
    row, what = SHAPES["assistant parts"]
    pairs = [{"prompt": "Refund order 7.", "chosen": GOOD, "rejected": _row(USER, {"role": "assistant",
                                                                                   "content": "No."})},
             {"prompt": "Refund order 7.", "chosen": GOOD, "rejected": row}]
    report = wai.export_preference(pairs, tmp_path / "dpo.jsonl", format=fmt)
    said = _said(report, NOT_TEXT_PAIRS)
    assert len(said) == 1 and said[0].startswith(
        f"1 of 2 pairs {NOT_TEXT_PAIRS}, written as its JSON text (first at line 2 of the output: {what})"), \
        report.get("warnings")
