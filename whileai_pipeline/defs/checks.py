"""The gates as blocking asset checks: ``tool_call_roundtrip`` and ``privileged_leak`` on both exports.

Each check reads the export report from its own run's materialization of the asset (the export
asset stores every format's full report as metadata), falling back to the partition's latest one
when the check runs alone. Under ``validate=True`` a failed
gate is ``passed=False`` with ERROR severity; because the checks are ``blocking=True``, Dagster then
fails the check step (``DagsterAssetCheckFailedError``), skips everything downstream and fails the
run, so ``dagster asset materialize`` and ``whileai-pipeline run`` exit non-zero. The export asset
has already kept the published files untouched and moved the candidate under ``rejected/``.

Under ``validate=False`` the checks pass with WARN severity and say what was let through. A leak
check that had nothing to read (no row carried privileged context) passes with WARN and says so.
"""

import os
import warnings

import dagster as dg
import orjson

from whileai_pipeline.core.gates import LEAK_FIELDS, LEAK_MIN_QUOTE_CHARS, SCRUBBED_BY_THE_EXPORT
from whileai_pipeline.core.openai_format import summary, validate_file

from .assets import dpo_export, sft_export
from .partitions import simulation_runs
from .summaries import md_table

ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN


def _report_metadata(context, asset_key):
    """This run's materialization of the export (so two overlapping runs never judge each other's
    report); the partition's latest one when the check runs without its asset."""
    own = [
        event.asset_materialization
        for event in context.instance.all_logs(context.run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        if event.asset_materialization is not None
        and event.asset_materialization.asset_key == asset_key
        and event.asset_materialization.partition == context.partition_key
    ]
    if own:
        return own[-1].metadata, context.run.run_id
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[context.partition_key]), limit=1
    ).records
    if not records:
        return None, None
    record = records[0]
    return record.asset_materialization.metadata, record.run_id


def _value(metadata, name, default=None):
    entry = metadata.get(name)
    return default if entry is None else entry.value


def _reports(metadata):
    return {fmt: _value(metadata, f"{fmt}/report") or {} for fmt in _value(metadata, "formats", [])}


def _no_materialization(asset_key, partition, severity=ERROR):
    return dg.AssetCheckResult(
        passed=False,
        severity=severity,
        description=f"nothing to check: {asset_key.to_user_string()} has no materialization for "
        f"partition {partition!r}",
    )


def _common_metadata(metadata, run_id):
    out = {"validate": bool(_value(metadata, "validate", True)), "export_status": _value(metadata, "status", "")}
    if run_id:
        out["materialization_run_id"] = run_id
    rejected = _value(metadata, "rejected_path")
    if rejected:
        out["rejected_path"] = dg.MetadataValue.path(str(rejected))
    live = _value(metadata, "live")
    if live is not None:  # the files published now, refused export or not
        out["live"] = dg.MetadataValue.json(live)
    return out


def _roundtrip_result(metadata, run_id, asset="<export>"):
    reports = _reports(metadata)
    validate = bool(_value(metadata, "validate", True))
    out = _common_metadata(metadata, run_id)
    checked = invalid = 0
    bad = []
    for fmt, report in reports.items():
        part = report.get("tool_call_roundtrip") or {}
        out[f"{fmt}/tool_call_roundtrip"] = dg.MetadataValue.json(part)
        out[f"{fmt}/checked"] = int(part.get("checked") or 0)
        out[f"{fmt}/invalid"] = int(part.get("invalid") or 0)
        checked += out[f"{fmt}/checked"]
        invalid += out[f"{fmt}/invalid"]
        if part.get("invalid"):
            path = _value(metadata, f"{fmt}/rejected_path") or _value(metadata, f"{fmt}/published_path")
            where = _rows_named(path, part.get("rows") or [])
            bad.append(f"{fmt}: {part.get('invalid')} of {part.get('checked')} (rows {part.get('rows')}{where})")
    if not bad:
        # each format writes the same tool calls: say how many there are, not their sum over formats
        per_format = max((out[f"{fmt}/checked"] for fmt in reports), default=0)
        text = (f"all {per_format} tool call(s) parse back to structured arguments in each of "
                f"{len(reports)} format(s)" if len(reports) > 1 else
                f"all {checked} tool call(s) parse back to structured arguments")
        if validate:
            return dg.AssetCheckResult(passed=True, severity=ERROR, description=text, metadata=out)
        return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out,
                                   description=text + f" ({LET_THROUGH}: this gate would not have blocked)")
    text = "tool calls whose arguments do not parse back to an object: " + "; ".join(bad)
    if validate:
        return dg.AssetCheckResult(passed=False, severity=ERROR, metadata=out,
                                   description=text + _refused("tool_call_roundtrip", asset, metadata))
    return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out,
                               description=text + f". Exported anyway ({LET_THROUGH}).")


