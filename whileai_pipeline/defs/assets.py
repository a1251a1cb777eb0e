"""The five assets, one partition per simulation run.

    raw_simulation_data -> scored_simulation_data -> preference_pairs -> dpo_export
                           scored_simulation_data -> sft_export

Every asset reads and writes JSONL files through the storage resource and returns a
``MaterializeResult`` (metadata only), so no row list passes through an IO manager. The export
logic lives in the library (``whileai_pipeline.simulations``); this layer chooses files, calls it,
decides publish or reject from the reports, and describes what happened.
"""

import contextlib
import errno
import filecmp
import functools
import hashlib
import itertools
import math
import os
import re
import shutil
from pathlib import Path

import dagster as dg

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import preference, sft
from whileai_pipeline.core.atomic import atomic_file
from whileai_pipeline.core.errors import (LINE_ADVICE, BadJsonlError, ExportError, JudgeStalledError,
                                          SourceChangedError, WriteFailedError)
from whileai_pipeline.core.jsonl import _BLANK, dumps_line, iter_jsonl, parse_line, read_json, sha256_file
from whileai_pipeline.core.judge import judge_pairs_file
from whileai_pipeline.core.pairs import build_pairs_file
from whileai_pipeline.core.progress import Progress, tick
from whileai_pipeline.core.rows import PAIRS_FILE, SYSTEM_PROMPT_ARGUMENT, shape_problem
from whileai_pipeline.core.runs import (SIMULATE_DONE, progress_path, read_sidecar_file, sidecar_file,
                                        simulate_stage)
from whileai_pipeline.core.scoring import (ScoreStats, ScorerError, load_callable, passing_rows_file, resolve_scorer,
                                           score_file, score_stats_of_file, verdict)

from .code_fingerprint import code_fingerprint
from .config import (FIX_RUN_CONFIG, FORMATS, ConfigFileError, DpoExportConfig, OnBadLine, PairsConfig, RawConfig,
                     ScoreConfig, SftExportConfig, as_run_config, check_run_config)
from .partitions import simulation_runs
from .stored_options import latest_materializations
from . import journal
from .publishing import GATES, discard, failed_gates, publish, reject, rejected_dir_name, report_file, same_refusal
from .resources import (ENV_HOME, ENV_SETTLE, PartitionLockedError, PipelineStorage, checked_key, copy_atomic,
                        fingerprint, incoming_path, meta_path_for)
from .summaries import (RawStats, dpo_numbers, export_summary_markdown, not_a_trajectory, raw_facts, real,
                        sft_numbers)

GROUP = "whileai"
STAGE_RAW, STAGE_SCORED, STAGE_SFT_SOURCE, STAGE_PAIRS = "raw", "scored", "sft_source", "pairs"


def _readable(stage):
    """Where ``on_bad_line: quarantine`` copies a run's readable lines before they are put in place as ``stage``."""
    return stage.with_name(f".{stage.name}.readable")


def _stage_with_sidecar(incoming, stage, meta_src) -> None:
    """Put the finished ``incoming`` in place as ``stage`` together with a copy of the sidecar ``meta_src``
    (or, when there is none, without the sidecar ``stage`` had), see ``_put_in_place``."""
    staged = meta_src is not None and meta_src.is_file()
    if staged:
        copy_atomic(meta_src, incoming_path(meta_path_for(stage)))
    _put_in_place(stage, incoming, staged)


def _put_in_place(stage, rows, sidecar_staged, remove=(), also=()) -> None:
    """Rename ``rows`` onto ``stage``, and the sidecar staged beside it (``incoming_path`` of its name) onto
    its own name when ``sidecar_staged`` (else remove the sidecar ``stage`` had), each ``(staged, dest)``
    of ``also``, and remove ``remove``: all or none (``journal``), so a stage never pairs new rows with an
    earlier run's system prompt and tools."""
    meta_dest = meta_path_for(stage)
    moves, remove = [(rows, stage), *also], [path for path in remove if path.exists()]
    if sidecar_staged:
        moves.append((incoming_path(meta_dest), meta_dest))
    elif meta_dest.exists():
        remove.append(meta_dest)
    journal.commit(stage.with_name(f".{stage.stem}{journal.SUFFIX}"), moves, remove)


def _one_process_per_run(body):
    """Run an asset body under its run's partition lock (``PipelineStorage.partition_lock``)."""

    @functools.wraps(body)  # Dagster reads the wrapped signature for config and resources
    def locked(context, config, storage):
        # Every asset's options of the run, before this step changes a file (the CLI checks them before it
        # starts): Dagster checks only their types, and `min_margin: -1` failed its own step after the
        # steps before it had replaced their stages and published an SFT export.
        try:
            check_run_config(context.run.run_config)
        except ConfigFileError as exc:
            raise dg.Failure(description=f"{exc}. {FIX_RUN_CONFIG}") from None
        try:  # a partition added by hand (the UI's "Add partition" takes any name): said as the step's failure
            checked_key(context.partition_key)
        except ValueError as exc:
            raise dg.Failure(description=str(exc)) from None
        try:
            with storage.partition_lock(context.partition_key, on_wait=context.log.info):
                # a killed step's renames (a stage and its sidecar, a publish), done half-way: finished
                # before anything reads or replaces those files
                for done in _finish_journals(storage, context.partition_key):
                    context.log.warning(f"finished the renames a killed or refused step left half done ({done})")
                if leftovers := storage.remove_leftovers(context.partition_key):
                    context.log.info(f"removed what killed runs left: {', '.join(sorted(leftovers))}")
                return body(context, config, storage)
        except PartitionLockedError as exc:
            raise dg.Failure(description=str(exc)) from None
        except WriteFailedError as exc:  # its advice ("choose an output directory") is for library calls
            raise _write_failure(exc, storage, "this step replaced no stage and no published file") from None

    return locked


def _finish_journals(storage, key) -> list:
    """``journal.finish_all`` for run ``key``'s folders; a rename still refused fails the step with what to
    do, not Dagster's bare OSError."""
    try:
        done = journal.finish_all(storage.stage_dir(key))
    except OSError as exc:
        where = exc.filename2 or exc.filename
        left = ", ".join(map(str, journal.pending(storage.stage_dir(key))))
        advice = _storage_advice(exc.errno, os.path.dirname(where) if where else storage.base)
        raise dg.Failure(
            description=f"write_failed: {where}: {exc.strerror or exc}; an earlier step of run {key!r} left "
            f"renames half done ({left}) and they are still refused, so this step stopped before reading anything. "
            f"{advice}, "
            "then materialize again.", metadata={"error": type(exc).__name__}) from None
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, or not a journal's shape: edited by hand
        left = ", ".join(map(str, journal.pending(storage.stage_dir(key))))
        raise dg.Failure(
            description=f"bad_journal: cannot read the renames an earlier step of run {key!r} left half done "
            f"({left}): {exc!r:.200}. A journal is written whole by the pipeline, so this one was changed by hand. "
            f"Check that {storage.published_dir(key)} holds the files of one export (each report's sha256 "
            "matches its file), move the journal away, then materialize again.",
            metadata={"error": type(exc).__name__}) from None
    candidates = storage.stage_dir(key) / "candidates"
    for left in done:  # a refused publish's candidate folder, kept for its journal (_finish_export): settled now
        if os.path.dirname(os.path.dirname(left)) == str(candidates):
            discard(candidates / os.path.basename(os.path.dirname(left)))
    return done


