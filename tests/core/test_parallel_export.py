"""Exports spread over worker processes are byte-identical to the one-process path."""

import hashlib
import os
import random
import re

import orjson
import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.jsonl import dumps


def _run(path, n=240, seed=3, interleave=False, bad_arguments=True):
    rnd = random.Random(seed)
    with open(path, "wb") as fh:
        for i in range(n):
            steps = []
            for _ in range(rnd.randint(1, 5)):
                if rnd.random() < 0.5:
                    steps.append({"tool": "lookup", "arguments": rnd.choice([{"id": i}, '{"id": 1}', "{bad" if bad_arguments else {}]),
                                  "result": "x" * rnd.randint(0, 300)})
                else:
                    steps.append({"text": rnd.choice(["<think>h</think>ok", "fine", "  "])})
            task = i % 7 if interleave else i // 5  # interleaved: a group's rollouts are spread over the file
            row = {"prompt": f"p{task}", "steps": steps, "final_text": "done", "scenario_id": f"s{task}",
                   "rollout_index": i % 5, "reward": rnd.choice([0, 1, 0.5, None]),
                   "privileged": {"reference": "a long hidden reference text"}}
            fh.write(dumps(row) + b"\n")
            if i % 50 == 7:
                fh.write(b"\n")  # blank lines must not shift row numbering
    return path


@pytest.mark.parametrize("fmt,unroll,mask_mode", [("openai", False, "assistant"), ("trl", False, "assistant"),
                                                  ("trl", False, "final"), ("openai", True, "assistant"),
                                                  ("trl", True, "assistant")])
def test_workers_give_identical_bytes(tmp_path, monkeypatch, fmt, unroll, mask_mode):
    src = _run(tmp_path / "run.jsonl")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # many chunks even for a small file
    opts = dict(format=fmt, unroll=unroll, mask_mode=mask_mode, validate=False, max_tool_output_chars=120)
    one = wai.export_dataset(src, tmp_path / "one.jsonl", workers=1, **opts)
    two = wai.export_dataset(src, tmp_path / "two.jsonl", workers=2, **opts)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    strip = ("path", "sha256", "elapsed_seconds")
    assert {k: v for k, v in one.items() if k not in strip} == {k: v for k, v in two.items() if k not in strip}
    assert two["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "run.jsonl", "two.jsonl"]


def test_bad_line_in_a_worker_names_file_and_line(tmp_path, monkeypatch):
    src = _run(tmp_path / "run.jsonl", n=100)
    lines = src.read_bytes().split(b"\n")
    lines[80] = b'{"prompt": "p", broken'
    src.write_bytes(b"\n".join(lines))
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    for kwargs in ({}, {"unroll": True}):
        with pytest.raises(wai.BadJsonlError, match=rf"^bad_jsonl: {src}:81: "):
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_a_schema_problem_in_a_late_chunk_names_the_same_line_as_one_process(tmp_path, monkeypatch):
    """Workers number each chunk's lines from 1 (the parent no longer reads the file to count them);
    the parent carries the count on, so the first bad row's line is the file's, blank lines included."""
    src = _run(tmp_path / "run.jsonl", n=200)
    lines = src.read_bytes().split(b"\n")
    lines[170] = b'{"reward": 1, "scenario_id": "no conversation"}'  # line 171: nothing to train on
    src.write_bytes(b"\n".join(lines))
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    assert len(list(parallel.byte_chunks(src))) > 10
    errors = []
    for workers in (1, 2):
        with pytest.raises(wai.SchemaInvalidError) as caught:
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=workers, validate=False)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert f"(first bad row from {src}:171)" in errors[1]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("spill_rows", [None, 7])
def test_every_source_kind_gives_the_same_bytes(tmp_path, monkeypatch, fmt, interleave, spill_rows):
    """File with workers, file in one process, a list and a one-shot generator (the spliced spool path);
    with ``spill_rows`` the per-row group summaries go through their temporary file in tiny blocks."""
    from whileai_pipeline.core import groups

    src = _run(tmp_path / "run.jsonl", interleave=interleave)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    if spill_rows:
        monkeypatch.setattr(groups, "SPILL_ROWS", spill_rows)
    rows = [orjson.loads(line) for line in src.read_bytes().splitlines() if line.strip()]
    opts = dict(format=fmt, validate=False)
    outs = {}
    for name, source, workers in (("two", src, 2), ("one", src, 1), ("list", rows, None),
                                  ("generator", (r for r in rows), None)):
        report = wai.export_dataset(source, tmp_path / f"{name}.jsonl", workers=workers, **opts)
        outs[name] = (tmp_path / f"{name}.jsonl").read_bytes()
        assert report["sha256"] == hashlib.sha256(outs[name]).hexdigest()
        assert report["groups"] == (7 if interleave else 48)
    assert outs["two"] == outs["one"] == outs["list"] == outs["generator"]
    first = orjson.loads(outs["one"].split(b"\n")[0])
    keys = list(first)
    assert keys[keys.index("group_id"):keys.index("group_id") + 6] == ["group_id", "k", "n0", "n1", "reward_mean",
                                                                       "reward_std"]
    assert first["k"] == (35 if interleave else 5)


