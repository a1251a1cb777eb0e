"""What must be shown, point 5: the inbox sensor and the re-export schedule, evaluated against a
temporary instance."""

import datetime
import hashlib
import os
import re
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


def _age(path, seconds=120):
    """Make a file look settled: last modified ``seconds`` ago (the sensor waits for younger ones)."""
    then = os.stat(path).st_mtime_ns - int(seconds * 1e9)
    os.utime(path, ns=(then, then))


def _drop(src, dest):
    """A finished file in the inbox: copied, and not modified since a while."""
    shutil.copyfile(src, dest)
    _age(dest)


def _apply(instance, result):
    """What the daemon does with a SensorResult's partition requests."""
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))


def test_sensor_new_file_registers_one_partition_and_one_run(storage, instance):
    storage.inbox.mkdir(parents=True)
    _drop(SAMPLE, storage.inbox / "run_a.jsonl")
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
    _age(storage.inbox / "run_a.jsonl")
    changed = _evaluate(inbox_sensor, instance, storage, cursor=touched.cursor)
    assert not changed.dynamic_partitions_requests
    assert len(changed.run_requests) == 1 and changed.run_requests[0].run_key != run.run_key

    # a sidecar is part of the run's content
    _drop(SAMPLE_META, storage.inbox / "run_a.meta.json")
    with_meta = _evaluate(inbox_sensor, instance, storage, cursor=changed.cursor)
    assert len(with_meta.run_requests) == 1


def test_sensor_requests_are_targeted_at_the_chain_job():
    assert inbox_sensor.job_name == "simulation_chain"


# Dagster's run retries, as both jobs ask for them (on an instance with `run_retries: {enabled: true}`):
# a run that ended without a failed step (its run worker killed or crashed) twice at most, never a run
# that failed on a step (a gate, a refused input). tests/reliability/test_run_retries.py shows it with
# a real daemon and a real kill.
RETRIES = {"dagster/max_retries": "2", "dagster/retry_on_asset_or_op_failure": "false",
           "dagster/retry_strategy": "FROM_FAILURE"}


@pytest.mark.parametrize("job", ["simulation_chain", "reexport"])
def test_both_jobs_ask_dagster_to_retry_a_crashed_run_twice_and_a_failed_step_never(job):
    from dagster._core.events import JobFailureData, RunFailureReason

    from whileai_pipeline.definitions import defs

    job_def = defs.resolve_job_def(job)
    # the tags every run of the job gets (Dagster adds them to the sensor's, the schedule's and launched runs)
    assert {k: v for k, v in job_def.run_tags.items() if k in RETRIES} == RETRIES
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True}}) as instance:
        def failed(reason=None, parent=None):
            lineage = {}
            if parent is not None:  # as the retry daemon makes a retry: ids and tags
                lineage = {"root_run_id": parent.root_run_id or parent.run_id, "parent_run_id": parent.run_id}
            tags = {**job_def.run_tags, **{f"dagster/{k}": v for k, v in lineage.items()}}
            run = instance.create_run_for_job(job_def, status=dg.DagsterRunStatus.STARTED, tags=tags, **lineage)
            instance.report_run_failed(run, job_failure_data=JobFailureData(error=None, failure_reason=reason))
            return instance.get_run_by_id(run.run_id)

        def will_retry(run):
            return run.tags["dagster/will_retry"]

        # killed (no reason: the code server or run monitoring failed it), interrupted, restarted, broken
        for reason in (None, RunFailureReason.UNEXPECTED_TERMINATION, RunFailureReason.RUN_WORKER_RESTART,
                       RunFailureReason.RUN_EXCEPTION, RunFailureReason.JOB_INITIALIZATION_FAILURE):
            assert will_retry(failed(reason)) == "true", reason
        # a gate or a step that refused its input: the same input would fail the same way
        assert will_retry(failed(RunFailureReason.STEP_FAILURE)) == "false"
        # bounded: the run and two retries, then no more
        first = failed()
        second = failed(parent=first)
        third = failed(parent=second)
        assert [will_retry(r) for r in (first, second, third)] == ["true", "true", "false"]


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
    _drop(SAMPLE, storage.inbox / "b run.jsonl")  # sanitized to b_run
    _drop(SAMPLE, storage.inbox / "c.jsonl")
    result = _evaluate(inbox_sensor, instance, storage)
    assert sorted(result.dynamic_partitions_requests[0].partition_keys) == ["b_run", "c"]
    assert sorted(r.partition_key for r in result.run_requests) == ["b_run", "c"]


def _schedule(instance, storage, when=datetime.datetime(2026, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)):
    with dg.build_schedule_context(instance=instance, resources={"storage": storage},
                                   scheduled_execution_time=when) as context:
        return reexport_schedule(context)


