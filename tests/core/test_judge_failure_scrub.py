"""What a judge says about a pair it could not judge reaches the pipeline's log and its `judge_failed:`
error: like the reasons written onto pairs, it carries no privileged key (DECISIONS 8)."""

import pytest

from whileai_pipeline.core.judge import judge_pairs_file
from whileai_pipeline.simulations import write_jsonl

SECRET = "the parcel was lost in the Leeds depot fire"


def _pairs(path):
    side = {"prompt": "where is my parcel?", "final_text": "let me check", "reward": 1,
            "privileged": {"reference": SECRET}}
    write_jsonl(path, [{"prompt": "where is my parcel?", "chosen": side, "rejected": {**side, "reward": 0}}])
    return path


@pytest.mark.parametrize("answer", [
    {"winner": "unsure", "reason": {"why": "cannot tell", "reference": SECRET}},  # a structured reason
    {"winner": "unsure", "reference": SECRET},  # no reason: the answer itself is quoted
])
def test_first_failure_carries_no_privileged_key(tmp_path, answer):
    src = _pairs(tmp_path / "pairs.jsonl")
    report = judge_pairs_file(src, tmp_path / "judged.jsonl", lambda a, b: answer)
    assert report["failed"] == 1 and report["first_failure"]
    assert SECRET not in report["first_failure"]


@pytest.mark.parametrize("answer", ["A", None, ["A"]])
def test_an_answer_without_a_winner_is_shown_with_what_a_judge_returns(tmp_path, answer):
    """A judge returning a bare "A" failed with only "no winner in 'A'": the failure says what was returned
    (its type too) and the shapes a judge answers in."""
    src = _pairs(tmp_path / "pairs.jsonl")
    report = judge_pairs_file(src, tmp_path / "judged.jsonl", lambda a, b: answer, swap=False)
    assert report["failed"] == 1
    assert report["first_failure"] == (
        f"no winner in what the judge returned, {type(answer).__name__} {answer!r}: a judge returns "
        "{'winner': 'A' | 'B' | 'tie', 'reason': ...} or text holding 'winner: A'")