def _storage_advice(code, folder) -> str:
    """What to do about a write the pipeline's storage root (``folder``) refused, by errno."""
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"Free space on the disk holding {folder} (or raise the quota or file size limit there)"
    if code in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return f"Move out of the way what is under {folder} where the pipeline's folders or files go"
    if code == errno.ENOENT:
        return f"A folder under {folder} went while the step ran: keep the storage root as the pipeline makes it"
    if code == errno.EXDEV:  # a link or a mount to another disk: a rename from stages/ cannot get there
        return (f"{folder} is on another filesystem than the storage root's stages/, and publishing renames files "
                "from there: keep the whole storage root on one filesystem (to keep it on another disk, point "
                f"${ENV_HOME} there)")
    return (f"Make {folder} writable for the user running the pipeline (its owner and mode, a read-only mount, "
            "an immutable attribute)")


def _progress(context, what):
    """Rows done and rows/s to the Dagster log every few seconds (and a bar when the CLI is on a terminal)."""
    return Progress(f"{context.partition_key}: {what}", log=context.log.info)


def _require_stage(storage, path, needs: str):
    if not path.is_file():
        raise dg.Failure(
            description=f"missing stage file {path}: materialize {needs} for this partition first "
            "(the whole chain: `whileai-pipeline run PATH`, or select the upstream assets too)."
            + storage.root_hint()
        )


def _write_failure(exc: WriteFailedError, storage, state: str, what=None) -> dg.Failure:
    """The step's failure for a file of the storage root the library could not write (a stage, a candidate):
    the library's advice ("choose an output directory ..., then export again") is for a caller who names the
    output, a pipeline user names none. ``state`` says what is left as it was; ``what``, the library call."""
    reason = getattr(exc.reason, "strerror", None) or exc.reason
    return dg.Failure(
        description=f"{what + ': ' if what else ''}write_failed: {exc.dest}: {reason}; {state}. "
        f"{_storage_advice(getattr(exc.reason, 'errno', None), storage.base)}, then materialize again.",
        metadata={"error": type(exc).__name__})


def _library_failure(exc: Exception, what: str, said=None) -> dg.Failure:
    """The step's failure for the library's error ``exc`` (``said``: its message as the pipeline words it)."""
    return dg.Failure(description=f"{what}: {said or exc}", metadata={"error": type(exc).__name__})


# --------------------------------------------------------------------------- 1. raw

def _snapshot(src, snapshot):
    """Copy the run to ``snapshot``; fail, keeping nothing, if the run changed while it was copied."""
    try:
        copy_atomic(src, snapshot)
    except SourceChangedError:
        raise dg.Failure(
            description=f"source_changed: {src} changed while it was being copied into the stage (is it "
            "still being written?); nothing was staged and the previous stage is unchanged. Materialize "
            f"again once the file is complete; the inbox sensor waits for ${ENV_SETTLE} seconds without a "
            "change before it takes a file.") from None


def _snapshot_sidecar(src, meta_snapshot):
    """Copy the sidecar of run ``src`` to ``meta_snapshot`` and check it: its (system_prompt, tools), or
    None when the run has none."""
    try:
        meta_src = sidecar_file(src)
    except ExportError as exc:  # bad_sidecar: a folder or a broken link by the sidecar's name
        raise dg.Failure(description=str(exc)) from None
    if meta_src is None:
        return None
    _snapshot(meta_src, meta_snapshot)
    try:
        return read_sidecar_file(meta_snapshot)
    except (ValueError, OSError) as exc:
        message = str(exc).replace(str(meta_snapshot), str(meta_src))
        raise dg.Failure(description=message) from None  # bad_sidecar: <the sidecar>: what is wrong