def test_schedule_one_request_per_run_it_can_re_export(sqlite_instance, storage):
    instance = sqlite_instance
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["alpha", "beta", "gamma", "added by hand"])
    for key in ("alpha", "beta"):  # staged; gamma was only registered
        for stage in ("scored", "pairs"):
            path = storage.stage_path(key, stage)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
    when = datetime.datetime(2026, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)
    requests = _schedule(instance, storage, when)
    assert sorted(r.partition_key for r in requests) == ["alpha", "beta"]
    assert len({r.run_key for r in requests}) == 2
    assert all(when.isoformat() in r.run_key for r in requests)
    assert all(r.run_config == {} for r in requests)  # never exported: the defaults
    assert reexport_schedule.job_name == "reexport"
    # evaluated by hand, with no tick time (build_schedule_context's default): Dagster raises on reading it
    with dg.build_schedule_context(instance=instance, resources={"storage": storage}) as context:
        keys = sorted(r.run_key for r in reexport_schedule(context))
    assert keys == ["reexport:alpha:manual", "reexport:beta:manual"]


def test_schedule_skips_when_nothing_registered(sqlite_instance, storage):
    skip = _schedule(sqlite_instance, storage)
    assert isinstance(skip, dg.SkipReason) and "no simulation runs" in skip.skip_message
    sqlite_instance.add_dynamic_partitions(PARTITIONS_NAME, ["only_registered"])
    skip = _schedule(sqlite_instance, storage)
    assert isinstance(skip, dg.SkipReason)
    assert skip.skip_message == ("no registered run has stage files to re-export from: only_registered (no scored "
                                 "and no pairs stage: run its whole chain first)")


def test_schedule_skips_when_the_exported_runs_have_lost_their_stage_files(sqlite_instance, storage, tmp_path,
                                                                          monkeypatch):
    """A run exported once whose stages are gone (deleted, or a code server given another storage root): every
    tick failed with KeyError, as the materializations of no run were all runs' (an empty set of partitions)."""
    from .conftest import Chain

    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    assert chain.materialize(key).success
    shutil.rmtree(storage.stage_dir(key))
    for mode in ("changed", "all"):
        monkeypatch.setenv("WHILEAI_PIPELINE_REEXPORT", mode)
        skip = _schedule(sqlite_instance, storage)
        assert isinstance(skip, dg.SkipReason), skip
        assert skip.skip_message == (f"no registered run has stage files to re-export from: {key} (no scored and no "
                                     "pairs stage: run its whole chain first)")


