"""Tool calls that are not call objects are named in the export's warnings.

The spec reads them as they come (3.4): a non-object call is ``{}``, a ``function`` that is not an object is
passed over for the call itself, and a ``tool_calls`` given as text is iterated, one call per character. The
rows are written so, as calls with no name and arguments ``{}``, which pass the round-trip gate: a trainer
learns to make them. The pipeline refuses such lines when it reads a run (``rows.shape_problem``); a caller of
the library is told.
"""

import orjson
import pytest

import whileai_pipeline.simulations as wai

MISSHAPEN = "hold tool calls that are not call objects"
MISSHAPEN_PAIRS = "have a side whose tool calls are not call objects"


def _row(calls, reply="Done."):
    return {"messages": [{"role": "user", "content": "Refund order 7."},
                         {"role": "assistant", "content": "", "tool_calls": calls},
                         {"role": "tool", "content": "ok"},
                         {"role": "assistant", "content": reply}], "reward": 1.0}


GOOD = _row([{"id": "c1", "type": "function", "function": {"name": "refund", "arguments": {"id": 7}}}])
LOOSE = _row([{"name": "refund", "arguments": {"id": 7}}])  # the loose calls conversation() makes: fine
SHAPES = {
    "text": _row("refund"),
    "object": _row({"name": "refund", "arguments": {"id": 7}}),
    "a call as text": _row(["refund"]),
    "function as text": _row([{"id": "c1", "function": "refund"}]),
}


def _warnings(report, needle):
    return [w for w in report.get("warnings", []) if needle in w]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_an_export_names_rows_whose_tool_calls_are_not_call_objects(tmp_path, shape, fmt):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (GOOD, SHAPES[shape], LOOSE)))
    out = tmp_path / "out.jsonl"
    report = wai.export_dataset(src, out, format=fmt, system_prompt="S")
    written = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(written) == 3  # written as the spec reads them
    said = _warnings(report, MISSHAPEN)
    assert len(said) == 1, report.get("warnings")
    assert said[0].startswith(f"1 of 3 rows {MISSHAPEN} (first: row 1 of the source, counting from 0)"), said


def test_well_formed_and_loose_calls_are_not_named(tmp_path):
    report = wai.export_dataset([GOOD, LOOSE], tmp_path / "out.jsonl", system_prompt="S")
    assert not _warnings(report, MISSHAPEN), report.get("warnings")
    assert report["n_written"] == 2


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_pair_with_such_a_side_is_named(tmp_path, fmt):
    pairs = [{"prompt": "Refund order 7.", "chosen": GOOD, "rejected": SHAPES["a call as text"], "margin": 1.0},
             {"prompt": "Refund order 7.", "chosen": GOOD, "rejected": LOOSE, "margin": 1.0}]
    report = wai.export_preference(pairs, tmp_path / "dpo.jsonl", format=fmt, system_prompt="S")
    said = _warnings(report, MISSHAPEN_PAIRS)
    assert len(said) == 1 and said[0].startswith(f"1 of 2 pairs {MISSHAPEN_PAIRS} (first at line 1 of the "
                                                 "output)"), report.get("warnings")
