"""The process running a pooled export is SIGKILLed (the OOM killer, a CI timeout, ``kill -9`` of the
CLI) while its workers are busy.

Its workers used to live on forever: each waits for its next task on a queue that nothing closes when
the parent dies. They held their memory and the dead command's stdout and stderr, so whatever read that
output until EOF (a CI runner, ``subprocess.run(capture_output=True)``) hung too. They now end with their
parent, and the next export cleans up and writes the same bytes as one never interrupted.
"""

import contextlib
import os
import signal
import subprocess
import sys

import pytest

import whileai_pipeline.simulations as wai

from .test_source_rewritten import PREVIOUS, _run

# The export kills its own process (not its workers) once 100 rows are done, after writing down the pids
# of its workers.
KILLED_MID_EXPORT = r"""
import multiprocessing, os, signal, sys
import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel, progress
parallel.CHUNK_BYTES = 4096
progress.EVERY_ROWS = 50

def on_progress(done):
    if done >= 100:
        with open(sys.argv[3], "w") as fh:
            fh.write(" ".join(str(child.pid) for child in multiprocessing.active_children()))
        os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[4] == "at once":  # killed as its workers start: they are still importing when it dies
    import concurrent.futures as cf
    submit = cf.ProcessPoolExecutor.submit

    def submit_then_die(self, *args, **kwargs):
        future = submit(self, *args, **kwargs)
        on_progress(100)
        return future

    cf.ProcessPoolExecutor.submit = submit_then_die
wai.export_datasets(sys.argv[1], {"openai": sys.argv[2], "trl": sys.argv[2] + ".trl"}, workers=2, validate=False,
                    progress=on_progress)
"""


def _running(pid) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.mark.parametrize("when", ["mid export", "at once"])
def test_workers_end_with_a_killed_parent_and_the_next_export_is_whole(tmp_path, when):
    src = _run(tmp_path / "run.jsonl")
    out = tmp_path / "out" / "sft.jsonl"
    out.parent.mkdir()
    out.write_bytes(PREVIOUS)
    pids_file = tmp_path / "workers.txt"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MID_EXPORT, str(src), str(out), str(pids_file), when],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    workers = []
    try:
        try:
            proc.communicate(timeout=120)  # EOF only once every process holding the pipes has ended
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("the killed export's workers are still running, holding its stdout") from None
        finally:
            workers = [int(pid) for pid in pids_file.read_text().split()] if pids_file.exists() else []
        assert proc.returncode == -signal.SIGKILL
        assert workers, "the export never started its workers"
        assert not [pid for pid in workers if _running(pid)]
    finally:
        for pid in workers:  # what a failing run of this test would leave behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    assert out.read_bytes() == PREVIOUS
    wai.export_datasets(src, {"openai": out, "trl": f"{out}.trl"}, workers=2, validate=False)
    assert sorted(p.name for p in out.parent.iterdir()) == ["sft.jsonl", "sft.jsonl.trl"]
    alone = tmp_path / "alone"
    wai.export_datasets(src, {"openai": alone / "sft.jsonl", "trl": alone / "sft.jsonl.trl"}, workers=1,
                        validate=False)
    assert out.read_bytes() == (alone / "sft.jsonl").read_bytes()
    assert (out.parent / "sft.jsonl.trl").read_bytes() == (alone / "sft.jsonl.trl").read_bytes()
