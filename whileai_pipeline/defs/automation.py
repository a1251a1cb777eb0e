"""Jobs, the inbox sensor and the re-export schedule.

* ``simulation_chain``: all five assets and their checks, for one partition.
* ``reexport``: the two export assets and their checks (reads the stage files, so it re-publishes
  from the last scored rows and pairs; it never reads ``rejected/``).
* ``inbox_sensor``: a new or changed run file (or sidecar) in the inbox registers a partition and
  requests the chain for it, once per content (``run_key = "<name>:<sha256[:16]>"``), once it has
  settled: not modified for ``$WHILEAI_PIPELINE_SETTLE_SECONDS`` (default 30), and not while ``simulate``
  says it is still writing it (``progress_stage``). A tick hashes files for
  at most ``$WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS`` (default 20) and leaves the rest to the next one.
* ``reexport_schedule``: on ``$WHILEAI_PIPELINE_CRON`` (default ``0 3 * * *``, daily at 03:00
  UTC), one re-export request per registered run whose exports would change (its stage files, options
  or the code changed since its last export; ``$WHILEAI_PIPELINE_REEXPORT=all``: every run).

Both jobs carry ``RETRY_TAGS``: on an instance with ``run_retries: {enabled: true}``, a run whose run
worker died is re-executed from where it stopped; a run that failed on its data is not.
"""

import os
import time

import dagster as dg
from dagster._utils.schedules import is_valid_cron_string  # the rule ScheduleDefinition applies (Dagster pinned)

from whileai_pipeline.core.runs import (PROGRESS_SUFFIX, SIMULATE_DONE, SIMULATE_PATIENCE_SECONDS, changed_lately,
                                        progress_path, progress_stage)
from whileai_pipeline.core.settings import seconds_from_env

from .code_fingerprint import code_fingerprint_on_disk
from .assets import (ASSET_NAMES, ASSETS, CHAIN_STAGES, STAGE_PAIRS, STAGE_SCORED, dpo_export, preference_pairs,
                     raw_simulation_data, scored_simulation_data, sft_export)
from . import sensor_state
from .partitions import PARTITIONS_NAME
from .resumable_hash import ResumableHashes
from .resources import (DEFAULT_HOME, ENV_HOME, ENV_SENSOR_BUDGET, ENV_SETTLE, RUN_SUFFIX, PipelineStorage, fingerprint,
                        meta_path_for, partition_key_for)
from .stored_options import latest_materializations, stored_run_config, stored_run_configs
from .unchanged import chain_stopped_at, why_reexport

ENV_CRON = "WHILEAI_PIPELINE_CRON"
DEFAULT_CRON = "0 3 * * *"
ENV_REEXPORT = "WHILEAI_PIPELINE_REEXPORT"
REEXPORT_CHANGED, REEXPORT_ALL = "changed", "all"
NAMES_SHOWN = 20  # run names a tick log line lists before "and N more"
DEFAULT_SETTLE_SECONDS = 30.0
# A third of Dagster's sensor timeout (60 s unless DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS says otherwise):
# hashing new run files is the tick's only long work, and at about 1 GB/s, 20 s is some 20 GB a tick.
DEFAULT_SENSOR_BUDGET_SECONDS = 20.0
_HASHES = ResumableHashes()  # run files half hashed when a tick's budget ran out, for the next tick

# Dagster's run retries (the daemon's auto re-execution; it runs when the instance sets
# `run_retries: {enabled: true}`), read from each run's tags. Only a run that ended without a step
# failing is retried: its run worker was killed (OOM, a restarted container, a lost pod or machine) or
# crashed. The sensor requests each content once and the schedule re-exports from the stage files, so
# without this such a run's data never reached the exports. A failed gate or a step that refused its
# input (failure reason STEP_FAILURE) is not retried: the same input fails the same way. The retry
# re-executes from the failure (the steps that had not succeeded, and what follows them); each step
# takes the run's lock and finishes or removes what the killed step left (`_one_process_per_run`).
RETRY_TAGS = {
    "dagster/max_retries": "2",  # at most two retries of one run (the run group counts them)
    "dagster/retry_on_asset_or_op_failure": "false",
    "dagster/retry_strategy": "FROM_FAILURE",
}

simulation_chain_job = dg.define_asset_job(
    "simulation_chain",
    selection=dg.AssetSelection.assets(*ASSET_NAMES),
    description="The whole chain for one run: raw -> scored -> pairs -> SFT and DPO exports, with the gates.",
    tags=RETRY_TAGS,
)

