"""A run file rewritten or truncated under an export, and a worker process killed mid-export.

Before these were named, a pooled export stopped with whatever broke first: a worker's "mmap length
is greater than file size", or "A process in the process pool was terminated abruptly" (a worker
killed by SIGBUS when the mapped pages it was reading were cut off). Both now say what happened and
what to do; in every case nothing is published and no temp or part file is left.
"""

import multiprocessing
import os
import random
import signal

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel, progress
from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.pairs import build_pairs_file

PREVIOUS = b"previous export\n"


def _run(path, n=1500):
    rnd = random.Random(7)
    with open(path, "wb") as fh:
        for i in range(n):
            steps = [{"tool": "lookup", "arguments": {"id": i}, "result": "r" * rnd.randint(50, 400)},
                     {"text": "found it"}]
            fh.write(dumps({"prompt": f"p{i // 6}", "steps": steps, "final_text": "done", "scenario_id": f"s{i // 6}",
                            "rollout_index": i % 6, "reward": rnd.choice([0, 1, 0.25, 0.75])}) + b"\n")
    return path


def _source(tmp_path, kind):
    src = _run(tmp_path / "run.jsonl")
    if kind.startswith("preference"):  # its source is a pairs file
        build_pairs_file(src, tmp_path / "pairs.jsonl", max_pairs_per_prompt=3, min_margin=0.25, workers=1)
        src.unlink()
        src = tmp_path / "pairs.jsonl"
    return src


def _export(kind, src, out, workers, on_progress):
    opts = dict(workers=workers, progress=on_progress)
    if kind == "pairs":
        return build_pairs_file(src, out, min_margin=0.25, **opts)
    if kind == "preference":
        return wai.export_preference(src, out, validate=False, **opts)
    # both formats at once: openai into out (named in the errors), trl beside it
    both = {"openai": out, "trl": out.with_name("out.trl.jsonl")}
    if kind == "preference, both formats":
        return wai.export_preferences(src, both, validate=False, **opts)
    if kind == "grouped, both formats":
        return wai.export_datasets(src, both, validate=False, **opts)
    return wai.export_dataset(src, out, unroll=kind == "unrolled", validate=False, **opts)


def _once_at(rows, action):
    def on_progress(done):
        if done == rows:
            action()
    return on_progress


KINDS = ["grouped", "unrolled", "preference", "pairs", "grouped, both formats", "preference, both formats"]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("cut", ["emptied", "cut_mid_line", "rewritten_same_size"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_source_changed_mid_export_is_named_and_publishes_nothing(tmp_path, monkeypatch, kind, cut, workers):
    src = _source(tmp_path, kind)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # many chunks, most still to map when the file changes
    monkeypatch.setattr(progress, "EVERY_ROWS", 50)
    out = tmp_path / "out.jsonl"
    out.write_bytes(PREVIOUS)
    size = src.stat().st_size

    def change():
        if cut == "emptied":
            open(src, "wb").close()
        elif cut == "cut_mid_line":
            os.truncate(src, size // 3 + 11)
        else:  # same size, other bytes: only the stamp (mtime) tells
            data = src.read_bytes()
            src.write_bytes(data[len(data) // 2:] + data[:len(data) // 2])
            os.utime(src, ns=(1, 1))

    with pytest.raises(wai.SourceChangedError, match=rf"^source_changed: {src} changed while it was being "
                                                     r"exported; nothing was written\. Export again once"):
        _export(kind, src, out, workers, _once_at(100, change))
    assert out.read_bytes() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.jsonl", src.name])


def test_a_source_removed_mid_export_is_named(tmp_path, monkeypatch):
    src = _run(tmp_path / "run.jsonl")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(progress, "EVERY_ROWS", 50)
    with pytest.raises(wai.SourceChangedError, match="^source_changed: "):
        wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, validate=False, progress=_once_at(100, src.unlink))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_worker_is_named_and_publishes_nothing(tmp_path, monkeypatch, kind):
    src = _source(tmp_path, kind)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(progress, "EVERY_ROWS", 50)
    out = tmp_path / "out.jsonl"
    out.write_bytes(PREVIOUS)
    killed = []

    def kill_workers():
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGKILL)
            killed.append(child.pid)

    with pytest.raises(wai.WorkerLostError, match=rf"^worker_lost: a worker process reading {src} ended abruptly "
                                                  r".*Export again, or in one process: workers=1"):
        _export(kind, src, out, 2, _once_at(100, kill_workers))
    assert killed
    assert out.read_bytes() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.jsonl", src.name])


def test_the_new_errors_survive_a_trip_through_pickle():
    import pickle

    for error in (wai.SourceChangedError("/x/run.jsonl"), wai.WorkerLostError("/x/run.jsonl")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and back.path == "/x/run.jsonl"
        assert isinstance(back, wai.ExportError)


def test_a_source_changed_between_the_two_passes_of_pair_building_leaves_no_part_files(tmp_path):
    """Pass 2's tasks still running when one failed used to write parts after they were removed."""
    run = tmp_path / "run.jsonl"
    groups = 2500  # five pass-2 tasks of 500 pairs
    wai.write_jsonl(run, [{"prompt": f"task {g}", "final_text": f"answer {k} " + "x" * 2000, "reward": k}
                          for g in range(groups) for k in (0, 1)])

    def change_between_passes(rows_done):
        if rows_done == 2 * groups:  # the call after pass 1
            with open(run, "r+b") as fh:
                fh.write(b"X" * 100)  # same size: only pass 2 finds out

    with pytest.raises(wai.SourceChangedError, match=f"^source_changed: {run} changed"):
        build_pairs_file(run, tmp_path / "pairs.jsonl", workers=2, progress=change_between_passes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