@pytest.mark.parametrize("fails", ["scoring", "judging"])
def test_a_new_version_whose_chain_stopped_before_its_exports_is_named_not_called_unchanged(
        sqlite_instance, storage, tmp_path, monkeypatch, fails):
    """v2 of an exported run fails after its raw stage (a scorer that raises, a judge that is down): the exports
    stay v1 (or the SFT export v2 and the DPO export v1). Nothing ever brought them up to date: the sensor had
    read v2, step failures are not retried, and the tick said the run was unchanged."""
    from .conftest import Chain, sample_rows

    (tmp_path / "flaky.py").write_text("def scorer(row):\n    raise RuntimeError('scorer is down')\n\n"
                                       "def judge(a, b):\n    raise TimeoutError('judge is down')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    assert chain.materialize(key).success
    assert isinstance(_schedule(sqlite_instance, storage), dg.SkipReason)  # nothing changed: not re-exported
    chain.register(sample_rows()[:-6])
    broken = ({"scored_simulation_data": {"config": {"scorer": "flaky:scorer"}}} if fails == "scoring" else
              {"preference_pairs": {"config": {"judge": "flaky:judge"}}})
    assert not chain.materialize(key, run_config={"ops": broken}).success
    skip = _schedule(sqlite_instance, storage)
    assert isinstance(skip, dg.SkipReason), skip
    stopped, read = ("scored_simulation_data", "raw") if fails == "scoring" else ("preference_pairs", "scored")
    assert skip.skip_message == (
        f"1 run(s) whose {stopped} was made from another {read} stage than the one there now (a newer version whose "
        f"chain stopped at {stopped}, or a step run on its own), so that their exports are not all of the run as it "
        f"is: {key}; run each one's whole chain again (whileai-pipeline run <run file>, or the simulation_chain job "
        "for the run)"), skip.skip_message
    assert "nothing changed" not in skip.skip_message
    assert chain.materialize(key).success  # the whole chain again: up to date
    assert "nothing changed" in _schedule(sqlite_instance, storage).skip_message


def test_an_export_materialized_alone_says_when_the_inbox_holds_a_version_no_step_has_read(sqlite_instance, storage,
                                                                                          tmp_path, monkeypatch):
    """CI registers v2 of a run and materializes only the exports: they re-exported v1's stages as "unchanged",
    with nothing to say that the inbox held a version no step had read. The same content touched or registered
    again is no new version, hashed once to tell; neither is a run file that left the inbox; v2 under another
    name for the run is."""
    import whileai_pipeline.defs.assets as assets_mod

    from .conftest import Chain, materialization, sample_rows

    hashed, original = [], assets_mod.fingerprint
    monkeypatch.setattr(assets_mod, "fingerprint", lambda path, **kw: hashed.append(path) or original(path, **kw))
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    assert chain.materialize(key).success

    def warnings():
        exports = chain.materialize(key, selection=["sft_export", "dpo_export"])
        assert exports.success
        return [materialization(exports, asset).get("warning") for asset in ("sft_export", "dpo_export")]

    run = storage.run_path(key)
    hashed.clear()
    assert warnings() == [None, None] and hashed == []  # untouched: the stats tell
    os.utime(run)  # touched
    chain.register()  # the same content registered again: a new inode
    assert warnings() == [None, None] and hashed == [run, run]  # each export compares the content once
    assert warnings() == [None, None] and hashed == [run, run]  # and not again while the file stays so
    chain.register(sample_rows()[:-6])
    for kind, warning in zip(("sft", "dpo"), warnings()):
        assert warning.value == (
            "the run file in the inbox is not the one raw_simulation_data last read (a newer version of the run, "
            f"registered and never read): this {kind} export is of the stages as they are, an earlier version. "
            "Materialize the run's whole chain (--select '*', or whileai-pipeline run <run file>) to export it")
    assert chain.materialize(key).success  # the whole chain: v2 read and exported
    assert warnings() == [None, None]
    # another name for the same run, as the sensor takes it (with its sidecar: without it, it is another version)
    run.rename(run.with_name(f"{key} .jsonl"))
    run.with_name(f"{key}.meta.json").rename(run.with_name(f"{key} .meta.json"))
    assert storage.find_run(key) == run.with_name(f"{key} .jsonl") and warnings() == [None, None]
    run.with_name(f"{key} .jsonl").unlink()  # the run file leaves the inbox
    assert warnings() == [None, None]
    run.write_bytes(SAMPLE.read_bytes())  # v3 put there by hand
    assert [w is not None for w in warnings()] == [True, True]


def test_a_re_export_and_a_new_version_keep_the_options_the_run_was_exported_with(sqlite_instance, storage,
                                                                                 tmp_path, monkeypatch):
    """The schedule used to re-export with the defaults: a run exported with formats [openai] and
    mask_mode final came back as assistant, with TRL files added."""
    from .conftest import Chain

    monkeypatch.setenv("WHILEAI_PIPELINE_REEXPORT", "all")  # nothing changed since: re-exported when asked to
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    options = {"ops": {"sft_export": {"config": {"formats": ["openai"], "mask_mode": "final"}},
                       "dpo_export": {"config": {"formats": ["openai"]}},
                       "preference_pairs": {"config": {"min_margin": 0.5}}}}
    assert chain.materialize(key, run_config=options).success
    published = sorted(p.name for p in storage.published_dir(key).iterdir())
    sft_bytes = storage.published_path(key, "sft", "openai").read_bytes()
    (request,) = _schedule(sqlite_instance, storage)
    sft = request.run_config["ops"]["sft_export"]["config"]
    assert (sft["formats"], sft["mask_mode"]) == (["openai"], "final")
    assert request.run_config["ops"]["dpo_export"]["config"]["formats"] == ["openai"]
    again = chain.materialize(key, run_config=request.run_config, selection=["sft_export", "dpo_export"])
    assert again.success
    assert materialization(again, "sft_export")["status"].value == "unchanged"
    assert storage.published_path(key, "sft", "openai").read_bytes() == sft_bytes
    assert sorted(p.name for p in storage.published_dir(key).iterdir()) == published
    # a new version dropped in the inbox runs the whole chain with the options of the last one
    _drop(SAMPLE, storage.run_path(key))
    with open(storage.run_path(key), "ab") as fh:
        fh.write(b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')
    _age(storage.run_path(key))
    _age(storage.run_meta_path(key))
    (new_version,) = _evaluate(inbox_sensor, sqlite_instance, storage).run_requests
    assert new_version.run_config["ops"]["preference_pairs"]["config"]["min_margin"] == 0.5
    assert new_version.run_config["ops"]["sft_export"]["config"]["mask_mode"] == "final"


def test_a_run_exported_with_the_gates_off_is_re_exported_with_them_on(sqlite_instance, storage, tmp_path):
    """``validate: false`` was stored with the other options, so one launchpad run that turned the
    gates off turned them off for every scheduled re-export after it."""
    from .conftest import Chain

    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    exports = ("sft_export", "dpo_export")
    off = {"ops": {name: {"config": {"validate": False, "formats": ["openai"]}} for name in exports}}
    result = chain.materialize(key, run_config=off)
    assert result.success
    for name in exports:
        assert materialization(result, name)["config"].value["validate"] is False  # still on record
    (request,) = _schedule(sqlite_instance, storage)
    for name in exports:
        config = request.run_config["ops"][name]["config"]
        assert "validate" not in config and config["formats"] == ["openai"]  # the rest is carried


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
    _drop(SAMPLE, chain.storage.inbox / "Nightly Run.jsonl")
    _drop(SAMPLE_META, chain.storage.inbox / "Nightly Run.meta.json")
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
    assert "registered_from" not in raw  # dropped into the inbox: where it came from is not known


def test_the_raw_stage_names_the_file_a_run_was_registered_from(chain):
    """The inbox copy is all the chain reads; the UI shows which experiment's file it was a copy of."""
    key = chain.register()
    run = chain.materialize(key, selection=["raw_simulation_data"])
    assert run.success
    raw = materialization(run, "raw_simulation_data")
    assert raw["registered_from"].value == str((chain.tmp_path / "incoming" / f"{key}.jsonl").resolve())
    assert raw["source_path"].value == str(chain.storage.run_path(key))


def test_a_run_registered_again_while_the_raw_stage_reads_is_not_named_as_its_origin(chain, monkeypatch):
    """The stage holds the rows of the copy it snapshotted: a ``register`` of another file of that name
    meanwhile (the command lock is not the step's) must not have the metadata name that other file."""
    from whileai_pipeline.defs import assets

    key = chain.register()
    other = chain.tmp_path / "exp2" / f"{key}.jsonl"
    other.parent.mkdir()
    other.write_bytes(b'{"prompt": "another experiment", "final_text": "ok"}\n')
    snapshot = assets._snapshot

    def snapshot_then_register(src, dest):
        snapshot(src, dest)
        if src.name.endswith(".jsonl"):
            chain.storage.register(other)

    monkeypatch.setattr(assets, "_snapshot", snapshot_then_register)
    run = chain.materialize(key, selection=["raw_simulation_data"])
    assert run.success
    raw = materialization(run, "raw_simulation_data")
    assert raw["rows"].value > 1  # the sample's rows, not the other file's one
    assert "registered_from" not in raw, raw["registered_from"].value


def test_sensor_waits_for_a_file_still_being_written(storage, instance, monkeypatch):
    """A run written straight into the inbox is taken only once it has not changed for the settle
    time: not at every tick, hashed whole each time, and exported half-written."""
    monkeypatch.delenv("WHILEAI_PIPELINE_SETTLE_SECONDS", raising=False)
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "growing.jsonl"
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    cursor = None
    for k in range(0, len(lines), 10):  # a writer appending rows between ticks
        with open(run, "ab") as fh:
            fh.writelines(lines[k:k + 10])
        tick = _evaluate(inbox_sensor, instance, storage, cursor=cursor)
        assert not tick.run_requests and not tick.dynamic_partitions_requests
        cursor = tick.cursor
    _age(run, seconds=31)  # the writer is done: 31 s without a change
    done = _evaluate(inbox_sensor, instance, storage, cursor=cursor)
    (request,) = done.run_requests
    assert request.run_key == f"growing:{hashlib.sha256(SAMPLE.read_bytes()).hexdigest()[:16]}"

    # a sidecar written after the run holds it back too, then counts in its content
    _apply(instance, done)
    shutil.copyfile(SAMPLE_META, storage.inbox / "growing.meta.json")
    waiting = _evaluate(inbox_sensor, instance, storage, cursor=done.cursor)
    assert not waiting.run_requests
    _age(storage.inbox / "growing.meta.json", seconds=31)
    (with_meta,) = _evaluate(inbox_sensor, instance, storage, cursor=waiting.cursor).run_requests
    assert with_meta.run_key != request.run_key


def test_settle_seconds_come_from_the_environment(storage, instance, monkeypatch):
    storage.inbox.mkdir(parents=True)
    shutil.copyfile(SAMPLE, storage.inbox / "now.jsonl")
    monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", "0")
    assert len(_evaluate(inbox_sensor, instance, storage).run_requests) == 1
    monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", "3600")
    _age(storage.inbox / "now.jsonl", seconds=120)
    assert not _evaluate(inbox_sensor, instance, storage).run_requests
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", bad)
        with pytest.raises(ValueError, match=rf"WHILEAI_PIPELINE_SETTLE_SECONDS must be a number of seconds "
                                            rf"\(0 takes a file as soon as it is seen\), got '{bad}'"):
            _evaluate(inbox_sensor, instance, storage)


@pytest.mark.parametrize("changed", ["run", "sidecar"])
def test_a_run_that_changes_while_it_is_staged_fails_and_keeps_the_previous_stage(chain, request, changed):
    """Copied while a writer still changes it, the run is not staged: the stage would be a prefix of the
    run, exported as if it were the whole. The sidecar is staged with the rows or not at all: a stage
    never pairs new rows with the old system prompt, or the other way round."""
    key = chain.register()
    assert chain.materialize(key, selection=["raw_simulation_data"]).success
    stage = chain.storage.stage_path(key, "raw")
    stage_meta = stage.with_name("raw.meta.json")
    staged, staged_meta = stage.read_bytes(), stage_meta.read_bytes()
    run_file = chain.storage.run_path(key)
    changing = run_file if changed == "run" else run_file.with_name(f"{key}.meta.json")
    assert changing.is_file()
    if changed == "sidecar":
        run_file.write_bytes(run_file.read_bytes() * 2)  # new rows, which must not be staged alone
    request.getfixturevalue("writer_appends_during_copies" if changed == "run"
                            else "sidecar_rewritten_during_copies")  # from here on
    result = chain.materialize(key, selection=["raw_simulation_data"])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert (f"source_changed: {changing} changed while it was being copied into the stage (is it still being "
            "written?); nothing was staged") in message, message
    assert stage.read_bytes() == staged
    assert stage_meta.read_bytes() == staged_meta
    assert sorted(p.name for p in stage.parent.iterdir() if p.name.startswith(".")) == []


def test_raw_stage_materialized_by_hand_while_simulate_writes_the_run_reads_nothing(chain):
    """The sensor and the CLI wait for simulate; a materialization by hand (the UI, dagster asset
    materialize) of a run simulate is still writing into the inbox fails instead of staging a part of it,
    and keeps the previous stage."""
    key = chain.register()
    assert chain.materialize(key, selection=["raw_simulation_data"]).success
    stage = chain.storage.stage_path(key, "raw")
    staged = stage.read_bytes()
    run_file = chain.storage.run_path(key)
    progress = _progress(run_file, "rollout")
    result = chain.materialize(key, selection=["raw_simulation_data"])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.event_specific_data.error.message.strip().endswith(
        f"simulate is still writing {run_file} ({progress.name} says stage 'rollout', not 'stopped'); nothing was "
        "read. Materialize again once simulate has finished (the inbox sensor takes the run by itself then), or "
        f"delete {progress} if no simulate is writing it any more.")
    assert stage.read_bytes() == staged
    # a simulate killed mid-run leaves "rollout": after an hour without a change the run is read, as the
    # sensor then takes it
    for path in (run_file, run_file.with_name(f"{key}.meta.json"), progress):
        _age(path, seconds=3700)
    assert chain.materialize(key, selection=["raw_simulation_data"]).success
    _progress(run_file, "stopped")
    assert chain.materialize(key, selection=["raw_simulation_data"]).success


def test_content_that_comes_back_is_a_new_version_with_its_own_run_key(storage, instance):
    """A, then B, then A again: Dagster never launches a sensor's run key twice, so the third version
    needs a key of its own, or the inbox would say A while stages and exports keep B."""
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "night.jsonl"
    version_b = SAMPLE.read_bytes() + b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n'
    keys, cursor = [], None
    for content in (SAMPLE.read_bytes(), version_b, SAMPLE.read_bytes()):
        run.write_bytes(content)
        _age(run)
        result = _evaluate(inbox_sensor, instance, storage, cursor=cursor)
        _apply(instance, result)
        cursor = result.cursor
        (request,) = result.run_requests
        keys.append(request.run_key)
    sha_a = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()[:16]
    assert keys == [f"night:{sha_a}", f"night:{hashlib.sha256(version_b).hexdigest()[:16]}:v2", f"night:{sha_a}:v3"]


def test_content_that_comes_back_after_its_file_left_the_inbox_twice_gets_a_run_key_of_its_own(storage, instance):
    """A, removed, B, removed, A: each removal forgot a run seen in one version, so B was version 1 again and
    A its first run key, which Dagster had launched already: the inbox said A, the exports kept B."""
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "night.jsonl"
    version_b = SAMPLE.read_bytes() + b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n'
    keys, cursor = [], None
    for content in (SAMPLE.read_bytes(), None, version_b, None, SAMPLE.read_bytes()):
        if content is None:
            run.unlink()
        else:
            run.write_bytes(content)
            _age(run)
        result = _evaluate(inbox_sensor, instance, storage, cursor=cursor)
        _apply(instance, result)
        cursor = result.cursor
        keys += [request.run_key for request in result.run_requests]
    sha_a, sha_b = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()[:16], hashlib.sha256(version_b).hexdigest()[:16]
    assert keys == [f"night:{sha_a}", f"night:{sha_b}:v2", f"night:{sha_a}:v3"]


def test_inbox_files_the_sensor_cannot_take_are_named_once(storage, instance):
    storage.inbox.mkdir(parents=True)
    for name in ("a_b.jsonl", "a b.jsonl", "---.jsonl"):
        _drop(SAMPLE, storage.inbox / name)
    with dg.build_sensor_context(instance=instance, resources={"storage": storage}) as context:
        with pytest.MonkeyPatch.context() as mp:
            said = []
            mp.setattr(context.log, "warning", said.append)
            first = inbox_sensor(context)
    assert [r.partition_key for r in first.run_requests] == ["a_b"]
    assert said == ["inbox files the sensor cannot take: ---.jsonl: its name gives no run name (it needs a letter "
                    "or digit); a b.jsonl: its run name 'a_b' is a_b.jsonl's; rename one of them"]
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"storage": storage}) as context:
        with pytest.MonkeyPatch.context() as mp:
            said = []
            mp.setattr(context.log, "warning", said.append)
            inbox_sensor(context)
    assert said == []  # the same files: not said again at every tick