@dg.asset(
    partitions_def=simulation_runs,
    group_name=GROUP,
    kinds={"python", "jsonl"},
    description="The run as read from the inbox (JSONL trajectories, still carrying their privileged "
    "blocks) plus its optional sidecar, validated line by line and snapshotted to `stages/<run>/raw.jsonl`.",
)
@_one_process_per_run
def raw_simulation_data(
    context: dg.AssetExecutionContext, config: RawConfig, storage: PipelineStorage
) -> dg.MaterializeResult:
    key = context.partition_key
    src = storage.find_run(key)
    if src is None:
        raise dg.Failure(
            description=f"no run file for partition {key!r}: expected {storage.run_path(key)}. Register "
            "one with `whileai-pipeline run PATH` or copy <name>.jsonl into the inbox." + storage.root_hint()
        )
    stage_said = simulate_stage(src)
    if stage_said is not None:  # the sensor and the CLI wait for it too: a part of the run, without its sidecar
        raise dg.Failure(
            description=f"simulate is still writing {src} ({progress_path(src).name} says stage {stage_said!r}, not "
            f"{SIMULATE_DONE!r}); nothing was read. Materialize again once simulate has finished (the inbox sensor "
            f"takes the run by itself then), or delete {progress_path(src)} if no simulate is writing it any more."
        )
    meta_src = meta_path_for(src)
    stage = storage.stage_path(key, STAGE_RAW)
    quarantine = storage.stage_path(key, "quarantine")
    # Snapshot first, then read only the snapshot: the rows counted, hashed and staged are the same
    # bytes even if the inbox file changes meanwhile. The previous stage survives a failed read.
    # The sidecar is snapshotted (and checked) first, and staged only with the run's rows: a stage
    # never pairs new rows with an old system prompt and tools, or the other way round.
    snapshot = incoming_path(stage)
    meta_snapshot = incoming_path(meta_path_for(stage))
    stats = RawStats()
    quarantined = 0
    registered_from = storage.registered_from(key)  # the file `run`/`register` copied into the inbox
    # before the copy: a change after it is a newer version the exports are not of (``run_file_changed``)
    inputs = _stats((src, meta_src))
    try:
        sidecar = _snapshot_sidecar(src, meta_snapshot)
        _snapshot(src, snapshot)
        n_bytes = snapshot.stat().st_size
        if config.on_bad_line == OnBadLine.fail:
            progress = _progress(context, "reading the run")
            digest = hashlib.sha256()  # taken in the same read that counts the rows
            try:
                for lineno, facts in raw_facts(snapshot, digest):
                    tick(progress, stats.rows + 1)
                    if isinstance(facts, str):  # why the line is not a trajectory
                        raise BadJsonlError(src, lineno, facts, None if PAIRS_FILE in facts else LINE_ADVICE)
                    stats.add_facts(facts)
            except ExportError as exc:  # a bad line, a lost worker: said of the run file, not of our snapshot
                message = str(exc).replace(str(snapshot), str(src))
                where = {"line": exc.line} if isinstance(exc, BadJsonlError) else {}
                raise dg.Failure(description=message, metadata={"path": dg.MetadataValue.path(str(src)),
                                                                **where}) from None
            progress.close(stats.rows)
            run_sha = digest.hexdigest()
            _refuse_empty(stats, src)
            rows = snapshot
        else:
            run_sha = sha256_file(snapshot)
            rows, quarantined = _copy_with_quarantine(snapshot, src, stage, quarantine, stats)
            _refuse_empty(stats, src)
        # the rows, their sidecar (or none: a stale one would still be read) and the quarantine, together
        _put_in_place(stage, rows, sidecar is not None, remove=[] if quarantined else [quarantine],
                      also=[(incoming_path(quarantine), quarantine)] if quarantined else [])
    finally:
        for leftover in (snapshot, meta_snapshot, _readable(stage), incoming_path(quarantine)):
            if leftover.exists():
                leftover.unlink()
    has_sidecar = sidecar is not None

    metadata = {
        "dagster/row_count": stats.rows,
        "rows": stats.rows,
        "bytes": n_bytes,
        "sha256": run_sha,
        # of what was staged (the run's snapshot and the sidecar staged beside it), not of the inbox now: a
        # sidecar changed while the run was read is a version the sensor has still to request
        "fingerprint": fingerprint(stage, run_sha=run_sha),
        "prompts": stats.prompts,
        "groups": stats.groups,
        "rows_with_privileged": stats.privileged_rows,
        "rows_with_privileged_text": stats.privileged_text_rows,
        "tool_calls": stats.tool_calls,
        "finish_reasons": dg.MetadataValue.json(stats.finish_reasons_summary()),
        "quarantined_lines": quarantined,
        "source_path": dg.MetadataValue.path(str(src)),
        "stage_path": dg.MetadataValue.path(str(stage)),
        "sidecar": dg.MetadataValue.text(str(meta_src) if has_sidecar else "(none)"),
        "system_prompt_chars": len(sidecar[0] or "") if sidecar else 0,
        "tools_declared": len(sidecar[1] or []) if sidecar else 0,
        "preview": dg.MetadataValue.md(stats.preview_markdown()),
        "inputs": dg.MetadataValue.json(inputs),
    }
    # named only if no register replaced the inbox copy while it was snapshotted: the stage holds that copy's rows
    if registered_from and registered_from == storage.registered_from(key):
        metadata["registered_from"] = dg.MetadataValue.path(registered_from)
    if quarantined:
        metadata["quarantine_path"] = dg.MetadataValue.path(str(quarantine))
        context.log.warning(f"{quarantined} unreadable line(s) of {src} quarantined to {quarantine}")
    if stats.privileged_text_rows:
        # also as metadata, which the CLI's summary shows: the gates pass on the other rows, and it prints no log
        metadata["warning"] = (
            f"{stats.privileged_text_rows} row(s) carry privileged as text, not an object: the leak gates read only "
            "an object, so their replies are not checked for quotes of it. Write privileged as a JSON object "
            "(json.loads the text) and register the run again"
        )
        context.log.warning(metadata["warning"])
    elif stats.rows and not stats.privileged_rows:
        context.log.warning(
            "no row carries a privileged block: the leak gates will have nothing to read "
            "(rows saved through the export are scrubbed; export the raw trajectories instead)"
        )
    metadata["config"] = dg.MetadataValue.json(as_run_config(config))  # what a re-export runs with
    return dg.MaterializeResult(metadata=metadata)


def _refuse_empty(stats, src):
    if not stats.rows:
        raise dg.Failure(
            description=f"empty_run: {src} holds no trajectories (no non-blank line with a JSON object); "
            "nothing to export. Check that the simulation finished writing it, then run again.",
            metadata={"path": dg.MetadataValue.path(str(src))},
        )


def _copy_with_quarantine(snapshot, src, stage, quarantine, stats) -> tuple:
    """Copy readable lines verbatim to a file beside ``stage``; unreadable ones go to ``incoming_path(quarantine)``
    as records naming the run file ``src`` and the line number. Returns (that file, to be put in place as
    ``stage`` together with the quarantine, the number of lines quarantined). With no readable line the run
    is refused and the previous stage stays (the quarantine, put in place alone, says why)."""
    bad = 0
    first_bad = None
    incoming = _readable(stage)
    with open(snapshot, "rb") as fin, atomic_file(incoming) as out, atomic_file(incoming_path(quarantine)) as qout:
        for lineno, line in enumerate(fin, 1):
            reason = None
            try:
                row = parse_line(src, lineno, line)
            except BadJsonlError as exc:
                reason = exc.reason
            else:
                if row is _BLANK:
                    continue
                if not isinstance(row, dict):
                    reason = not_a_trajectory(row)
                else:
                    reason = shape_problem(row)
            if reason is None:
                stats.add(row)
                out.write(line.strip().removeprefix(b"\xef\xbb\xbf") + b"\n")
            else:
                bad += 1
                first_bad = first_bad or f"line {lineno}: {reason}"
                qout.write(dumps_line({"path": str(src), "line": lineno, "reason": reason,
                                       "text": line.strip().decode("utf-8", "replace")}))
    if bad and not stats.rows:
        incoming.unlink()
        os.replace(incoming_path(quarantine), quarantine)
        raise dg.Failure(
            description=f"empty_run: none of the {bad} non-blank line(s) of {src} is a readable trajectory "
            f"(first: {first_bad}; all in {quarantine}); nothing was staged and the previous stage is "
            "unchanged. Fix the run file and materialize again.",
            metadata={"path": dg.MetadataValue.path(str(src)),
                      "quarantine_path": dg.MetadataValue.path(str(quarantine))})
    return incoming, bad


# --------------------------------------------------------------------------- 2. scored

# why a scorer graded no row of a run ('' for a user's module:function)
_UNGRADED = {
    "existing": "the rows carry no numeric reward: set a scorer (reference_match or module:function)",
    "reference_match": "no row has a privileged.reference (text or a number) to compare its answer with",
    "": "it returned None (or NaN) for every row",
}


