"""Publishing under the paths a demanding user takes: a write that fails half-way, a killed run, a
format with no row, a run that leaves the gate checks out, a trainer that reads as another user."""

import errno
import os
import shutil
import signal
import stat
import subprocess
import sys

import dagster as dg
import orjson
import pytest

from whileai_pipeline.defs import journal, publishing
from whileai_pipeline.defs.assets import ASSETS, sft_export
from whileai_pipeline.definitions import defs
from whileai_pipeline.defs.partitions import PARTITIONS_NAME, simulation_runs

from .conftest import (SAMPLE_META, executed_steps, leaking_rows, materialization, read_rows, sample_rows,
                       tree_bytes, write_rows)

pytestmark = pytest.mark.pipeline
SFT_CHAIN = dg.AssetSelection.assets("raw_simulation_data", "scored_simulation_data", "sft_export")


@dg.asset(partitions_def=simulation_runs, deps=[sft_export])
def downstream_trainer() -> None:
    """Stands in for a training job that reads the SFT export."""


def _new_version(rows=None):
    """The sample with every final reply changed: both formats of both exports get new bytes."""
    rows = rows or sample_rows()
    for row in rows:
        row["final_text"] += " (v2)"
        row["messages"][-1]["content"] += " (v2)"
    return rows


def test_a_write_that_fails_while_publishing_leaves_every_format_as_it_was(published, monkeypatch):
    """A full disk while the first report was written left the new sft.openai.jsonl beside the old
    sft.trl.jsonl, and beside its own old report (another sha256): not all-or-nothing."""
    chain, key, before = published
    chain.register(_new_version())
    real = publishing.write_json

    def disk_full_once(path, value, **kwargs):
        monkeypatch.setattr(publishing, "write_json", real)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(publishing, "write_json", disk_full_once)
    result = chain.materialize(key, selection=SFT_CHAIN)
    assert not result.success
    assert tree_bytes(chain.storage.published_dir(key)) == before


def test_a_re_export_keeps_the_mode_of_the_files_it_replaces(published):
    """The docs promise it (a trainer running as another user reads published/): the data file got the
    candidate's umask mode while its report kept the old one."""
    chain, key, _ = published
    data = chain.storage.published_path(key, "sft", "openai")
    report = publishing.report_file(data)
    for path in (data, report):
        os.chmod(path, 0o640)
    chain.register(_new_version())
    result = chain.materialize(key, selection=SFT_CHAIN)
    assert materialization(result, "sft_export")["status"].value == "published"
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in (data, report)} == {
        data.name: "0o640", report.name: "0o640"}


KILL_AT_PUBLISH = """
import os, signal, sys
import dagster as dg
import whileai_pipeline.defs.assets as assets
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.resources import PipelineStorage
assets.publish = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer, say
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions("simulation_runs", [sys.argv[2]])
    dg.materialize([*assets.ASSETS, *CHECKS], instance=instance, partition_key=sys.argv[2],
                   resources={"storage": PipelineStorage(root=sys.argv[1])})
"""


