"""Scoring, pair building and judging edges found by a review (real files in tmp_path)."""

import io

import orjson
import pytest

from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.scoring import ScoreStats, resolve_scorer, score_file


def _write(path, rows):
    path.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    return path


def _score(tmp_path, rows, scorer="reference_match"):
    src = _write(tmp_path / "raw.jsonl", rows)
    out = io.BytesIO()
    score_file(src, out, resolve_scorer(scorer), ScoreStats())
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("reference, answer, reward", [
    (42, "The total is 42, not 1e99999999999999999999.", 1.0),  # a huge exponent beside the right number
    (42, "Roughly 1e99999999999999999999.", 0.0),
    ("42", "It is 1E-99999999999999999999 or 42.", 1.0),
    ("1e99999999999999999999", "The answer is 1e99999999999999999999.", 1.0),  # no Decimal: matched as words
    ("1e99999999999999999999", "The answer is 42.", 0.0),
])
def test_reference_match_grades_an_answer_holding_a_number_no_decimal_can_hold(tmp_path, reference, answer, reward):
    """A model's answer (or a reference) that writes a number whose exponent is beyond what ``decimal`` takes
    (``1e99999999999999999999``) failed the whole scoring step with ``decimal.InvalidOperation`` on that one
    row. Such a number equals no reference a run can hold; the row is graded on the others."""
    rows = [{"prompt": "p", "privileged": {"reference": reference}, "final_text": answer}]
    assert [r["reward"] for r in _score(tmp_path, rows)] == [reward]