@dg.asset(
    partitions_def=simulation_runs,
    group_name=GROUP,
    deps=[raw_simulation_data],
    kinds={"python", "jsonl"},
    description="Every raw row with a reward from the configured scorer (existing, reference_match or "
    "module:function) and who scored it (scorer, label_source); `stages/<run>/scored.jsonl`.",
)
@_one_process_per_run
def scored_simulation_data(
    context: dg.AssetExecutionContext, config: ScoreConfig, storage: PipelineStorage
) -> dg.MaterializeResult:
    key = context.partition_key
    raw = storage.stage_path(key, STAGE_RAW)
    _require_stage(storage, raw, "raw_simulation_data")
    try:
        scorer = resolve_scorer(config.scorer)
    except ScorerError as exc:
        raise dg.Failure(description=str(exc)) from None
    scored = storage.stage_path(key, STAGE_SCORED)
    stats = ScoreStats()
    progress = _progress(context, f"scoring ({scorer.name})")
    try:
        with atomic_file(incoming_path(scored)) as out:
            scored_sha = score_file(raw, out, scorer, stats, dest=scored, progress=progress)
    except ScorerError as exc:
        raise dg.Failure(description=f"{exc}. Fix the scorer (or set another one in the run config) and "
                         "materialize again; the scored stage is unchanged.") from None
    progress.close(stats.n)
    _stage_with_sidecar(incoming_path(scored), scored, meta_path_for(raw))
    warning = None
    if stats.n and stats.counts["ungraded"] == stats.n:  # else the run succeeds publishing nothing, unexplained
        why = _UNGRADED.get(scorer.name, _UNGRADED[""])
        warning = (f"scorer {scorer.name} graded none of the {stats.n} rows: {why}. No row passes, "
                   "so the SFT export (sft_rows: pass) and the preference pairs will be empty.")
        context.log.warning(warning)
    metadata = {
        "dagster/row_count": stats.n,
        "scorer": scorer.name,
        "passes": stats.counts["pass"],
        "fails": stats.counts["fail"],
        "ungraded": stats.counts["ungraded"],
        "pass_rate": round(stats.counts["pass"] / (stats.counts["pass"] + stats.counts["fail"]), 4)
        if stats.counts["pass"] + stats.counts["fail"] else math.nan,  # no graded row: no rate, not 0
        "mean_reward": real(stats.mean_reward),  # NaN when no row is graded: the key stays
        "groups": stats.keyed_groups,  # rows with no task key are not a group (spec 3.11)
        **_reward_pictures(stats),
        "stage_path": dg.MetadataValue.path(str(scored)),
        "sha256": scored_sha,
    }
    if warning:
        metadata["warning"] = warning  # the CLI's summary shows it
    metadata["config"] = dg.MetadataValue.json(as_run_config(config))  # what a re-export runs with
    metadata["inputs"] = dg.MetadataValue.json(step_inputs(storage, key, "scored_simulation_data"))
    return dg.MaterializeResult(metadata=metadata)


# --------------------------------------------------------------------------- 3. pairs

@dg.asset(
    partitions_def=simulation_runs,
    group_name=GROUP,
    deps=[scored_simulation_data],
    kinds={"python", "jsonl"},
    description="Chosen/rejected pairs from rollouts of the same prompt whose rewards differ by at least "
    "min_margin (build_preference_pairs), optionally judged pairwise; `stages/<run>/pairs.jsonl`.",
)
@_one_process_per_run
def preference_pairs(
    context: dg.AssetExecutionContext, config: PairsConfig, storage: PipelineStorage
) -> dg.MaterializeResult:
    key = context.partition_key
    scored = storage.stage_path(key, STAGE_SCORED)
    _require_stage(storage, scored, "scored_simulation_data")
    path = storage.stage_path(key, STAGE_PAIRS)
    written = ("path", "n_written", "sha256", "ties")  # what the file functions add to the reports
    try:
        judge = load_callable(config.judge, "judge") if config.judge else None  # before anything is written
    except ScorerError as exc:
        raise _library_failure(exc, "judge_pairs") from None
    # Built (and judged) beside the stage, put in place only when all went well: a failed step leaves
    # the previous pairs, which a re-export would otherwise publish.
    incoming = incoming_path(path)
    try:
        try:
            # File to file: the library keeps one summary per row, not the rows (memory stays flat).
            pairing = _progress(context, "pairing")
            report = build_pairs_file(
                scored,
                incoming,
                max_pairs_per_prompt=config.max_pairs_per_prompt,
                min_margin=config.min_margin,
                length_match=config.length_match,
                progress=pairing,
            )
            pairing.close()  # its "(finished)" line, as every other stage's
        except WriteFailedError as exc:
            raise _write_failure(exc, storage, "the previous pairs are unchanged", "build_preference_pairs") from None
        except ValueError as exc:
            raise _library_failure(exc, "build_preference_pairs") from None
        n_pairs, sha256, ties = report["n_written"], report["sha256"], 0  # built pairs carry no tie
        report = {k: v for k, v in report.items() if k not in written}
        judge_report = warning = None
        if judge is not None:
            progress = _progress(context, f"judging ({config.judge})")
            try:
                judged = judge_pairs_file(incoming, incoming, judge, concurrency=config.judge_concurrency,
                                          progress=progress, timeout=config.judge_timeout)
            except JudgeStalledError as exc:  # its own token, as judge_failed: below
                raise dg.Failure(description=f"{exc} The previous pairs are unchanged.",
                                 metadata={"judge": config.judge}) from None
            except WriteFailedError as exc:
                raise _write_failure(exc, storage, "the previous pairs are unchanged", "judge_pairs") from None
            except ValueError as exc:
                raise _library_failure(exc, "judge_pairs") from None
            progress.close(judged["n"])
            sha256, ties = judged["sha256"], judged["ties"]
            judge_report = {k: v for k, v in judged.items() if k not in (*written, "first_failure")}
            if judged["failed"]:
                said = (f"the judge {config.judge} could not judge {judged['failed']} of {judged['n']} pairs "
                        f"(first: {judged['first_failure']})")
                if not judged["n_judged"]:  # a judge that never answers is a broken judge, not a verdict
                    raise dg.Failure(description=f"judge_failed: {said}. Fix the judge (its key, its endpoint) "
                                     "or remove it from the config, then materialize again. The previous "
                                     "pairs are unchanged.")
                # also as metadata, which the CLI's summary shows: it prints no step's log
                warning = f"{said}; those pairs keep the order their rewards gave them"
                context.log.warning(warning)
        _stage_with_sidecar(incoming, path, meta_path_for(scored))  # export_preference reads its sidecar
    finally:
        if incoming.exists():
            incoming.unlink()
    metadata = {
        "dagster/row_count": n_pairs,
        "pairs": n_pairs,
        "prompts_seen": report.get("prompts_seen") or 0,
        "prompts_with_contrast": report.get("prompts_with_contrast") or 0,
        "trainer_pairs": report.get("trainer_pairs") or 0,
        "ties": ties,
        "pair_report": dg.MetadataValue.json(report),
        "stage_path": dg.MetadataValue.path(str(path)),
        "sha256": sha256,
    }
    metadata["mean_margin"] = real(report.get("mean_margin"))  # NaN with no pairs: the key stays
    if judge_report is not None:
        metadata["judge"] = config.judge
        metadata["judge_report"] = dg.MetadataValue.json(judge_report)
    if warning:
        metadata["warning"] = warning
    if report.get("note"):
        context.log.warning(report["note"])
    metadata["config"] = dg.MetadataValue.json(as_run_config(config))  # what a re-export runs with
    metadata["inputs"] = dg.MetadataValue.json(step_inputs(storage, key, "preference_pairs"))
    return dg.MaterializeResult(metadata=metadata)


# --------------------------------------------------------------------------- 4/5. exports

# the stage each export reads (sft_export builds sft_source from the scored stage and its sidecar)
EXPORT_STAGES = {"sft_export": STAGE_SCORED, "dpo_export": STAGE_PAIRS}
EXPORT_KINDS = {"sft_export": "sft", "dpo_export": "dpo"}


