"""A row the exporters cannot convert (``messages`` or ``tool_calls`` of the wrong shape) is refused
with its place: the file and line it came from, over worker processes as in one, or its index among
rows given in memory. The error used to say only what was wrong, leaving the user to search a file
of a hundred thousand lines for it."""

import pickle

import orjson
import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.errors import BadRowError, ExportError

GOOD = {"prompt": "Where is order 7?", "scenario_id": "s1", "reward": 1,
        "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": {"status": "shipped"}}],
        "final_text": "It shipped."}
BAD_CALLS = {"prompt": "q", "messages": [{"role": "user", "content": "q"},
                                         {"role": "assistant", "content": "a", "tool_calls": 3}]}
BAD_MESSAGES = dict(GOOD, messages=5)


def _write(path, rows):
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("format", ["openai", "trl"])
def test_export_dataset_names_the_line(tmp_path, monkeypatch, workers, format):
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)  # a chunk per line: the bad one is far from the first
    run = _write(tmp_path / "run.jsonl", [GOOD] * 6 + [BAD_MESSAGES] + [GOOD] * 2)
    out = tmp_path / "out.jsonl"
    with pytest.raises(BadRowError) as info:
        wai.export_dataset(run, out, workers=workers, format=format)
    assert str(info.value) == (
        f"bad_row: {run}:7: messages must be a list of message objects, got int 5: fix that row, or leave the key "
        "out (the conversation is rebuilt from prompt and steps)")
    assert not out.exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_export_preference_names_the_line(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)
    pair = {"prompt": "q", "chosen": GOOD, "rejected": GOOD, "margin": 1.0}
    pairs = _write(tmp_path / "pairs.jsonl", [pair] * 4 + [dict(pair, rejected=BAD_CALLS)] + [pair])
    out = tmp_path / "dpo.jsonl"
    with pytest.raises(BadRowError, match=rf"^bad_row: {pairs}:5: tool_calls must be a list of call objects, got int 3"):
        wai.export_preference(pairs, out, workers=workers)
    assert not out.exists()


def test_rows_in_memory_are_named_by_index(tmp_path):
    with pytest.raises(BadRowError, match=r"^bad_row: index 2 of the rows given: messages must be a list"):
        wai.export_dataset([GOOD, GOOD, BAD_MESSAGES], tmp_path / "out.jsonl")
    pair = {"prompt": "q", "chosen": BAD_CALLS, "rejected": GOOD}
    with pytest.raises(BadRowError, match=r"^bad_row: index 0 of the pairs given: tool_calls must be a list"):
        wai.export_preference([pair], tmp_path / "dpo.jsonl")


def test_the_error_is_an_export_error_that_crosses_processes():
    exc = BadRowError.at("run.jsonl", 3, ExportError("messages must be a list"))
    assert isinstance(exc, ExportError) and isinstance(exc, ValueError)  # what callers caught before
    copy = pickle.loads(pickle.dumps(exc))
    assert (type(copy), str(copy), copy.where, copy.reason) == (
        BadRowError, "bad_row: run.jsonl:3: messages must be a list", "run.jsonl:3", "messages must be a list")


def test_training_rows_name_the_line_or_index(tmp_path):
    run = _write(tmp_path / "run.jsonl", [GOOD, BAD_CALLS])
    with pytest.raises(BadRowError, match=rf"^bad_row: {run}:2: tool_calls must be a list of call objects, got int 3"):
        wai.training_rows(run)
    with pytest.raises(BadRowError, match=r"^bad_row: index 1 of the rows given: tool_calls must be a list"):
        list(wai.iter_training_rows([GOOD, BAD_CALLS]))


@pytest.mark.parametrize("kind", ["training", "completion", "preference"])
def test_to_trl_names_the_row_instead_of_a_type_error(kind):
    side = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "tool_calls": True}]
    good = {"messages": side[:1] + [{"role": "assistant", "content": "a"}]}
    bad = {"messages": side, "chosen": side, "rejected": side}
    with pytest.raises(BadRowError, match=r"^bad_row: index 1 of the rows given: tool_calls must be a list, got bool "
                                          r"True: to_trl reshapes rows as training_rows\(\) and export_dataset\(\)"):
        wai.to_trl([good, bad], kind)
    with pytest.raises(BadRowError, match=r"^bad_row: index 0 of the rows given: messages must be a list, got int 5"):
        wai.to_trl([{"messages": 5, "chosen": 5, "rejected": 5}], kind)