def test_the_candidates_of_a_killed_export_are_removed_by_the_next_one(chain):
    """Each killed export left a whole copy of the training files under stages/<run>/candidates/
    for good (the folder is documented as short-lived)."""
    key = chain.register()
    killed = subprocess.run([sys.executable, "-c", KILL_AT_PUBLISH, str(chain.storage.base), key],
                            capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    candidates = chain.storage.stage_dir(key) / "candidates"
    assert any(candidates.rglob("sft.*.jsonl"))  # what the killed run left

    assert chain.materialize(key).success
    assert not candidates.exists() or list(candidates.rglob("*")) == []


def test_a_format_left_with_no_row_does_not_keep_an_earlier_input_beside_the_new_one(chain):
    """mask_mode=final drops TRL rows with no assistant reply: a version whose passing rows have none
    published sft.openai.jsonl from it and kept sft.trl.jsonl from the version before, status
    "published", with nothing in the metadata saying so."""
    config = {"ops": {"sft_export": {"config": {"mask_mode": "final"}}}}
    key = chain.register()
    assert chain.materialize(key, run_config=config, selection=SFT_CHAIN).success
    chain.register([{"prompt": f"q{i}", "scenario_id": f"s{i}", "reward": 1.0,
                     "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)], meta=False)
    result = chain.materialize(key, run_config=config, selection=SFT_CHAIN)
    md = materialization(result, "sft_export")
    assert (md["openai/rows_written"].value, md["trl/rows_written"].value) == (3, 0)
    sources = {}
    for fmt in ("openai", "trl"):
        report = publishing.report_file(chain.storage.published_path(key, "sft", fmt))
        if report.is_file():
            sources[fmt] = orjson.loads(report.read_bytes())["source_sha256"]
    assert len(set(sources.values())) == 1, sources  # one input for every sft file there
    assert str(chain.storage.published_path(key, "sft", "trl")) in md["removed"].value


def test_an_export_that_removes_a_format_is_not_unchanged(published):
    """Dropping trl from the formats removed sft.trl.jsonl, and the status said "unchanged"."""
    chain, key, _ = published
    result = chain.materialize(key, run_config={"ops": {"sft_export": {"config": {"formats": ["openai"]}}}},
                               selection=dg.AssetSelection.assets("sft_export"))
    md = materialization(result, "sft_export")
    assert md["removed"].value
    assert md["status"].value == "published"


def test_a_run_without_the_gate_checks_fails_when_the_gates_refuse(published):
    """A selection without the checks (or ``materialize`` given the assets alone) ran a refused export
    green, and an asset downstream of it ran on."""
    chain, key, before = published
    rows, _ = leaking_rows()
    chain.register(rows)
    result = dg.materialize([*ASSETS, downstream_trainer], instance=chain.instance, partition_key=key,
                            resources={"storage": chain.storage}, raise_on_error=False)
    assert not result.success
    assert "downstream_trainer" not in executed_steps(result)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key == "sft_export")
    assert "refused by its gates" in failure.event_specific_data.error.message
    assert tree_bytes(chain.storage.published_dir(key)) == before


def _chain_job():
    return defs.resolve_job_def("simulation_chain")


def test_re_executing_the_export_step_alone_fails_when_the_gates_refuse(published, sqlite_instance, monkeypatch):
    """The UI's "re-execute selected step" on sft_export runs it without its checks: the run was green."""
    chain, key, before = published
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(chain.storage.base))
    sqlite_instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
    rows, _ = leaking_rows()
    chain.register(rows)
    job = dg.reconstructable(_chain_job)
    tags = {"dagster/partition": key}
    parent = dg.execute_job(job, sqlite_instance, tags=tags)
    assert not parent.success  # the gate checks fail it
    again = dg.execute_job(job, sqlite_instance, tags=tags,
                           reexecution_options=dg.ReexecutionOptions(parent.run_id, step_selection=["sft_export"]))
    assert executed_steps(again) == {"sft_export"}
    assert not again.success
    assert tree_bytes(chain.storage.published_dir(key)) == before


def test_a_bad_option_value_in_a_dagster_run_config_fails_before_anything_changes(published):
    """The CLI refuses ``min_margin: -1`` before it starts (exit 2); launched from the launchpad or
    ``dagster asset materialize -c``, it failed only preference_pairs, after raw and scored had replaced
    their stages and sft_export had published the new version."""
    chain, key, before = published
    stages = tree_bytes(chain.storage.stage_dir(key))
    chain.register(_new_version())
    result = chain.materialize(key, run_config={"ops": {"preference_pairs": {"config": {"min_margin": -1.0}}}})
    assert not result.success
    assert executed_steps(result) == {"raw_simulation_data"}
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "bad value for preference_pairs" in failure.event_specific_data.error.message
    assert tree_bytes(chain.storage.stage_dir(key)) == stages
    assert tree_bytes(chain.storage.published_dir(key)) == before


@pytest.mark.parametrize("asset, values, said", [
    ("sft_export", {"formats": ["openai", "openai"]}, "bad value for sft_export: formats lists a format twice"),
    ("preference_pairs", {"min_margin": -1.0}, "bad value for preference_pairs: min_margin must be positive"),
    ("scored_simulation_data", {"scorer": "nonsense"}, "bad value for scored_simulation_data: scorer must be"),
])
def test_a_bad_option_of_the_one_asset_selected_fails_its_step_with_the_message_not_a_traceback(published, asset,
                                                                                                 values, said):
    """``dagster asset materialize --select <asset> -c`` (or the launchpad) with a bad value for that asset: Dagster
    builds the asset's config before the step's own check of the run config runs, so the step failed with
    pydantic's ValidationError inside Dagster's "Error occurred while executing op" and a stack trace (its
    ``[type=value_error, ...]`` and pydantic.dev link included), not with the one-line message the same value
    gets when another step checks it first."""
    chain, key, before = published
    stages = tree_bytes(chain.storage.stage_dir(key))
    result = chain.materialize(key, run_config={"ops": {asset: {"config": values}}}, selection=[asset])
    assert not result.success
    assert executed_steps(result) == {asset}
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data
    assert failure.user_failure_data is not None, failure.error.cls_name  # a Failure, not an error in user code
    description = failure.user_failure_data.description
    assert said in description and "pydantic" not in description, description
    assert "Nothing was changed by this step" in description
    assert tree_bytes(chain.storage.stage_dir(key)) == stages
    assert tree_bytes(chain.storage.published_dir(key)) == before


@pytest.mark.parametrize("key", ["has space", "../escape"])
def test_a_partition_added_by_hand_with_a_name_the_storage_refuses_fails_its_step_with_that_message(chain, key):
    """The UI's "Add partition" takes any name. Materializing such a partition failed ``raw_simulation_data`` with
    a ValueError raised from user code (Dagster's "Error occurred while executing op" and a stack trace) rather
    than a step failure that says only what is wrong and what to do, as every other refusal of a step does."""
    chain.instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
    result = chain.materialize(key)
    assert not result.success
    assert executed_steps(result) == {"raw_simulation_data"}
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    error = failure.event_specific_data.error
    assert error.cls_name == "Failure", error.cls_name
    assert f"partition {key!r} is not a run name this pipeline can store" in error.message
    assert "whileai-pipeline register FILE" in error.message


def test_option_values_taken_from_the_environment_in_a_dagster_run_config_are_read_not_refused(chain, monkeypatch):
    """Dagster's run config takes ``{env: NAME}`` for a string, integer or boolean option (the launchpad and
    ``dagster asset materialize -c`` show it in the schema); the check of every asset's options that each step
    makes first read that mapping itself as the value and failed the run with ``Input should be a valid
    integer`` before anything ran. The value read from the environment is checked instead: a good one runs,
    a bad one fails as the same value written in the file does."""
    key = chain.register()
    monkeypatch.setenv("WAI_TEST_CAP", "200")
    monkeypatch.setenv("WAI_TEST_UNROLL", "true")
    monkeypatch.setenv("WAI_TEST_SCORER", "existing")
    monkeypatch.setenv("WAI_TEST_FORMAT", "trl")
    run_config = {"ops": {
        "scored_simulation_data": {"config": {"scorer": {"env": "WAI_TEST_SCORER"}}},
        "sft_export": {"config": {"max_tool_output_chars": {"env": "WAI_TEST_CAP"},
                                  "unroll": {"env": "WAI_TEST_UNROLL"}, "formats": [{"env": "WAI_TEST_FORMAT"}]}}}}
    result = chain.materialize(key, run_config=run_config)
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.event_type_value == "STEP_FAILURE"]
    config = materialization(result, "sft_export")["config"].value
    assert (config["max_tool_output_chars"], config["unroll"], config["formats"]) == (200, True, ["trl"])

    monkeypatch.setenv("WAI_TEST_CAP", "-5")  # what the file could not say either
    result = chain.materialize(key, run_config=run_config)
    assert not result.success
    assert executed_steps(result) == {"raw_simulation_data"}
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "bad value for sft_export: max_tool_output_chars must be 0 or more" in message


KILL_AFTER_FIRST_RENAME = """
import os, signal, sys, types
import dagster as dg
from whileai_pipeline.defs import journal
from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.resources import PipelineStorage

def replace_then_die(src, dest):  # the OOM killer strikes between two renames of one publish
    os.replace(src, dest)
    if os.sep + "published" + os.sep in dest:
        os.kill(os.getpid(), signal.SIGKILL)

journal.os = types.SimpleNamespace(**{**vars(os), "replace": replace_then_die})
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions("simulation_runs", [sys.argv[2]])
    dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=sys.argv[2],
                   resources={"storage": PipelineStorage(root=sys.argv[1])},
                   selection=["raw_simulation_data", "scored_simulation_data", "sft_export"])
"""


def _sft_files(chain, key):
    """{format: (sha256 of the data file, its report)} of the published SFT export."""
    import hashlib

    out = {}
    for fmt in ("openai", "trl"):
        data = chain.storage.published_path(key, "sft", fmt)
        out[fmt] = (hashlib.sha256(data.read_bytes()).hexdigest(),
                    orjson.loads(publishing.report_file(data).read_bytes()))
    return out


def test_a_publish_killed_between_two_renames_is_finished_by_the_next_run(published):
    """SIGKILL after the first rename of a publish left the new sft.openai.jsonl beside its old report
    and the old sft.trl.jsonl. The next run removed the staged files that would have completed it, and
    when that run's gate then refused its own input, the mixed set stayed as the last good export."""
    chain, key, before = published
    old_source = _sft_files(chain, key)["openai"][1]["source_sha256"]
    chain.register(_new_version())
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_RENAME, str(chain.storage.base), key],
                            capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert tree_bytes(chain.storage.published_dir(key)) != before  # the kill came after a rename

    rows, _ = leaking_rows()
    chain.register(_new_version(rows))
    result = chain.materialize(key, selection=SFT_CHAIN)
    assert not result.success  # the leak gate refused this version: it publishes nothing
    files = _sft_files(chain, key)
    for fmt, (sha, report) in files.items():
        assert report["sha256"] == sha, f"{fmt}: the report is not the report of the file beside it"
    sources = {report["source_sha256"] for _, report in files.values()}
    assert len(sources) == 1 and sources != {old_source}  # every file is the killed run's whole export
    assert not (chain.storage.stage_dir(key) / "candidates").exists() or not any(
        (chain.storage.stage_dir(key) / "candidates").rglob("*.json*"))