def _rows_named(path, indices, limit=3):
    """``: line 1 of sft.openai.jsonl, scenario s1, 'Where is order 7?'; ...`` for the first ``limit`` row
    indices of the written file ``path``, so the rows can be found in the run (the indices count the
    exported rows, not the run's lines); empty when the file cannot be read."""
    wanted = sorted(set(indices))[:limit]
    if not path or not wanted:
        return ""
    found = {}
    try:
        with open(path, "rb") as fh:
            for index, line in enumerate(fh):
                if index in wanted:
                    found[index] = orjson.loads(line)
                if index >= wanted[-1]:
                    break
    except (OSError, ValueError):
        return ""
    named = []
    for index in wanted:
        row = found.get(index)
        if not isinstance(row, dict):
            continue
        parts = [f"line {index + 1} of {os.path.basename(path)}"]
        if row.get("scenario_id") is not None:
            parts.append(f"scenario {row['scenario_id']}")
        prompt = row.get("prompt_text") or row.get("prompt")
        if isinstance(prompt, list):  # a preference row's prompt messages: the last user turn
            users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
            prompt = users[-1] if users else None
        if isinstance(prompt, str) and prompt:
            parts.append(repr(prompt if len(prompt) <= 60 else prompt[:57] + "..."))
        named.append(", ".join(parts))
    return (": " + "; ".join(named)) if named else ""


