"""The nightly schedule leaves out a run whose exports would come out the same as their last materialization.

Every night used to re-export every run, also when its stage files, options and code were those of its last
export: byte-identical files (status ``unchanged``) for a run worker, a full read of the stages and some
400 KB of event log per run. Each test first sees the run left out, then changes one thing and sees it
requested again, with the reason in the tick's log.
"""

import datetime
import os
import shutil
from pathlib import Path

import dagster as dg
import pytest

from whileai_pipeline.defs import automation, journal
from whileai_pipeline.defs.assets import EXPORT_KINDS
from whileai_pipeline.defs.code_fingerprint import code_fingerprint, code_fingerprint_on_disk

from .conftest import Chain, export_config, leaking_rows, materialization

pytestmark = pytest.mark.pipeline

WHEN = datetime.datetime(2026, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)
EXPORTS = ("sft_export", "dpo_export")
UPSTREAM = ["raw_simulation_data", "scored_simulation_data", "preference_pairs"]


def _schedule(instance, storage):
    """One tick: (its requests, or [] for a SkipReason; the SkipReason's message or None; what it logged at INFO)."""
    said = []
    with dg.build_schedule_context(instance=instance, resources={"storage": storage},
                                   scheduled_execution_time=WHEN) as context:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(context.log, "info", said.append)
            result = automation.reexport_schedule(context)
    if isinstance(result, dg.SkipReason):
        return [], result.skip_message, said
    return list(result), None, said


def _requested(instance, storage):
    requests, _, said = _schedule(instance, storage)
    return sorted(r.partition_key for r in requests), said


@pytest.fixture
def exported(sqlite_instance, storage, tmp_path):
    """A run exported through its whole chain with the default options: (chain, key)."""
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    assert chain.materialize(key).success
    return chain, key


def _assert_left_out(chain, key):
    requests, skip, said = _schedule(chain.instance, chain.storage)
    assert requests == []
    assert f"nothing changed since their last export (stage files, options, code): {key};" in skip
    assert "WHILEAI_PIPELINE_REEXPORT=all" in skip
    assert any(key in line and "nothing changed" in line for line in said)


def _assert_pairs_named_as_older(chain, key):
    """The pairs were made from another scored stage than the one there now: the DPO export is not of the run as it
    is, and the tick says so instead of "nothing changed" (``unchanged.chain_stopped_at``)."""
    requests, skip, _ = _schedule(chain.instance, chain.storage)
    assert requests == []
    assert skip.startswith(f"1 run(s) whose preference_pairs was made from another scored stage than the one there "
                           f"now (a newer version whose chain stopped at preference_pairs, or a step run on its own), "
                           f"so that their exports are not all of the run as it is: {key}; "), skip
    assert "nothing changed" not in skip


def _assert_requested_because(chain, key, reason):
    requested, said = _requested(chain.instance, chain.storage)
    assert requested == [key]
    assert any(line.startswith("re-exporting 1 run(s): ") and f"{reason}: {key}" in line for line in said), said


def test_a_run_with_nothing_changed_is_not_re_exported(exported):
    chain, key = exported
    _assert_left_out(chain, key)
    _assert_left_out(chain, key)  # the skip records nothing: the next night compares with the same export
    for name in EXPORTS:
        records = chain.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), asset_partitions=[key]), limit=10).records
        assert len(records) == 1


def test_an_unchanged_run_is_left_out_and_a_changed_one_requested_in_the_same_tick(exported):
    chain, key = exported
    other = chain.register(name="other_run")
    assert chain.materialize(other, selection=UPSTREAM).success  # staged, never exported
    requested, said = _requested(chain.instance, chain.storage)
    assert requested == [other]
    assert any("never exported: other_run" in line for line in said), said
    assert any("1 run(s) not re-exported, as nothing changed" in line and key in line for line in said), said