def test_what_a_killed_run_of_a_reused_pid_left_is_removed_by_the_next_run(published):
    """The files a killed step leaves are named with its pid, and the library removes only those of a
    pid that is gone. A container's entrypoint (a Kubernetes run pod, ``docker run``) is pid 1 at every
    start, so an OOM-killed run's temp and part files, each up to the size of the run, stayed for good."""
    chain, key, before = published
    stage, out = chain.storage.stage_dir(key), chain.storage.published_dir(key)
    left = [stage / ".scored.jsonl.1.k3x9q2za.write.tmp", stage / ".scored.jsonl.1.scored0.part.tmp",
            stage / f".sft_source.jsonl.{os.getpid()}.ab12cd34.write.tmp", stage / ".raw.jsonl.incoming",
            stage / ".raw.meta.json.incoming", stage / "..pairs.jsonl.incoming.1.zz_top01.write.tmp",
            stage / ".raw.jsonl.readable"]
    for path in left:
        path.write_bytes(b"what a killed run wrote\n")
    assert chain.materialize(key).success
    assert [p.name for p in left if p.exists()] == []
    assert tree_bytes(out) == before


KILL_AFTER_SCORED_ROWS = """
import os, signal, sys
import dagster as dg
from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.resources import PipelineStorage

real_replace = os.replace

def replace_then_die(src, dest):  # the scored rows are in place, their sidecar not yet
    real_replace(src, dest)
    if os.path.basename(dest) == "scored.jsonl":
        os.kill(os.getpid(), signal.SIGKILL)

os.replace = replace_then_die
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions("simulation_runs", [sys.argv[2]])
    dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=sys.argv[2],
                   resources={"storage": PipelineStorage(root=sys.argv[1])})
"""


