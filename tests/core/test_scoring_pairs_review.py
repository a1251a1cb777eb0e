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


SCENARIO_NOTE = ("1/1 pairs join rollouts of different scenarios (scenario_id) that share a prompt text: each side's "
                 "reward was earned on its own task, so the chosen reply need not be the better answer to the same "
                 "one. Give each scenario its own prompt text, or pair the rows of one scenario at a time.")


@pytest.mark.parametrize("workers", [1, 2])
def test_pairs_that_join_two_scenarios_sharing_a_prompt_are_warned_of(tmp_path, monkeypatch, workers):
    """Pairs group by prompt text (spec 8.2), not by scenario: two scenarios that open with the same words (the
    order delayed in one, delivered in the other) were paired without a word, the refund that was right in one
    chosen over the refusal that was right in the other. Kept as the spec pairs them; the report says so, in
    memory and from a file (one process, or workers writing pass 2)."""
    from whileai_pipeline.core import pairs as pairs_mod
    from whileai_pipeline.core import parallel

    import whileai_pipeline.simulations as wai

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)
    monkeypatch.setattr(pairs_mod, "PAIRS_PER_TASK", 1)
    rows = [
        {"scenario_id": "delayed", "prompt": "Where is my order?", "reward": 1, "final_text": "Refunded."},
        {"scenario_id": "delivered", "prompt": "where is my order?", "reward": 0, "final_text": "It was delivered."},
        {"scenario_id": "lost", "prompt": "Refund B", "reward": 1, "final_text": "Refunded."},
        {"scenario_id": "lost", "prompt": "Refund B", "reward": 0, "final_text": "No."},
        {"prompt": "Cancel C", "reward": 1, "final_text": "Cancelled.", "scenario_id": "c"},
        {"prompt": "Cancel C", "reward": 0, "final_text": "No."},  # one side names no scenario: not counted
    ]
    src = _write(tmp_path / "scored.jsonl", rows)
    pairs, report = wai.build_preference_pairs(list(wai.read_jsonl(src)))
    assert [(p["chosen"].get("scenario_id"), p["rejected"].get("scenario_id")) for p in pairs] == [
        ("delayed", "delivered"), ("lost", "lost"), ("c", None)]
    assert report["warnings"] == [SCENARIO_NOTE.replace("1/1", "1/3")]
    file_report = pairs_mod.build_pairs_file(src, tmp_path / "pairs.jsonl", workers=workers)
    assert file_report["n_written"] == 3 and file_report["warnings"] == report["warnings"]
    same = [r for r in rows if r.get("scenario_id") == "lost"]
    assert wai.build_preference_pairs(same)[1]["warnings"] == []
