"""A run opened with ``load_run`` is exported as its file is: the report says which file and its
SHA-256 (DECISIONS 15), a bad row is named by the line it is on, and, as for any run object (spec
5.3), no output means no file. A ``Run`` used to write ``<name>.train.jsonl`` into the run's folder
when given no output, report no ``source_sha256`` and name a bad row "index 2 of the rows given"."""

import json

import orjson
import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.errors import BadRowError

ROW = {"scenario_id": "s1", "prompt": "Where is order 7?", "reward": 1.0,
       "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": {"status": "shipped"}}],
       "final_text": "It shipped."}
META = {"system_prompt": "You track orders.", "tools": [{"type": "function", "function": {"name": "lookup"}}]}


def _run(tmp_path, rows):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    (tmp_path / "run.meta.json").write_text(json.dumps(META), encoding="utf-8")
    return path


@pytest.mark.parametrize("format", ["openai", "trl"])
def test_a_run_given_no_output_writes_no_file(tmp_path, format):
    path = _run(tmp_path, [ROW, dict(ROW, reward=0.0)])
    report = wai.export_dataset(wai.load_run(path), format=format)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl", "run.meta.json"]
    assert "path" not in report and "n_written" not in report and report["n"] == 2


@pytest.mark.parametrize("format", ["openai", "trl"])
def test_a_run_reports_its_file_as_the_path_does(tmp_path, format):
    path = _run(tmp_path, [ROW, [1, 2], dict(ROW, reward=0.0)])
    by_path = wai.export_dataset(str(path), tmp_path / "a.jsonl", format=format)
    by_run = wai.export_dataset(wai.load_run(path), tmp_path / "b.jsonl", format=format)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    for report in (by_path, by_run):
        del report["elapsed_seconds"], report["path"]
    assert by_run == by_path
    assert by_run["source_sha256"] and by_run["system_prompt_source"] == "sidecar"


def test_a_bad_row_of_a_run_is_named_by_its_line(tmp_path):
    path = _run(tmp_path, [ROW, dict(ROW, messages=5)])
    path.write_bytes(b"\n" + path.read_bytes())  # a blank line first: the bad row, index 1, is on line 3
    for call in (lambda: wai.export_dataset(wai.load_run(path), tmp_path / "out.jsonl"),
                 lambda: wai.training_rows(wai.load_run(path))):
        with pytest.raises(BadRowError, match=rf"^bad_row: {path}:3: messages must be a list"):
            call()
    assert not (tmp_path / "out.jsonl").exists()