def test_a_stage_killed_between_its_rows_and_its_sidecar_is_never_exported_half_new(published, tmp_path):
    """A kill after scored.jsonl was replaced and before scored.meta.json was left the new rows beside
    the previous run's system prompt and tools; the next re-export (the schedule's, which reads the stage
    files) published them together, gates passing."""
    chain, key, _ = published
    new_prompt = "You are the order desk, second edition."
    src = tmp_path / "v2" / f"{key}.jsonl"
    write_rows(src, _new_version())
    meta = orjson.loads(SAMPLE_META.read_bytes())
    src.with_name(f"{key}.meta.json").write_bytes(orjson.dumps(dict(meta, system_prompt=new_prompt)))
    chain.storage.register(src)
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_SCORED_ROWS, str(chain.storage.base), key],
                            capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]

    assert chain.materialize(key, selection=dg.AssetSelection.assets("sft_export", "dpo_export")).success
    rows = read_rows(chain.storage.published_path(key, "sft", "openai"))  # the pairs stage was not reached
    assert all(row["messages"][-1]["content"].endswith(" (v2)") for row in rows)
    assert {row["messages"][0]["content"] for row in rows} == {new_prompt}


@pytest.mark.parametrize("refused_file", ["sft.openai.jsonl", "sft.trl.jsonl"])  # the first rename, a later one
def test_a_published_folder_that_refuses_a_rename_says_what_is_published_and_what_to_do(published, monkeypatch,
                                                                                        refused_file):
    """A ``published/<run>/`` the pipeline may not write (another owner, a read-only mount) failed the step with
    Dagster's bare ``PermissionError: [Errno 13] ...``: no ``write_failed:``, no word on which published files
    were already replaced, nothing on what to do. And a refusal after the first rename left the new openai
    files beside the old trl ones until a later export succeeded: what was replaced is now put back."""
    chain, key, before = published
    chain.register(_new_version())
    refused = chain.storage.published_dir(key) / refused_file
    real = os.replace

    def refuse(src, dst, **kwargs):
        if os.fspath(dst) == str(refused):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src), None, os.fspath(dst))
        return real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", refuse)
    result = chain.materialize(key, selection=SFT_CHAIN)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key == "sft_export")
    message = failure.event_specific_data.error.message
    folder = chain.storage.published_dir(key)
    assert f"write_failed: sft export for '{key}': {refused}: Permission denied; " in message
    assert "nothing was published and the published files are unchanged" in message
    assert f"Make {folder} writable for the user running the pipeline" in message
    assert message.rstrip().endswith("then materialize again.")
    assert tree_bytes(folder) == before
    assert journal.pending(chain.storage.stage_dir(key)) == []


