"""Issue 7, point 2: the pipeline against a Postgres-backed Dagster instance built from
deploy/postgres/dagster.yaml, everything read back from Postgres, and the run queue's limit per run.

Two tests:

* ``test_runs_partitions_materializations_and_checks_live_in_postgres``: the bundled sample and a
  gate-failing copy of it (one passing reply quotes its privileged reference) are materialized
  against the instance; a second instance object (a new connection) and plain SQL on Dagster's tables
  then read back the run history, the dynamic partitions, every materialization with its report
  metadata, and every check evaluation.
* ``test_two_reexports_of_one_run_never_overlap``: the deployment shape, all real processes: a code
  server (deploy/workspace.code-server.yaml), ``dagster job launch`` x3 into the QueuedRunCoordinator,
  then ``dagster-daemon run`` for as long as the runs take (bounded). Two re-exports of the same run
  and one of another run are queued together; the tag limit on ``dagster/partition`` lets the other
  run's re-export start at once and holds the second re-export of the same run until the first ends.
"""

import json
import sys

import pytest

from .conftest import DEPLOY, free_port, instance_from, need, pg_query, start_code_server, wait_for

need("dagster_postgres")
need("psycopg2")

import dagster as dg  # noqa: E402
from pipeline.conftest import Chain, check_results, leaking_rows, materialization, tree_bytes  # noqa: E402
from whileai_pipeline.defs.assets import ASSET_NAMES  # noqa: E402
from whileai_pipeline.defs.partitions import PARTITIONS_NAME  # noqa: E402
from whileai_pipeline.defs.resources import PipelineStorage  # noqa: E402

pytestmark = pytest.mark.postgres

CHECKS = {(a, c) for a in ("sft_export", "dpo_export") for c in ("tool_call_roundtrip", "privileged_leak")}
VOLATILE = ("elapsed_seconds", "path")


def _stable(report):
    return {k: v for k, v in report.items() if k not in VOLATILE}


def _published_report(storage, key, kind, fmt):
    name = storage.published_path(key, kind, fmt).name.replace(".jsonl", ".report.json")
    return json.loads((storage.published_dir(key) / name).read_text())