EXPORTS = (sft_export, dpo_export)
CHAIN_STEPS = (scored_simulation_data, preference_pairs)  # between the run and the exports

reexport_job = dg.define_asset_job(
    "reexport",
    selection=dg.AssetSelection.assets(sft_export, dpo_export),
    description="Re-exports one run from its stage files (scored rows, pairs), with the gates. The schedule "
    "passes each run the options it was last exported with; launched by hand, it runs with the config given "
    "in the launchpad (empty: the defaults, not the run's last options).",
    tags=RETRY_TAGS,
)


def cron_schedule() -> str:
    """``$WHILEAI_PIPELINE_CRON`` or the default. A bad value is refused naming the variable: Dagster's own
    error names only the schedule, and it stops the code location and every CLI command that loads it."""
    cron = os.environ.get(ENV_CRON) or DEFAULT_CRON
    if not is_valid_cron_string(cron):
        raise ValueError(f"${ENV_CRON} must be a cron expression of five fields, e.g. {DEFAULT_CRON!r} (daily at "
                         f"03:00 UTC), got {cron!r}")
    return cron


def _signature(path):
    """Cheap change detector: size and mtime of the run file and of its sidecar, and the mtime of the
    progress file ``simulate`` keeps beside a run it writes."""
    st = path.stat()
    meta, progress = meta_path_for(path), progress_path(path)
    # os.path.isfile, not Path.is_file: a run named near the 255-byte limit leaves no room for these names,
    # and Path.is_file raises "File name too long" (which failed every tick)
    mst = meta.stat() if os.path.isfile(meta) else None
    pst = progress.stat() if os.path.isfile(progress) else None
    return [st.st_size, st.st_mtime_ns, mst.st_size if mst else None, mst.st_mtime_ns if mst else None,
            pst.st_mtime_ns if pst else None] + (["not a file"] if not mst and os.path.lexists(meta) else [])


def reexport_mode() -> str:
    """``$WHILEAI_PIPELINE_REEXPORT``: ``changed`` (the default) re-exports only the runs whose exports would
    change; ``all`` re-exports every run, as before the schedule compared. Read at each schedule tick."""
    value = os.environ.get(ENV_REEXPORT)
    if not value:
        return REEXPORT_CHANGED
    if value.strip() not in (REEXPORT_CHANGED, REEXPORT_ALL):
        raise ValueError(f"${ENV_REEXPORT} must be {REEXPORT_CHANGED!r} (re-export only the runs whose stage files, "
                         f"options or code changed since their last export; the default) or {REEXPORT_ALL!r} "
                         f"(every run with stage files, every night), got {value!r}")
    return value.strip()


def _names(keys) -> str:
    """``a, b, c`` or, past ``NAMES_SHOWN``, the first ones and ``and N more``: 1000 names make no log line."""
    shown = ", ".join(keys[:NAMES_SHOWN])
    return shown if len(keys) <= NAMES_SHOWN else f"{shown} and {len(keys) - NAMES_SHOWN} more"


def settle_seconds() -> float:
    """How long a run file (and its sidecar) must go unmodified before the sensor takes it."""
    return seconds_from_env(ENV_SETTLE, DEFAULT_SETTLE_SECONDS, "0 takes a file as soon as it is seen")


def sensor_budget_seconds() -> float:
    """How long one sensor tick may spend hashing run files before it leaves the rest to the next tick."""
    return seconds_from_env(ENV_SENSOR_BUDGET, DEFAULT_SENSOR_BUDGET_SECONDS,
                            "0 hashes one file, or 8 MB of a big one, a tick; keep it well under Dagster's "
                            "sensor timeout, 60 s by default")


def _settling(sig, now_ns, settle) -> bool:
    """True while the run file or its sidecar was modified less than ``settle`` seconds ago.

    A run written straight into the inbox (``simulate`` appending trajectory by trajectory) would
    otherwise be taken at every sensor tick, hashed whole each time, and exported half-written.
    """
    newest = max(t for t in (sig[1], sig[3]) if t is not None)
    return now_ns - newest < settle * 1e9


def _shown(text) -> str:
    """``text`` (a path or file name) with the bytes of a name that is not UTF-8 as ``\\xe9``: Python gives them as
    surrogates, which the sensor's memory (orjson) and Dagster's database refuse."""
    return os.fsencode(str(text)).decode("utf-8", "backslashreplace")


IGNORED = "_ignored"  # the cursor's list of inbox files not taken (no key starts with "_")


