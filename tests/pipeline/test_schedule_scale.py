"""The nightly schedule with many registered runs: its event-log queries do not grow with the runs.

One schedule evaluation used to make two materialization queries per run (about 6.5 ms a run on SQLite,
6.5 s at 1000 runs, more with PostgreSQL's round trips), inside Dagster's 60 s evaluation timeout. Telling
the runs that changed since their last export from the others reads the same records, no more.
"""

import datetime
import inspect

import dagster as dg
import pytest

from whileai_pipeline.defs.assets import dpo_export, export_inputs, export_outputs, sft_export
from whileai_pipeline.defs.automation import reexport_schedule
from whileai_pipeline.defs.code_fingerprint import code_fingerprint
from whileai_pipeline.defs.config import CONFIG_CLASSES, as_run_config
from whileai_pipeline.defs.partitions import PARTITIONS_NAME

pytestmark = pytest.mark.pipeline

WHEN = datetime.datetime(2026, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)


def _stage(storage, key):
    for stage in ("scored", "pairs"):
        path = storage.stage_path(key, stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def _exported_with(instance, storage, key, asset, formats):
    """A materialization of ``asset`` for ``key`` recording what an export records of what it ran with: its
    options (``config``: all of them, as the asset stores them), its stage files (``inputs``), what it left
    in published/ (``outputs``) and the code."""
    name = asset.key.to_user_string()
    config = as_run_config(CONFIG_CLASSES[name](formats=formats))
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset.key, partition=key, metadata={
        "config": dg.MetadataValue.json(config), "inputs": dg.MetadataValue.json(export_inputs(storage, key, name)),
        "outputs": dg.MetadataValue.json(export_outputs(storage, key, name)), "code_fingerprint": code_fingerprint()}))


def _runs(instance, storage, n):
    """``n`` staged runs, by index modulo 3: 0, exported in openai only (after an earlier export in trl only)
    and unchanged since; 1, never exported; 2, exported like 0, then its scored stage rewritten. Returns the
    keys of the runs the schedule must request (1 and 2)."""
    keys = [f"run_{i:03d}" for i in range(n)]
    instance.add_dynamic_partitions(PARTITIONS_NAME, keys)
    for i, key in enumerate(keys):
        _stage(storage, key)
        if i % 3 != 1:
            for asset in (sft_export, dpo_export):
                _exported_with(instance, storage, key, asset, ["trl"])
                _exported_with(instance, storage, key, asset, ["openai"])
        if i % 3 == 2:
            scored = storage.stage_path(key, "scored")
            scored.with_name("next.jsonl").write_text("{}\n")
            scored.with_name("next.jsonl").replace(scored)
    return [key for i, key in enumerate(keys) if i % 3 != 0]


def _count_event_log_calls(instance, monkeypatch):
    """Counts every public call made to event log storage of this instance's kind (the schedule's context
    opens its own instance from the same folder)."""
    cls = type(instance._event_storage)  # noqa: SLF001 - every event-log read goes through it
    calls = []
    for name in dir(cls):
        attr = inspect.getattr_static(cls, name)
        if name.startswith("_") or not inspect.isfunction(attr):
            continue

        def counted(self, *args, _name=name, _attr=attr, **kwargs):
            calls.append(_name)
            return _attr(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)
    return calls


def _evaluate(instance, storage):
    with dg.build_schedule_context(instance=instance, resources={"storage": storage},
                                   scheduled_execution_time=WHEN) as context:
        return reexport_schedule(context)


def test_each_run_is_re_exported_with_its_own_latest_options(sqlite_instance, storage):
    keys = _runs(sqlite_instance, storage, 7)
    requests = {r.partition_key: r for r in _evaluate(sqlite_instance, storage)}
    assert sorted(requests) == keys  # not the runs unchanged since their last export
    for key in keys:
        if int(key.split("_")[1]) % 3 == 1:
            assert requests[key].run_config == {}  # never exported: the defaults
        else:
            # the latest export's options as recorded, but validate (never carried)
            recorded = {name: as_run_config(CONFIG_CLASSES[name](formats=["openai"]))
                        for name in ("sft_export", "dpo_export")}
            assert requests[key].run_config == {"ops": {
                name: {"config": {k: v for k, v in options.items() if k != "validate"}}
                for name, options in recorded.items()}}
            assert all(o["config"]["formats"] == ["openai"] for o in requests[key].run_config["ops"].values())


def test_the_schedule_reads_the_event_log_as_often_with_40_runs_as_with_4(sqlite_instance, storage, tmp_path,
                                                                        monkeypatch):
    from whileai_pipeline.defs.resources import PipelineStorage

    few_requested = _runs(sqlite_instance, storage, 4)
    many_storage = PipelineStorage(root=str(tmp_path / "many"))
    (tmp_path / "many_home").mkdir()
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path / "many_home")) as many:
        many_requested = _runs(many, many_storage, 40)
        calls = _count_event_log_calls(sqlite_instance, monkeypatch)
        assert [r.partition_key for r in _evaluate(sqlite_instance, storage)] == few_requested
        few_calls = list(calls)
        calls.clear()
        assert [r.partition_key for r in _evaluate(many, many_storage)] == many_requested
        assert "get_dynamic_partitions" in few_calls  # counted where the schedule's context reads
        assert sorted(calls) == sorted(few_calls)