def _sft_failure(result):
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key == "sft_export")
    return failure.event_specific_data.error.message


def test_a_refused_publish_that_could_not_keep_the_previous_files_is_left_for_the_next_step(published, monkeypatch):
    """No kept copy (another filesystem: ``os.link`` fails), so nothing can be put back. The step went on
    to complete the journal in its ``finally``; with the refusal cleared, that published the whole new set
    while the step failed saying "nothing was published" (and with the refusal lasting, the candidate folder
    was then removed with the journal in it, leaving new openai files beside old trl ones for good). Now the
    journal and its folder are left, the message names the files already replaced, and the next step
    completes the publish before it reads anything."""
    chain, key, before = published
    chain.register(_new_version())
    folder = chain.storage.published_dir(key)
    real_link = os.link

    def no_link(src, dst, *args, **kwargs):
        if ".previous" in os.path.basename(dst):
            raise OSError(errno.EXDEV, "Invalid cross-device link", os.fspath(src), None, os.fspath(dst))
        return real_link(src, dst, *args, **kwargs)

    real_replace, refused = os.replace, []

    def refuse_once(src, dst, **kwargs):  # the refusal has cleared by the time anything tries again
        if os.fspath(dst) == str(folder / "sft.trl.jsonl") and not refused:
            refused.append(dst)
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src), None, os.fspath(dst))
        return real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(os, "replace", refuse_once)
    message = _sft_failure(chain.materialize(key, selection=SFT_CHAIN))
    assert refused, "the refusal was never reached"
    replaced = f"{folder / 'sft.openai.jsonl'}, {folder / 'sft.openai.report.json'} were already replaced"
    assert f"write_failed: sft export for '{key}': {folder / 'sft.trl.jsonl'}: Permission denied; {replaced}, " \
           "and the previous files could not be kept to put back; the run's next step completes this publish " \
           "before it reads anything; the other published files of this export are the previous ones." in message
    now = tree_bytes(folder)
    assert now["sft.trl.jsonl"] == before["sft.trl.jsonl"] and now["sft.openai.jsonl"] != before["sft.openai.jsonl"]
    assert len(journal.pending(chain.storage.stage_dir(key))) == 1

    monkeypatch.undo()
    assert chain.materialize(key, selection=dg.AssetSelection.assets("sft_export")).success
    assert journal.pending(chain.storage.stage_dir(key)) == []
    for fmt in ("openai", "trl"):
        rows = read_rows(folder / f"sft.{fmt}.jsonl")
        assert rows and all(" (v2)" in orjson.dumps(row).decode() for row in rows)