def _ignored_inbox_files(storage, runs) -> list:
    """``[name, why]`` for each inbox run file the sensor does not take (its name gives no run name, or
    another file's name gives the same one)."""
    if not storage.inbox.is_dir():
        return []
    taken = {path: key for key, path in runs}
    by_key = {key: path for key, path in runs}
    out = []
    for path in sorted(storage.inbox.glob(f"*{RUN_SUFFIX}")):
        if path in taken or not path.is_file() or path.name.startswith("."):
            continue
        try:
            key = partition_key_for(path)
        except ValueError:
            out.append([_shown(path.name), "its name gives no run name (it needs a letter or digit)"])
            continue
        out.append([_shown(path.name), f"its run name {key!r} is {_shown(by_key[key].name)}'s; rename one of them"])
    return out


def _versions_of_removed_runs(seen, cursor) -> dict:
    """``{key: {"n": versions, "fp": the last content}}`` for each run of the previous cursor ``seen`` that the new
    ``cursor`` lost (its file left the inbox). Content that comes back later (A, B, removed, A; or A, removed, B,
    removed, A) is then version n + 1 with a run key of its own, not A's first run key, which Dagster never
    launches twice. A run seen in one version needs its entry too: forgotten, B came back as version 1 and A
    after it as A's first run key again, and the stages and exports kept B. The last content that comes back
    (A, removed, A) is the file touched, not changed: nothing is requested, as while it stayed (a second run
    of it, while the first was still queued, was). About 100 bytes a run name, as Dagster keeps its partition."""
    return {key: {"n": prev.get("n", 1), **({"fp": prev["fp"]} if prev.get("fp") else {})}
            for key, prev in seen.items() if key not in cursor and not key.startswith("_") and isinstance(prev, dict)}


