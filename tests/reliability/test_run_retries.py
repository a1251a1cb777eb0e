"""A chain run whose run worker dies is retried by Dagster and publishes; a run that fails a gate is not.

The sensor requests each content once, and the nightly re-export reads the stage files, so before the
jobs carried ``RETRY_TAGS`` (defs/automation.py) a run worker killed after the raw stage (OOM, a
restarted container, a lost machine) left its run failed and its data out of the exports for good.

One test, all real processes, as deployed (docs/deploying.md): a SQLite ``DAGSTER_HOME`` whose
``dagster.yaml`` turns on run retries (``enabled: true`` and nothing else, so the jobs' tags decide how
often and for what), run monitoring (short poll) and the run queue; a code server (it starts the run
workers: DefaultRunLauncher) and ``dagster-daemon run`` (sensor, queue, monitoring, and the retry
daemon). The inbox sensor requests two runs:

* ``support_orders``, a new version of a run exported before, so the sensor gives it the options it
  was exported with: a ``module:function`` scorer that, in the run worker, writes down its pid and then
  blocks mid-scoring. The test SIGKILLs that pid: the raw stage is done, the scored stage half written.
  The code server sees its run worker gone and fails the run (no step failed); the retry daemon
  re-executes it from the failure, and the retry publishes exactly what an uninterrupted run publishes.
* ``leaky``, a run one of whose passing replies quotes its privileged reference: the leak gates fail
  the run (a step failure). Its job's ``dagster/max_retries`` would allow a retry; the
  ``dagster/retry_on_asset_or_op_failure: false`` tag is why the daemon declines.
"""

import os
import signal
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from deploy.conftest import (BLOCKING_SCORED, DEPLOY, REPO, Procs, free_port, start_code_server, wait_for,
                             write_blocking_scorer)
from pipeline.conftest import Chain, leaking_rows, sample_rows, tree_bytes
from whileai_pipeline.defs.automation import RETRY_TAGS
from whileai_pipeline.defs.resources import LEFTOVER_SUFFIXES, PipelineStorage

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

# The interrupted run scores with BLOCKING_SCORER (deploy/conftest.py): in the first run only, it blocks
# on the 5th row in the run worker until the test releases it.
SCORED = BLOCKING_SCORED

INSTANCE_YAML = {
    "run_coordinator": {
        "module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator",
        "config": {"max_concurrent_runs": 4, "dequeue_interval_seconds": 1,
                   "tag_concurrency_limits": [{"key": "dagster/partition",
                                               "value": {"applyLimitPerUniqueValue": True}, "limit": 1}]},
    },
    "run_launcher": {"module": "dagster._core.launcher", "class": "DefaultRunLauncher"},
    "run_monitoring": {"enabled": True, "poll_interval_seconds": 1, "start_timeout_seconds": 60},
    # the operator's switch only: how many retries and for which failures come from the jobs' tags
    "run_retries": {"enabled": True},
    "telemetry": {"enabled": False},
}

FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def _leftovers(storage, key):
    return sorted(p.name for d in (storage.stage_dir(key), storage.published_dir(key)) if d.is_dir()
                  for p in d.iterdir() if p.name.startswith(".") and p.name.endswith(LEFTOVER_SUFFIXES))


def _jsonl_files(directory):
    return {name: data for name, data in tree_bytes(directory).items() if name.endswith(".jsonl")}


def _runs(instance, key):
    return instance.get_runs(filters=dg.RunsFilter(job_name="simulation_chain", tags={"dagster/partition": key}),
                             ascending=True)


def _ppid(pid):
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return int(fh.read().rsplit(b")", 1)[1].split()[1])


def _ancestors(pid):
    chain = [pid]
    while chain[-1] > 1:
        chain.append(_ppid(chain[-1]))
    return chain