def _leak_result(metadata, run_id, asset="<export>"):
    reports = _reports(metadata)
    validate = bool(_value(metadata, "validate", True))
    out = _common_metadata(metadata, run_id)
    any_checked = False
    leaked_total = 0
    rejected_quoting = 0
    summaries = []
    for fmt, report in reports.items():
        part = report.get("privileged_leaks") or {}
        out[f"{fmt}/privileged_leaks"] = dg.MetadataValue.json(part)
        out[f"{fmt}/rows_checked"] = int(part.get("n_checked") or 0)
        out[f"{fmt}/rows_leaked"] = int(part.get("n_leaked") or 0)
        any_checked = any_checked or bool(part.get("checked"))
        leaked_total = max(leaked_total, int(part.get("n_leaked") or 0))
        rejected_quoting = max(rejected_quoting, int(part.get("rejected_quoting") or 0))
        if part.get("summary") and part["summary"] not in summaries:
            summaries.append(part["summary"])
    summary = "; ".join(summaries) or "no leak report"
    if any("rejected_quoting" in (r.get("privileged_leaks") or {}) for r in reports.values()):
        out["rejected_quoting"] = rejected_quoting  # a DPO report's count, in every result: one plot, no gaps
    if rejected_quoting:
        summary += (f"; {rejected_quoting} rejected side(s) quote their privileged context "
                    "(a useful negative, not refused)")
    if leaked_total:
        rows = _leaked_rows(reports)
        out["leaked_rows"] = dg.MetadataValue.md(md_table(["scenario", "rollout", "field", "quoted text"], rows))
        summary += "; first: " + ", ".join(f"{s} rollout {r} quotes privileged.{f}" for s, r, f, _ in rows[:3])
        if validate:
            return dg.AssetCheckResult(passed=False, severity=ERROR, metadata=out,
                                       description=summary + _refused("privileged_leak", asset, metadata))
        return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out,
                                   description=summary + f". Exported anyway ({LET_THROUGH}).")
    if not any_checked:
        # an export of nothing: no row read, or none written (every pair a dropped tie, every row dropped)
        if reports and all(r.get("rows_read") == 0 or r.get("n_written", r.get("pairs")) == 0
                           for r in reports.values()):
            # not the library's "none carried privileged context": the rows it read may well have
            said = ("no row was exported, so no reply was written that could quote anything; the gate reads the "
                    "rows of the next export that has some.")
        else:
            # the library's guess at why (rows saved through the SDK's export) is one cause of several: said below
            said = (summary.replace(SCRUBBED_BY_THE_EXPORT, "") + ". This pass proves nothing about leaks: the gate "
                    f"reads the texts ({LEAK_MIN_QUOTE_CHARS} characters or more) under a privileged object's "
                    f"{', '.join(LEAK_FIELDS[:-1])} and {LEAK_FIELDS[-1]} only, so one holding other keys alone (an "
                    "answer, notes) gives it nothing to read; export raw trajectories (which keep their privileged "
                    "blocks), not rows saved through the export; a privileged block written as JSON text is not "
                    "read either (raw_simulation_data's rows_with_privileged_text counts them).")
        return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out, description="NOTHING TO READ: " + said)
    if not validate:
        return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out,
                                   description=summary + f" ({LET_THROUGH}: this gate would not have blocked)")
    return dg.AssetCheckResult(passed=True, severity=WARN if rejected_quoting else ERROR,
                               metadata=out, description=summary)


def _leaked_rows(reports):
    """[scenario, rollout, field, quoted text] of each leaking row the reports name (each once, in order)."""
    rows = []
    for report in reports.values():
        for leak in (report.get("privileged_leaks") or {}).get("leaked") or []:
            row = [leak.get("scenario_id"), leak.get("rollout_index"), leak.get("field"), leak.get("needle")]
            if row not in rows:
                rows.append(row)
    return rows


_REMEDY = {
    "tool_call_roundtrip": "fix those tool calls in the run (arguments must be a JSON object) or in the tool "
    "that wrote them",
    "privileged_leak": "drop or regenerate the rollouts named (their assistant replies repeat the privileged "
    "context the simulator gave them, which the model must not learn to say)",
}


# How a pipeline user turns the gates off, in the words of the config they write (validate=False is the
# library's keyword argument, which they never pass).
LET_THROUGH = "validate: false"


def _refused(gate, asset, metadata):
    """What a refusal means and what to do: said in the description, which the CLI and the check page show.
    A published file that is the refused candidate byte for byte (published before, with the gates off, or
    by code whose gates passed it) is said to hold what was refused: "unchanged" alone read as "safe"."""
    live = _value(metadata, "live") or {}
    same = [fmt for fmt, report in _reports(metadata).items()
            if report.get("sha256") and (live.get(fmt) or {}).get("sha256") == report["sha256"]]
    held = (f"; published/ holds these same rows already in {', '.join(same)}: what a trainer downloads now is "
            "what this gate refused") if same else ""
    return (f". Export refused: the published files are unchanged{held}, and the candidate and its reports are "
            f"kept under rejected/ (this check's rejected_path). To fix: {_REMEDY[gate]}, then run the chain again; "
            f"{LET_THROUGH} (in the options file, or ops.{asset}.config.validate in Dagster's run config) would "
            "publish it anyway, with this check as a WARN.")


