"""Upgrading the code location over a deployment made by earlier versions: the same storage root and
Dagster instance, with the cursor, run configs and materialization metadata those versions left.

The old shapes are built here explicitly, as those versions wrote them (no old code is imported):

* materializations without ``config`` metadata (before 2b4f2aa): the options live only in the run
  config of the run that made them;
* a sensor cursor ``{run: {"sig": [...], "fp": "..."}}`` without the version count ``n`` (before 7d06351);
* the export metadata keys the UI plots, as the version of ff8350a wrote them.
"""

import datetime
import os
import shutil

import dagster as dg
import orjson
import pytest

from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.automation import inbox_sensor, reexport_schedule
from whileai_pipeline.defs.config import CONFIG_CLASSES
from whileai_pipeline.defs import sensor_state
from whileai_pipeline.defs.partitions import simulation_runs

from .conftest import SAMPLE, Chain, materialization, tree_bytes

pytestmark = pytest.mark.pipeline

# A run exported with options other than the defaults, in every asset that has options.
OPTIONS = {"ops": {
    "raw_simulation_data": {"config": {"on_bad_line": "quarantine"}},
    "preference_pairs": {"config": {"min_margin": 0.5, "max_pairs_per_prompt": 2}},
    "sft_export": {"config": {"formats": ["openai"], "mask_mode": "final", "sft_rows": "all", "strip_think": False}},
    "dpo_export": {"config": {"formats": ["openai"], "strip_think": False}},
}}

# What ff8350a's exports of the bundled sample stored (and, per format, under <f>/); the UI plots the
# numbers across materializations, so a key renamed or dropped would end a plot at the upgrade.
OLD_SFT_KEYS = ["dagster/row_count", "formats", "gates", "group_pass_rates", "published", "reward_histogram",
                "source_path", "source_sha256", "status", "summary", "validate"]
OLD_SFT_FORMAT_KEYS = ["groups", "masked_messages", "passes", "fails", "published_path", "report", "rows",
                       "rows_checked", "rows_leaked", "rows_written", "sha256", "tool_calls_checked",
                       "tool_calls_invalid", "tool_outputs_truncated", "trained_messages", "ungraded"]
OLD_DPO_KEYS = OLD_SFT_KEYS
OLD_DPO_FORMAT_KEYS = ["chosen_longer_frac", "mean_margin", "pairs", "published_path", "rejected_quoting", "report",
                       "rows_checked", "rows_leaked", "sha256", "ties_dropped", "tool_calls_checked",
                       "tool_calls_invalid"]
NUMBERS = {"row_count", "groups", "masked_messages", "passes", "fails", "rows", "rows_checked", "rows_leaked",
           "rows_written", "tool_calls_checked", "tool_calls_invalid", "tool_outputs_truncated", "trained_messages",
           "ungraded", "chosen_longer_frac", "mean_margin", "pairs", "rejected_quoting", "ties_dropped"}
ADDED_SINCE = ("config", "gates_failed", "mean_reward", "openai/warnings", "trl/warnings", "inputs",
               "code_fingerprint")


def _old_shape_asset(name, metadata):
    """An asset with ``name``'s key, partitions and config class whose materialization carries
    ``metadata`` as given: what the earlier version recorded, run config and all."""
    config_class = CONFIG_CLASSES[name]

    def body(config):
        return dg.MaterializeResult(metadata=metadata)

    body.__annotations__ = {"config": config_class}
    return dg.asset(name=name, partitions_def=simulation_runs)(body)


def _as_before_2b4f2aa(chain, key, result):
    """Record, for each asset of ``result``, a materialization like the ones made before 2b4f2aa: the
    same metadata without ``config`` (and without the keys added since), made by a real run whose run
    config holds ``OPTIONS``. It becomes each asset's latest materialization of ``key``."""
    old = []
    for asset_def in ASSETS:
        name = asset_def.key.to_user_string()
        metadata = {k: v for k, v in materialization(result, name).items() if k not in ADDED_SINCE}
        old.append(_old_shape_asset(name, metadata))
    run = dg.materialize(old, instance=chain.instance, partition_key=key, run_config=OPTIONS)
    assert run.success
    for asset_def in ASSETS:
        assert "config" not in materialization(run, asset_def.key.to_user_string())


def _schedule(instance, storage):
    when = datetime.datetime(2027, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)
    with dg.build_schedule_context(instance=instance, resources={"storage": storage},
                                   scheduled_execution_time=when) as context:
        return reexport_schedule(context)