def export_inputs(storage, key, asset_name) -> dict:
    """``{path: [size, mtime_ns, inode] or None}`` of the stage file the export ``asset_name`` reads and of its
    sidecar (None: absent). Recorded as ``inputs`` with each export, so the schedule can tell a stage rewritten
    since (a stage is replaced by a rename: a new inode) from the same file, without reading it. The paths
    are absolute: the reports name the stage, so the same bytes under another root are another export."""
    stage = storage.stage_path(key, EXPORT_STAGES[asset_name])
    return _stats((stage, meta_path_for(stage)))


# the stage each step between the run and the exports reads, in chain order
CHAIN_STAGES = {"scored_simulation_data": STAGE_RAW, "preference_pairs": STAGE_SCORED}


def step_inputs(storage, key, asset_name) -> dict:
    """``{path: [size, mtime_ns, inode] or None}`` of the stage the step ``asset_name`` (``CHAIN_STAGES``) reads,
    recorded as ``inputs`` with it: a stage rewritten since, by a newer version of the run whose chain then
    failed at this step, is one the exports were not made from (``unchanged.chain_stopped_at``)."""
    return _stats((storage.stage_path(key, CHAIN_STAGES[asset_name]),))


def run_file_changed(storage, key, raw, seen=None):
    """(Whether the inbox holds another version of run ``key`` than raw_simulation_data's materialization ``raw``
    (its latest) read, what to record for the next call). Another version is one registered and not read yet.
    The raw step's recorded ``inputs`` (the run file and sidecar as they were) tell an untouched file at a
    glance; a file that differs by them (touched, registered again, another name for the run, a storage root
    copied) is compared by content with the ``fingerprint`` it recorded, once: ``seen`` is what the previous
    call recorded (stats whose content was found the same), and such a file is not hashed again. A run file
    that left the inbox is no new version: the stages stay the run's."""
    metadata = raw.asset_materialization.metadata
    recorded, read = metadata.get("inputs"), metadata.get("fingerprint")
    src = storage.find_run(key)
    if src is None or recorded is None or read is None:  # gone, or read by a version that did not record it
        return False, None
    now = _stats((src, meta_path_for(src)))
    if now == recorded.value:
        return False, None
    same = {"stats": now, "fingerprint": read.value}
    if seen == same:
        return False, same
    return (False, same) if fingerprint(src) == read.value else (True, None)


def export_outputs(storage, key, asset_name) -> dict:
    """``{path: [size, mtime_ns, inode] or None}`` of what ``published/<run>/`` holds of the export ``asset_name``
    (each format's file and its report), recorded as ``outputs`` at the end of the export: a re-export that
    changes nothing leaves them untouched, so a file removed or edited by hand since is a reason to export
    the run again."""
    kind = EXPORT_KINDS[asset_name]
    files = [storage.published_path(key, kind, fmt) for fmt in FORMATS]
    return _stats([p for path in files for p in (path, report_file(path))])


def live_files(storage, key, kind, outcomes) -> dict:
    """``{format: {"path", "sha256"}}`` of the files ``published/<run>/`` holds of export ``kind`` (what a trainer
    downloads). ``outcomes``: what this export published (``publish``), whose SHA-256 is known; a file it did
    not publish (a refusal, nothing to publish) is hashed, as its report could be older than it."""
    out = {}
    for fmt in FORMATS:
        path = storage.published_path(key, kind, fmt)
        if not path.is_file():
            continue
        outcome = outcomes.get(fmt) or {}
        try:
            sha = outcome["sha256"] if outcome.get("path") == str(path) else sha256_file(path)
        except OSError:  # removed or unreadable since: named, without a hash
            sha = None
        out[fmt] = {"path": str(path), "sha256": sha}
    return out


def _stats(paths) -> dict:
    out = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:  # none there (or none to be had: a name too long, a loop of links; reading it says why)
            out[str(path)] = None
        else:
            out[str(path)] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return out

def _reward_pictures(stats):
    """Reward histogram and pass rate by group (markdown for the UI) of a ``ScoreStats``."""
    return {
        "reward_histogram": dg.MetadataValue.md(stats.histogram_markdown()),
        "group_pass_rates": dg.MetadataValue.md(stats.groups_markdown()),
    }


def _candidate_dir(context, storage):
    """This run's candidate folder, once the folders of killed runs are gone: each holds a whole export,
    and under the partition lock no other export of this run is writing one."""
    cand_dir = storage.candidate_dir(context.partition_key, context.run.run_id)
    shutil.rmtree(cand_dir.parent, ignore_errors=True)  # their publishes were finished under the lock
    return cand_dir


def _export_candidates(context, storage, kind, formats, export, source, what, **options):
    """Every format's candidate of a ``kind`` export from one library call (``export``: one read of
    ``source``): (candidate folder, {format: path}, {format: report}). The gates decide afterwards
    (``_finish_export``), so the library is told not to refuse; a ValueError it raises (ExportError and
    the ValueErrors the library shares with the reference) discards the candidates and fails the step."""
    cand_dir = _candidate_dir(context, storage)
    candidates = {fmt: cand_dir / f"{kind}.{fmt}.jsonl" for fmt in formats}
    try:
        reports = export(
            str(source),
            {fmt: str(path) for fmt, path in candidates.items()},
            validate=False,
            progress=(progress := _progress(context, f"{kind} export ({', '.join(formats)})")),
            **options,
        )
        progress.close()
    except WriteFailedError as exc:
        discard(cand_dir)
        raise _write_failure(exc, storage, "nothing was published and the published files are unchanged", what) \
            from None
    except ValueError as exc:
        discard(cand_dir)
        said = _said_of_the_run(str(exc), storage, context.partition_key, source) if kind == "sft" else None
        raise _library_failure(exc, what, said) from None
    _advise_pipeline_users(reports, storage, context.partition_key)
    if kind == "sft":
        _name_rows_in_the_run(reports, storage, context.partition_key, source)
    return cand_dir, candidates, reports


# The library ends its no-tools and no-system-prompt warnings with advice for its callers: pass tools= or
# system_prompt=, or keep a sidecar beside the file given (for the DPO export, the pairs file). A pipeline
# user passes neither and never handles a stage file: both come from the run's sidecar only.
LIBRARY_SIDECAR_ADVICE = (sft.NO_TOOLS_ADVICE, sft.NO_SYSTEM_ADVICE,
                          preference.NO_TOOLS_ADVICE, preference.NO_SYSTEM_ADVICE)
# ... and its two-system-turns warnings with system_prompt="", which the run's sidecar says instead
LIBRARY_TWO_SYSTEMS_ADVICE = (sft.TWO_SYSTEMS_ADVICE, preference.TWO_SYSTEMS_ADVICE)
# ... and its undeclared-tool warnings with "the tools", which for a pipeline user are the sidecar's
LIBRARY_UNDECLARED_ADVICE = (sft.UNDECLARED_ADVICE, preference.UNDECLARED_ADVICE)
# ... and its failed-rows warning with ``scored.passes()``, where the pipeline has its sft_rows option
LIBRARY_FAILED_ROWS_ADVICE = (sft.FAILED_ROWS_ADVICE,)


def _run_file(storage, key) -> Path:
    """The run file a pipeline user has: the one ``run``/``register`` copied into the inbox, else the inbox's."""
    return Path(storage.registered_from(key) or storage.find_run(key) or storage.run_path(key))


