"""A Celery worker SIGKILLed while it scores a run, with deploy/distributed's settings.

Two ``dagster-celery`` workers (one pool process each) started from deploy/distributed/celery.yaml
as it is for the first case, and again for the second with one change, a visibility timeout of
seconds instead of an hour so the test waits seconds; a private Redis and PostgreSQL (conftest); the
chain of deploy/distributed/definitions.py orchestrated from this process with the same file as run
config. A ``module:function`` scorer, where ``$WHILEAI_TEST_SCORER_GATE`` is set (the workers),
blocks on the 5th row of a pool process's first scoring until the test releases it, so the kill
lands mid-step with the scored stage half written.

1. The pool process running the step is killed (what the OOM killer does): its worker survives and
   reports the task lost, the run fails at once with no step failure (``RUN_EXCEPTION``), so Dagster's
   run retries will re-execute it; published/ keeps the previous export byte for byte.
2. The whole worker is killed (main process and pool: a lost machine or container): nothing reports
   anything. With ``task_acks_late`` the step's message is still in Redis and the surviving worker
   runs the step again once the visibility timeout has passed; the run succeeds and publishes
   exactly what an uninterrupted run publishes. With the default early ack (the file before late
   acks) the message is gone and the run waits forever: this test then times out.

The short timeout must pass only after the kill: a step still running when it passes is delivered a
second time (what the file's comment warns of), and the run would then succeed for that reason. With
a 4 s timeout for both cases, a busy machine that took longer than that from sending the step to the
kill failed the first case that way. So the first case keeps the file's hour, and the second's
timeout is three times what the first case took from sending the step to the kill, and at least
10 s; the second case checks it killed in time and that the step was delivered again only after.
"""

import copy
import math
import os
import signal
import sys
import time

import pytest
import yaml

from .conftest import BLOCKING_SCORED, DEPLOY, JobThread, instance_from, need, wait_for, write_blocking_scorer

need("dagster_postgres")
need("dagster_celery")
need("redis")

import celery  # noqa: E402
import dagster as dg  # noqa: E402
from dagster._core.definitions.reconstruct import ReconstructableRepository  # noqa: E402
from pipeline.conftest import Chain, sample_rows, tree_bytes, write_rows  # noqa: E402
from whileai_pipeline.defs.partitions import PARTITIONS_NAME  # noqa: E402
from whileai_pipeline.defs.resources import LEFTOVER_SUFFIXES, PipelineStorage  # noqa: E402

pytestmark = pytest.mark.distributed

WORKERS = ("worker-1", "worker-2")
MIN_VISIBILITY_TIMEOUT = 10  # seconds, for the second case (its workers start cold); the file says 3600

SCORED = BLOCKING_SCORED  # deploy/conftest.py: blocks on a pool process's 5th row until released


def _leftovers(storage, key):
    return sorted(p.name for d in (storage.stage_dir(key), storage.published_dir(key)) if d.is_dir()
                  for p in d.iterdir() if p.name.startswith(".") and p.name.endswith(LEFTOVER_SUFFIXES))


def _jsonl_files(directory):
    return {name: data for name, data in tree_bytes(directory).items() if name.endswith(".jsonl")}


def _scoring_events(instance, run_id, says):
    return [e for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
            if e.step_key == "scored_simulation_data" and says in (e.message or "")]


def _scoring_workers(instance, run_id, after=0.0):
    """The Celery workers that started the scoring step of the run (from the wall-clock time ``after``
    on), in order."""
    return [e.dagster_event.event_specific_data.metadata["Celery worker"].value.split("@")[0]
            for e in _scoring_events(instance, run_id, "in celery worker") if e.timestamp > after]


def _sent_to_killed(instance, killed_at):
    """Seconds from the scoring step's message being sent (the run being the instance's latest) to the
    kill at wall-clock time ``killed_at``."""
    (run,) = instance.get_runs(limit=1)
    (sent,) = _scoring_events(instance, run.run_id, "Submitting celery task")
    return killed_at - sent.timestamp