def test_gate_failure_in_workers_leaves_no_part_files(tmp_path, monkeypatch):
    src = _run(tmp_path / "run.jsonl", bad_arguments=False)
    with open(src, "ab") as fh:
        fh.write(dumps({"prompt": "p", "steps": [{"text": "the secret is a long hidden reference text"}],
                        "scenario_id": "leak", "privileged": {"reference": "a long hidden reference text"}}) + b"\n")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    (tmp_path / "out.jsonl").write_bytes(b"previous\n")
    for fmt in ("openai", "trl"):
        with pytest.raises(wai.PrivilegedLeakError) as refused:
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, format=fmt)
        # the pooled pass leaves the source's hash for later: a refusal still reports it
        assert refused.value.report["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert (tmp_path / "out.jsonl").read_bytes() == b"previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "run.jsonl"]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_preference_workers_give_identical_bytes(tmp_path, monkeypatch, fmt):
    from whileai_pipeline.core.pairs import build_pairs_file

    src = _run(tmp_path / "run.jsonl", n=400, bad_arguments=False)
    build_pairs_file(src, tmp_path / "pairs.jsonl", max_pairs_per_prompt=2, min_margin=0.5, workers=1)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    opts = dict(format=fmt, validate=False, drop_ties=False, system_prompt="sys", tools=[{"type": "function"}])
    one = wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "one.jsonl", workers=1, **opts)
    two = wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "two.jsonl", workers=2, **opts)
    assert one["pairs"] >= 40
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    strip = ("path", "elapsed_seconds")
    assert {k: v for k, v in one.items() if k not in strip} == {k: v for k, v in two.items() if k not in strip}
    assert two["sha256"] == hashlib.sha256((tmp_path / "two.jsonl").read_bytes()).hexdigest()
    assert two["source_sha256"] == hashlib.sha256((tmp_path / "pairs.jsonl").read_bytes()).hexdigest()

    # a chosen reply that quotes its privileged block fails the gate: no file, no part left behind
    with open(tmp_path / "pairs.jsonl", "ab") as fh:
        leak = {"prompt": "p", "steps": [{"text": "it is a long hidden reference text"}],
                "privileged": {"reference": "a long hidden reference text"}}
        fh.write(dumps({"prompt": "p", "chosen": leak, "rejected": {"prompt": "p", "final_text": "no"}}) + b"\n")
    with pytest.raises(wai.PrivilegedLeakError) as refused:
        wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "three.jsonl", workers=2, format=fmt)
    assert refused.value.report["source_sha256"] == hashlib.sha256((tmp_path / "pairs.jsonl").read_bytes()).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "pairs.jsonl", "run.jsonl", "two.jsonl"]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_pooled_preference_counts_ties_skips_and_drops_as_one_process(tmp_path, monkeypatch, fmt):
    """Entries that give no row (a tie, a line that is not an object, a pair TRL drops for want of a
    completion) come back from a worker as what they are; they once came back as strings that the
    tally took apart as if they were rows, and the export failed with "schema_invalid ... 0:t"."""
    from whileai_pipeline.core.pairs import build_pairs_file

    src = _run(tmp_path / "run.jsonl", n=400, bad_arguments=False)
    build_pairs_file(src, tmp_path / "built.jsonl", max_pairs_per_prompt=2, min_margin=0.5, workers=1)
    with open(tmp_path / "built.jsonl", "rb") as fh, open(tmp_path / "pairs.jsonl", "wb") as out:
        for k, line in enumerate(fh):
            pair = orjson.loads(line)
            pair["tie"] = k % 3 == 0
            if k % 7 == 1:
                pair["rejected"] = {"prompt": pair["prompt"]}  # nothing said: no completion for TRL
            out.write(dumps(pair) + b"\n")
            if k % 5 == 2:
                out.write(b'"a line that is not an object"\n')
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    opts = dict(format=fmt, validate=False, system_prompt="sys")
    one = wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "one.jsonl", workers=1, **opts)
    two = wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "two.jsonl", workers=2, **opts)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    strip = ("path", "elapsed_seconds")
    assert {k: v for k, v in one.items() if k not in strip} == {k: v for k, v in two.items() if k not in strip}
    assert two["ties_dropped"] >= 10 and two["rows_skipped"] >= 10 and two["pairs"] >= 20
    if fmt == "trl":
        assert two["no_completion_dropped"] >= 3

    with open(tmp_path / "pairs.jsonl", "ab") as fh:  # one entry without a rejected side fails both alike
        fh.write(dumps({"prompt": "p", "chosen": {"prompt": "p", "final_text": "yes"}}) + b"\n")
    last_line = (tmp_path / "pairs.jsonl").read_bytes().count(b"\n")
    errors = []
    for workers in (1, 2):
        with pytest.raises(ValueError, match="^export_preference takes chosen/rejected pairs, and 1 of ") as failed:
            wai.export_preference(tmp_path / "pairs.jsonl", tmp_path / "three.jsonl", workers=workers, **opts)
        errors.append(str(failed.value))
    assert errors[0] == errors[1]
    assert errors[0].endswith(f" The first is line {last_line} of {tmp_path / 'pairs.jsonl'}.")
    assert not (tmp_path / "three.jsonl").exists()
    entries = [orjson.loads(line) for line in (tmp_path / "pairs.jsonl").read_bytes().splitlines()]
    entries.insert(3, {"prompt": "p", "rejected": {"prompt": "p", "final_text": "no"}})
    with pytest.raises(ValueError, match=r"and 2 of \d+ entries .* The first is index 3 of the pairs given\.$"):
        wai.export_preference(iter(entries), tmp_path / "three.jsonl", **opts)