def run_sidecar_advice(storage, key) -> str:
    """What a pipeline user does for an export without tool schemas or system prompt: give the run a sidecar,
    named beside the run file (``_run_file``)."""
    run = _run_file(storage, key)
    return (f"Put system_prompt and tools in the run's sidecar {meta_path_for(run)} (a JSON object beside "
            f"{run.name}) and run it again.{_misspelled_sidecar_keys(meta_path_for(run))}")


def _misspelled_sidecar_keys(meta) -> str:
    """The sidecar's keys that stand for ``system_prompt`` or ``tools`` under another name (``system``,
    ``systemPrompt``, ``tool``, ``functions``) where that name is missing: the export reads only those two
    names, and a user who wrote the file sees it there."""
    try:
        data = read_json(meta)
    except (OSError, ValueError):  # none, or one the raw stage refused already
        return ""
    if not isinstance(data, dict):
        return ""
    said = []
    for key in data:
        flat = "".join(c for c in str(key).lower() if c.isalnum())
        if "system_prompt" not in data and ("system" in flat or flat == "sysprompt"):
            said.append(f"{key!r} (did you mean 'system_prompt'?)")
        elif "tools" not in data and (flat.startswith("tool") or flat == "functions"):
            said.append(f"{key!r} (did you mean 'tools'?)")
    return f" The sidecar has {', '.join(said)}: the export reads only these two names." if said else ""


def two_systems_advice(storage, key) -> str:
    """What a pipeline user does for rows given the run's system prompt besides their own: the pipeline has no
    system_prompt= option, the run's sidecar is where the prompt comes from."""
    return (f"Take the system message out of the rows, or set \"system_prompt\" to \"\" in the run's sidecar "
            f"{meta_path_for(_run_file(storage, key))} to keep only the rows' own (rows without one then have none), "
            "and run it again.")


def undeclared_tool_advice(storage, key) -> str:
    """What a pipeline user does for rows that call a tool the run's tools do not declare: those tools are the
    sidecar's, the pipeline has no tools= option."""
    return (f"Add the tool's schema to \"tools\" in the run's sidecar {meta_path_for(_run_file(storage, key))}, "
            "or take those rows out of the run, and run it again.")


def failed_rows_advice(storage, key) -> str:
    """What a pipeline user does for failed rows in the SFT export: its sft_rows option chooses them."""
    return "Set sft_rows: pass to export the passing rows only, unless that is intended."


def _advise_pipeline_users(reports, storage, key) -> None:
    """Put ``run_sidecar_advice``, ``two_systems_advice``, ``undeclared_tool_advice`` and ``failed_rows_advice`` in
    place of the library's advice in each report's warnings (in place), so the metadata, the stored reports and the
    CLI name what a pipeline user can act on."""
    advice = {}
    for report in reports.values():
        warnings = report.get("warnings") or []
        for i, text in enumerate(warnings):
            if not isinstance(text, str):
                continue
            for endings, advise in ((LIBRARY_SIDECAR_ADVICE, run_sidecar_advice),
                                    (LIBRARY_TWO_SYSTEMS_ADVICE, two_systems_advice),
                                    (LIBRARY_UNDECLARED_ADVICE, undeclared_tool_advice),
                                    (LIBRARY_FAILED_ROWS_ADVICE, failed_rows_advice)):
                ending = next((a for a in endings if text.endswith(a)), None)
                if ending is not None:
                    if advise not in advice:
                        advice[advise] = advise(storage, key)
                    warnings[i] = text[: -len(ending)] + advice[advise]
                    break


def _name_rows_in_the_run(reports, storage, key, source) -> None:
    """``_said_of_the_run`` for each SFT warning that names its first row by its place in the stage (``row <i> of
    the source, counting from 0``), in place."""
    for report in reports.values():
        warnings = report.get("warnings") or []
        for i, text in enumerate(warnings):
            if isinstance(text, str) and _SOURCE_ROW in text:
                warnings[i] = _said_of_the_run(text, storage, key, source)


_SOURCE_ROW = "of the source, counting from 0"
_FIRST_SOURCE_ROW = re.compile(r"\(first: row (\d+) " + re.escape(_SOURCE_ROW))


def _said_of_the_run(message, storage, key, source) -> str:
    """An SFT export's error or warning about a row of its stage ``source`` (``<source>:<line>``, or a warning's
    ``(first: row <i> of the source, counting from 0``) with that row named by its line in the run
    (``_run_line``), and the library's ``system_prompt=`` advice as the run's sidecar: the stage holds only the
    rows exported (the passing ones, by default), so its numbers are not the run's, and a pipeline user neither
    edits a stage nor passes arguments. A row the run cannot be matched to keeps the library's words."""
    def in_run(match):
        return _run_line(storage, key, source, int(match.group(1))) or match.group(0)

    def first_in_run(match):
        line = _run_line(storage, key, source, int(match.group(1)) + 1)
        return f"(first: {line}" if line else match.group(0)

    message = re.sub(re.escape(str(source)) + r":(\d+)", in_run, message)
    message = _FIRST_SOURCE_ROW.sub(first_in_run, message, count=1)
    sidecar = meta_path_for(_run_file(storage, key))
    return message.replace(SYSTEM_PROMPT_ARGUMENT, f"(or a system_prompt in the run's sidecar {sidecar})")


def _run_line(storage, key, source, line):
    """``<file>:<line>`` of the run line that row ``line`` of the SFT stage ``source`` came from, else None.

    The scored stage holds one row per non-blank line of the raw stage, in order, and ``sft_source`` its
    passing rows. The file named is the inbox run when the raw stage is still its copy (the CLI names it as
    the file given), else the raw stage (``on_bad_line: quarantine`` left lines out: its numbers are its own).
    Read only on this failure, and only up to the row."""
    scored, raw = storage.stage_path(key, STAGE_SCORED), storage.stage_path(key, STAGE_RAW)
    try:
        if Path(source) == storage.stage_path(key, STAGE_SFT_SOURCE):
            passing = (n for n, row in iter_jsonl(scored)
                       if isinstance(row, dict) and verdict(row.get("reward")) == "pass")
            line = next(itertools.islice(passing, line - 1, None), None)
        elif Path(source) != scored:
            return None
        if line is None:
            return None
        line = next(itertools.islice((n for n, _ in iter_jsonl(raw)), line - 1, None), None)
        if line is None:
            return None
        run = storage.find_run(key)
        named = run if run is not None and filecmp.cmp(run, raw, shallow=False) else raw
    except (OSError, ValueError):  # a stage gone or changed since: the library's own words stay
        return None
    return f"{named}:{line}"


