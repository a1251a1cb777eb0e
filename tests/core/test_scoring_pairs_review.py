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


RANGE_NOTE = ("{k} rows have a reward outside [0, 1] and were left out of pairing (pairs read rewards as scores from 0 "
              "to 1): with a grader on another scale, the rows it rewarded most are the ones left out, and a pair's "
              "chosen side may be a poor reply. Rescale the rewards to [0, 1] before pairing.")


@pytest.mark.parametrize("workers", [1, 2])
def test_rows_left_out_of_pairing_for_a_reward_outside_0_1_are_warned_of(tmp_path, monkeypatch, workers):
    """A grader on a 0-10 scale: only rows rewarded exactly 0 or 1 are scores (spec 8.2), so the one pair made
    chose a 1/10 reply over a 0/10 one and the 10/10 and 7/10 replies were dropped without a word."""
    from whileai_pipeline.core import pairs as pairs_mod
    from whileai_pipeline.core import parallel

    import whileai_pipeline.simulations as wai

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)
    rows = [
        {"prompt": "Refund A", "reward": 10, "final_text": "Refunded, and here is your receipt."},
        {"prompt": "Refund A", "reward": 1, "final_text": "Maybe later."},
        {"prompt": "Refund A", "reward": 0, "final_text": "No."},
        {"prompt": "Refund A", "reward": 7.5, "final_text": "Refunded."},
        {"prompt": "Refund A", "reward": 10 ** 400, "final_text": "A reward no float holds."},
        {"prompt": "Refund A", "reward": -1, "final_text": "Rude."},
        {"prompt": "Refund A", "reward": 5, "judge_status": "error", "final_text": "x"},  # not ok: not counted
        {"prompt": "", "reward": 5, "final_text": "x"},  # no prompt: not counted
        {"prompt": "Refund A", "reward": True, "final_text": "x"},  # a bool is no number here
        {"prompt": "Refund A", "reward": float("nan"), "final_text": "x"},
    ]
    src = _write(tmp_path / "scored.jsonl", rows)
    pairs, report = wai.build_preference_pairs(list(wai.read_jsonl(src)))
    assert [(p["chosen_score"], p["rejected_score"]) for p in pairs] == [(1.0, 0.0)]
    assert report["warnings"] == [RANGE_NOTE.format(k=4)]
    file_report = pairs_mod.build_pairs_file(src, tmp_path / "pairs.jsonl", workers=workers)
    assert file_report["warnings"] == report["warnings"]
    in_range = [r for r in rows if r["reward"] in (0, 1) and r["reward"] is not True]
    assert wai.build_preference_pairs(in_range)[1]["warnings"] == []


def _pairs_file(tmp_path):
    import whileai_pipeline.simulations as wai

    rows = [{"prompt": f"p{i}", "reward": r, "final_text": t} for i in range(3) for r, t in ((1, "good"), (0, "bad"))]
    pairs, _ = wai.build_preference_pairs(rows)
    return _write(tmp_path / "pairs.jsonl", pairs)


@pytest.mark.parametrize("knob", [{"examples": None}, {"examples": "3"}, {"prefers_rejected_flag": None},
                                  {"position_flip_flag": "0.2"}])
def test_judging_settings_that_are_no_numbers_are_refused_before_the_judge_is_called(tmp_path, knob):
    """``examples=None`` (or a flag share that is no number) failed with a bare TypeError from a comparison only
    after the judge had been asked about every pair (a paid model's calls spent, the pairs file not written)."""
    from whileai_pipeline.core.judge import judge_pairs_file

    import whileai_pipeline.simulations as wai

    src = _pairs_file(tmp_path)
    calls = []

    def prefers_rejected(a, b):
        calls.append(1)
        return {"winner": "A" if a["final_text"] == "bad" else "B"}

    with pytest.raises(TypeError, match=f"^{next(iter(knob))} must be a number"):
        judge_pairs_file(src, tmp_path / "judged.jsonl", prefers_rejected, **knob)
    with pytest.raises(TypeError, match=f"^{next(iter(knob))} must be a number"):
        wai.judge_pairs(list(wai.read_jsonl(src)), prefers_rejected, concurrency=1, **knob)
    assert calls == [] and not (tmp_path / "judged.jsonl").exists()


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_pairs_the_pairwise_judge_decided_for_the_rejected_side_are_warned_of_in_the_export(tmp_path, fmt):
    """Spec 7.6: a pair the judge decided for the rejected side is exported unchanged, and the DPO report said
    nothing: DPO pushed up the reply the judge found worse. Still exported as the rewards ordered it; the
    report now counts such pairs (ties are dropped and not counted; a failed judgment is not a verdict)."""
    from whileai_pipeline.core.judge import judge_pairs_file

    import whileai_pipeline.simulations as wai

    src = _pairs_file(tmp_path)  # three pairs: good (1) over bad (0)

    def judge(a, b):  # prefers "bad" on p0, calls p1 a tie in both orders, fails on p2
        if a["prompt"] == "p2":
            raise RuntimeError("judge model down")
        if a["prompt"] == "p1":
            return {"winner": "tie"}
        return {"winner": "A" if a["final_text"] == "bad" else "B"}

    judged = judge_pairs_file(src, tmp_path / "judged.jsonl", judge)
    assert (judged["prefers_rejected"], judged["ties"], judged["failed"]) == (1, 1, 1)
    report = wai.export_preference(tmp_path / "judged.jsonl", tmp_path / "dpo.jsonl", system_prompt="SYS",
                                   format=fmt)
    written = [orjson.loads(line) for line in (tmp_path / "dpo.jsonl").read_bytes().splitlines()]
    assert report["pairs"] == len(written) == 2 and report["ties_dropped"] == 1
    assert [w for w in report["warnings"] if "pairwise judge" in w] == [
        "1 of 2 pairs were decided for the rejected side by the pairwise judge (pairwise.winner 'rejected') and are "
        "exported as their rewards ordered them: DPO pushes up the reply the judge found worse. Leave them out, or "
        "look at why the grader and the judge disagree (pairwise.reasons)."]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_pairs_file_given_as_the_rows_to_pair_is_refused(tmp_path, monkeypatch, workers):
    """Pairs (or a judged pairs file) given where scored rows go carry no reward of their own, so nothing was
    paired and the note said to raise rollouts_per_request, and build_pairs_file wrote an empty pairs file."""
    from whileai_pipeline.core import parallel
    from whileai_pipeline.core.pairs import build_pairs_file

    import whileai_pipeline.simulations as wai

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)
    src = _pairs_file(tmp_path)
    message = r"^build_preference_pairs takes scored rows, and 3 of the 3 rows given are preference pairs"
    with pytest.raises(ValueError, match=message):
        wai.build_preference_pairs(list(wai.read_jsonl(src)))
    with pytest.raises(ValueError, match=message):
        build_pairs_file(src, tmp_path / "again.jsonl", workers=workers)
    assert not (tmp_path / "again.jsonl").exists()