def _refuse_trl_then_the_put_back(monkeypatch, folder):
    """``os.replace`` refuses (EACCES) the first rename onto ``sft.trl.jsonl``, then the put-back of
    ``sft.openai.jsonl`` from its kept copy; returns the list of refused destinations, as they come."""
    real, refusals = os.replace, []

    def replace(src, dst, **kwargs):
        first_trl = os.fspath(dst) == str(folder / "sft.trl.jsonl") and not refusals
        put_back = os.fspath(dst) == str(folder / "sft.openai.jsonl") and ".previous" in os.fspath(src)
        if first_trl or (put_back and len(refusals) == 1):
            refusals.append(os.fspath(dst))
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src), None, os.fspath(dst))
        return real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return refusals


def test_a_refused_put_back_says_so_and_the_next_step_finishes_putting_back(published, monkeypatch):
    """The trl rename refused, then the put-back of the openai file refused too: the message said only that
    files were already replaced, and the candidate folder holding the undo journal and the kept previous
    files was removed. It now says the put-back was refused, and the next step puts the previous files back
    (the undo journal) before it exports again."""
    chain, key, before = published
    chain.register(_new_version())
    folder = chain.storage.published_dir(key)
    refusals = _refuse_trl_then_the_put_back(monkeypatch, folder)
    message = _sft_failure(chain.materialize(key, selection=SFT_CHAIN))
    assert refusals == [str(folder / "sft.trl.jsonl"), str(folder / "sft.openai.jsonl")]
    replaced = f"{folder / 'sft.openai.jsonl'}, {folder / 'sft.openai.report.json'} were already replaced"
    assert f"{replaced}, and putting the previous ones back was refused too; the run's next step puts them back " \
           "before it reads anything; the other published files of this export are the previous ones." in message
    assert len(journal.pending(chain.storage.stage_dir(key))) == 1

    monkeypatch.undo()
    from whileai_pipeline.defs.journal import finish_all

    assert finish_all(chain.storage.stage_dir(key))  # what the next step does first
    assert tree_bytes(folder) == before
    assert chain.materialize(key, selection=dg.AssetSelection.assets("sft_export")).success
    assert journal.pending(chain.storage.stage_dir(key)) == []
    assert all(" (v2)" in orjson.dumps(row).decode() for row in read_rows(folder / "sft.trl.jsonl"))


def test_renames_an_earlier_step_left_that_are_still_refused_fail_the_next_step_saying_so(published, monkeypatch):
    """A refusal that lasts: the next step met it again in ``finish_all`` and failed with Dagster's bare
    ``PermissionError``. It now says which renames were left, that it changed nothing, and what to do."""
    chain, key, _ = published
    chain.register(_new_version())
    folder = chain.storage.published_dir(key)
    real_link, real_replace = os.link, os.replace

    def no_link(src, dst, *args, **kwargs):
        if ".previous" in os.path.basename(dst):
            raise OSError(errno.EXDEV, "Invalid cross-device link", os.fspath(src), None, os.fspath(dst))
        return real_link(src, dst, *args, **kwargs)

    def refuse(src, dst, **kwargs):
        if os.fspath(dst) == str(folder / "sft.trl.jsonl"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src), None, os.fspath(dst))
        return real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(os, "replace", refuse)
    _sft_failure(chain.materialize(key, selection=SFT_CHAIN))
    left = journal.pending(chain.storage.stage_dir(key))
    assert len(left) == 1

    result = chain.materialize(key, selection=dg.AssetSelection.assets("sft_export"))
    message = _sft_failure(result)
    assert f"write_failed: {folder / 'sft.trl.jsonl'}: Permission denied; an earlier step of run '{key}' left " \
           f"renames half done ({left[0]}) and they are still refused, so this step stopped before reading " \
           f"anything. Make " \
           f"{folder} writable for the user running the pipeline" in message, message

    monkeypatch.undo()
    assert chain.materialize(key, selection=dg.AssetSelection.assets("sft_export")).success
    assert journal.pending(chain.storage.stage_dir(key)) == []
    assert not chain.storage.candidate_dir(key, "x").parent.exists()