def _gates_run_after(context) -> bool:
    """Whether this run executes the export's blocking gate checks. A run can leave them out (a selection
    ``without_checks()``, ``materialize`` given the assets alone, the export step re-executed alone), and
    then nothing would fail it when the gates refuse the export. It reads Dagster's run plan (1.13, pinned);
    when that cannot be read, the checks are taken as absent: the step fails, which is the safe side."""
    try:
        layer = context.job_def.asset_layer
        checks = [dg.AssetCheckKey(context.asset_key, gate) for gate in GATES]
        if not set(checks) <= set(layer.asset_graph.asset_check_keys):
            return False
        selected = context.run.asset_check_selection
        if selected is not None and not set(checks) <= set(selected):
            return False
        steps = context.run.step_keys_to_execute
        return steps is None or all(str(layer.get_op_output_handle(c).node_handle) in steps for c in checks)
    except Exception:  # noqa: BLE001 - a Dagster internal that moved; failing the refused export is safe
        return False


def _not_put_in_place(exc, storage, key, kind, cand_dir, refused) -> str:
    """The step's failure when a file could not be renamed into ``published/`` (or, for an export the gates
    ``refused``, into ``rejected/``): Dagster would show the bare OSError, which says neither what was left
    published nor what to do. A refused rename puts back the files already replaced (``journal.rollback``)
    and deletes the publish journal; a journal still there names the files it could not put back."""
    if isinstance(exc, WriteFailedError):  # a report or gates.json, written through atomic_file: its OSError
        where, exc = exc.dest, exc.reason
    else:
        where = exc.filename2 or exc.filename or cand_dir
    folder = storage.rejected_root(key) if refused else storage.published_dir(key)
    done, undoing = [], False
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        left = cand_dir / f"publish-{kind}{journal.SUFFIX}"
        done, undoing = journal.replaced(left), journal.undoing(left)
    if refused:
        state = (f"the gates refused this export ({refused}) and its candidate could not be kept under {folder}; "
                 "the published files are unchanged")
    elif done:
        were = "was" if len(done) == 1 else "were"
        if undoing:  # the put-back was refused too: the next step finishes putting back
            why = (f"putting the previous {'one' if len(done) == 1 else 'ones'} back was refused too; the run's "
                   "next step puts them back before it reads anything")
        else:  # no copy of the previous files could be kept (another filesystem): the next step completes it
            why = ("the previous files could not be kept to put back; the run's next step completes this "
                   "publish before it reads anything")
        state = (f"{', '.join(done)} {were} already replaced, and {why}; the other published files of this "
                 "export are the previous ones")
    else:
        state = "nothing was published and the published files are unchanged"
    advice = _storage_advice(exc.errno, folder)
    return (f"write_failed: {kind} export for {key!r}: {where}: {exc.strerror or exc}; {state}. {advice}, "
            "then materialize again.")


def _unread_version(context, storage, key, kind):
    """(What to say when the inbox holds another version of the run than raw_simulation_data last read, else
    None; what to record as ``inbox_checked``, ``run_file_changed``'s memory). A version registered and never
    read: CI that registers a run and materializes only the exports, which re-export the stages as they are. A
    file that cannot be looked at says nothing here: the export itself is what matters."""
    export = sft_export if kind == "sft" else dpo_export
    try:
        latest = latest_materializations(context.instance, [key], (raw_simulation_data, export))
        raw, previous = latest["raw_simulation_data"].get(key), latest[export.key.to_user_string()].get(key)
        if raw is None:
            return None, None
        seen = previous.asset_materialization.metadata.get("inbox_checked") if previous is not None else None
        changed, checked = run_file_changed(storage, key, raw, seen.value if seen is not None else None)
    except OSError:
        return None, None
    if not changed:
        return None, checked
    return (f"the run file in the inbox is not the one raw_simulation_data last read (a newer version of the run, "
            f"registered and never read): this {kind} export is of the stages as they are, an earlier version. "
            "Materialize the run's whole chain (--select '*', or whileai-pipeline run <run file>) to export it"), None


