"""Every bad input gives the same outcome over worker processes as in one process: the same bytes and
report, or the same error, word for word.

A pooled export sends per-row outcomes back from other processes; anything in them that only works
by identity in one process (as the preference tally's string markers once did) shows up here.
"""

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.pairs import build_pairs_file

from .cases import CASES

VOLATILE = ("path", "elapsed_seconds")


def _outcome(call, out):
    try:
        report = call()
    except Exception as exc:  # noqa: BLE001 - the outcome under comparison is whatever comes out
        return "error", type(exc).__name__, str(exc)
    written = out.read_bytes() if out.exists() else None
    return "ok", {k: v for k, v in report.items() if k not in VOLATILE}, written


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_over_workers_as_in_one_process(tmp_path, monkeypatch, case):
    run = tmp_path / "run.jsonl"
    run.write_bytes(case.run * (3 if len(case.run) < 1 << 20 else 1))  # a few chunks, even for a one-line case
    if case.sidecar is not None:
        (tmp_path / "run.meta.json").write_bytes(case.sidecar)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)
    calls = {
        "export_dataset": lambda out, w: wai.export_dataset(run, out, workers=w),
        "export_dataset unroll trl": lambda out, w: wai.export_dataset(run, out, workers=w, unroll=True,
                                                                       format="trl", validate=False),
        "build_pairs_file": lambda out, w: build_pairs_file(run, out, workers=w, min_margin=0.5),
    }
    for name, call in calls.items():
        outcomes = []
        for workers in (1, 2):
            out = tmp_path / f"{workers}" / "out.jsonl"
            outcomes.append(_outcome(lambda: call(out, workers), out))
        assert outcomes[0] == outcomes[1], name
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and "out" not in p.name) == sorted(
        ["run.jsonl"] + (["run.meta.json"] if case.sidecar is not None else []))