def test_a_killed_pool_process_fails_the_run_and_a_lost_worker_s_step_is_redelivered(
        tmp_path, pg_env, redis_broker, procs, monkeypatch):
    mods, gate = tmp_path / "mods", tmp_path / "gate"
    gate.mkdir()
    write_blocking_scorer(mods)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delenv("WHILEAI_TEST_SCORER_GATE", raising=False)
    root = tmp_path / "whileai"
    storage = PipelineStorage(root=str(root))
    rows = sample_rows()
    newer = rows[: len(rows) - 6]  # the run's new version: fewer rows, so other exports

    # --- what is published before (the first version), and what an uninterrupted chain publishes
    # for the new version (elsewhere), both in process
    (tmp_path / "sqlite_home").mkdir()
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path / "sqlite_home")) as sqlite:
        chain = Chain(storage, sqlite, tmp_path)
        key = chain.register(rows)
        assert chain.materialize(key, run_config=SCORED).success
        reference = Chain(PipelineStorage(root=str(tmp_path / "reference")), sqlite, tmp_path / "ref_src")
        assert reference.register(newer) == key
        assert reference.materialize(key, run_config=SCORED).success
    before = tree_bytes(storage.published_dir(key))
    expected = _jsonl_files(reference.storage.published_dir(key))
    assert before and expected and _jsonl_files(storage.published_dir(key)) != expected
    write_rows(tmp_path / "incoming" / f"{key}.jsonl", newer)
    assert storage.register(tmp_path / "incoming" / f"{key}.jsonl") == key

    # --- the workers' config: the deploy file; the second case shortens its visibility timeout
    config = yaml.safe_load((DEPLOY / "distributed" / "celery.yaml").read_text())

    def celery_yaml(visibility_timeout=None):
        if visibility_timeout is None:
            return DEPLOY / "distributed" / "celery.yaml"
        changed = copy.deepcopy(config)
        source = changed["execution"]["config"].setdefault("config_source", {})
        source.setdefault("broker_transport_options", {})["visibility_timeout"] = visibility_timeout
        path = tmp_path / f"celery-{visibility_timeout}s.yaml"
        path.write_text(yaml.safe_dump(changed))
        return path

    broker, backend = f"{redis_broker}/0", f"{redis_broker}/1"
    monkeypatch.setenv("DAGSTER_CELERY_BROKER_URL", broker)
    monkeypatch.setenv("DAGSTER_CELERY_BACKEND_URL", backend)
    with instance_from("distributed", tmp_path / "dagster_home") as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
        bindir = os.path.dirname(sys.executable)  # `dagster-celery` starts `celery` by name
        env = procs.child_env(
            DAGSTER_HOME=tmp_path / "dagster_home", DAGSTER_CELERY_BROKER_URL=broker,
            DAGSTER_CELERY_BACKEND_URL=backend, WHILEAI_PIPELINE_WORKERS=1, WHILEAI_TEST_SCORER_GATE=gate,
            PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            PYTHONPATH=os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")])), **pg_env)
        workdir = tmp_path / "worker_cwd"
        workdir.mkdir()
        app = celery.Celery(broker=broker, backend=backend)
        workers = {}

        def start_workers(config_file, case):
            for name in WORKERS:
                workers[name] = procs.start(f"{name}.{case}", [
                    sys.executable, "-c", "import sys; from dagster_celery.cli import main; sys.exit(main())",
                    "worker", "start", "-A", "dagster_celery.app", "-y", config_file,
                    "-n", name, "-l", "INFO", "--", "--concurrency=1", "--without-gossip", "--without-mingle",
                ], env, cwd=workdir)

            def both_answer():
                for name, proc in workers.items():
                    assert proc.poll() is None, f"{name} exited\n{procs.logs()}"
                replies = app.control.ping(timeout=1.0) or []
                return {host.split("@")[0] for reply in replies for host in reply} >= set(WORKERS)

            wait_for(both_answer, 90, "both Celery workers", procs, interval=0.5)

        start_workers(celery_yaml(), "case1")

        recon = ReconstructableRepository.for_file(
            str(DEPLOY / "distributed" / "definitions.py"), "defs").get_reconstructable_job("simulation_chain")
        # the workers' file as run config too (`dagster job launch -c`): the executor accepts it
        run_config = {**config, "resources": {"storage": {"config": {"root": str(root)}}}, **SCORED}

        def scoring_pid():
            return (gate / "started").is_file() and int((gate / "started").read_text().split()[0])

        def worker_of(pid):
            (name,) = [n for n, proc in workers.items() if os.getpgid(pid) == proc.pid]
            return name

        # --- 1. the pool process that runs the step is SIGKILLed
        job = JobThread(recon, instance, run_config, key)
        pid = wait_for(scoring_pid, 60, "the first run to start scoring", procs)
        scoring = worker_of(pid)
        os.kill(pid, signal.SIGKILL)
        killed, killed_at = time.monotonic(), time.time()
        left = _leftovers(storage, key)
        sent_to_kill = _sent_to_killed(instance, killed_at)
        (gate / "release").write_text("")
        run_id = job.finish(30, "pool process killed", procs)["run_id"]
        print(f"pool process killed {sent_to_kill:.1f}s after the step was sent: run ended in "
              f"{time.monotonic() - killed:.1f}s; it left {left}")
        run = instance.get_run_by_id(run_id)
        assert run.status == dg.DagsterRunStatus.FAILURE
        # no step failed (the step never reported): a run the retry daemon re-executes
        assert run.tags["dagster/failure_reason"] == "RUN_EXCEPTION"
        assert run.tags["dagster/will_retry"] == "true"
        (failure,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert "WorkerLostError" in str(failure.dagster_event.event_specific_data.error)
        assert _scoring_workers(instance, run_id) == [scoring]  # not started again anywhere
        assert left and tree_bytes(storage.published_dir(key)) == before
        for name, proc in workers.items():
            assert proc.poll() is None, f"{name} exited with its pool process\n{procs.logs()}"

        # --- 2. the whole worker running the step is SIGKILLed (a lost machine), with workers whose
        # visibility timeout leaves this machine three times the time the first case took to the kill
        visibility_timeout = max(MIN_VISIBILITY_TIMEOUT, math.ceil(3 * sent_to_kill))
        procs.stop()
        start_workers(celery_yaml(visibility_timeout), "case2")
        for name in ("started", "release"):
            (gate / name).unlink()
        job = JobThread(recon, instance, run_config, key)
        pid = wait_for(scoring_pid, 60, "the second run to start scoring", procs)
        lost = worker_of(pid)
        os.killpg(workers[lost].pid, signal.SIGKILL)
        killed, killed_at = time.monotonic(), time.time()
        left = _leftovers(storage, key)
        sent_to_kill = _sent_to_killed(instance, killed_at)
        assert sent_to_kill < visibility_timeout, (
            f"the kill came {sent_to_kill:.1f}s after the step was sent, past the {visibility_timeout}s "
            "visibility timeout: the step may have been delivered twice before it (too slow a machine)")
        (gate / "release").write_text("")
        # redelivered after the visibility timeout, at the next sweep (every 10 s)
        run_id = job.finish(visibility_timeout + 40, f"worker {lost} killed", procs)["run_id"]
        print(f"worker {lost} killed {sent_to_kill:.1f}s after the step was sent: step redelivered (visibility "
              f"timeout {visibility_timeout}s) and run ended in {time.monotonic() - killed:.1f}s; it left {left}")
        run = instance.get_run_by_id(run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS, procs.logs()
        survivor = next(n for n in WORKERS if n != lost)
        assert _scoring_workers(instance, run_id) == [lost, survivor]
        assert _scoring_workers(instance, run_id, after=killed_at) == [survivor]  # delivered again after the kill
        assert left and not _leftovers(storage, key)
        assert _jsonl_files(storage.published_dir(key)) == expected