def _evaluate_logged(instance, storage, cursor=None):
    """One tick, with what it logged at INFO."""
    said = []
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": storage}) as context:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(context.log, "info", said.append)
            return inbox_sensor(context), said


def test_a_tick_past_its_hashing_budget_leaves_the_other_files_to_the_next_ticks(storage, instance, monkeypatch):
    """Dagster fails a sensor tick that runs past its timeout (60 s) and keeps the old cursor: a tick
    that hashed all of fifty big runs dropped at once would fail the same way at every tick. With the
    budget spent, each tick hashes one file and names the others; every file gets its turn."""
    monkeypatch.setenv("WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS", "0")  # spent by the first file
    storage.inbox.mkdir(parents=True)
    for name in ("a", "b", "c"):
        _drop(SAMPLE, storage.inbox / f"{name}.jsonl")
    taken, cursor = [], None
    for waiting in (["b", "c"], ["c"], []):
        result, said = _evaluate_logged(instance, storage, cursor)
        _apply(instance, result)
        cursor = result.cursor
        taken.append([r.partition_key for r in result.run_requests])
        deferred = [line for line in said if "wait for the next tick" in line]
        if waiting:
            (line,) = deferred
            assert re.fullmatch(rf"hashed 1 of the new or changed run files in [0-9.]+ s; {', '.join(waiting)} wait for "
                                r"the next tick \(\$WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS, default 20 s\)", line), line
        else:
            assert deferred == []
    assert taken == [["a"], ["b"], ["c"]]
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == ["a", "b", "c"]
    quiet, _ = _evaluate_logged(instance, storage, cursor)
    assert not quiet.run_requests

    # two runs change: the one left for later keeps its old cursor entry, so it is still seen as changed
    for name in ("a", "c"):
        with open(storage.inbox / f"{name}.jsonl", "ab") as fh:
            fh.write(b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')
        _age(storage.inbox / f"{name}.jsonl")
    first, _ = _evaluate_logged(instance, storage, quiet.cursor)
    second, _ = _evaluate_logged(instance, storage, first.cursor)
    third, _ = _evaluate_logged(instance, storage, second.cursor)
    assert [[r.run_key.split(":")[0] for r in t.run_requests] for t in (first, second, third)] == [["a"], ["c"], []]
    assert second.run_requests[0].run_key.endswith(":v2")


def test_a_tick_within_its_budget_hashes_every_file(storage, instance, monkeypatch):
    monkeypatch.setenv("WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS", "3600")
    storage.inbox.mkdir(parents=True)
    for name in ("a", "b", "c"):
        _drop(SAMPLE, storage.inbox / f"{name}.jsonl")
    result, said = _evaluate_logged(instance, storage)
    assert [r.partition_key for r in result.run_requests] == ["a", "b", "c"]
    assert not [line for line in said if "wait for the next tick" in line]


@pytest.mark.parametrize("bad", ["soon", "-1", "nan"])
def test_a_bad_sensor_budget_is_refused_naming_the_variable(storage, instance, monkeypatch, bad):
    monkeypatch.setenv("WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS", bad)
    storage.inbox.mkdir(parents=True)
    _drop(SAMPLE, storage.inbox / "a.jsonl")
    with pytest.raises(ValueError, match=rf"WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS must be a number of seconds "
                                         rf"\(0 hashes one file, or 8 MB of a big one, a tick; .*\), got '{bad}'"):
        _evaluate(inbox_sensor, instance, storage)


def _progress(run, stage, age=0):
    """The progress file ``simulate(output=run)`` keeps beside the run it writes, at ``stage``."""
    path = run.with_name(run.name + ".progress.json")
    path.write_text(stage if stage.startswith(("{", "[", "not json")) else f'{{"stage": "{stage}", "rows": 12}}')
    if age:
        _age(path, seconds=age)
    return path


def test_sensor_waits_while_simulate_says_it_is_still_writing_the_run(storage, instance, monkeypatch):
    """simulate appends rows as its rollouts finish and writes the sidecar only at the end: with a slow
    agent the run goes unmodified for longer than the settle time while it is still being written. Its
    progress file says so; the run is taken once that says "stopped", not before."""
    monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", "0")  # only the progress file holds it back
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "slow.jsonl"
    _drop(SAMPLE, run)
    _age(_progress(run, "rollout"), seconds=1800)  # half an hour without a new row: still within the patience
    waiting, said = _evaluate_logged(instance, storage)
    assert not waiting.run_requests and not waiting.dynamic_partitions_requests
    assert ("waiting for simulate to finish slow (rollout): the progress file beside each "
            "(<run>.jsonl.progress.json) is at that stage, not 'stopped'") in said
    again, _ = _evaluate_logged(instance, storage, waiting.cursor)
    assert not again.run_requests  # the next tick looks again and still waits
    _progress(run, "stopped")
    (request,) = _evaluate_logged(instance, storage, again.cursor)[0].run_requests
    assert request.run_key == f"slow:{hashlib.sha256(SAMPLE.read_bytes()).hexdigest()[:16]}"


def test_a_progress_file_that_never_says_stopped_holds_the_run_back_for_an_hour_at_most(storage, instance,
                                                                                       monkeypatch):
    """A simulate killed mid-run (SIGKILL, a lost machine) leaves its progress file at "rollout": after an
    hour without any change the run is taken as it is, and the log says why."""
    monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", "0")
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "killed.jsonl"
    _drop(SAMPLE, run)
    _age(run, seconds=3700)
    _progress(run, "rollout", age=3700)
    warned = []
    with dg.build_sensor_context(instance=instance, resources={"storage": storage}) as context:
        monkeypatch.setattr(context.log, "warning", warned.append)
        (request,) = inbox_sensor(context).run_requests
    assert request.partition_key == "killed"
    assert warned == ["taken although their progress file is not at 'stopped': killed (rollout); nothing about "
                      "them changed for 1 h (a simulate that was killed leaves its progress file so)"]


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"stage": 3}', '{"rows": 4}', "stopped"])
def test_a_progress_file_that_says_no_stage_holds_nothing_back(storage, instance, monkeypatch, content):
    """Only a progress file that names a stage other than "stopped" makes the sensor wait; anything else
    beside a run (not JSON, no stage) leaves it to the settle time alone."""
    monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", "0")
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "done.jsonl"
    _drop(SAMPLE, run)
    _progress(run, content)
    (request,) = _evaluate(inbox_sensor, instance, storage).run_requests
    assert request.partition_key == "done"


