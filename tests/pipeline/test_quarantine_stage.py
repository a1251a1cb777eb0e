"""``on_bad_line: quarantine``: the quarantine file goes with the raw stage it was made with.

Found by a review: the quarantine was written straight onto ``stages/<run>/quarantine.jsonl`` before the
run was known to be stageable. A new version of the run with no trajectory at all (only blank lines)
failed with ``empty_run`` and kept the previous raw stage, but its quarantine was replaced by an empty
file: the lines set aside from the stage still in place were gone.
"""

import os

import orjson
import pytest

from .conftest import materialization, read_rows, sample_rows

pytestmark = pytest.mark.pipeline

RAW = "raw_simulation_data"
QUARANTINE = {"ops": {RAW: {"config": {"on_bad_line": "quarantine"}}}}


def test_an_empty_new_version_keeps_the_quarantine_of_the_stage_in_place(chain):
    key = chain.register(sample_rows()[:4])
    run = chain.storage.run_path(key)
    run.write_bytes(run.read_bytes() + b"not json\n")  # line 5
    assert chain.materialize(key, run_config=QUARANTINE, selection=[RAW]).success
    stage = chain.storage.stage_path(key, "raw")
    quarantine = chain.storage.stage_path(key, "quarantine")
    staged, set_aside = stage.read_bytes(), quarantine.read_bytes()
    assert [q["line"] for q in read_rows(quarantine)] == [5]

    run.write_bytes(b"\n  \r\n\n")  # no trajectory at all
    result = chain.materialize(key, run_config=QUARANTINE, selection=[RAW])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "empty_run:" in failure.event_specific_data.error.message
    assert stage.read_bytes() == staged
    assert quarantine.read_bytes() == set_aside  # still the lines set aside from the stage in place
    assert sorted(os.listdir(stage.parent)) == ["quarantine.jsonl", "raw.jsonl", "raw.meta.json"]


def test_a_good_version_after_a_quarantined_one_removes_the_quarantine(chain):
    key = chain.register(sample_rows()[:4])
    run = chain.storage.run_path(key)
    good = run.read_bytes()
    run.write_bytes(good + b"[1]\n")
    first = chain.materialize(key, run_config=QUARANTINE, selection=[RAW])
    assert materialization(first, RAW)["quarantined_lines"].value == 1
    run.write_bytes(good)
    second = chain.materialize(key, run_config=QUARANTINE, selection=[RAW])
    md = materialization(second, RAW)
    assert md["quarantined_lines"].value == 0 and "quarantine_path" not in md
    assert not chain.storage.stage_path(key, "quarantine").exists()
    assert read_rows(chain.storage.stage_path(key, "raw")) == [orjson.loads(x) for x in good.splitlines()]
    assert sorted(os.listdir(chain.storage.stage_dir(key))) == ["raw.jsonl", "raw.meta.json"]