_RECORD_POOLS = (
    "import whileai_pipeline.core.parallel as par\n"
    "pools = []\n"
    "_init = par.WorkerPool.__init__\n"
    "def _record(self, n):\n"
    "    pools.append(n)\n"
    "    _init(self, n)\n"
    "par.WorkerPool.__init__ = _record\n"
)


@pytest.mark.parametrize("how", ["script without a main guard", "script piped to python -"])
def test_a_script_without_a_main_guard_gets_its_workers(tmp_path, how):
    """Spawned processes re-import the caller's ``__main__``: an export called at a script's top level
    ran again in every worker, which died (BrokenProcessPool), and ``python -`` has no file to import.
    Workers are started without the caller's main module, so both run over two processes."""
    import subprocess
    import sys

    src = _run(tmp_path / "run.jsonl", n=60, bad_arguments=False)
    script = (_RECORD_POOLS + "import whileai_pipeline.simulations as wai\n"
              f"r = wai.export_dataset({str(src)!r}, {str(tmp_path / 'out.jsonl')!r}, workers=2)\n"
              "print('rows', r['n'], 'pools', pools)\n")
    if how == "script piped to python -":
        proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120)
    else:
        (tmp_path / "export_it.py").write_text(script)
        proc = subprocess.run([sys.executable, str(tmp_path / "export_it.py")], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["rows", "60", "pools", "[2]"]
    assert "Traceback" not in proc.stderr, proc.stderr
    one = wai.export_dataset(src, tmp_path / "one.jsonl", workers=1)
    assert one["sha256"] == hashlib.sha256((tmp_path / "out.jsonl").read_bytes()).hexdigest()


def test_hiding_main_restores_it(monkeypatch):
    import sys

    main = sys.modules["__main__"]
    with parallel._main_hidden():
        assert sys.modules["__main__"] is not main and getattr(sys.modules["__main__"], "__file__", None) is None
    assert sys.modules["__main__"] is main
    with pytest.raises(KeyError), parallel._main_hidden():
        raise KeyError("inside")
    assert sys.modules["__main__"] is main


def _export_in_child(src, out, workers):
    wai.export_dataset(src, out, workers=workers)


def test_a_daemonic_caller_runs_in_one_process(tmp_path):
    """A multiprocessing.Pool worker is daemonic and may not start processes of its own."""
    import multiprocessing

    src = _run(tmp_path / "run.jsonl", n=60, bad_arguments=False)
    child = multiprocessing.get_context("spawn").Process(
        target=_export_in_child, args=(str(src), str(tmp_path / "out.jsonl"), 2), daemon=True)
    child.start()
    child.join(120)
    assert child.exitcode == 0
    wai.export_dataset(src, tmp_path / "one.jsonl", workers=1)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "out.jsonl").read_bytes()


