"""Issue 7, point 3: the whole chain for two runs with every step a Celery task (deploy/distributed),
against a broker this test starts on 127.0.0.1, gives byte-identical files to the in-process run.

What runs here: a private Redis (broker db 0, result backend db 1), two ``dagster-celery worker start``
processes (one pool process each, started from deploy/distributed/celery.yaml, in a folder that is
neither the repository nor the storage root, without WHILEAI_PIPELINE_HOME), the Postgres-backed
instance of deploy/distributed/dagster.yaml (the workers open it themselves), and the job
``simulation_chain`` of deploy/distributed/definitions.py, orchestrated from this process.

The two runs: the bundled sample (raw rows with privileged context), and the same rows as the SDK
saves them (no privileged blocks: the leak gates pass with WARN). Each is first materialized in process
against an embedded SQLite instance; its outputs are kept and wiped, then the Celery runs rebuild them
under the same root, so even the reports' absolute paths must come out identical.
"""

import os
import shutil
import sys
import time

import pytest

from .conftest import DEPLOY, JobThread, instance_from, need, wait_for

need("dagster_postgres")
need("dagster_celery")
need("redis")

import celery  # noqa: E402
import dagster as dg  # noqa: E402
from dagster._core.definitions.reconstruct import ReconstructableRepository  # noqa: E402
from pipeline.conftest import Chain, check_results, materialization, tree_bytes, unprivileged_rows  # noqa: E402
from whileai_pipeline.defs.partitions import PARTITIONS_NAME  # noqa: E402
from whileai_pipeline.defs.resources import PipelineStorage  # noqa: E402

pytestmark = pytest.mark.distributed

WORKERS = ("worker-1", "worker-2")
VOLATILE = ("elapsed_seconds", "path")  # the candidate path holds the run id
RUN_TIMEOUT = 150


def _stable(report):
    return {k: v for k, v in report.items() if k not in VOLATILE}


def _collect(result) -> dict:
    return {
        "success": result.success,
        "events": list(result.all_events),
        "materializations": {a: materialization(result, a) for a in ("sft_export", "dpo_export")}
        if result.success else {},
        "checks": check_results(result),
    }


def test_chain_for_two_runs_on_celery_workers_is_byte_identical_to_in_process(
        tmp_path, pg_env, redis_broker, procs, monkeypatch):
    root = tmp_path / "whileai"
    storage = PipelineStorage(root=str(root))

    # --- reference: the in-process executor, embedded SQLite instance
    (tmp_path / "sqlite_home").mkdir()
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path / "sqlite_home")) as sqlite:
        chain = Chain(storage, sqlite, tmp_path)
        keys = [chain.register(), chain.register(unprivileged_rows(), name="support_orders_saved")]
        reference = {}
        for key in keys:
            result = chain.materialize(key)
            assert result.success
            reference[key] = {"materializations": {a: materialization(result, a) for a in ("sft_export", "dpo_export")},
                              "checks": check_results(result)}
    expected = {part: tree_bytes(root / part) for part in ("published", "stages")}
    assert len(expected["published"]) == 16  # 2 runs x (sft, dpo) x (openai, trl) x (data, report)
    for part in ("published", "stages", "rejected", "locks"):
        shutil.rmtree(root / part, ignore_errors=True)
    assert sorted(p.name for p in root.iterdir()) == ["inbox", "origins"]  # what registering the runs made

    # --- the broker and two workers, all on 127.0.0.1
    broker, backend = f"{redis_broker}/0", f"{redis_broker}/1"
    monkeypatch.setenv("DAGSTER_CELERY_BROKER_URL", broker)
    monkeypatch.setenv("DAGSTER_CELERY_BACKEND_URL", backend)
    home = tmp_path / "dagster_home"
    with instance_from("distributed", home) as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, keys)
        bindir = os.path.dirname(sys.executable)  # `dagster-celery` starts `celery` by name
        env = procs.child_env(DAGSTER_HOME=home, DAGSTER_CELERY_BROKER_URL=broker, DAGSTER_CELERY_BACKEND_URL=backend,
                              PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", **pg_env)
        workdir = tmp_path / "worker_cwd"
        workdir.mkdir()
        started = time.monotonic()
        workers = [procs.start(name, [
            sys.executable, "-c", "import sys; from dagster_celery.cli import main; sys.exit(main())",
            "worker", "start", "-A", "dagster_celery.app", "-y", DEPLOY / "distributed" / "celery.yaml",
            "-n", name, "-l", "WARNING", "--", "--concurrency=1", "--without-gossip", "--without-mingle",
        ], env, cwd=workdir) for name in WORKERS]

        app = celery.Celery(broker=broker, backend=backend)

        def both_answer():
            for name, proc in zip(WORKERS, workers):
                assert proc.poll() is None, f"{name} exited\n{procs.logs()}"
            replies = app.control.ping(timeout=1.0) or []
            return {host.split("@")[0] for reply in replies for host in reply} >= set(WORKERS)

        wait_for(both_answer, 90, "both Celery workers", procs, interval=0.5)
        print(f"workers ready in {time.monotonic() - started:.1f}s")

        # --- the chain for each run, every step a Celery task
        recon = ReconstructableRepository.for_file(
            str(DEPLOY / "distributed" / "definitions.py"), "defs").get_reconstructable_job("simulation_chain")
        run_config = {"resources": {"storage": {"config": {"root": str(root)}}}}
        used_workers = set()
        for key in keys:
            started = time.monotonic()
            out = JobThread(recon, instance, run_config, key, _collect).finish(RUN_TIMEOUT, f"run for {key}", procs)
            outcome = "succeeded" if out["success"] else "FAILED"
            print(f"{key}: celery run {outcome} in {time.monotonic() - started:.1f}s")
            assert out["success"], procs.logs()

            steps = {e.step_key for e in out["events"] if e.event_type_value == "STEP_START"}
            assert len(steps) == 11  # five assets, four gate checks, two consumer_format checks
            delegated = {}
            for e in out["events"]:
                data = e.event_specific_data
                if e.event_type_value == "ENGINE_EVENT" and "in celery worker" in (e.message or ""):
                    delegated[e.step_key] = data.metadata["Celery worker"].value.split("@")[0]
            assert set(delegated) == steps, "every step ran as a Celery task"
            assert set(delegated.values()) <= set(WORKERS)
            used_workers |= set(delegated.values())
            assert all(e.pid != os.getpid() for e in out["events"] if e.event_type_value == "STEP_START")

            # same reports as in process (bar timing and the candidate's run-specific path)
            for asset in ("sft_export", "dpo_export"):
                md, ref = out["materializations"][asset], reference[key]["materializations"][asset]
                for fmt in ("openai", "trl"):
                    assert _stable(md[f"{fmt}/report"].value) == _stable(ref[f"{fmt}/report"].value)
                    assert md[f"{fmt}/sha256"].value == ref[f"{fmt}/sha256"].value
                assert md["status"].value == "published"
            for check, ref in reference[key]["checks"].items():
                got = out["checks"][check]
                assert (got.passed, got.severity, got.description) == (ref.passed, ref.severity, ref.description)

        # Which worker takes which task is Celery's choice (both did in every run seen here); not asserted.
        print(f"steps ran on: {sorted(used_workers)}")

        # the runs are in the shared instance, as the workers recorded them
        assert {r.status for r in instance.get_runs()} == {dg.DagsterRunStatus.SUCCESS}

    # --- byte-identical to the in-process run: published files with their reports, and every stage file
    assert tree_bytes(root / "published") == expected["published"]
    assert tree_bytes(root / "stages") == expected["stages"]
    assert not (root / "rejected").exists()