def _finish_export(context, storage, kind, formats, candidates, reports, config, cand_dir, pictures, inputs,
                   totals=None, unread=None):
    """Decide from the reports, publish or reject, and describe it all as metadata: the status and the summary
    first (what the asset page's table opens with), then the numbers, then the per-format reports and paths.
    ``inputs``: ``export_inputs`` taken before the stage was read. ``totals``: plotted numbers of the whole
    export, beside ``dagster/row_count``. ``unread``: what ``_unread_version`` found."""
    key = context.partition_key
    validate = config.validate_gates
    failed = failed_gates(reports)
    blocked = validate and bool(failed)
    rejected_dir = None
    removed = []
    try:
        try:
            if blocked:
                rejected_dir = (same_refusal(storage.rejected_root(key), kind, candidates, reports, failed, validate)
                                or storage.rejected_root(key) / rejected_dir_name(context.run.run_id, kind))
                outcomes = reject(candidates, reports, rejected_dir, failed, validate)
            else:
                destinations = {fmt: storage.published_path(key, kind, fmt) for fmt in formats}
                outcomes, removed = publish(candidates, reports, destinations, kind,
                                            others={fmt: storage.published_path(key, kind, fmt) for fmt in FORMATS})
        except (OSError, WriteFailedError):  # a refusal: what was replaced is put back, or left journaled
            raise
        except BaseException:
            journal.finish_all(cand_dir.parent.parent)  # a publish interrupted half-way (Ctrl-C): completed
            raise
    except (OSError, WriteFailedError) as exc:  # published/ or rejected/ refused a file: no room, no permission, ...
        raise dg.Failure(description=_not_put_in_place(exc, storage, key, kind, cand_dir, failed if blocked else None),
                         metadata={"error": type(exc).__name__}) from None
    finally:
        if not journal.left_in(cand_dir):  # else its staged and kept files are what the next step settles it with
            discard(cand_dir)

    if blocked:
        status = "rejected"
    elif not any(o["path"] for o in outcomes.values()):
        status = "nothing to publish"
    elif all(o["unchanged"] for o in outcomes.values() if o["path"]) and not removed:
        status = "unchanged"  # a removed file is a change to what published/<run>/ holds
    else:
        status = "published"

    numbers = sft_numbers if kind == "sft" else dpo_numbers
    first = reports[formats[0]]
    row_count = first.get("n_written") if kind == "sft" else first.get("pairs")
    metadata = {
        "status": status,
        "validate": validate,
        "published": not blocked and any(o["path"] for o in outcomes.values()),
        "formats": dg.MetadataValue.json(list(formats)),
        "gates": dg.MetadataValue.json({fmt: {g: g not in failed.get(fmt, []) for g in
                                              ("tool_call_roundtrip", "privileged_leak")} for fmt in formats}),
        "dagster/row_count": int(row_count or 0),
        # how many of the gates failed in any format (a refused or let-through export plots as a spike)
        "gates_failed": len({gate for gates in failed.values() for gate in gates}),
        **(totals or {}),
    }
    if rejected_dir is not None:
        metadata["rejected_path"] = dg.MetadataValue.path(str(rejected_dir))
    kept = [str(p) for fmt in FORMATS if (p := storage.published_path(key, kind, fmt)).is_file()]
    if status == "nothing to publish" and kept:
        # what a consumer of published/<run>/ now reads comes from an earlier materialization
        metadata["kept_earlier"] = dg.MetadataValue.json(kept)
    if removed:
        metadata["removed"] = dg.MetadataValue.json(removed)
    for fmt in formats:
        report, outcome = reports[fmt], outcomes[fmt]
        # ``path`` names where the file is now, as the report beside it does: the candidate's folder is gone
        shown = {**report, "path": outcome["path"]} if "path" in report else report
        metadata[f"{fmt}/report"] = dg.MetadataValue.json(shown)
        for name, value in numbers(report).items():
            metadata[f"{fmt}/{name}"] = value
        if outcome["path"]:
            label = "rejected_path" if blocked else "published_path"
            metadata[f"{fmt}/{label}"] = dg.MetadataValue.path(outcome["path"])
            metadata[f"{fmt}/sha256"] = outcome["sha256"]
    warnings = {fmt: reports[fmt]["warnings"] for fmt in formats if reports[fmt].get("warnings")}
    if warnings:
        metadata["warnings"] = dg.MetadataValue.json(warnings)
    if first.get("source_path"):
        metadata["source_path"] = dg.MetadataValue.path(str(first["source_path"]))
        metadata["source_sha256"] = str(first.get("source_sha256") or "")
    summary = dg.MetadataValue.md(export_summary_markdown(kind, reports, outcomes, status, validate, failed,
                                                          rejected_dir, root=storage.base))
    metadata = {"status": metadata.pop("status"), "summary": summary, **metadata}
    metadata.update(pictures)
    if blocked:
        context.log.error(
            f"{kind} export for {key!r} refused by its gates ({failed}); candidate kept under "
            f"{rejected_dir}; the published files are unchanged"
        )
    elif failed:
        context.log.warning(f"{kind} export for {key!r} failed gates {failed} but validate is false: published anyway")
    if status == "nothing to publish":
        context.log.warning(
            f"{kind} export for {key!r} has no {'rows' if kind == 'sft' else 'pairs'} to publish; "
            + (f"the earlier published files are kept: {', '.join(kept)}" if kept else "nothing is published"))
    if removed:
        context.log.info(f"{kind} export for {key!r}: removed the files of formats it did not publish: {removed}")
    metadata["config"] = dg.MetadataValue.json(as_run_config(config))  # what a re-export runs with
    # what else the files depend on: the schedule skips the run while all three stay the same
    metadata["inputs"] = dg.MetadataValue.json(inputs)
    metadata["outputs"] = dg.MetadataValue.json(export_outputs(storage, key, f"{kind}_export"))
    # what a trainer downloads now: this export's files when it published them, the earlier ones it left
    # in place when it was refused or had nothing to publish (its own <f>/sha256 is then not theirs)
    metadata["live"] = dg.MetadataValue.json(live_files(storage, key, kind, outcomes if not blocked else {}))
    metadata["code_fingerprint"] = code_fingerprint()
    said, checked = unread if unread is not None else (None, None)
    if said:
        metadata["warning"] = said
        context.log.warning(said)
    if checked:  # the inbox file compared by content and found the same: not hashed again while it stays so
        metadata["inbox_checked"] = dg.MetadataValue.json(checked)
    if blocked and not _gates_run_after(context):
        raise dg.Failure(
            description=f"{kind} export for {key!r} refused by its gates ({failed}); this run does not execute "
            "the gate checks, which would fail it, so the export step fails instead. The published files are "
            f"unchanged; the candidate and its reports are under {rejected_dir}. Materialize the export with its "
            "checks (the default selection) to record the refusal as a materialization and check results.",
            metadata={name: metadata[name] for name in ("status", "gates", "rejected_path", "summary")})
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    partitions_def=simulation_runs,
    group_name=GROUP,
    deps=[scored_simulation_data],
    kinds={"python", "jsonl"},
    description="SFT training files in each configured format (export_datasets: one read for all), published to "
    "`published/<run>/sft.<format>.jsonl` only when the round-trip and leak gates pass.",
)
@_one_process_per_run
def sft_export(
    context: dg.AssetExecutionContext, config: SftExportConfig, storage: PipelineStorage
) -> dg.MaterializeResult:
    key = context.partition_key
    scored = storage.stage_path(key, STAGE_SCORED)
    _require_stage(storage, scored, "scored_simulation_data")
    inputs = export_inputs(storage, key, "sft_export")  # before the read: a later change is a change
    unread = _unread_version(context, storage, key, "sft")  # before anything is written
    if config.sft_rows == "pass":
        source = storage.stage_path(key, STAGE_SFT_SOURCE)
        carried = ScoreStats()  # of the rows the export carries, counted in the pass that picks them
        with atomic_file(incoming_path(source)) as out:
            passing_rows_file(scored, out, carried, dest=source)  # over workers for a big run
        _stage_with_sidecar(incoming_path(source), source, meta_path_for(scored))
    else:
        source = scored
        carried = None
    formats = list(config.formats)
    # Every format from one read: each row is parsed, converted and leak-checked once.
    cand_dir, candidates, reports = _export_candidates(
        context, storage, "sft", formats, wai.export_datasets, source, "export_dataset",
        mask_mode=config.mask_mode.value,
        unroll=config.unroll,
        strip_think=config.strip_think,
        max_tool_output_chars=config.max_tool_output_chars,
    )
    stats = carried if carried is not None else score_stats_of_file(source)
    # the mean reward of the rows the export carries: NaN when none is graded, so the key stays
    return _finish_export(context, storage, "sft", formats, candidates, reports, config, cand_dir,
                          _reward_pictures(stats), inputs, {"mean_reward": real(stats.mean_reward)}, unread)


@dg.asset(
    partitions_def=simulation_runs,
    group_name=GROUP,
    deps=[preference_pairs],
    kinds={"python", "jsonl"},
    description="DPO preference files in each configured format (export_preferences: one read for all), "
    "published to `published/<run>/dpo.<format>.jsonl` only when the round-trip and leak gates pass.",
)
@_one_process_per_run
def dpo_export(
    context: dg.AssetExecutionContext, config: DpoExportConfig, storage: PipelineStorage
) -> dg.MaterializeResult:
    key = context.partition_key
    pairs_path = storage.stage_path(key, STAGE_PAIRS)
    _require_stage(storage, pairs_path, "preference_pairs")
    inputs = export_inputs(storage, key, "dpo_export")  # before the read: a later change is a change
    unread = _unread_version(context, storage, key, "dpo")  # before anything is written
    formats = list(config.formats)
    # Every format from one read. A path source: the pairs stream from the stage file, the system
    # prompt and tools come from its sidecar (pairs.meta.json), and the report names the file and
    # its SHA-256.
    cand_dir, candidates, reports = _export_candidates(
        context, storage, "dpo", formats, wai.export_preferences, pairs_path, "export_preference",
        strip_think=config.strip_think,
        drop_ties=config.drop_ties,
    )
    pictures = _reward_pictures(score_stats_of_file(pairs_path, sides=True))  # both sides of every pair
    return _finish_export(context, storage, "dpo", formats, candidates, reports, config, cand_dir,
                          pictures, inputs, unread=unread)


ASSETS = [raw_simulation_data, scored_simulation_data, preference_pairs, sft_export, dpo_export]
ASSET_NAMES = [a.key.to_user_string() for a in ASSETS]
