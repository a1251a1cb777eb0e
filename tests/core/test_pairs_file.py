"""File-to-file pair building (and judging) gives the same pairs and report as the list API."""

import decimal
import hashlib

import numpy
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.jsonl import dumps, write_jsonl
from whileai_pipeline.core.pairs import build_pairs_file

row = st.fixed_dictionaries({
    "prompt": st.sampled_from(["Refund A", "refund  a", "Cancel B", "", "Track C"]),
    "reward": st.sampled_from([0, 1, 0.5, 0.25, None, True, 1.5]),
    "final_text": st.text(alphabet="ab <think>/", max_size=12),
}, optional={"model_version": st.sampled_from(["m1", "m2"]),
             "judge_status": st.sampled_from(["ok", "error"]),
             "steps": st.just([{"tool": "refund", "arguments": {"id": "A"}, "result": "ok"}])})


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row, max_size=25), max_pairs=st.integers(1, 3), margin=st.sampled_from([0.5, 1.0]),
       length_match=st.booleans())
def test_file_pairs_equal_list_pairs(tmp_path, rows, max_pairs, margin, length_match):
    src = tmp_path / "scored.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    opts = dict(max_pairs_per_prompt=max_pairs, min_margin=margin, length_match=length_match)
    pairs, report = wai.build_preference_pairs(list(wai.read_jsonl(src)), **opts)
    file_report = build_pairs_file(src, tmp_path / "pairs.jsonl", **opts)
    written = [orjson.loads(line) for line in (tmp_path / "pairs.jsonl").read_bytes().splitlines()]
    assert written == [orjson.loads(dumps(p)) for p in pairs]
    assert {k: v for k, v in file_report.items() if k not in ("path", "n_written", "sha256")} == report
    assert file_report["n_written"] == len(pairs)


def test_workers_build_the_same_pairs_file(tmp_path, monkeypatch):
    """Pass 1 over worker processes (many small chunks, blank and CRLF lines, a BOM) gives the same bytes."""
    from whileai_pipeline.core import pairs, parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 512)
    monkeypatch.setattr(pairs, "PAIRS_PER_TASK", 3)  # pass 2 over workers too
    lines = []
    for i in range(300):
        r = {"prompt": f"task {i % 23}", "reward": (i * 7 % 11) / 10, "final_text": "x" * (i % 40),
             "steps": [{"tool": "t", "arguments": {"n": i % 3}, "result": "ok"}], "model_version": f"m{i % 2}"}
        lines.append(dumps(r) + (b"\r\n" if i % 17 == 0 else b"\n") + (b"\n" if i % 29 == 0 else b""))
    src = tmp_path / "scored.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))
    one = build_pairs_file(src, tmp_path / "one.jsonl", workers=1)
    two = build_pairs_file(src, tmp_path / "two.jsonl", workers=2)
    assert one["n_written"] >= 20
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert {k: v for k, v in one.items() if k != "path"} == {k: v for k, v in two.items() if k != "path"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "scored.jsonl", "two.jsonl"]


def test_rows_read_back_for_pass_two_whatever_surrounds_them(tmp_path, monkeypatch):
    """Pass 2 reads each paired row back from where pass 1 found it: the first line behind a BOM, a
    line with bare NaN tokens, a CRLF line, a line followed by blank and form-feed lines, a last line
    without a newline. Each pair holds exactly the rows the list API pairs, with one process or two."""
    from whileai_pipeline.core import pairs, parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64)
    monkeypatch.setattr(pairs, "PAIRS_PER_TASK", 1)
    src = tmp_path / "scored.jsonl"
    src.write_bytes(
        b'\xef\xbb\xbf{"prompt": "q", "reward": 1, "final_text": "behind a BOM"}\n'
        b'{"prompt": "q", "reward": 0, "final_text": "with NaN", "extra": NaN}\n \x0c\n\n'
        b'{"prompt": "r", "reward": 1, "final_text": "crlf"}\r\n'
        b'{"prompt": "r", "reward": 0, "final_text": "no newline at the end"}')
    expected, _ = wai.build_preference_pairs(list(wai.read_jsonl(src)))
    assert [(p["chosen"]["final_text"], p["rejected"]["final_text"]) for p in expected] == [
        ("behind a BOM", "with NaN"), ("crlf", "no newline at the end")]
    for workers in (1, 2):
        build_pairs_file(src, tmp_path / f"{workers}.jsonl", workers=workers)
        written = [orjson.loads(line) for line in (tmp_path / f"{workers}.jsonl").read_bytes().splitlines()]
        assert written == [orjson.loads(dumps(p)) for p in expected]