def test_a_refused_put_back_settled_by_another_asset_s_step_leaves_no_candidate_folder(published, monkeypatch):
    """The refused publish keeps its candidate folder for the next step; when that step is not an export (here
    the raw stage), it settled the journal but left the folder, with the unpublished candidates in it, under
    stages/<run>/candidates/ until some later export of the run."""
    chain, key, before = published
    chain.register(_new_version())
    folder = chain.storage.published_dir(key)
    refusals = _refuse_trl_then_the_put_back(monkeypatch, folder)
    _sft_failure(chain.materialize(key, selection=SFT_CHAIN))
    assert len(refusals) == 2 and len(journal.pending(chain.storage.stage_dir(key))) == 1
    monkeypatch.undo()

    assert chain.materialize(key, selection=dg.AssetSelection.assets("raw_simulation_data")).success
    assert journal.pending(chain.storage.stage_dir(key)) == []
    assert tree_bytes(folder) == before
    candidates = chain.storage.candidate_dir(key, "x").parent
    assert not candidates.exists(), sorted(str(p.relative_to(candidates)) for p in candidates.rglob("*"))


def test_a_rejection_refused_half_way_leaves_no_folder_without_its_gates_json(tmp_path, monkeypatch):
    """A new ``rejected/`` folder was filled in place: a refusal after the first file (no room for
    ``gates.json``, a permission) left a folder holding a candidate and no word of why it was refused,
    which the next identical refusal could not match either, so it stayed for good. The folder now
    appears whole, under its name, or not at all (the step's failure says the candidate was not kept)."""
    cand_dir = tmp_path / "candidates" / "r"
    cand_dir.mkdir(parents=True)
    candidates, reports = {}, {}
    for fmt in ("openai", "trl"):
        candidates[fmt] = cand_dir / f"sft.{fmt}.jsonl"
        candidates[fmt].write_bytes(b'{"messages": []}\n')
        reports[fmt] = {"path": str(candidates[fmt]), "n_written": 1, "sha256": None}
    root = tmp_path / "rejected" / "run"
    real_write_json = publishing.write_json

    def no_room_for_gates(dest, value, **kw):
        if dest.name == "gates.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(dest))
        return real_write_json(dest, value, **kw)

    monkeypatch.setattr(publishing, "write_json", no_room_for_gates)
    with pytest.raises(OSError):
        publishing.reject(candidates, reports, root / "20260101T000000Z-abcdef12-sft", {"privileged_leak": 1}, True)
    assert not root.exists() or list(root.iterdir()) == []
    monkeypatch.setattr(publishing, "write_json", real_write_json)
    for fmt, candidate in candidates.items():  # the same refusal again, with room this time
        candidate.write_bytes(b'{"messages": []}\n')
    killed = root / ".20251231T000000Z-0badf00d-sft.partial"  # a step killed while filling its folder
    killed.mkdir(parents=True)
    (killed / "sft.openai.jsonl").write_bytes(b"{}\n")
    folder = root / "20260101T000001Z-abcdef12-sft"
    outcomes = publishing.reject(candidates, reports, folder, {"privileged_leak": 1}, True)
    assert sorted(p.name for p in root.iterdir()) == [folder.name]
    assert sorted(p.name for p in folder.iterdir()) == [
        "gates.json", "sft.openai.jsonl", "sft.openai.report.json", "sft.trl.jsonl", "sft.trl.report.json"]
    assert outcomes["trl"]["path"] == str(folder / "sft.trl.jsonl")
    assert orjson.loads((folder / "sft.trl.report.json").read_bytes())["path"] == str(folder / "sft.trl.jsonl")


KILL_WHILE_REJECTING = """
import os, signal, sys
import dagster as dg
from whileai_pipeline.defs import publishing
from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.resources import PipelineStorage

real = publishing.write_json

def die_at_gates(path, value, **kwargs):  # the candidates are in the hidden folder, its gates.json not yet
    if path.name == "gates.json":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, value, **kwargs)

publishing.write_json = die_at_gates
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions("simulation_runs", [sys.argv[2]])
    dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=sys.argv[2],
                   resources={"storage": PipelineStorage(root=sys.argv[1])},
                   selection=["raw_simulation_data", "scored_simulation_data", "sft_export"])
"""