def test_a_run_exported_before_options_were_stored_keeps_them_after_the_upgrade(sqlite_instance, storage, tmp_path):
    """Before 2b4f2aa no materialization stored its options, and the first scheduled re-export after
    the upgrade ran with the defaults: a run exported as openai-only, mask_mode final, every row, came
    back as openai + trl, assistant mask, passing rows only (different training files, status
    published). The options are read from the run config of the run that made the materialization."""
    chain = Chain(storage, sqlite_instance, tmp_path)
    key = chain.register()
    first = chain.materialize(key, run_config=OPTIONS)
    assert first.success
    published = tree_bytes(storage.published_dir(key))
    _as_before_2b4f2aa(chain, key, first)

    (request,) = _schedule(sqlite_instance, storage)
    assert request.run_config == {"ops": {name: OPTIONS["ops"][name] for name in ("sft_export", "dpo_export")}}
    again = chain.materialize(key, run_config=request.run_config, selection=["sft_export", "dpo_export"])
    assert again.success
    assert materialization(again, "sft_export")["status"].value == "unchanged"
    assert materialization(again, "dpo_export")["status"].value == "unchanged"
    assert tree_bytes(storage.published_dir(key)) == published

    # a new version dropped in the inbox (the files the old version registered) keeps them too
    _as_before_2b4f2aa(chain, key, first)  # the re-export stored config for the exports: undo that
    run_file = storage.run_path(key)
    run_file.write_bytes(SAMPLE.read_bytes() + b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')
    for path in (run_file, storage.run_meta_path(key)):
        then = os.stat(path).st_mtime_ns - 120 * 10**9
        os.utime(path, ns=(then, then))
    with dg.build_sensor_context(instance=sqlite_instance, resources={"storage": storage}) as context:
        (new_version,) = inbox_sensor(context).run_requests
    assert new_version.run_config == OPTIONS


def _memory(storage, cursor):
    """What the sensor remembers, which its cursor names (``sensor_state``)."""
    state, lost = sensor_state.load(storage, cursor)
    assert lost is None
    return state


def test_a_sensor_cursor_from_before_7d06351_is_read_as_it_is(chain):
    """The cursor the daemon kept across the upgrade has no version count. Unchanged files request
    nothing (no re-run of every run), and a changed one gets a run key no earlier version used."""
    key = chain.register()
    assert chain.materialize(key).success
    run_file = chain.storage.run_path(key)
    for path in (run_file, chain.storage.run_meta_path(key)):
        then = os.stat(path).st_mtime_ns - 120 * 10**9
        os.utime(path, ns=(then, then))
    with dg.build_sensor_context(instance=chain.instance, resources={"storage": chain.storage}) as context:
        fresh = _memory(chain.storage, inbox_sensor(context).cursor)
    old_cursor = {name: {"sig": entry["sig"], "fp": entry["fp"]} for name, entry in fresh.items()}
    assert old_cursor[key] and "n" not in old_cursor[key]

    with dg.build_sensor_context(instance=chain.instance, cursor=orjson.dumps(old_cursor).decode(),
                                 resources={"storage": chain.storage}) as context:
        tick = inbox_sensor(context)
    assert tick.run_requests == []
    memory = _memory(chain.storage, tick.cursor)
    assert {name: {"sig": e["sig"], "fp": e["fp"]} for name, e in memory.items()} == old_cursor

    shutil.copyfile(SAMPLE, run_file)
    with open(run_file, "ab") as fh:
        fh.write(b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')
    then = os.stat(run_file).st_mtime_ns - 120 * 10**9
    os.utime(run_file, ns=(then, then))
    with dg.build_sensor_context(instance=chain.instance, cursor=tick.cursor,
                                 resources={"storage": chain.storage}) as context:
        (request,) = inbox_sensor(context).run_requests
    assert request.run_key.endswith(":v2")  # the old versions' keys had no suffix: never a repeat


def test_the_export_metadata_the_ui_plots_keeps_every_key_of_the_earlier_versions(chain):
    """The UI plots each number across materializations of a partition; a key that disappears ends its
    plot at the upgrade. Every key ff8350a's exports wrote is still written."""
    key = chain.register()
    result = chain.materialize(key)
    assert result.success
    sft, dpo = materialization(result, "sft_export"), materialization(result, "dpo_export")
    for metadata, common, per_format in ((sft, OLD_SFT_KEYS, OLD_SFT_FORMAT_KEYS), (dpo, OLD_DPO_KEYS,
                                                                                  OLD_DPO_FORMAT_KEYS)):
        expected = set(common) | {f"{fmt}/{name}" for fmt in ("openai", "trl") for name in per_format}
        assert expected - set(metadata) == set()
        numbers = [k for k in expected if k.split("/")[-1] in NUMBERS]
        assert numbers and all(isinstance(metadata[k].value, (int, float)) for k in numbers)