def test_judging_a_pairs_file_equals_judging_the_list(tmp_path):
    """judge_pairs_file (a pair at a time, what the pipeline runs) gives the pairs and the report of
    judge_pairs over the whole list, and may write over its source."""
    from whileai_pipeline.core.judge import judge_pairs_file

    rows = [{"prompt": f"task {i % 9}", "reward": i % 2, "final_text": "x" * (i % 7)} for i in range(120)]
    src = tmp_path / "scored.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    build_pairs_file(src, tmp_path / "pairs.jsonl", max_pairs_per_prompt=3)
    calls = []

    def judge(a, b):  # prefers the longer reply, says tie on equal length, fails on one prompt
        calls.append(1)
        if a["prompt"] == "task 4":
            raise RuntimeError("judge down")
        la, lb = len(a["final_text"]), len(b["final_text"])
        return {"winner": "tie" if la == lb else ("A" if la > lb else "B"), "reason": "length"}

    pairs = list(wai.read_jsonl(tmp_path / "pairs.jsonl"))
    expected, expected_report = wai.judge_pairs([dict(p) for p in pairs], judge)
    report = judge_pairs_file(tmp_path / "pairs.jsonl", tmp_path / "pairs.jsonl", judge)
    written = tmp_path / "pairs.jsonl"
    assert list(wai.read_jsonl(written)) == [orjson.loads(dumps(p)) for p in expected]
    extras = ("path", "n_written", "sha256", "ties", "first_failure")  # what the file function adds
    assert {k: v for k, v in report.items() if k not in extras} == expected_report
    assert report["first_failure"] == "RuntimeError: judge down"  # both orders raised it: said once
    assert report["n_written"] == len(pairs) >= 20 and report["ties"] == sum(p["tie"] for p in expected) >= 1
    assert report["sha256"] == hashlib.sha256(written.read_bytes()).hexdigest()
    assert expected_report["failed"] >= 1 and len(calls) == 4 * len(pairs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl", "scored.jsonl"]

    with open(written, "ab") as fh:
        fh.write(dumps({"prompt": "p", "chosen": {"prompt": "p"}}) + b"\n")
    before = written.read_bytes()
    with pytest.raises(ValueError, match=rf"^{written}:{len(pairs) + 1} is not a pair"):
        judge_pairs_file(written, written, judge)
    assert written.read_bytes() == before  # nothing replaced


@pytest.mark.parametrize("build", ["rows", "file"])
def test_a_min_margin_that_is_nan_or_not_a_number_is_refused(tmp_path, build):
    """The reference takes NaN and pairs nothing without a word; ours says what is wrong, as for 0."""
    rows = [{"prompt": "p", "reward": r, "final_text": "x" * (i + 1)} for i, r in enumerate([0.0, 1.0, 2.0])]
    run = tmp_path / "run.jsonl"
    write_jsonl(run, rows)

    def pairs(margin):
        if build == "rows":
            return wai.build_preference_pairs(rows, min_margin=margin)
        return build_pairs_file(run, tmp_path / "pairs.jsonl", min_margin=margin)

    with pytest.raises(ValueError, match=r"^min_margin must be positive; equal scores carry no preference \(got nan\)$"):
        pairs(float("nan"))
    with pytest.raises(ValueError, match=r"^min_margin must be finite and at most 1.798e\+308 \(got inf\): no pair"):
        pairs(float("inf"))
    # beyond the largest float: float() of the int raised a bare OverflowError (the Decimal's is inf)
    with pytest.raises(ValueError, match=r"^min_margin must be finite and at most 1.798e\+308 \(got 1000000000000000"
                                         r"0000\.\.\. \(401 characters\)\): no pair of rewards is further apart"):
        pairs(10**400)
    with pytest.raises(ValueError, match=r"\(got Decimal\('1E\+400'\)\)"):
        pairs(decimal.Decimal("1e400"))
    if build == "rows":  # the largest floats are margins still (a file build would write its pairs file)
        assert pairs(1e308)[1]["pairs"] == 0
    with pytest.raises(TypeError, match=r"^min_margin must be a number, got str '1'; pass the smallest reward"):
        pairs("1")
    with pytest.raises(ValueError, match=r"^min_margin must be positive; .* \(got Decimal\('NaN'\)\)$"):
        pairs(decimal.Decimal("NaN"))  # its comparison raises InvalidOperation, not a ValueError
    with pytest.raises(TypeError, match=r"^min_margin must be a number, got ndarray"):
        pairs(numpy.array([1.0, 2.0]))
    assert not (tmp_path / "pairs.jsonl").exists()
    assert pairs(1.0)  # the same rows pair with a number


def test_a_pair_margin_is_the_score_difference_rounded_to_six_places():
    """Spec 8.2: ``margin = round(chosen - rejected, 6)``; 0.3 - 0.1 is 0.19999999999999998 in floats."""
    rows = [{"prompt": "p", "reward": 0.3, "final_text": "aa"}, {"prompt": "p", "reward": 0.1, "final_text": "ab"}]
    pairs, _ = wai.build_preference_pairs(rows, min_margin=0.1)
    assert [p["margin"] for p in pairs] == [0.2]


def test_scrub_reaches_privileged_keys_inside_tuples():
    """DECISIONS 8 at any depth: in-memory metadata may hold tuples, which keep their type."""
    scrubbed = wai.scrub({"lineage": ({"privileged": "answer", "step": 1}, [{"reference": "r", "rubric": "x"}])})
    assert scrubbed == {"lineage": ({"step": 1}, [{}])}
    assert type(scrubbed["lineage"]) is tuple


def test_a_margin_too_big_for_a_float_is_left_out_of_mean_margin(tmp_path):
    """The reference fails with OverflowError on a 400-digit integer margin (a hand-made pairs file,
    read exactly); ours exports the pair and leaves that margin out of the mean (spec 7.3 counts bools)."""
    row = {"prompt": "p", "final_text": "done", "reward": 1, "steps": [{"text": "a1"}]}
    pairs = [{"prompt": "p", "chosen": row, "rejected": {**row, "final_text": "worse"}, "margin": m}
             for m in (10 ** 400, 0.5, True)]
    report = wai.export_preference(pairs, tmp_path / "dpo.jsonl")
    assert (report["pairs"], report["mean_margin"]) == (3, 0.75)


def test_the_judge_is_asked_about_several_pairs_at_once_and_the_results_keep_their_order(tmp_path):
    """Spec 8.5's ``concurrency`` (8 by default): a judge is usually a remote model. How many calls were
    in flight at once is counted, not timed; every concurrency gives the same pairs and report."""
    import threading
    import time

    in_flight, most, lock = [0], [0], threading.Lock()

    def judge(a, b):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.02)  # a remote call's wait, so that calls can overlap
        with lock:
            in_flight[0] -= 1
        return {"winner": "A" if len(a["final_text"]) >= len(b["final_text"]) else "B", "reason": "longer"}

    rows = [{"prompt": f"p{i % 6}", "reward": (i // 6) % 2, "final_text": "x" * (i + 1)} for i in range(24)]
    pairs, _ = wai.build_preference_pairs(rows, max_pairs_per_prompt=2)
    assert len(pairs) >= 8
    results = {}
    for concurrency in (1, 4, 8):
        most[0] = 0
        judged, report = wai.judge_pairs([dict(p) for p in pairs], judge, concurrency=concurrency)
        results[concurrency] = (judged, report)
        assert most[0] == 1 if concurrency == 1 else most[0] > 1
    assert results[1] == results[4] == results[8]
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    from whileai_pipeline.core.judge import judge_pairs_file
    one = judge_pairs_file(tmp_path / "pairs.jsonl", tmp_path / "one.jsonl", judge)
    four = judge_pairs_file(tmp_path / "pairs.jsonl", tmp_path / "four.jsonl", judge, concurrency=4)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "four.jsonl").read_bytes()
    assert {k: v for k, v in one.items() if k != "path"} == {k: v for k, v in four.items() if k != "path"}
    for bad in (0, 2.5, True, "8"):
        with pytest.raises(ValueError, match="^concurrency must be a whole number of at least 1"):
            wai.judge_pairs([dict(p) for p in pairs], judge, concurrency=bad)


def test_build_pairs_file_without_an_output_says_it_needs_one(tmp_path):
    """build_pairs_file has no default output; None was os.path's bare 'expected str, bytes or
    os.PathLike object, not NoneType'."""
    src = tmp_path / "run.jsonl"
    src.write_text('{"prompt": "p", "reward": 1, "final_text": "a"}\n', encoding="utf-8")
    with pytest.raises(TypeError, match=r"^build_pairs_file needs an output path"):
        build_pairs_file(str(src), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
