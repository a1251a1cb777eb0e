"""Ctrl-C (SIGINT) and a full disk where the CLI meets them first.

Ctrl-C mid-run printed ``step scored_simulation_data failed: dagster._core.errors.DagsterExecutionInterruptedError``
and exit 1 (documented as "the run failed": a gate, the data or a full disk); it now says it was
interrupted, that the published files are whole, and how to go on, with exit 130 (128 + SIGINT).
Ctrl-C between two renames of a publish left the new ``sft.openai.jsonl`` beside the old report and
the old ``sft.trl.jsonl``: the step's cleanup removed the staged files that would have completed it.
A full disk while the run was copied into the inbox was exit 2 ("bad usage") with a message about an
export; it is exit 1, as a full disk anywhere else, saying what to free.
"""

import hashlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from whileai_pipeline.defs import publishing
from whileai_pipeline.defs.resources import PipelineStorage


pytestmark = pytest.mark.pipeline

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "whileai_pipeline" / "sample" / "support_orders.jsonl"
CLI = "import sys; from whileai_pipeline.cli import main; sys.exit(main(sys.argv[1:]))"


def tree_bytes(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _cli(tmp_path, *args, preexec_fn=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=preexec_fn)


def test_ctrl_c_mid_run_says_interrupted_and_exits_130(tmp_path):
    (tmp_path / "ctrl_c.py").write_text("import os, signal\n\ndef scorer(row):\n"
                                        "    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the run is scored\n"
                                        "    return row.get('reward')\n")
    (tmp_path / "opts.yaml").write_text("scorer: ctrl_c:scorer\n")
    home = tmp_path / "home"
    assert _cli(tmp_path, "run", str(SAMPLE), "--home", str(home)).returncode == 0
    before = tree_bytes(home / "published")

    done = _cli(tmp_path, "run", str(SAMPLE), "--home", str(home), "--config", str(tmp_path / "opts.yaml"))
    assert done.returncode == 130, done.stdout + done.stderr
    assert "(INTERRUPTED)" in done.stdout
    assert "DagsterExecutionInterruptedError" not in done.stdout + done.stderr
    assert "whileai-pipeline: interrupted (Ctrl-C)" in done.stderr and "run the same command again" in done.stderr
    assert tree_bytes(home / "published") == before


INTERRUPTED_MID_PUBLISH = """
import os, signal, sys, types
import dagster as dg
from whileai_pipeline.defs import journal
from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.resources import PipelineStorage

def replace_then_ctrl_c(src, dest):
    os.replace(src, dest)
    if os.sep + "published" + os.sep in dest:
        journal.os = os  # once: the rest of the step runs as usual
        os.kill(os.getpid(), signal.SIGINT)

journal.os = types.SimpleNamespace(**{**vars(os), "replace": replace_then_ctrl_c})
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions("simulation_runs", [sys.argv[2]])
    result = dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=sys.argv[2],
                            resources={"storage": PipelineStorage(root=sys.argv[1])}, raise_on_error=False,
                            selection=["raw_simulation_data", "scored_simulation_data", "sft_export"])
print("SUCCESS" if result.success else "FAILED")
"""


def test_ctrl_c_between_two_renames_of_a_publish_leaves_a_whole_export(tmp_path):
    storage = PipelineStorage(root=str(tmp_path / "home"))
    old = tmp_path / "in" / "support_orders.jsonl"
    old.parent.mkdir()
    rows = SAMPLE.read_bytes().splitlines(keepends=True)
    old.write_bytes(b"".join(rows[:30]))
    key = storage.register(old)
    first = subprocess.run([sys.executable, "-c", INTERRUPTED_MID_PUBLISH.replace("signal.SIGINT", "0"),
                            storage.root, key], capture_output=True, text=True, timeout=300)
    assert first.stdout.split()[-1] == "SUCCESS", first.stderr[-2000:]
    old_source = orjson.loads(publishing.report_file(storage.published_path(key, "sft", "openai")).read_bytes())
    storage.register(SAMPLE, name=key)

    done = subprocess.run([sys.executable, "-c", INTERRUPTED_MID_PUBLISH, storage.root, key], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    sources = set()
    for fmt in ("openai", "trl"):
        data = storage.published_path(key, "sft", fmt)
        report = orjson.loads(publishing.report_file(data).read_bytes())
        assert report["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest(), fmt
        sources.add(report["source_sha256"])
    assert len(sources) == 1 and sources != {old_source["source_sha256"]}


def test_a_full_disk_while_the_run_is_copied_in_is_a_failed_run(tmp_path):
    run = tmp_path / "big.jsonl"
    run.write_bytes(SAMPLE.read_bytes() * 20)  # bigger than the limit; Dagster's own files are not
    limit = run.stat().st_size // 2

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    for command in ("run", "register"):
        done = _cli(tmp_path, command, str(run), "--home", str(tmp_path / "home"), preexec_fn=small_disk)
        assert done.returncode == 1, done.stderr
        inbox = tmp_path / "home" / "inbox" / "big.jsonl"
        assert done.stderr.startswith(f"whileai-pipeline: error: cannot copy the run into {inbox} (File too large); "
                                      "nothing ran and the published files are unchanged. Free space under ")
        assert not inbox.exists()


# A terminal's Ctrl-C goes to the whole foreground process group, not only to the CLI: also to the
# processes Dagster starts beside each step (``tail`` and its ``watch_orphans.py`` watcher mirroring the
# step's output). The tests above signal the CLI alone; these signal its group, as a terminal does.

def _cli_in_own_group(tmp_path, *args):
    """The CLI as a terminal's foreground job: its own process group, SIGINT at its default (a test
    runner started in the background may have it ignored, which its children would inherit)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("DAGSTER_HOME", None)
    return subprocess.Popen([sys.executable, "-c", CLI, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _assert_said_interrupted(proc, out, err):
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, out + err
    assert "whileai-pipeline: interrupted (Ctrl-C)" in err and "run the same command again" in err


def test_ctrl_c_to_the_process_group_mid_step_prints_no_traceback(tmp_path):
    # Dagster's watcher processes died on it with a KeyboardInterrupt traceback each on the terminal.
    (tmp_path / "ctrl_c_group.py").write_text(
        "import os, signal, time\n\ndef scorer(row):\n"
        "    os.killpg(os.getpgid(0), signal.SIGINT)  # Ctrl-C at the terminal while the run is scored\n"
        "    time.sleep(1)\n    return row.get('reward')\n")
    (tmp_path / "opts.yaml").write_text("scorer: ctrl_c_group:scorer\n")
    proc = _cli_in_own_group(tmp_path, "run", str(SAMPLE), "--home", str(tmp_path / "home"),
                             "--config", str(tmp_path / "opts.yaml"))
    out, err = proc.communicate(timeout=300)
    _assert_said_interrupted(proc, out, err)
    assert "(INTERRUPTED)" in out


def test_ctrl_c_before_the_run_starts_prints_no_traceback(tmp_path):
    # While the command waited for another one on the same run (or imported Dagster), Ctrl-C ended it
    # with Python's KeyboardInterrupt traceback and no exit code of ours.
    import fcntl

    home = tmp_path / "home"
    (home / "locks").mkdir(parents=True)
    with open(home / "locks" / "support_orders.command.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another command on this run
        proc = _cli_in_own_group(tmp_path, "run", str(SAMPLE), "--home", str(home))
        assert "waiting for another whileai-pipeline command" in proc.stdout.readline()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    _assert_said_interrupted(proc, out, err)
    assert not (home / "inbox" / "support_orders.jsonl").exists()


INTERRUPTED_AT_START = """
import os, signal, sys, time
from whileai_pipeline.cli import main
from whileai_pipeline.defs.resources import PipelineStorage

def ctrl_c_while_resources_start(self, context):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(2)

PipelineStorage.setup_for_execution = ctrl_c_while_resources_start
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_before_the_first_step_is_an_interruption_not_a_failure(tmp_path):
    # Dagster records it as the run's failure, not a step's: the CLI said "(FAILED)" with no reason, exit 1.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_AT_START, "demo", "--home", str(tmp_path / "home")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "(INTERRUPTED)" in done.stdout and "(FAILED)" not in done.stdout
    assert "whileai-pipeline: interrupted (Ctrl-C)" in done.stderr
