"""What must be shown, point 5: the inbox sensor and the re-export schedule, evaluated against a
temporary instance."""

import datetime
import hashlib
import os
import shutil

import dagster as dg
import pytest

from whileai_pipeline.defs.automation import DEFAULT_CRON, inbox_sensor, reexport_schedule
from whileai_pipeline.defs.partitions import PARTITIONS_NAME

from .conftest import SAMPLE, SAMPLE_META, materialization

pytestmark = pytest.mark.pipeline


def _evaluate(sensor_def, instance, storage, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": storage}) as context:
        return sensor_def(context)


def _apply(instance, result):
    """What the daemon does with a SensorResult's partition requests."""
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))


def test_sensor_new_file_registers_one_partition_and_one_run(storage, instance):
    storage.inbox.mkdir(parents=True)
    shutil.copyfile(SAMPLE, storage.inbox / "run_a.jsonl")
    result = _evaluate(inbox_sensor, instance, storage)
    assert len(result.dynamic_partitions_requests) == 1
    request = result.dynamic_partitions_requests[0]
    assert request.partitions_def_name == PARTITIONS_NAME and list(request.partition_keys) == ["run_a"]
    assert len(result.run_requests) == 1
    run = result.run_requests[0]
    sha = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    assert run.partition_key == "run_a"
    assert run.run_key == f"run_a:{sha[:16]}"
    _apply(instance, result)

    # the same file again: nothing
    again = _evaluate(inbox_sensor, instance, storage, cursor=result.cursor)
    assert not again.run_requests and not again.dynamic_partitions_requests
    # touched but not changed: nothing
    os.utime(storage.inbox / "run_a.jsonl", ns=(1, 1))
    touched = _evaluate(inbox_sensor, instance, storage, cursor=again.cursor)
    assert not touched.run_requests

    # changed content: one run request, no new partition
    with open(storage.inbox / "run_a.jsonl", "ab") as fh:
        fh.write(b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')
    changed = _evaluate(inbox_sensor, instance, storage, cursor=touched.cursor)
    assert not changed.dynamic_partitions_requests
    assert len(changed.run_requests) == 1 and changed.run_requests[0].run_key != run.run_key

    # a sidecar is part of the run's content
    shutil.copyfile(SAMPLE_META, storage.inbox / "run_a.meta.json")
    with_meta = _evaluate(inbox_sensor, instance, storage, cursor=changed.cursor)
    assert len(with_meta.run_requests) == 1


def test_sensor_requests_are_targeted_at_the_chain_job():
    assert inbox_sensor.job_name == "simulation_chain"


def test_sensor_skips_content_already_materialized(chain):
    """A run the CLI already materialized is not requested again by a fresh sensor."""
    key = chain.register()
    result = chain.materialize(key, selection=["raw_simulation_data"])
    assert result.success
    assert materialization(result, "raw_simulation_data")["fingerprint"].value
    fresh = _evaluate(inbox_sensor, chain.instance, chain.storage)
    assert not fresh.run_requests and not fresh.dynamic_partitions_requests


def test_sensor_two_new_files(storage, instance):
    storage.inbox.mkdir(parents=True)
    shutil.copyfile(SAMPLE, storage.inbox / "b run.jsonl")  # sanitized to b_run
    shutil.copyfile(SAMPLE, storage.inbox / "c.jsonl")
    result = _evaluate(inbox_sensor, instance, storage)
    assert sorted(result.dynamic_partitions_requests[0].partition_keys) == ["b_run", "c"]
    assert sorted(r.partition_key for r in result.run_requests) == ["b_run", "c"]


def test_schedule_one_request_per_registered_run(sqlite_instance):
    instance = sqlite_instance
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["alpha", "beta", "gamma"])
    when = datetime.datetime(2026, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
    requests = reexport_schedule(context)
    assert sorted(r.partition_key for r in requests) == ["alpha", "beta", "gamma"]
    assert len({r.run_key for r in requests}) == 3
    assert all(when.isoformat() in r.run_key for r in requests)
    assert reexport_schedule.job_name == "reexport"


def test_schedule_skips_when_nothing_registered(sqlite_instance):
    context = dg.build_schedule_context(instance=sqlite_instance)
    skip = reexport_schedule(context)
    assert isinstance(skip, dg.SkipReason) and "no simulation runs" in skip.skip_message


def test_schedule_cron_comes_from_the_environment(tmp_path):
    import subprocess
    import sys

    code = "from whileai_pipeline.defs.automation import reexport_schedule as s; print(s.cron_schedule)"
    env = {**os.environ, "WHILEAI_PIPELINE_CRON": "*/15 * * * *"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "*/15 * * * *"
    env.pop("WHILEAI_PIPELINE_CRON")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == DEFAULT_CRON


def test_sensor_file_with_unsanitized_name_runs_end_to_end(chain):
    """A file dropped in the inbox as `Nightly Run.jsonl` becomes partition `Nightly_Run` and the
    chain finds it by that key."""
    chain.storage.inbox.mkdir(parents=True)
    shutil.copyfile(SAMPLE, chain.storage.inbox / "Nightly Run.jsonl")
    shutil.copyfile(SAMPLE_META, chain.storage.inbox / "Nightly Run.meta.json")
    result = _evaluate(inbox_sensor, chain.instance, chain.storage)
    _apply(chain.instance, result)
    (request,) = result.run_requests
    assert request.partition_key == "Nightly_Run"
    run = chain.materialize(request.partition_key)
    assert run.success
    raw = materialization(run, "raw_simulation_data")
    assert raw["source_path"].value == str(chain.storage.inbox / "Nightly Run.jsonl")
    assert raw["system_prompt_chars"].value > 0
    assert chain.storage.published_path("Nightly_Run", "sft", "openai").is_file()