_DESCRIPTIONS = {
    "tool_call_roundtrip": "Every tool call's arguments parse back to an object in the exported encoding "
    "(openai: a JSON string; trl: a dict). Blocking: a failure refuses the export unless validate is false.",
    "privileged_leak": "No exported assistant reply quotes its row's privileged context (reference, principle, "
    "hidden state); tool-call arguments are not searched. Blocking: a failure refuses the export unless validate "
    "is false. Nothing to read: WARN.",
}
_RESULTS = {"tool_call_roundtrip": _roundtrip_result, "privileged_leak": _leak_result}


def _gate_check(asset_def, gate):
    asset_key = asset_def.key

    def _check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        metadata, run_id = _report_metadata(context, asset_key)
        if metadata is None:
            return _no_materialization(asset_key, context.partition_key)
        result = _RESULTS[gate](metadata, run_id, asset_key.to_user_string())
        if not result.passed and result.severity == ERROR:
            # Dagster fails this step with only "1 blocking asset check failed": say here, in the failed
            # step's own log at ERROR, what failed, where the candidate is, and what to do
            where = _value(metadata, "rejected_path")
            context.log.error(f"{asset_key.to_user_string()} {gate} refused the export of {context.partition_key!r}: "
                              + result.description + (f" Candidate: {where}" if where else ""))
        return result

    # Partitioned checks record their result per run (partition) in the UI. Dagster 1.13 marks
    # `partitions_def` on checks as preview; the version is pinned, so the warning is silenced here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec.*")
        return dg.asset_check(
            asset=asset_def,
            name=gate,
            blocking=True,
            partitions_def=simulation_runs,
            description=_DESCRIPTIONS[gate],
        )(_check)


def _consumer_format_check(asset_def):
    """Non-blocking: every written file passes its consumer's format rules (issue 5)."""
    asset_key = asset_def.key

    def _check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        metadata, run_id = _report_metadata(context, asset_key)
        if metadata is None:  # non-blocking, as its every other outcome
            return _no_materialization(asset_key, context.partition_key, WARN)
        out, problems, checked = _common_metadata(metadata, run_id), [], 0
        for fmt in _value(metadata, "formats", []):
            path = _value(metadata, f"{fmt}/published_path") or _value(metadata, f"{fmt}/rejected_path")
            if not path:
                continue
            checked += 1
            try:
                report = validate_file(path, fmt)
            except OSError as exc:  # run without its asset, after the file was removed or moved
                why = ("is gone (removed since the export?)" if isinstance(exc, FileNotFoundError)
                       else f"cannot be read ({exc.strerror or exc})")
                problems.append(f"{fmt}: {path} {why}; materialize {asset_key.to_user_string()} again")
                continue
            out[f"{fmt}/format_report"] = dg.MetadataValue.json(summary(report))
            out[f"{fmt}/format_errors"] = int(report["errors"])
            out[f"{fmt}/format_warnings"] = int(report["warnings"])
            if not report["ok"]:
                problems.append(f"{fmt}: {report['errors']} error(s) in {report['rows_with_errors']} row(s)")
        if not checked:
            return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out,
                                       description="no file was written, so there was nothing to validate")
        whose = (" (the refused export's files, kept under rejected/; the published files were not replaced)"
                 if out["export_status"] == "rejected" else "")
        if problems:
            return dg.AssetCheckResult(passed=False, severity=WARN, metadata=out,
                                       description="consumer format problems: " + "; ".join(problems) + whose)
        return dg.AssetCheckResult(passed=True, severity=WARN, metadata=out,
                                   description=f"{checked} file(s) pass their consumer's format rules{whose}")

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec.*")
        return dg.asset_check(
            asset=asset_def,
            name="consumer_format",
            blocking=False,
            partitions_def=simulation_runs,
            description="Each written file passes the rules of what reads it: OpenAI's fine-tuning file format "
            "(openai) or TRL's conversational shapes (trl). Non-blocking: a failure is a WARN.",
        )(_check)


CHECKS = [_gate_check(asset_def, gate) for asset_def in (sft_export, dpo_export) for gate in _RESULTS]
CHECKS += [_consumer_format_check(asset_def) for asset_def in (sft_export, dpo_export)]