def test_reward_statistics_over_workers_equal_one_process(tmp_path, monkeypatch):
    """The pipeline's reward pictures of a big export source: the same tallies from worker processes."""
    from whileai_pipeline.core.scoring import score_stats_of_file

    src = _run(tmp_path / "run.jsonl", n=300, interleave=True)
    with open(src, "ab") as fh:
        fh.write(b"[1, 2]\n" + dumps({"task_id": "t", "reward": 7.5}) + b"\n" + dumps({"reward": "0.3"}) + b"\n")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    one, two = score_stats_of_file(src, workers=1), score_stats_of_file(src, workers=2)
    assert vars(one) == vars(two)
    assert one.n == 302 and one.out_of_range == 1 and one.n_groups == 9


def test_reward_statistics_of_pair_sides_over_workers_equal_one_process(tmp_path, monkeypatch):
    """The DPO stage's reward pictures: both rows of every pair, from worker processes or one."""
    from whileai_pipeline.core.pairs import build_pairs_file
    from whileai_pipeline.core.scoring import ScoreStats, score_stats_of_file

    src = _run(tmp_path / "run.jsonl", n=300, interleave=True)
    pairs = tmp_path / "pairs.jsonl"
    build_pairs_file(src, pairs, workers=1)
    with open(pairs, "ab") as fh:  # a line that is no pair, and a pair with one side missing
        fh.write(b"[1, 2]\n" + dumps({"chosen": {"task_id": "t", "reward": 7.5}, "rejected": None}) + b"\n")
    expected = ScoreStats()
    for line in pairs.read_bytes().splitlines():
        pair = orjson.loads(line)
        if isinstance(pair, dict):
            expected.add(pair["chosen"])
            expected.add(pair["rejected"])
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    one, two = score_stats_of_file(pairs, workers=1, sides=True), score_stats_of_file(pairs, workers=2, sides=True)
    assert vars(one) == vars(two) == vars(expected)
    assert one.n == 2 * (len(pairs.read_bytes().splitlines()) - 2) + 1 and one.out_of_range == 1