def _cmdline(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _engine_messages(instance, run_id):
    return [e.message for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]


def test_a_killed_run_worker_is_retried_to_the_exports_and_a_failed_gate_is_not(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(INSTANCE_YAML))
    mods, gate = tmp_path / "mods", tmp_path / "gate"
    gate.mkdir()
    write_blocking_scorer(mods)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delenv("WHILEAI_TEST_SCORER_GATE", raising=False)
    storage = PipelineStorage(root=str(tmp_path / "whileai"))
    rows = sample_rows()
    newer = rows[: len(rows) - 6]  # the new version of the run: fewer rows, so other exports

    # What the retried run must publish: the new version through an uninterrupted chain, elsewhere.
    with dg.DagsterInstance.ephemeral() as scratch:
        reference = Chain(PipelineStorage(root=str(tmp_path / "reference")), scratch, tmp_path / "ref_src")
        ref_key = reference.register(newer)
        assert reference.materialize(ref_key, run_config=SCORED).success
        expected = _jsonl_files(reference.storage.published_dir(ref_key))

    with dg.DagsterInstance.from_config(str(home)) as instance:
        # the run as exported before (with the blocking scorer's options, which the sensor reuses) ...
        chain = Chain(storage, instance, tmp_path)
        key = chain.register(rows)
        assert chain.materialize(key, run_config=SCORED).success
        before = _jsonl_files(storage.published_dir(key))
        assert before and before != expected
        # ... then its new version, and a new run that leaks, both dropped into the inbox
        chain.register(newer)
        leaky = chain.register(leaking_rows()[0], name="leaky")

        procs = Procs(tmp_path / "logs")
        try:
            port = free_port()
            env = procs.child_env(
                DAGSTER_HOME=home, WHILEAI_PIPELINE_HOME=storage.base, WHILEAI_CODE_SERVER_HOST="127.0.0.1",
                WHILEAI_CODE_SERVER_PORT=port, WHILEAI_PIPELINE_SETTLE_SECONDS=0, WHILEAI_PIPELINE_WORKERS=1,
                WHILEAI_PIPELINE_CRON="0 0 1 1 *", WHILEAI_TEST_SCORER_GATE=gate,
                DAGSTER_EVENT_LOG_CONSUMER_DAEMON_INTERVAL_SECONDS=1,
                PYTHONPATH=os.pathsep.join(filter(None, [str(mods), str(REPO), os.environ.get("PYTHONPATH")])))
            code_server = start_code_server(procs, env, port, 60)
            daemon = procs.start("daemon", [sys.executable, "-m", "dagster._daemon", "run", "-w",
                                            DEPLOY / "workspace.code-server.yaml"], env)

            # the sensor's run of the new version scores in a run worker of the code server: kill it there
            started = wait_for(lambda: (gate / "started").is_file() and (gate / "started").read_text(), 60,
                               "the sensor's run to start scoring", procs)
            pid, parent = map(int, started.split())
            # the run worker itself (the steps run in it), a child of the code server's gRPC server
            assert _ancestors(parent)[:2] == [parent, code_server.pid] and b"spawn_main" in _cmdline(pid)
            (first,) = _runs(instance, key)[-1:]
            assert first.status == dg.DagsterRunStatus.STARTED
            assert first.tags.get("dagster/sensor_name") == "inbox_sensor"
            assert RETRY_TAGS.items() <= first.tags.items()
            # The daemon's event log consumer (which retries runs) starts its cursors at the end of the event log on
            # its first tick and ignores older events: a run killed before that tick is never seen to fail, so never
            # retried. Its first tick can come after the sensor's run has started (seen once on a loaded CI run).
            failure_cursor = f"EVENT_LOG_CONSUMER_CURSOR-{dg.DagsterEventType.RUN_FAILURE.value}"
            wait_for(lambda: instance.daemon_cursor_storage.get_cursor_values({failure_cursor}), 60,
                     "the daemon's event log consumer to start", procs)
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            left = _leftovers(storage, key)
            (gate / "release").write_text("")

            def retried_and_done():
                assert daemon.poll() is None, procs.logs()
                runs = _runs(instance, key)
                return len(runs) >= 2 and all(r.status in FINISHED for r in runs) and runs
            failed, retry, *more = wait_for(retried_and_done, 60, "the retry of the killed run", procs)
            print(f"killed run failed, retried and finished in {time.monotonic() - killed_at:.1f}s; "
                  f"what the killed step left: {left}")

            assert failed.run_id == first.run_id and failed.status == dg.DagsterRunStatus.FAILURE
            assert "dagster/failure_reason" not in failed.tags  # no step failed: the worker was gone
            assert failed.tags["dagster/will_retry"] == "true"
            assert retry.status == dg.DagsterRunStatus.SUCCESS and not more, procs.logs()
            assert retry.parent_run_id == failed.run_id and retry.tags["dagster/retry_number"] == "1"
            # from the failure: the raw stage, done before the kill, is not run again
            assert "raw_simulation_data" not in retry.step_keys_to_execute
            assert "scored_simulation_data" in retry.step_keys_to_execute
            # what the killed step left was removed, and the retry published the new version's exports
            assert left and not _leftovers(storage, key)
            assert any("removed what killed runs left" in m for m in
                       [e.message for e in instance.all_logs(retry.run_id)]), left
            assert _jsonl_files(storage.published_dir(key)) == expected

            # the run that failed its gates: failed on a step, and the daemon declined to retry it. On a loaded
            # machine a run of it may fail before its steps run (the code server not answering yet): that one is
            # retried, as the docs say, so the gated run is the last of its runs, not always the first.
            runs = _runs(instance, leaky)
            said = [(r.run_id, r.status, r.tags) for r in runs], procs.logs()
            gated = runs[-1]
            assert [r.tags.get("dagster/failure_reason") for r in runs].count("STEP_FAILURE") == 1, said
            assert all(r.status == dg.DagsterRunStatus.FAILURE for r in runs), said
            assert gated.status == dg.DagsterRunStatus.FAILURE
            assert gated.tags["dagster/failure_reason"] == "STEP_FAILURE"
            assert gated.tags["dagster/will_retry"] == "false"
            wait_for(lambda: any("Not retrying run since it failed due to an asset or op failure" in m
                                 for m in _engine_messages(instance, gated.run_id)), 20,
                     "the retry daemon to decline the gate failure", procs)
            assert not instance.get_runs(filters=dg.RunsFilter(tags={"dagster/parent_run_id": gated.run_id}))
            assert not storage.published_dir(leaky).exists() or not _jsonl_files(storage.published_dir(leaky))
        finally:
            procs.stop()
