"""The options each run was last materialized with, read back from the ``config`` metadata of its assets.

The schedule asks this for every registered run at once. One query per run and asset (four round trips
each, and a whole event deserialized) took 6.5 s for 1000 runs on SQLite, and grows with each round
trip's latency on PostgreSQL, inside Dagster's 60 s evaluation timeout. Here each asset costs two
queries whatever the number of runs: the latest materialization id of every partition, then those
events by id. The schedule reads those same records for what else each export depended on (its
``inputs``, ``outputs`` and ``code_fingerprint``), with no query of its own.
"""

import dagster as dg
import orjson

from .config import stored_config

# storage ids per query: well under SQLite's bound on the parameters of one statement
BATCH = 500


def _latest_records(instance, asset_key, keys) -> dict:
    """``{partition: record}`` of the latest materialization of ``asset_key`` for each of ``keys`` that has one."""
    keys = set(keys)
    if not keys:  # Dagster reads an empty set of partitions as every partition
        return {}
    ids = instance.get_latest_storage_id_by_partition(asset_key, dg.DagsterEventType.ASSET_MATERIALIZATION, keys)
    by_id = {storage_id: key for key, storage_id in ids.items() if key in keys}
    wanted = sorted(by_id)
    out = {}
    for start in range(0, len(wanted), BATCH):
        chunk = wanted[start:start + BATCH]
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset_key, storage_ids=chunk), limit=len(chunk)).records
        for record in records:
            out[by_id[record.storage_id]] = record
    return out


def latest_materializations(instance, keys, assets) -> dict:
    """``{asset name: {key: record}}``: the latest materialization of each of ``assets`` for each of ``keys``
    that has one, in two queries per asset."""
    keys = list(keys)
    return {asset_def.key.to_user_string(): _latest_records(instance, asset_def.key, keys) for asset_def in assets}


def stored_run_configs(instance, keys, assets, latest=None) -> dict:
    """``{key: run config}`` for each of ``keys``: the options ``key``'s latest materialization of each asset
    was made with, so a re-export or a new version of the run keeps them instead of the defaults. An asset
    never materialized, or whose stored options fail today's checks, gets the defaults (no entry).
    ``latest``: ``latest_materializations`` of the same keys and assets, when the caller has read them."""
    keys = list(keys)
    if latest is None:
        latest = latest_materializations(instance, keys, assets)
    ops = {key: {} for key in keys}
    for asset_def in assets:
        name = asset_def.key.to_user_string()
        checked = {}  # most runs share their options: each distinct set is checked once
        for key, record in latest[name].items():
            options = _options_of(instance, record, name)
            if options is None:
                continue
            token = orjson.dumps(options, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
            if token not in checked:
                checked[token] = stored_config(name, options)
            if checked[token]:
                ops[key][name] = {"config": dict(checked[token])}
    return {key: ({"ops": per_key} if per_key else {}) for key, per_key in ops.items()}


def _options_of(instance, record, asset_name):
    """The options a materialization was made with: its ``config`` metadata or, for one made before that
    metadata existed (versions before 2b4f2aa), the config its run gave the asset (one query, once: the
    re-export then records ``config``). Without this, the first re-export after an upgrade from such a
    version published a run exported with ``mask_mode: final`` again with the defaults. None when
    neither is there (the run was deleted)."""
    entry = record.asset_materialization.metadata.get("config")
    if entry is not None:
        return entry.value
    run = instance.get_run_by_id(record.run_id)
    if run is None:
        return None
    ops = (run.run_config or {}).get("ops")
    block = ops.get(asset_name) if isinstance(ops, dict) else None
    values = block.get("config") if isinstance(block, dict) else None
    return values if isinstance(values, dict) else {}  # the run set nothing for it: the defaults


def stored_run_config(instance, key, assets) -> dict:
    """``stored_run_configs`` for one run."""
    return stored_run_configs(instance, [key], assets)[key]
