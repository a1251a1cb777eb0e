"""Issue 6.4: two processes materializing the same run take turns; nothing interleaves or corrupts."""

import fcntl
import os
import subprocess
import sys

import dagster as dg
import orjson
import pytest

from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.partitions import PARTITIONS_NAME
from whileai_pipeline.defs.resources import ENV_LOCK_TIMEOUT, PipelineStorage

pytestmark = pytest.mark.pipeline

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "whileai_pipeline", "sample", "support_orders.jsonl")

MATERIALIZE = r"""
import sys, dagster as dg
from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.partitions import PARTITIONS_NAME
from whileai_pipeline.defs.resources import PipelineStorage
storage = PipelineStorage(root=sys.argv[1])
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions(PARTITIONS_NAME, [sys.argv[2]])
    result = dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=sys.argv[2],
                            resources={"storage": storage}, raise_on_error=False)
    waited = any("is locked by another process" in (e.user_message or "") for e in instance.all_logs(result.run_id))
print("SUCCESS" if result.success else "FAILED", "WAITED" if waited else "FREE")
"""


def _big_run(path, copies=60):
    rows = [orjson.loads(line) for line in open(SAMPLE, "rb") if line.strip()]
    with open(path, "wb") as fh:
        for c in range(copies):
            for row in rows:
                fh.write(orjson.dumps(dict(row, rollout_index=c * 100 + (row.get("rollout_index") or 0))) + b"\n")


def _tree(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_two_processes_on_one_run_take_turns(tmp_path):
    storage = PipelineStorage(root=str(tmp_path / "home"))
    src = tmp_path / "big.jsonl"
    _big_run(src)
    key = storage.register(src)
    procs = [subprocess.Popen([sys.executable, "-c", MATERIALIZE, storage.root, key], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0].split() for p in procs]
    assert all(out[0] == "SUCCESS" for out in outputs), outputs
    assert any(out[1] == "WAITED" for out in outputs), f"the two runs never overlapped: {outputs}"
    together = _tree(storage.published_dir(key))

    alone = PipelineStorage(root=str(tmp_path / "alone"))
    alone.register(src)
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
        assert dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=key,
                              resources={"storage": alone}).success
    # Same bytes as one process alone (reports name their own storage root, so that is swapped).
    by_itself = {name: data.replace(str(tmp_path / "alone").encode(), str(tmp_path / "home").encode())
                 for name, data in _tree(alone.published_dir(key)).items()}
    assert together == by_itself
    assert not [p for p in (tmp_path / "home").rglob("*") if p.name.endswith(".tmp")]


def test_a_run_held_too_long_fails_clearly(tmp_path, monkeypatch):
    storage = PipelineStorage(root=str(tmp_path / "home"))
    key = storage.register(SAMPLE)
    monkeypatch.setenv(ENV_LOCK_TIMEOUT, "0.5")
    lock = tmp_path / "home" / "locks" / f"{key}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with dg.DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
            result = dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=key,
                                    resources={"storage": storage}, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "partition_locked: run 'support_orders' is being materialized by another process" in \
        failure.event_specific_data.error.message
    assert not storage.published_dir(key).exists()


def test_two_commands_on_a_fresh_root_create_its_dagster_databases_once(tmp_path):
    """Both used to create the SQLite databases and their migration stamps at once (two alembic heads,
    every later command on that root failing). The second now waits for the first's lock."""
    import threading

    from whileai_pipeline import cli

    storage = PipelineStorage(root=str(tmp_path / "home"))
    storage.dagster_home.mkdir(parents=True)
    opened = threading.Event()
    with open(storage.dagster_home / ".create.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a first command creating the databases would hold it
        thread = threading.Thread(target=lambda: (cli._instance(storage), opened.set()))
        thread.start()
        assert not opened.wait(1.0), "the instance was created while another command held the lock"
        fcntl.flock(held, fcntl.LOCK_UN)
    thread.join(60)
    assert opened.is_set()
    script = ("import sys; from whileai_pipeline.cli import main; "
              "sys.exit(main(['register', sys.argv[1], '--name', sys.argv[2]]))")
    for attempt in range(2):
        root = tmp_path / f"fresh{attempt}"
        env = {**os.environ, "WHILEAI_PIPELINE_HOME": str(root)}
        env.pop("DAGSTER_HOME", None)
        procs = [subprocess.Popen([sys.executable, "-c", script, SAMPLE, name], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for name in ("one", "two")]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        later = subprocess.run([sys.executable, "-c", script, SAMPLE, "three"], env=env, capture_output=True,
                               text=True, timeout=300)
        assert later.returncode == 0, later.stderr


def test_a_second_command_on_the_same_run_waits_for_the_first(tmp_path, monkeypatch):
    """``run`` copies the file into the inbox, then its steps read that copy: another command's copy in
    between made one command export the other's file, both exiting 0. A command now holds its run's
    command lock from the copy to the last step."""
    import io
    import threading

    from whileai_pipeline import cli

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "home"
    lock = home / "locks" / "night.command.lock"
    lock.parent.mkdir(parents=True)
    src = tmp_path / "night.jsonl"
    with open(SAMPLE, "rb") as fh:
        src.write_bytes(fh.read())
    out, done = io.StringIO(), threading.Event()
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a first command on run "night" would hold it
        thread = threading.Thread(target=lambda: (cli.register_only(src, home=home, out=out), done.set()))
        thread.start()
        assert not done.wait(1.0), "registered while another command held the run"
        assert out.getvalue() == "waiting for another whileai-pipeline command on run 'night' to finish\n"
        assert not (home / "inbox" / "night.jsonl").exists()
        fcntl.flock(held, fcntl.LOCK_UN)
    thread.join(60)
    assert done.is_set() and (home / "inbox" / "night.jsonl").is_file()