@pytest.mark.parametrize("asset, stage", [("scored_simulation_data", "scored"), ("preference_pairs", "pairs")])
def test_a_rewritten_stage_is_re_exported(exported, asset, stage):
    chain, key = exported
    _assert_left_out(chain, key)
    assert chain.materialize(key, selection=[asset]).success  # the same rows, staged again (a new file)
    export = "sft_export" if stage == "scored" else "dpo_export"  # the other export read another stage
    _assert_requested_because(chain, key, f"{export}: {stage} stage changed")
    assert chain.materialize(key, selection=list(EXPORTS)).success  # what the re-export does
    if stage == "scored":  # the pairs stay those of the scored stage before
        _assert_pairs_named_as_older(chain, key)
        assert chain.materialize(key, selection=["preference_pairs", *EXPORTS]).success
    _assert_left_out(chain, key)


def test_a_stage_whose_bytes_are_put_back_by_a_rename_is_re_exported(exported):
    """The signature is the file's, not its content's: reading a stage to hash it is what the skip saves."""
    chain, key = exported
    _assert_left_out(chain, key)
    pairs = chain.storage.stage_path(key, "pairs")
    copy = pairs.with_name("copy.jsonl")
    shutil.copy2(pairs, copy)  # the same bytes and mtime, another inode
    os.replace(copy, pairs)
    _assert_requested_because(chain, key, "dpo_export: pairs stage changed")


def test_a_stage_sidecar_removed_is_re_exported(exported):
    chain, key = exported
    _assert_left_out(chain, key)
    sidecar = chain.storage.stage_dir(key) / "scored.meta.json"
    assert sidecar.is_file()  # the sample has one
    sidecar.unlink()
    _assert_requested_because(chain, key, "sft_export: scored stage changed")


@pytest.mark.parametrize("change", ["removed", "edited", "report removed"])
def test_a_published_file_removed_or_edited_by_hand_is_re_exported_and_put_back(exported, change):
    """A re-export with nothing changed would publish the same bytes, also over a file someone removed or
    edited: the last export recorded what it left in published/, so the schedule sees the difference."""
    chain, key = exported
    _assert_left_out(chain, key)
    published = chain.storage.published_path(key, "dpo", "openai")
    report = published.with_name(published.name[:-len(".jsonl")] + ".report.json")
    before = published.read_bytes(), report.read_bytes()
    if change == "removed":
        published.unlink()
    elif change == "edited":
        with open(published, "ab") as fh:
            fh.write(b'{"hand": "edit"}\n')
    else:
        report.unlink()
    _assert_requested_because(chain, key, "dpo_export: published files changed since")
    assert chain.materialize(key, selection=list(EXPORTS)).success  # what the re-export does
    assert (published.read_bytes(), report.read_bytes()) == before
    _assert_left_out(chain, key)


def test_a_refused_export_is_left_out_until_its_stage_changes(sqlite_instance, storage, tmp_path):
    """A refusal is recorded like an export (status rejected): re-exporting the same stage refuses the same
    way. New rows staged without their exports (an upstream step run alone) are re-exported."""
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register(leaking_rows()[0])
    refused = chain.materialize(key)
    assert not refused.success and materialization(refused, "sft_export")["status"].value == "rejected"
    _assert_left_out(chain, key)
    chain.register()  # the rows without the leak
    assert chain.materialize(key, selection=UPSTREAM).success
    requested, said = _requested(chain.instance, chain.storage)
    assert requested == [key]
    assert any("scored stage changed" in line and "pairs stage changed" in line for line in said), said


def test_new_code_re_exports_every_run(exported, monkeypatch):
    chain, key = exported
    _assert_left_out(chain, key)
    monkeypatch.setattr(automation, "code_fingerprint_on_disk", lambda: "0" * 64)
    _assert_requested_because(chain, key, "new code")


def test_a_run_last_exported_with_the_gates_off_is_re_exported(exported):
    """``validate`` is not carried: the re-export runs the gates, so its files may differ (a refusal)."""
    chain, key = exported
    _assert_left_out(chain, key)
    assert chain.materialize(key, run_config=export_config(validate=False), selection=list(EXPORTS)).success
    _assert_requested_because(chain, key, "last exported with validate: false")
    (request,) = _schedule(chain.instance, chain.storage)[0]
    assert chain.materialize(key, run_config=request.run_config, selection=list(EXPORTS)).success
    _assert_left_out(chain, key)  # exported with the gates on: nothing to do until something changes


