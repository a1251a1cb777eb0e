"""The raw stage reads a big run over worker processes: the same metadata, and errors naming the same line."""

import copy
import hashlib

import pytest

from whileai_pipeline.core import parallel
from whileai_pipeline.defs.summaries import PREVIEW_ROWS, RawStats, raw_facts

from .conftest import materialization, sample_rows, write_rows

pytestmark = pytest.mark.pipeline

RAW = "raw_simulation_data"


def _many_rows(n=240):
    """The sample's rows again and again, with their own scenario ids, some without a prompt or a
    privileged block, a few with a finish reason of their own."""
    base = sample_rows()
    rows = []
    for i in range(n):
        row = copy.deepcopy(base[i % len(base)])
        row["scenario_id"] = f"s{i // 6}"
        row["rollout_index"] = i % 6
        if i % 7 == 0:
            row.pop("prompt", None)
        if i % 5 == 0:
            row.pop("privileged", None)
        if i % 11 == 0:
            row["finish_reason"] = "length"
        rows.append(row)
    return rows


@pytest.fixture
def pools(monkeypatch):
    """The worker counts of every pool started (so a test knows the workers really ran)."""
    started = []
    init = parallel.WorkerPool.__init__

    def record(self, workers):
        started.append(workers)
        init(self, workers)

    monkeypatch.setattr(parallel.WorkerPool, "__init__", record)
    return started


def _stats(path, workers):
    stats, digest = RawStats(), hashlib.sha256()
    for _, facts in raw_facts(path, digest, workers=workers):
        stats.add_facts(facts)
    return stats, digest.hexdigest()


def test_raw_facts_over_workers_count_what_one_process_counts(tmp_path, monkeypatch, pools):
    src = write_rows(tmp_path / "run.jsonl", _many_rows())
    with open(src, "ab") as fh:
        fh.write(b"\n[1, 2]\n")  # a blank line is skipped; a non-object is counted as one
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # many chunks, each with its own preview rows
    (one, sha_one), (two, sha_two) = _stats(src, 1), _stats(src, 2)
    assert pools == [2]
    assert vars(one) == vars(two)
    assert sha_one == sha_two == hashlib.sha256(src.read_bytes()).hexdigest()
    assert one.rows == 240 and one.non_objects == 1 and one.groups == 40
    assert len(one.preview) == PREVIEW_ROWS and one.preview[0][:2] == ["s0", 0]
    # the same numbers as adding the parsed rows one by one
    direct = RawStats()
    for row in [*_many_rows(), [1, 2]]:
        direct.add(row)
    assert vars(direct) == vars(one)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("bad, reason", [(b"[1, 2]", "expected a JSON object (one trajectory), got list"),
                                         (b'{"prompt": ', "unexpected end of data")])
def test_a_bad_line_fails_the_stage_naming_the_run_file_and_line(chain, monkeypatch, pools, workers, bad, reason):
    monkeypatch.setenv(parallel.ENV_WORKERS, workers)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    key = chain.register(_many_rows(), name="big")
    run_file = chain.storage.run_path(key)
    lines = run_file.read_bytes().splitlines(keepends=True)
    run_file.write_bytes(b"".join(lines[:150]) + bad + b"\n" + b"".join(lines[150:]))
    result = chain.materialize(key, selection=[RAW])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    description = failure.event_specific_data.error.message
    assert f"{run_file}:151: {reason}" in description, description
    assert ".incoming" not in description
    assert pools == ([2] if workers == "2" else [])


def test_raw_metadata_is_the_same_over_workers(chain, monkeypatch, pools):
    key = chain.register(_many_rows(), name="big")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    seen = {}
    for workers in ("1", "2"):
        monkeypatch.setenv(parallel.ENV_WORKERS, workers)
        result = chain.materialize(key, selection=[RAW])
        assert result.success
        seen[workers] = {k: v.value for k, v in materialization(result, RAW).items()}
    assert pools == [2]
    assert seen["1"] == seen["2"]
    assert seen["2"]["rows"] == 240 and seen["2"]["groups"] == 40
    assert seen["2"]["sha256"] == hashlib.sha256(chain.storage.run_path(key).read_bytes()).hexdigest()


def test_a_worker_lost_while_the_raw_stage_reads_names_the_run_file(chain, monkeypatch):
    """The error named the stage's hidden snapshot (stages/<run>/.raw.jsonl.incoming), a file the user
    never made and that is gone once the step fails, instead of the run file it is a copy of. The worker
    dies at a precise point here: ``raw_facts`` raises what ``WorkerPool.ordered`` raises for it."""
    from whileai_pipeline.core.errors import WorkerLostError
    from whileai_pipeline.defs import assets

    key = chain.register(_many_rows(), name="big")

    def lose_a_worker(path, hasher=None, workers=None):
        yield from list(raw_facts(path, hasher, workers=1))[:100]
        raise WorkerLostError(str(path))

    monkeypatch.setattr(assets, "raw_facts", lose_a_worker)
    result = chain.materialize(key, selection=[RAW])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert f"worker_lost: a worker process reading {chain.storage.run_path(key)} ended abruptly" in message
    assert ".incoming" not in message
    assert not chain.storage.stage_path(key, "raw").exists()
