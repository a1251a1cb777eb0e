"""The report an export keeps as metadata (``<format>/report``) names where its file is once the step
is done, as the ``.report.json`` beside the file does: under published/, or under rejected/ for a
refused candidate. It used to name the candidate under ``stages/<run>/candidates/<run id>/``, a
folder the step removes, so the path in the UI led nowhere."""

import json
from pathlib import Path

import pytest

from .conftest import leaking_rows, materialization

pytestmark = pytest.mark.pipeline


def _paths(md, label):
    for fmt in md["formats"].value:
        report = md[f"{fmt}/report"].value
        where = md[f"{fmt}/{label}"].value
        assert report["path"] == where, (fmt, report["path"], where)
        assert Path(where).is_file()
        beside = Path(where).with_name(Path(where).name.replace(".jsonl", ".report.json"))
        stored = json.loads(beside.read_text(encoding="utf-8"))
        assert stored == {k: v for k, v in report.items() if k != "elapsed_seconds"}


def test_the_report_in_the_metadata_names_the_published_and_the_rejected_file(published):
    chain, key, _ = published
    result = chain.materialize(key)  # the same input again: unchanged, the paths as they were
    for kind in ("sft_export", "dpo_export"):
        _paths(materialization(result, kind), "published_path")
    rows, _ = leaking_rows()
    chain.register(rows)
    result = chain.materialize(key)
    assert not result.success
    for kind in ("sft_export", "dpo_export"):
        md = materialization(result, kind)
        assert md["status"].value == "rejected"
        _paths(md, "rejected_path")