def test_a_run_whose_name_leaves_no_room_for_its_sidecar_or_progress_name_does_not_stop_the_sensor(chain):
    """``x...x.jsonl`` of 242 to 255 characters is a file, but ``x...x.jsonl.progress.json`` (and, from 252,
    ``x...x.meta.json``) can be nothing: their is_file() raised "[Errno 36] File name too long", which failed
    every tick of the sensor, so no run of the inbox was requested any more; and the raw stage failed on it."""
    storage, instance = chain.storage, chain.instance
    storage.inbox.mkdir(parents=True)
    _drop(SAMPLE, storage.inbox / "ok.jsonl")
    _drop(SAMPLE, storage.inbox / ("a" * 241 + ".jsonl"))  # no room for its progress file's name
    _drop(SAMPLE, storage.inbox / ("b" * 249 + ".jsonl"))  # nor for its sidecar's
    result = _evaluate(inbox_sensor, instance, storage)
    assert sorted(r.partition_key for r in result.run_requests) == ["a" * 200, "b" * 200, "ok"]
    _apply(instance, result)
    assert chain.materialize("b" * 200).success


def test_a_run_file_the_sensor_cannot_read_is_named_and_the_other_runs_go(storage, instance, monkeypatch):
    """A run copied in by another user with mode 0600 (the daemon cannot read it): hashing it raised
    PermissionError, which failed every tick, so no run of the inbox was requested any more. Simulated (the
    tests may run as root, who reads every file): ``open`` of that file in the hashing module refuses."""
    import builtins
    import errno

    from whileai_pipeline.core import jsonl
    from whileai_pipeline.defs import resumable_hash

    storage.inbox.mkdir(parents=True)
    _drop(SAMPLE, storage.inbox / "a.jsonl")
    _drop(SAMPLE, storage.inbox / "locked.jsonl")
    _drop(SAMPLE, storage.inbox / "z.jsonl")
    locked = str(storage.inbox / "locked.jsonl")

    def refusing_open(path, *args, **kwargs):
        if os.fspath(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", locked)
        return builtins.open(path, *args, **kwargs)

    for module in (jsonl, resumable_hash):  # the run file is hashed in the second, its sidecar in the first
        monkeypatch.setattr(module, "open", refusing_open, raising=False)
    said = []
    with dg.build_sensor_context(instance=instance, resources={"storage": storage}) as context:
        monkeypatch.setattr(context.log, "warning", said.append)
        result = inbox_sensor(context)
    assert sorted(r.partition_key for r in result.run_requests) == ["a", "z"]
    assert any("locked.jsonl (Permission denied)" in line for line in said), said
    _apply(instance, result)

    monkeypatch.undo()  # made readable: taken at the next tick
    again = _evaluate(inbox_sensor, instance, storage, cursor=result.cursor)
    assert [r.partition_key for r in again.run_requests] == ["locked"]


def test_inbox_file_names_that_are_not_utf8_stop_neither_the_sensor_nor_its_runs(chain):
    """Names in another encoding (a Latin-1 ``r\\xe9sum\\xe9.jsonl`` from an old zip) are str with surrogates
    in Python. One that reduces to no run name failed every tick, as the sensor's memory (orjson) refused
    it; one that does was requested with its path as a tag, and creating that run failed (the database
    refuses surrogates), at every tick."""
    from whileai_pipeline.defs.assets import ASSETS

    storage, instance = chain.storage, chain.instance
    storage.inbox.mkdir(parents=True)
    _drop(SAMPLE, storage.inbox / os.fsdecode(b"r\xe9sum\xe9.jsonl"))
    _drop(SAMPLE, storage.inbox / os.fsdecode(b"\xe9\xe9.jsonl"))  # no run name in it
    said = []
    with dg.build_sensor_context(instance=instance, resources={"storage": storage}) as context:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(context.log, "warning", said.append)
            result = inbox_sensor(context)
    (request,) = result.run_requests
    assert request.partition_key == "r_sum"
    assert any("\\xe9\\xe9.jsonl: its name gives no run name" in line for line in said), said
    _apply(instance, result)
    run = dg.materialize(ASSETS, instance=instance, partition_key=request.partition_key, tags=request.tags,
                         resources={"storage": storage}, selection=["raw_simulation_data"], raise_on_error=False)
    assert run.success


def test_the_waiting_and_deferred_lines_name_twenty_runs_and_count_the_rest(storage, instance, monkeypatch):
    """A thousand runs dropped at once made each tick log one line naming all of them (and the next ticks
    the same, minus those taken), where the other lines of the sensor and the schedule stop at twenty."""
    monkeypatch.setenv("WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS", "0")
    storage.inbox.mkdir(parents=True)
    for n in range(26):
        _drop(SAMPLE, storage.inbox / f"r{n:02d}.jsonl")
    for n in range(26):
        shutil.copyfile(SAMPLE, storage.inbox / f"s{n:02d}.jsonl")  # just written: settling
    _, said = _evaluate_logged(instance, storage)
    (deferred,) = [line for line in said if "wait for the next tick" in line]
    (settling,) = [line for line in said if "to settle" in line]
    assert "r20 and 5 more wait for the next tick" in deferred, deferred
    assert "s19 and 6 more to settle" in settling, settling


def test_a_file_too_big_for_one_ticks_budget_is_hashed_over_several_ticks(storage, instance, monkeypatch):
    """A run file that took longer than Dagster's sensor timeout to hash (tens of GB, or a few GB on slow
    network storage) was hashed whole in every tick, which timed out and kept the old cursor: that run
    was never requested. Each tick now hashes up to its budget and the next goes on from there (here:
    16 KB blocks and no budget, so one block a tick); a file that changes half-way is started over."""
    import hashlib

    from whileai_pipeline.defs import resumable_hash

    monkeypatch.setattr(resumable_hash, "BLOCK", 16 << 10)
    monkeypatch.setenv("WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS", "0")
    storage.inbox.mkdir(parents=True)
    big = storage.inbox / "big.jsonl"
    _drop(SAMPLE, big)  # no sidecar: the fingerprint is the file's SHA-256
    blocks = -(-big.stat().st_size // (16 << 10))
    assert blocks >= 5
    cursor, ticks = None, []
    for tick in range(3):
        result, said = _evaluate_logged(instance, storage, cursor)
        cursor = result.cursor
        assert not result.run_requests
        assert [line for line in said if line.startswith("still hashing big (")], said
    with open(big, "ab") as fh:  # changed half-way: hashed again from its first byte
        fh.write(b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')
    _age(big)
    new_blocks = -(-big.stat().st_size // (16 << 10))
    while True:
        result, said = _evaluate_logged(instance, storage, cursor)
        cursor = result.cursor
        ticks.append(result)
        if result.run_requests or len(ticks) > 2 * new_blocks:
            break
    assert len(ticks) == new_blocks  # one block a tick, from the start of the changed file
    (request,) = result.run_requests
    assert request.run_key == f"big:{hashlib.sha256(big.read_bytes()).hexdigest()[:16]}"
    _apply(instance, result)
    quiet, said = _evaluate_logged(instance, storage, cursor)
    assert not quiet.run_requests and not [line for line in said if line.startswith("still hashing")]


def test_a_half_hashed_file_replaced_by_another_of_the_same_size_and_mtime_is_hashed_anew(tmp_path, monkeypatch):
    """The half-done hash was kept while size and mtime stayed: another file moved over it with the same
    size and mtime (a copy that keeps times, then a rename) went on from the first file's bytes, and the
    digest named neither file."""
    import hashlib

    from whileai_pipeline.defs import resumable_hash

    monkeypatch.setattr(resumable_hash, "BLOCK", 4)
    hashes = resumable_hash.ResumableHashes()
    path, other = tmp_path / "run.jsonl", tmp_path / "other.jsonl"
    path.write_bytes(b"A" * 12)
    other.write_bytes(b"B" * 12)
    st = path.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert hashes.sha256(path, deadline=0) is None and hashes.progress(path) == (4, 12)
    os.replace(other, path)  # same name, size and mtime; another inode
    while (digest := hashes.sha256(path, deadline=0)) is None:
        pass
    assert digest == hashlib.sha256(b"B" * 12).hexdigest()