def _record_again(chain, key, change):
    """Record, for both exports, a materialization like their latest one with ``change`` applied to its
    metadata (a dict of the entries): what another version of the code left."""
    for name in EXPORTS:
        record = chain.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), asset_partitions=[key]), limit=1).records[0]
        metadata = dict(record.asset_materialization.metadata)
        change(metadata)
        chain.instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=dg.AssetKey(name), partition=key, metadata=metadata))


def test_options_that_fail_todays_checks_are_re_exported_with_the_defaults(exported):
    chain, key = exported
    _assert_left_out(chain, key)

    def negative_cap(metadata):
        if "max_tool_output_chars" in metadata["config"].value:
            metadata["config"] = dg.MetadataValue.json({**metadata["config"].value, "max_tool_output_chars": -1})

    _record_again(chain, key, negative_cap)
    _assert_requested_because(chain, key, "sft_export: other options (max_tool_output_chars)")


def test_an_export_recorded_before_inputs_and_code_were_recorded_is_re_exported(exported):
    chain, key = exported
    _assert_left_out(chain, key)
    _record_again(chain, key, lambda metadata: [metadata.pop(k) for k in ("inputs", "code_fingerprint")])
    _assert_requested_because(chain, key, "last exported by a version that did not record its inputs")


def test_an_export_that_recorded_other_inputs_is_re_exported(exported):
    chain, key = exported
    _assert_left_out(chain, key)

    from whileai_pipeline.defs.assets import export_inputs

    def other_inputs(metadata):
        inputs = export_inputs(chain.storage, key, "dpo_export")
        if metadata["inputs"].value == inputs:  # dpo_export's: one byte more than the pairs stage has
            path = str(chain.storage.stage_path(key, "pairs"))
            size, mtime, inode = inputs[path]
            metadata["inputs"] = dg.MetadataValue.json({**inputs, path: [size + 1, mtime, inode]})

    _record_again(chain, key, other_inputs)
    _assert_requested_because(chain, key, "dpo_export: pairs stage changed")


def test_reexport_all_requests_every_run(exported, monkeypatch):
    chain, key = exported
    _assert_left_out(chain, key)
    monkeypatch.setenv("WHILEAI_PIPELINE_REEXPORT", "all")
    _assert_requested_because(chain, key, "$WHILEAI_PIPELINE_REEXPORT=all")
    monkeypatch.setenv("WHILEAI_PIPELINE_REEXPORT", "changed")
    _assert_left_out(chain, key)


@pytest.mark.parametrize("bad", ["ALL", "every", "1"])
def test_a_bad_reexport_setting_is_refused_naming_the_variable(sqlite_instance, storage, monkeypatch, bad):
    monkeypatch.setenv("WHILEAI_PIPELINE_REEXPORT", bad)
    with pytest.raises(ValueError, match=rf"^\$WHILEAI_PIPELINE_REEXPORT must be 'changed' \(re-export only .*\) or "
                                         rf"'all' \(every run .*\), got '{bad}'$"):
        _schedule(sqlite_instance, storage)


def test_the_tick_log_names_twenty_runs_and_counts_the_rest():
    """1000 runs left out make one short line, not 1000 names."""
    keys = [f"run_{i:04d}" for i in range(1000)]
    said = automation._names(keys)
    assert said == ", ".join(keys[:20]) + " and 980 more"
    assert automation._names(keys[:20]) == ", ".join(keys[:20])