def test_passing_rows_over_workers_equal_one_process(tmp_path, monkeypatch):
    """The SFT stage's source when it trains on passing rows only: the same file and tallies from
    worker processes, and exactly the rows whose reward passes."""
    from whileai_pipeline.core.scoring import ScoreStats, passing_rows_file, verdict

    src = _run(tmp_path / "run.jsonl", n=300, interleave=True)
    with open(src, "ab") as fh:
        fh.write(b"[1, 2]\n" + dumps({"task_id": "t", "reward": 7.5}) + b"\n" + dumps({"reward": "0.9"}) + b"\n")
    rows = [orjson.loads(line) for line in src.read_bytes().splitlines() if line.strip()]
    expected = ScoreStats()
    passing = [r for r in rows if isinstance(r, dict) and verdict(r.get("reward")) == "pass"]
    for row in passing:
        expected.add(row)
    assert 50 < len(passing) < len(rows) - 50
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    for workers in (1, 2):
        stats, dest = ScoreStats(), tmp_path / f"passing{workers}.jsonl"
        with open(dest, "wb") as out:
            passing_rows_file(src, out, stats, dest=dest, workers=workers)
        assert dest.read_bytes() == b"".join(dumps(r) + b"\n" for r in passing)
        assert vars(stats) == vars(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passing1.jsonl", "passing2.jsonl", "run.jsonl"]


@pytest.mark.parametrize("scorer", ["existing", "reference_match"])
def test_scoring_over_workers_writes_the_same_file(tmp_path, monkeypatch, scorer):
    """The pipeline's scored stage for a big run: built-in scorers over workers, the same bytes and tallies."""
    from whileai_pipeline.core.scoring import ScoreStats, resolve_scorer, score_file

    src = _run(tmp_path / "run.jsonl", n=300, interleave=True)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    results = {}
    for workers in (1, 2):
        stats, dest, seen = ScoreStats(), tmp_path / f"scored{workers}.jsonl", []
        with open(dest, "wb") as out:
            sha = score_file(src, out, resolve_scorer(scorer), stats, dest=dest, progress=seen.append,
                             workers=workers)
        assert sha == hashlib.sha256(dest.read_bytes()).hexdigest()
        results[workers] = (dest.read_bytes(), vars(stats))
        assert sorted(p.name for p in tmp_path.iterdir() if "part" in p.name) == []
    assert results[1] == results[2]
    assert results[2][1]["n"] == 300 and seen[-1] == 300


@pytest.mark.parametrize("kind", ["grouped", "unrolled", "preference"])
def test_a_source_changed_before_its_late_hash_publishes_nothing(tmp_path, monkeypatch, kind):
    """A pooled export hashes its source at the end; if the file changed after the pass read it, the
    hash would not be of the rows exported, so the export fails and the previous output stays."""
    from whileai_pipeline.core import runs
    from whileai_pipeline.core.pairs import build_pairs_file

    src = _run(tmp_path / "run.jsonl", n=400, bad_arguments=False)
    if kind == "preference":
        build_pairs_file(src, tmp_path / "pairs.jsonl", max_pairs_per_prompt=2, min_margin=0.5, workers=1)
        src.unlink()
        src = tmp_path / "pairs.jsonl"
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    (tmp_path / "out.jsonl").write_bytes(b"previous\n")
    hash_whole = runs._HashingRows.hash_whole

    def appended_first(self):
        with open(self.path, "ab") as fh:
            fh.write(b"\n")
        hash_whole(self)

    monkeypatch.setattr(runs._HashingRows, "hash_whole", appended_first)
    with pytest.raises(wai.ExportError, match=rf"^source_changed: {src} changed"):
        if kind == "preference":
            wai.export_preference(src, tmp_path / "out.jsonl", workers=2, validate=False)
        else:
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, unroll=kind == "unrolled", validate=False)
    assert (tmp_path / "out.jsonl").read_bytes() == b"previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", src.name]


def test_a_failed_splice_leaves_no_thread_and_no_file(tmp_path, monkeypatch):
    """The source's hash starts in a thread with the splice; when the splice fails, the thread is
    ended with the export and nothing is published."""
    import threading

    from whileai_pipeline.core import spool

    src = _run(tmp_path / "run.jsonl", bad_arguments=False)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)

    def disk_full(self, part, suffixes):
        raise wai.WriteFailedError(self.dest, OSError(28, "No space left on device"))

    monkeypatch.setattr(spool.Spool, "splice_part", disk_full)
    before = set(threading.enumerate())
    with pytest.raises(wai.WriteFailedError):
        wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, validate=False)
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_the_output_is_flushed_while_the_splice_writes_it(tmp_path, monkeypatch):
    """``EarlyWriteback``: a pooled export fdatasyncs its output during the splice, every
    ``WRITEBACK_STEP`` bytes, so the disk does not start only at the final fsync. Same bytes."""
    from whileai_pipeline.core import spool

    src = _run(tmp_path / "run.jsonl", n=400, bad_arguments=False)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(spool, "WRITEBACK_STEP", 16 << 10)
    events = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def recording_fdatasync(fd):
        events.append("early")
        real_fdatasync(fd)

    def recording_fsync(fd):
        events.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    report = wai.export_dataset(src, tmp_path / "two.jsonl", workers=2, validate=False)
    # the first advance past a step always flushes (how many more depends on the disk); every early
    # flush ends before the output's own fsync, which publish waits for
    assert "early" in events and "early" not in events[events.index("fsync"):]
    wai.export_dataset(src, tmp_path / "one.jsonl", workers=1, validate=False)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert report["sha256"] == hashlib.sha256((tmp_path / "two.jsonl").read_bytes()).hexdigest()


def test_a_failed_early_flush_publishes_nothing(tmp_path, monkeypatch):
    """A flush that fails (a disk error) fails the export like a failed write: nothing is published,
    the previous file stays, and no temp file is left."""
    from whileai_pipeline.core import spool

    src = _run(tmp_path / "run.jsonl", n=400, bad_arguments=False)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(spool, "WRITEBACK_STEP", 16 << 10)

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    (tmp_path / "out.jsonl").write_bytes(b"previous\n")
    with pytest.raises(wai.WriteFailedError, match="Input/output error"):
        wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, validate=False)
    assert (tmp_path / "out.jsonl").read_bytes() == b"previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "run.jsonl"]