def _already_materialized(instance, key, fp) -> bool:
    """True when raw_simulation_data's latest materialization for ``key`` read exactly this content
    (e.g. the CLI ran it), so the sensor does not request the same work again."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=raw_simulation_data.key, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return False
    entry = records[0].asset_materialization.metadata.get("fingerprint")
    return entry is not None and entry.value == fp


@dg.sensor(
    job=simulation_chain_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    # plain text in the UI (no markdown): no backticks
    description=f"Watches inbox/ under the storage root (${ENV_HOME}, else ./{DEFAULT_HOME}) for new or "
    "changed <run>.jsonl files and their <run>.meta.json sidecars; registers each as a partition and runs "
    "the whole chain (simulation_chain) once per content, with the options the run was last exported "
    f"with, once the files have not been modified for ${ENV_SETTLE} seconds (default "
    f"{DEFAULT_SETTLE_SECONDS:g}) and, for a run simulate is writing, once its <run>.jsonl{PROGRESS_SUFFIX} "
    f"says {SIMULATE_DONE!r}. A tick hashes files for at most ${ENV_SENSOR_BUDGET} seconds (default "
    f"{DEFAULT_SENSOR_BUDGET_SECONDS:g}) and leaves the rest to the next tick. Files it cannot take are named "
    "in its tick log.",
)
def inbox_sensor(context: dg.SensorEvaluationContext, storage: PipelineStorage) -> dg.SensorResult:
    seen, lost = sensor_state.load(storage, context.cursor)
    if lost:
        context.log.warning(f"{lost}: every inbox file is hashed again; content raw_simulation_data already "
                            "read is not requested again")
    registered = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    settle, now_ns = settle_seconds(), time.time_ns()
    # Dagster fails a tick that runs past its timeout and keeps the old cursor, so a tick that tried to
    # hash everything dropped at once (fifty 2 GB runs) would start over, and fail, at every tick: no
    # run would ever be requested. Past the budget, the files not yet hashed wait for the next tick
    # (at least one file is worked on per tick, so every file gets its turn), and a file whose hash the
    # budget cut short is gone on with at the next tick (``ResumableHashes``).
    budget, started, hashed = sensor_budget_seconds(), time.monotonic(), 0
    new_keys, requests, cursor, settling, deferred, writing, stale, unreadable = [], [], {}, [], [], [], [], []
    unfinished = []
    runs = storage.inbox_runs()
    _HASHES.forget_all_but(path for _, path in runs)
    ignored = _ignored_inbox_files(storage, runs)
    if ignored and ignored != seen.get(IGNORED):  # said once, not at every tick
        context.log.warning("inbox files the sensor cannot take: " + "; ".join(f"{n}: {why}" for n, why in ignored))
    if ignored:
        cursor[IGNORED] = ignored
    for key, path in runs:
        try:
            sig = _signature(path)
        except FileNotFoundError:  # removed while we looked
            continue
        prev = seen.get(key)
        if prev and prev.get("sig") == sig:
            cursor[key] = prev
            continue
        stage = progress_stage(path)
        if stage is not None:
            if changed_lately(path):  # still being written (``simulate_stage``): look again at the next tick
                if prev:
                    cursor[key] = prev
                writing.append(f"{key} ({stage})")
                continue
            stale.append(f"{key} ({stage})")  # a simulate killed mid-run leaves its progress file so
        if _settling(sig, now_ns, settle):  # still being written, maybe: look again at the next tick
            if prev:
                cursor[key] = prev
            settling.append(key)
            continue
        if hashed and time.monotonic() - started >= budget:
            if prev:
                cursor[key] = prev
            deferred.append(key)
            continue
        try:
            run_sha = _HASHES.sha256(path, started + budget)
            fp = None if run_sha is None else fingerprint(path, run_sha=run_sha)
        except FileNotFoundError:  # removed while we looked
            continue
        except OSError as exc:  # e.g. another user's file: the other runs still go; looked at again next tick
            if prev:
                cursor[key] = prev
            unreadable.append(f"{_shown(path.name)} ({exc.strerror or exc})")
            continue
        hashed += 1
        if fp is None:  # the budget ran out inside this file: the next tick goes on from there
            if prev:
                cursor[key] = prev
            done, size = _HASHES.progress(path)
            unfinished.append(f"{key} ({done / 2**30:.1f} of {size / 2**30:.1f} GiB)")
            continue
        if prev and prev.get("fp") == fp:
            cursor[key] = {**prev, "sig": sig}
            continue  # touched, not changed
        # versions seen of this run: content that comes back (A, B, A) is a new version with a new run
        # key, as Dagster never launches a sensor's run key twice
        version = prev.get("n", 1) + 1 if prev else 1
        cursor[key] = {"sig": sig, "fp": fp, "n": version}
        if key in registered and _already_materialized(context.instance, key, fp):
            continue
        if key not in registered and key not in new_keys:
            new_keys.append(key)
        run_key = f"{key}:{fp[:16]}" if version == 1 else f"{key}:{fp[:16]}:v{version}"
        requests.append(
            dg.RunRequest(run_key=run_key, partition_key=key,
                          run_config=stored_run_config(context.instance, key, ASSETS),
                          tags={"whileai/run_file": _shown(path), "whileai/fingerprint": fp})
        )
    cursor.update(_versions_of_removed_runs(seen, cursor))
    partitions = [dg.AddDynamicPartitionsRequest(PARTITIONS_NAME, new_keys)] if new_keys else []
    if writing:
        context.log.info(f"waiting for simulate to finish {_names(writing)}: the progress file beside each "
                         f"(<run>.jsonl{PROGRESS_SUFFIX}) is at that stage, not {SIMULATE_DONE!r}")
    if stale:
        context.log.warning(f"taken although their progress file is not at {SIMULATE_DONE!r}: {_names(stale)}; "
                            f"nothing about them changed for {SIMULATE_PATIENCE_SECONDS / 3600:g} h (a simulate "
                            "that was killed leaves its progress file so)")
    if unreadable:
        context.log.warning(f"inbox files the sensor cannot read: {_names(unreadable)}; make them readable by the user "
                            "the sensor runs as (or move them out of the inbox): they are looked at again at every tick")
    if settling:
        context.log.info(f"waiting for {_names(settling)} to settle: modified less than {settle:g} s ago "
                         f"(${ENV_SETTLE})")
    if unfinished:
        context.log.info(f"still hashing {_names(unfinished)}: the next tick goes on from there "
                         f"(${ENV_SENSOR_BUDGET}, default {DEFAULT_SENSOR_BUDGET_SECONDS:g} s a tick)")
    if deferred:
        context.log.info(f"hashed {hashed} of the new or changed run files in {time.monotonic() - started:.1f} s; "
                         f"{_names(deferred)} wait for the next tick (${ENV_SENSOR_BUDGET}, default "
                         f"{DEFAULT_SENSOR_BUDGET_SECONDS:g} s)")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partitions,
        cursor=sensor_state.save(storage, cursor, context.cursor),
    )


@dg.schedule(
    cron_schedule=cron_schedule(),
    job=reexport_job,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description=f"Re-exports every registered run that has stage files and whose exports would change (job "
    f"reexport: the two exports and their gates) on ${ENV_CRON} (default '{DEFAULT_CRON}', UTC), each with the "
    "options it was last exported with. A run whose stage files, options and code are the same as at its last "
    "export is not re-exported: its files and numbers stay those of that export. "
    f"${ENV_REEXPORT}=all re-exports every run (default changed); materializing a run's two exports by hand "
    "re-exports that run. A gate that fails leaves the published files as they were.",
)
def reexport_schedule(context: dg.ScheduleEvaluationContext, storage: PipelineStorage):
    mode = reexport_mode()  # a bad value fails the tick before anything is read
    keys = sorted(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    if not keys:
        return dg.SkipReason("no simulation runs registered yet")
    try:
        tick = context.scheduled_execution_time.isoformat()
    except Exception:  # noqa: BLE001 - a context built without a time (a test, a notebook) raises Dagster's CheckError
        tick = "manual"
    reexportable, skipped = [], []
    for key in keys:
        why = _not_reexportable(storage, key)
        if why:
            skipped.append(f"{key} ({why})")
        else:
            reexportable.append(key)
    # a newer version whose chain failed before the exports: what a re-export reads is (partly) of the earlier one
    # (the two steps' last materializations in four queries, as the exports' below)
    chain = latest_materializations(context.instance, reexportable, CHAIN_STEPS)
    stopped = {key: step for key in reexportable if (step := chain_stopped_at(storage, key, chain)) is not None}
    # every run's last export materializations in four queries: four round trips per run took 6.5 s at
    # 1000 runs (Dagster gives an evaluation 60 s); the options and what else each export depended on
    # are read from the same records
    latest = latest_materializations(context.instance, reexportable, EXPORTS)
    configs = stored_run_configs(context.instance, reexportable, EXPORTS, latest)
    unchanged, why_by_key = [], {}
    if mode == REEXPORT_CHANGED:
        fingerprint = code_fingerprint_on_disk()  # what the run workers it launches would import
        for key in reexportable:
            why = why_reexport(storage, key, configs[key], latest, fingerprint)
            if why is None:
                if key not in stopped:  # not "nothing changed": its run did
                    unchanged.append(key)
            else:
                why_by_key[key] = why
    else:
        why_by_key = {key: f"${ENV_REEXPORT}={REEXPORT_ALL}" for key in reexportable}
    requests = [dg.RunRequest(run_key=f"reexport:{key}:{tick}", partition_key=key, run_config=configs[key])
                for key in reexportable if key in why_by_key]
    if skipped:
        context.log.info("not re-exported, as there is nothing to export from: " + "; ".join(skipped))
    by_step = {}
    for key, step in stopped.items():
        by_step.setdefault(step, []).append(key)
    said_stopped = [f"{len(group)} run(s) whose {step} was made from another {CHAIN_STAGES[step]} stage than the one "
                    f"there now (a newer version whose chain stopped at {step}, or a step run on its own), so that "
                    f"their exports are not all of the run as it is: {_names(group)}; run each one's whole chain again "
                    "(whileai-pipeline run <run file>, or the simulation_chain job for the run)"
                    for step, group in by_step.items()]
    for said in said_stopped:
        context.log.warning(said)
    said_unchanged = (f"{len(unchanged)} run(s) not re-exported, as nothing changed since their last export (stage "
                      f"files, options, code): {_names(unchanged)}; ${ENV_REEXPORT}={REEXPORT_ALL} re-exports them")
    if unchanged:
        context.log.info(said_unchanged)
    if requests:
        by_reason = {}
        for key, why in why_by_key.items():
            by_reason.setdefault(why, []).append(key)
        context.log.info(f"re-exporting {len(requests)} run(s): " + "; ".join(
            f"{why}: {_names(group)}" for why, group in sorted(by_reason.items(), key=lambda item: -len(item[1]))))
        return requests
    said = "; ".join(said_stopped + ([said_unchanged] if unchanged else []))
    if said:
        return dg.SkipReason(said + ("; not re-exported, as there is nothing to export from: " + "; ".join(skipped)
                                     if skipped else ""))
    return dg.SkipReason("no registered run has stage files to re-export from: " + "; ".join(skipped))


def _not_reexportable(storage, key):
    """Why a run cannot be re-exported (None when it can): an unsafe name, or stage files never made
    (registered only, or its chain failed before the pairs stage)."""
    try:
        missing = [stage for stage in (STAGE_SCORED, STAGE_PAIRS) if not storage.stage_path(key, stage).is_file()]
    except ValueError:
        return "not a name this pipeline can store"
    return f"no {' and no '.join(missing)} stage: run its whole chain first" if missing else None


JOBS = [simulation_chain_job, reexport_job]
SENSORS = [inbox_sensor]
SCHEDULES = [reexport_schedule]
