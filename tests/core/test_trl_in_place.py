"""TRL export rows equal the copying public path (``to_trl(training_rows(...))``) although the exporter
decodes arguments in place where it may."""

import json

import orjson
import pytest

import whileai_pipeline.simulations as wai


@pytest.mark.parametrize("unroll,mask_mode", [(True, "assistant"), (False, "final"), (False, "assistant")])
def test_trl_export_rows_equal_to_trl_of_training_rows(tmp_path, unroll, mask_mode):
    """The exporter decodes TRL arguments in place where it may (its own, unshared messages); unrolled
    samples share their message objects, and a deeply string-encoded argument decodes further each
    time it is decoded, so sharing must not change a row (checked against the copying public path)."""
    encoded = {"id": 1}
    for _ in range(7):
        encoded = json.dumps(encoded)
    row = {"prompt": "p", "final_text": "done", "steps": [
        {"tool": "t", "arguments": encoded, "result": "r"}, {"text": "a"},
        {"tool": "t", "arguments": encoded, "result": "r2"}]}
    out = tmp_path / "trl.jsonl"
    wai.export_dataset([row], out, format="trl", unroll=unroll, mask_mode=mask_mode, validate=False)
    kind = "completion" if unroll or mask_mode == "final" else "training"
    expected = wai.to_trl(wai.training_rows([row], unroll=unroll, mask_mode=mask_mode), kind=kind)
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == orjson.loads(orjson.dumps(expected))