def test_runs_partitions_materializations_and_checks_live_in_postgres(tmp_path, pg_env):
    storage = PipelineStorage(root=str(tmp_path / "whileai"))
    with instance_from("postgres", tmp_path / "dagster_home") as instance:
        # the instance really is Postgres, through the driver the file names
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert instance.run_storage.postgres_url.startswith("postgresql+psycopg2://")
        assert f"127.0.0.1:{pg_env['DAGSTER_PG_PORT']}/{pg_env['DAGSTER_PG_DB']}" in instance.run_storage.postgres_url

        chain = Chain(storage, instance, tmp_path)
        good = chain.register()
        good_result = chain.materialize(good)
        assert good_result.success
        rows, leaked = leaking_rows()
        bad = chain.register(rows, name="support_orders_leaky")
        bad_result = chain.materialize(bad)
        assert not bad_result.success
        runs = {good: good_result.run_id, bad: bad_result.run_id}
        in_process = {key: {a: materialization(r, a) for a in ("sft_export", "dpo_export")}
                      for key, r in ((good, good_result), (bad, bad_result))}
        in_process_checks = {good: check_results(good_result), bad: check_results(bad_result)}

    # --- a new instance object: everything below comes from the database, not from memory
    with instance_from("postgres", tmp_path / "dagster_home") as reader:
        records = reader.get_run_records()
        assert {r.dagster_run.run_id for r in records} == set(runs.values())
        by_id = {r.dagster_run.run_id: r.dagster_run for r in records}
        assert by_id[runs[good]].status == dg.DagsterRunStatus.SUCCESS
        assert by_id[runs[bad]].status == dg.DagsterRunStatus.FAILURE
        for key, run_id in runs.items():
            assert by_id[run_id].tags["dagster/partition"] == key

        assert sorted(reader.get_dynamic_partitions(PARTITIONS_NAME)) == sorted([good, bad])

        for key in (good, bad):
            for asset in ASSET_NAMES:
                found = reader.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=5
                ).records
                assert len(found) == 1, (key, asset)
                assert found[0].run_id == runs[key]
            for asset in ("sft_export", "dpo_export"):
                md = reader.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=1
                ).records[0].asset_materialization.metadata
                # the full report (JSON) and the numbers the UI plots came back intact
                assert md.keys() == in_process[key][asset].keys()
                for fmt in ("openai", "trl"):
                    assert md[f"{fmt}/report"].value == in_process[key][asset][f"{fmt}/report"].value
                assert md["dagster/row_count"].value == in_process[key][asset]["dagster/row_count"].value
                assert md["status"].value == ("published" if key == good else "rejected")

        # the report stored as metadata is the report published beside the file
        md = reader.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("sft_export"), asset_partitions=[good]), limit=1
        ).records[0].asset_materialization.metadata
        for fmt in ("openai", "trl"):
            assert _stable(md[f"{fmt}/report"].value) == _stable(_published_report(storage, good, "sft", fmt))
        # the refused run's metadata names the rejected candidate and what leaked
        md = reader.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("sft_export"), asset_partitions=[bad]), limit=1
        ).records[0].asset_materialization.metadata
        assert md["openai/report"].value["privileged_leaks"]["n_leaked"] == 1
        assert md["rejected_path"].value.startswith(str(storage.rejected_root(bad)))
        assert not storage.published_dir(bad).exists()

        # check evaluations, per run, from the check-execution table
        evaluations = {}
        for asset, check in CHECKS:
            history = reader.event_log_storage.get_asset_check_execution_history(
                dg.AssetCheckKey(dg.AssetKey(asset), check), limit=10)
            for record in history:
                evaluation = record.event.dagster_event.event_specific_data
                evaluations[(record.run_id, asset, check)] = (record.status.value, record.partition, evaluation)
        assert len(evaluations) == 8
        for key in (good, bad):
            for asset, check in CHECKS:
                status, partition, evaluation = evaluations[(runs[key], asset, check)]
                expected = in_process_checks[key][(asset, check)]
                assert partition == key
                assert evaluation.passed == expected.passed
                assert evaluation.severity == expected.severity
                assert evaluation.description == expected.description
                assert evaluation.blocking
                leak_fails = key == bad and check == "privileged_leak"
                assert status == ("FAILED" if leak_fails else "SUCCEEDED"), (key, asset, check)
        assert "1 quoted privileged context" in evaluations[(runs[bad], "sft_export", "privileged_leak")][2].description

    # --- and the same facts straight from Dagster's tables in this database
    with pg_query(pg_env) as cur:
        cur.execute("SELECT run_id, status FROM runs ORDER BY run_id")
        assert dict(cur.fetchall()) == {runs[good]: "SUCCESS", runs[bad]: "FAILURE"}
        cur.execute("SELECT partition FROM dynamic_partitions WHERE partitions_def_name = %s ORDER BY partition",
                    (PARTITIONS_NAME,))
        assert [r[0] for r in cur.fetchall()] == sorted([good, bad])
        cur.execute("SELECT partition, count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' "
                    "GROUP BY partition ORDER BY partition")
        assert dict(cur.fetchall()) == {good: 5, bad: 5}
        cur.execute("SELECT run_id, execution_status, count(*) FROM asset_check_executions "
                    "GROUP BY run_id, execution_status")
        # per run: 2 gates x 2 exports, plus the non-blocking consumer_format check on each export
        assert {(run, status): n for run, status, n in cur.fetchall()} == {
            (runs[good], "SUCCEEDED"): 6, (runs[bad], "SUCCEEDED"): 4, (runs[bad], "FAILED"): 2}


# ---------------------------------------------------------------------------------- the run queue

def _launch(procs, env, name, key, workspace):
    return procs.start(name, [sys.executable, "-m", "dagster", "job", "launch", "-w", workspace,
                              "--location", "whileai_pipeline", "-j", "reexport",
                              "--tags", json.dumps({"dagster/partition": key, "whileai/test": name})], env)


def _event_time(instance, run_id, event_type):
    events = instance.all_logs(run_id, of_type=event_type)
    assert events, f"run {run_id} has no {event_type.value} event"
    return events[0].timestamp


