"""The first command on a fresh storage root is killed while it creates the Dagster instance (Ctrl-C on
``whileai-pipeline demo``, a CI timeout).

Dagster creates the event log index (``dagster_home/history/runs/index.db``) only when the file does not
exist. Killed after the file appeared and before its tables were, the root was broken for good: every
later command failed with Dagster's "Using dynamic partitions definitions requires the dynamic partitions
table ... run `dagster instance migrate`". The next command now drops the unfinished index and Dagster
creates it again.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from whileai_pipeline.defs.partitions import PARTITIONS_NAME

pytestmark = pytest.mark.pipeline

SAMPLE = Path(__file__).resolve().parents[2] / "whileai_pipeline" / "sample" / "support_orders.jsonl"

KILLED_CREATING_THE_INDEX = """
import os, signal, sys
from dagster._core.storage.event_log.sqlite import sqlite_event_log
sqlite_event_log.SqlEventLogStorageMetadata.create_all = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
from whileai_pipeline.cli import main
sys.exit(main(sys.argv[1:]))
"""
CLI = "import sys; from whileai_pipeline.cli import main; sys.exit(main(sys.argv[1:]))"


def test_a_command_killed_while_creating_the_instance_does_not_break_the_root(tmp_path):
    env = {**os.environ}
    env.pop("DAGSTER_HOME", None)
    home = tmp_path / "home"
    args = ["register", str(SAMPLE), "--home", str(home)]
    killed = subprocess.run([sys.executable, "-c", KILLED_CREATING_THE_INDEX, *args], env=env, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (home / "dagster_home" / "history" / "runs" / "index.db").is_file()  # what the kill left

    for name in ("support_orders", "second"):
        done = subprocess.run([sys.executable, "-c", CLI, *args, "--name", name], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    with dg.DagsterInstance.local_temp(tempdir=str(home / "dagster_home")) as instance:
        assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == ["second", "support_orders"]
