"""Issue 6.2: SIGKILL an export at 20 random points; the published file is always whole."""

import os
import random
import signal
import subprocess
import sys
import time

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.jsonl import dumps

EXPORT = ("import sys, whileai_pipeline.simulations as wai; "
          "wai.export_dataset(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]), validate=False)")


def _big_run(path, rows=1500):
    rnd = random.Random(11)
    with open(path, "wb") as fh:
        for i in range(rows):
            steps = [{"tool": "lookup", "arguments": {"id": i}, "result": "r" * rnd.randint(2000, 12000)},
                     {"text": "thinking <think>hm</think> done"}]
            fh.write(dumps({"prompt": f"p{i // 6}", "scenario_id": f"s{i // 6}", "steps": steps,
                            "final_text": "ok", "reward": rnd.choice([0, 1])}) + b"\n")


def _temps(directory):
    return [n for n in os.listdir(directory) if n.endswith(".tmp")]


def test_sigkill_never_leaves_a_mixed_or_truncated_export(tmp_path):
    src = tmp_path / "run.jsonl"
    _big_run(src)
    out = tmp_path / "published.jsonl"
    previous = tmp_path / "previous.jsonl"
    wai.export_dataset(src, previous, format="trl", validate=False)       # an older, different export
    new = tmp_path / "new.jsonl"
    started = time.perf_counter()
    wai.export_dataset(src, new, validate=False)
    duration = time.perf_counter() - started
    old_bytes, new_bytes = previous.read_bytes(), new.read_bytes()
    assert old_bytes != new_bytes

    rnd = random.Random(2026)
    outcomes = {"previous": 0, "new": 0}
    for attempt in range(20):
        out.write_bytes(old_bytes)
        workers = 1 + attempt % 2
        proc = subprocess.Popen([sys.executable, "-c", EXPORT, str(src), str(out), str(workers)],
                                start_new_session=True)
        time.sleep(rnd.uniform(0.05, 1.5 * duration + 0.5))
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        data = out.read_bytes()
        assert data in (old_bytes, new_bytes), f"attempt {attempt}: published file is neither export"
        outcomes["previous" if data == old_bytes else "new"] += 1

    # Both outcomes must have happened, or the kill points did not straddle the rename.
    assert outcomes["previous"] > 0 and outcomes["new"] > 0, outcomes
    time.sleep(0.2)  # let the killed process group's pids disappear
    wai.export_dataset(src, out, validate=False, workers=1)     # the next run cleans up
    assert out.read_bytes() == new_bytes
    assert _temps(tmp_path) == []


def test_every_publish_syncs_the_file_then_the_rename(tmp_path, monkeypatch):
    """A crash after publishing must not lose the rename: every way an export writes its file fsyncs
    the file before the rename and the directory after it (one process, workers, unrolled, a list)."""
    import stat
    import threading

    from whileai_pipeline.core import parallel

    run = tmp_path / "run.jsonl"
    _big_run(run, rows=60)
    synced, lock = [], threading.Lock()
    real_fsync = os.fsync

    def recording_fsync(fd):
        with lock:
            synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 64 << 10)
    exports = {
        "one process": lambda out: wai.export_dataset(run, out, workers=1, validate=False),
        "workers": lambda out: wai.export_dataset(run, out, workers=2, validate=False),
        "unrolled over workers": lambda out: wai.export_dataset(run, out, workers=2, unroll=True, validate=False),
        "a one-shot iterator": lambda out: wai.export_dataset(iter(list(wai.read_jsonl(run))), out, validate=False),
    }
    for name, export in exports.items():
        synced.clear()
        export(tmp_path / f"{name}.jsonl")
        assert synced and synced[-1] == "dir", (name, synced)
        assert "file" in synced[:-1], (name, synced)