def test_two_reexports_of_one_run_never_overlap(tmp_path, pg_env, procs):
    home = tmp_path / "dagster_home"
    storage = PipelineStorage(root=str(tmp_path / "whileai"))
    with instance_from("postgres", home) as instance:
        # the queue the file configures: one run in progress per simulation run
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert limits == [{"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}]
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"

        chain = Chain(storage, instance, tmp_path)
        first, other = chain.register(), chain.register(name="support_orders_copy")
        assert chain.materialize(first).success and chain.materialize(other).success
        published = {k: tree_bytes(storage.published_dir(k)) for k in (first, other)}

        # the code server, as the workspace file expects it; it starts the run workers
        port = free_port()
        env = procs.child_env(DAGSTER_HOME=home, WHILEAI_PIPELINE_HOME=storage.base,
                              WHILEAI_CODE_SERVER_HOST="127.0.0.1", WHILEAI_CODE_SERVER_PORT=port, **pg_env)
        start_code_server(procs, env, port, 90)

        # three submissions at once, before any daemon runs: all three wait in the queue
        workspace = DEPLOY / "workspace.code-server.yaml"
        names = ("reexport-a1", "reexport-a2", "reexport-b")
        launchers = [_launch(procs, env, n, k, workspace) for n, k in zip(names, (first, first, other))]
        for name, proc in zip(names, launchers):
            assert proc.wait(120) == 0, procs.log(name)

        def runs_by_name():
            found = {}
            # only this test's submissions (a schedule tick at 03:00 UTC would add a run of its own)
            for run in instance.get_runs(filters=dg.RunsFilter(job_name="reexport")):
                if run.tags.get("whileai/test") in names:
                    found[run.tags["whileai/test"]] = run
            return found

        queued = runs_by_name()
        assert set(queued) == set(names)
        assert {r.status for r in queued.values()} == {dg.DagsterRunStatus.QUEUED}

        # the daemon dequeues; watch until every run is over (bounded), then stop it
        daemon = procs.start("daemon", [sys.executable, "-m", "dagster._daemon", "run", "-w", workspace], env)
        in_progress = {dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED}
        seen = []

        def all_done():
            assert daemon.poll() is None, procs.logs()
            runs = runs_by_name()
            seen.append({n: r.status for n, r in runs.items()})
            return all(r.status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
                                    dg.DagsterRunStatus.CANCELED) for r in runs.values())

        wait_for(all_done, 180, "the three re-exports to finish", procs, interval=0.2)
        procs.stop("daemon")
        procs.stop("code-server")

        runs = runs_by_name()
        assert {n: r.status for n, r in runs.items()} == dict.fromkeys(names, dg.DagsterRunStatus.SUCCESS), \
            procs.logs()
        records = {n: instance.get_run_record_by_id(runs[n].run_id) for n in names}
        earlier, later = sorted(("reexport-a1", "reexport-a2"), key=lambda n: records[n].start_time)
        starting = {n: _event_time(instance, runs[n].run_id, dg.DagsterEventType.RUN_STARTING) for n in names}
        enqueued = {n: _event_time(instance, runs[n].run_id, dg.DagsterEventType.RUN_ENQUEUED) for n in names}
        print("queue timeline (s after the first submission):")
        t0 = min(enqueued.values())
        for n in names:
            print(f"  {n}: enqueued {enqueued[n] - t0:.2f}  launched {starting[n] - t0:.2f}  "
                  f"started {records[n].start_time - t0:.2f}  ended {records[n].end_time - t0:.2f}")

        # same run: the second re-export was not even launched before the first had ended
        assert starting[later] >= records[earlier].end_time
        assert records[later].start_time >= records[earlier].end_time
        # other run: launched while the first re-export was still going (the queue ran them together)
        assert starting["reexport-b"] < records[earlier].end_time
        # no poll ever saw both re-exports of the same run in progress; one poll saw one waiting
        assert not any(s.get("reexport-a1") in in_progress and s.get("reexport-a2") in in_progress for s in seen)
        assert any(s.get(earlier) in in_progress and s.get(later) == dg.DagsterRunStatus.QUEUED for s in seen)

        # unchanged inputs and config: the re-exports rewrote identical bytes
        for key in (first, other):
            assert tree_bytes(storage.published_dir(key)) == published[key]
        for name in names:
            md = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey("sft_export"),
                                      asset_partitions=[runs[name].tags["dagster/partition"]]), limit=5
            ).records
            assert any(r.run_id == runs[name].run_id and r.asset_materialization.metadata["status"].value == "unchanged"
                       for r in md)