def test_a_refusal_killed_half_way_leaves_no_hidden_copy_once_the_run_publishes(published):
    """A step killed while it moved a refused candidate under ``rejected/<run>/`` left the hidden
    ``.<time>-<id>-sft.partial`` folder, a whole copy of the candidate export. Only a later refusal of the
    run removed it: once the run's input was fixed and it published, the copy stayed for good."""
    chain, key, before = published
    rows, _ = leaking_rows()
    chain.register(rows)
    killed = subprocess.run([sys.executable, "-c", KILL_WHILE_REJECTING, str(chain.storage.base), key],
                            capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    rejected = chain.storage.rejected_root(key)
    assert [p.name for p in rejected.glob(".*.partial")], "the kill came before the folder was filled"
    assert tree_bytes(chain.storage.published_dir(key)) == before

    chain.register(_new_version())
    assert chain.materialize(key).success
    assert not rejected.exists() or sorted(p.name for p in rejected.iterdir()) == []


def test_a_published_folder_cleared_after_a_killed_publish_does_not_fail_every_later_step(published):
    """A publish killed between two renames, then ``published/<run>/`` removed by hand (it held a new file
    beside old ones): every later step of the run, the raw stage included, failed on the killed step's
    journal ("No such file or directory ... then materialize again"), however often it was materialized."""
    chain, key, _ = published
    chain.register(_new_version())
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_RENAME, str(chain.storage.base), key],
                            capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert len(journal.pending(chain.storage.stage_dir(key))) == 1
    shutil.rmtree(chain.storage.published_dir(key))

    result = chain.materialize(key, selection=SFT_CHAIN)
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.event_type_value == "STEP_FAILURE"]
    assert journal.pending(chain.storage.stage_dir(key)) == []
    for fmt, (sha, report) in _sft_files(chain, key).items():
        assert report["sha256"] == sha
        assert all(" (v2)" in orjson.dumps(row).decode()
                   for row in read_rows(chain.storage.published_path(key, "sft", fmt)))


def test_a_published_folder_on_another_filesystem_is_said_so(published, monkeypatch):
    """``published/<run>/`` made a link (or a mount) to another disk, where the trainers read: each publish
    failed with ``Invalid cross-device link`` and the advice to make the folder writable, which it was."""
    chain, key, before = published
    chain.register(_new_version())
    folder = chain.storage.published_dir(key)
    real = os.replace

    def other_disk(src, dst, **kwargs):  # what rename(2) says from stages/ into a folder on another filesystem
        if os.path.dirname(os.fspath(dst)) == str(folder) and os.path.dirname(os.fspath(src)) != str(folder):
            raise OSError(errno.EXDEV, "Invalid cross-device link", os.fspath(src), None, os.fspath(dst))
        return real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", other_disk)
    message = _sft_failure(chain.materialize(key, selection=SFT_CHAIN))
    assert "Invalid cross-device link; nothing was published and the published files are unchanged." in message
    assert "writable" not in message, message
    assert f"{folder} is on another filesystem than the storage root's stages/" in message, message
    assert tree_bytes(folder) == before


@pytest.mark.parametrize("text", [b"{not json", b'{"moves": 5}', b"[]"], ids=["not-json", "wrong-shape", "a-list"])
def test_a_journal_changed_by_hand_fails_the_step_with_what_to_do_not_a_traceback(published, text):
    """A journal that is not one (edited by hand) failed every step of the run with orjson's or Python's
    bare error in a user-code stack trace."""
    chain, key, before = published
    bad = chain.storage.stage_dir(key) / f".sft{journal.SUFFIX}"
    bad.write_bytes(text)
    result = chain.materialize(key, selection=SFT_CHAIN)
    assert not result.success
    assert executed_steps(result) == {"raw_simulation_data"}
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert f"bad_journal: cannot read the renames an earlier step of run '{key}' left half done ({bad}): " in message
    assert f"Check that {chain.storage.published_dir(key)} holds the files of one export" in message
    assert message.rstrip().endswith("move the journal away, then materialize again.")
    assert tree_bytes(chain.storage.published_dir(key)) == before
    bad.unlink()
    assert chain.materialize(key, selection=SFT_CHAIN).success