def test_without_fdatasync_or_sched_getaffinity_an_export_still_runs_over_workers(tmp_path, monkeypatch):
    """macOS has neither: the early flush falls back to fsync, the worker count to cpu_count."""
    from whileai_pipeline.core import spool

    src = _run(tmp_path / "run.jsonl", n=400, bad_arguments=False)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 1)
    monkeypatch.setattr(spool, "WRITEBACK_STEP", 16 << 10)
    monkeypatch.delattr(os, "fdatasync")
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(parallel, "cpu_quota_cores", lambda: None)  # a CPU quota here (CI's container) is not the point
    monkeypatch.delenv(parallel.ENV_WORKERS, raising=False)
    flushed = []
    real_fsync = os.fsync

    def recording(fd):
        flushed.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    assert parallel.workers_for(src) == 2
    wai.export_dataset(src, tmp_path / "two.jsonl", validate=False)
    assert len(flushed) > 2  # early flushes, besides the output's own fsync and the directory's
    wai.export_dataset(src, tmp_path / "one.jsonl", workers=1, validate=False)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()


def test_a_worker_count_that_is_not_a_number_says_where_it_came_from(tmp_path, monkeypatch):
    src = _run(tmp_path / "run.jsonl", n=20)
    with pytest.raises(wai.ExportError, match=r"^workers must be a whole number of worker processes "
                                              r"\(1 for one process\), got 'x'$"):
        wai.export_dataset(src, tmp_path / "out.jsonl", workers="x")
    for bad in (2.5, True, float("inf"), "2.0"):  # int() would take 2.5 as 2 and True as 1
        with pytest.raises(wai.ExportError, match=rf"^workers must be a whole number .*, got {re.escape(repr(bad))}$"):
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=bad)
    assert wai.export_dataset(src, tmp_path / "out.jsonl", workers=2.0, validate=False)["n"] == 20
    monkeypatch.setenv(parallel.ENV_WORKERS, "two")
    with pytest.raises(wai.ExportError, match=r"^\$WHILEAI_PIPELINE_WORKERS must be a whole number of worker "
                                              r"processes \(1 for one process; unset it to choose by file size "
                                              r"and cores\), got 'two'$"):
        wai.export_dataset(src, tmp_path / "out.jsonl")
    assert wai.export_dataset(src, tmp_path / "out.jsonl", workers=1, validate=False)["n"] == 20  # the argument wins
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "run.jsonl"]


def test_a_worker_count_below_one_is_refused_not_read_as_one(tmp_path, monkeypatch):
    # 0 reads as "choose for me" in many tools and -1 as "every core": taking either as one process would
    # run a big export on one core without a word
    src = _run(tmp_path / "run.jsonl", n=20)
    for bad in (0, -1, "0"):
        with pytest.raises(wai.ExportError, match=rf"^workers must be at least 1 \(1 for one process\), "
                                                  rf"got {re.escape(repr(bad))}$"):
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=bad)
    monkeypatch.setenv(parallel.ENV_WORKERS, "0")
    with pytest.raises(wai.ExportError, match=r"^\$WHILEAI_PIPELINE_WORKERS must be at least 1 \(1 for one "
                                              r"process; unset it to choose by file size and cores\), got '0'$"):
        wai.export_dataset(src, tmp_path / "out.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def _env(path, name):
    """A worker task (``ordered`` calls ``task(path, *job)``): an environment variable of the worker."""
    return os.environ.get(name)


def test_workers_run_numeric_libraries_on_one_thread_unless_told_otherwise(tmp_path, monkeypatch):
    """One process per core already: OpenBLAS starting a thread per core in each worker only competes."""
    from whileai_pipeline.core.parallel import WorkerPool

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own setting is kept
    anything = tmp_path / "a.jsonl"
    anything.write_text("{}\n")
    with WorkerPool(2) as pool:
        assert list(pool.ordered(_env, anything, [("OPENBLAS_NUM_THREADS",)] * 4)) == ["1"] * 4
        assert list(pool.ordered(_env, anything, [("OMP_NUM_THREADS",)] * 4)) == ["3"] * 4
