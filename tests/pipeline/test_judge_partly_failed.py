"""A judge that fails on some pairs (a rate limit, a timeout) lets the run succeed, the pairs it could not
judge ordered by their rewards. The step logged a warning, which ``whileai-pipeline run`` does not show
(it prints the steps' logs only with -v): the run said nothing, and the DPO files went out judged in part."""

import io

import pytest

from .conftest import materialization, read_rows, sample_rows, write_rows

pytestmark = pytest.mark.pipeline

FAILING_PROMPT = "ORD-1003"  # the pairs of this prompt are never judged
JUDGE = f"""
def judge(a, b):
    if "{FAILING_PROMPT}" in (a.get("prompt") or ""):
        raise RuntimeError("rate limited")
    return {{"winner": "A" if a["reward"] >= b["reward"] else "B"}}
"""


@pytest.fixture
def partly_failing_judge(tmp_path, monkeypatch):
    (tmp_path / "partly_failing_judge.py").write_text(JUDGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "partly_failing_judge:judge"


def _failing_pairs(pairs_file):
    """How many of the pairs built hold the prompt the judge fails on."""
    failing = sum(FAILING_PROMPT in (pair.get("prompt") or "") for pair in read_rows(pairs_file))
    assert failing, "no pair of the sample holds the failing prompt"
    return failing


def test_the_pairs_step_records_the_warning(chain, partly_failing_judge):
    key = chain.register()
    result = chain.materialize(key, {"ops": {"preference_pairs": {"config": {"judge": partly_failing_judge}}}})
    assert result.success
    pairs = materialization(result, "preference_pairs")
    assert "warning" in pairs, sorted(pairs)
    failed = _failing_pairs(chain.storage.stage_path(key, "pairs"))
    assert f"could not judge {failed} of {pairs['pairs'].value} pairs" in pairs["warning"].value
    assert "rate limited" in pairs["warning"].value


def test_the_cli_says_the_judge_failed_on_some_pairs(tmp_path, monkeypatch, partly_failing_judge):
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    config = tmp_path / "opts.yaml"
    config.write_text(f"judge: {partly_failing_judge}\n")
    src = write_rows(tmp_path / "runs" / "night.jsonl", sample_rows())
    out = io.StringIO()
    assert run_chain(src, config_file=config, home=tmp_path / "home", out=out) == 0
    lines = [line for line in out.getvalue().splitlines() if line.startswith("  preference_pairs: WARNING ")]
    assert len(lines) == 1, out.getvalue()
    failed = _failing_pairs(tmp_path / "home" / "stages" / "night" / "pairs.jsonl")
    assert f"the judge {partly_failing_judge} could not judge {failed} of " in lines[0]
    assert "rate limited" in lines[0]