@pytest.mark.parametrize("stage, export", [("scored", "sft_export"), ("pairs", "dpo_export")])
def test_new_rows_a_killed_step_left_to_be_put_in_place_are_re_exported(exported, stage, export):
    """A step killed between writing its journal and the first rename leaves the stage files as they were,
    but the next step of the run puts its new rows in place before it reads anything: a re-export would
    publish other files, so the run is requested."""
    chain, key = exported
    _assert_left_out(chain, key)
    path = chain.storage.stage_path(key, stage)
    incoming = path.with_name(f".{path.name}.incoming")
    incoming.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))  # one row fewer
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(journal, "finish", lambda _journal: None)  # killed once the journal is written
        journal.commit(path.with_name(f".{path.stem}{journal.SUFFIX}"), [(incoming, path)])
    published = chain.storage.published_path(key, EXPORT_KINDS[export], "openai")
    before = published.read_bytes()
    _assert_requested_because(chain, key, "a killed step left renames to finish")
    assert chain.materialize(key, selection=list(EXPORTS)).success  # what the re-export does
    assert published.read_bytes() != before  # the rows the killed step staged
    if stage == "scored":  # the pairs were made from the rows before
        _assert_pairs_named_as_older(chain, key)
        assert chain.materialize(key, selection=["preference_pairs", *EXPORTS]).success
    _assert_left_out(chain, key)


@pytest.fixture
def package_on_disk(tmp_path, monkeypatch):
    """A copy of the package where the fingerprint looks for the installed one: what a new run worker
    would import, which a test edits as a deploy (or an edit) after this process imported the package."""
    import whileai_pipeline

    root = Path(whileai_pipeline.__file__).resolve().parent
    copy = tmp_path / "site-packages" / "whileai_pipeline"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(whileai_pipeline, "__file__", str(copy / "__init__.py"))
    return copy


@pytest.mark.parametrize("edited", ["before the export", "after the export"])
def test_code_changed_on_disk_after_the_process_started_is_re_exported(sqlite_instance, storage, tmp_path,
                                                                       package_on_disk, edited):
    """A code server lives for days and a run worker imports the code once: an upgrade installed meanwhile
    is what the next run workers run. The schedule used the fingerprint its process took once, and an
    export the one it read at its first export: the run was left out with the files of the old code."""
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    module = package_on_disk / "core" / "sft.py"
    if edited == "before the export":  # an upgrade while the run worker runs the chain
        module.write_bytes(module.read_bytes() + b"\n# upgraded\n")
    assert chain.materialize(key).success
    if edited == "after the export":
        module.write_bytes(module.read_bytes() + b"\n# upgraded\n")
    _assert_requested_because(chain, key, "new code")


def test_the_fingerprint_reads_every_file_of_the_package_but_its_bytecode_cache(package_on_disk):
    """An install without sources (sourceless ``.pyc``) or a data file the code reads is code too; the
    ``__pycache__`` that Python writes at import is not (the code server and run workers write their own)."""
    before = code_fingerprint_on_disk()
    assert before == code_fingerprint()  # the copy is the package this process imported
    (package_on_disk / "core" / "__pycache__").mkdir(exist_ok=True)
    (package_on_disk / "core" / "__pycache__" / "sft.cpython-311.pyc").write_bytes(b"bytecode")
    assert code_fingerprint_on_disk() == before
    for path in package_on_disk.rglob("*.py"):  # an install of compiled modules only
        path.with_suffix(".pyc").write_bytes(b"compiled " + path.read_bytes())
        path.unlink()
    sourceless = code_fingerprint_on_disk()
    sft = package_on_disk / "core" / "sft.pyc"
    sft.write_bytes(sft.read_bytes() + b"upgraded")
    assert code_fingerprint_on_disk() not in (before, sourceless)


def test_a_package_the_fingerprint_cannot_read_is_never_taken_as_unchanged(tmp_path, monkeypatch):
    """Imported from a zip, say: no file to hash, so no fingerprint can see a change; each call differs."""
    import whileai_pipeline

    monkeypatch.setattr(whileai_pipeline, "__file__", str(tmp_path / "app.zip" / "whileai_pipeline" / "__init__.py"))
    assert code_fingerprint_on_disk() != code_fingerprint_on_disk()
