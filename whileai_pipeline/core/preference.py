"""``export_preference``: chosen/rejected pairs as DPO rows, behind both gates (spec 7, DECISIONS 12)."""

import time
from pathlib import Path

from .conversation import conversation
from .errors import NoPreferencePairsError, PrivilegedLeakError, RoundtripInvalidError
from .gates import LeakGate, RoundtripGate, check_format, leak_verdict, scrub
from .jsonl import dumps
from .progress import tick
from .output import Spool, finish, refuse_source
from .pairs import first_turn_note, length_note
from .rows import SchemaCheck, preference_problems, stamp
from .runs import resolve_source
from .trl import trl_preference_row
from .wire import has_tool_calls, to_wire

PAIR_KEYS = (
    "tie", "pairwise", "first_turn_differs", "chosen_score", "rejected_score", "margin",
    "chosen_model", "rejected_model", "same_policy", "length_delta", "chosen_reason",
    "rejected_reason", "rejected_failure_class", "lineage",
)


def _pair_source(pairs, system_prompt, tools):
    """Pairs from a list, an iterator (read once) or a JSONL path; system and tools as for rows."""
    return resolve_source(pairs, system_prompt, tools)


def export_preference(pairs, output=None, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                      drop_ties=True, format="openai", progress=None):
    """Spec 7 + DECISIONS 12: export chosen/rejected pairs behind the round-trip and leak gates."""
    started = time.perf_counter()
    check_format(format)
    src = _pair_source(pairs, system_prompt, tools)
    dest = Path(output) if output else None
    if dest is not None and src.path is not None:
        refuse_source(dest, src.path)
    trl = format == "trl"
    roundtrip, leaks = RoundtripGate(format), LeakGate()
    schema = SchemaCheck("export_preference")
    n_entries = skipped = bad = ties = dropped = n_out = rejected_quoting = 0
    deltas = longer = identical = rows_with_calls = 0
    margins = []
    spool = Spool(dest)
    try:
        for item in src.rows:
            tick(progress, n_entries + skipped + 1)
            if not isinstance(item, dict):
                skipped += 1
                continue
            n_entries += 1
            if not (isinstance(item.get("chosen"), dict) and isinstance(item.get("rejected"), dict)):
                bad += 1
                continue
            if bad:
                continue
            if drop_ties and item.get("tie"):
                ties += 1
                continue
            entry = {"prompt": item.get("prompt")}
            for side in ("chosen", "rejected"):
                row = item[side]
                entry[side] = to_wire(row.get("messages") or conversation(row), system=src.system,
                                      strip_think=strip_think)
            if src.tools:
                entry["tools"] = list(src.tools)
            for key in PAIR_KEYS:
                value = item.get(key)
                if value is not None:
                    entry[key] = scrub(value)
            stamp(entry)
            if trl:
                entry = trl_preference_row(entry)
                if entry is None:
                    dropped += 1
                    continue
            schema.add(n_out, preference_problems(entry))
            if schema.bad:
                n_out += 1
                continue
            roundtrip.add(2 * n_out, entry["chosen"])
            roundtrip.add(2 * n_out + 1, entry["rejected"])
            leaks.add(item["chosen"])
            if leak_verdict(item["rejected"]):
                rejected_quoting += 1
            rows_with_calls += has_tool_calls(entry["chosen"]) or has_tool_calls(entry["rejected"])
            delta = entry.get("length_delta")
            if isinstance(delta, int):
                deltas += 1
                longer += delta > 0
            if entry.get("first_turn_differs") is False:
                identical += 1
            margin = entry.get("margin")
            if isinstance(margin, (int, float)):
                margins.append(margin)
            spool.write(dumps(entry))
            n_out += 1
        if progress is not None:
            progress(n_entries + skipped)
        if bad:
            raise ValueError(
                f"export_preference takes chosen/rejected pairs, and {bad} of {n_entries} entries have no "
                "chosen/rejected side. Build the pairs first: export_preference(build_preference_pairs(rows), ...) "
                "or scored.select_for_preference().")
        schema.raise_if_bad()

        report = {"pairs": n_out, "format": format, "tool_call_roundtrip": roundtrip.report()}
        privileged = leaks.export_report()
        privileged["rejected_quoting"] = rejected_quoting
        report["privileged_leaks"] = privileged
        if ties:
            report["ties_dropped"] = ties
        if dropped:
            report["no_completion_dropped"] = dropped
        if deltas:
            report["chosen_longer_frac"] = round(longer / deltas, 3)
            note = length_note(longer, deltas)
            if note:
                report["warnings"] = [note]
        if identical:
            report["first_turn_identical"] = identical
            report.setdefault("warnings", []).append(first_turn_note(identical, n_out))
        if margins:
            report["mean_margin"] = round(sum(margins) / len(margins), 4)
        if leaks.n_leaked:
            report.setdefault("warnings", []).append(
                f"{leaks.n_leaked} of {leaks.n_checked} chosen replies quote their own privileged context and are "
                "exported anyway (validate=False): DPO would push the model towards saying what only the grader "
                "was told; report['privileged_leaks']['leaked'] names them.")
        if rejected_quoting:
            report.setdefault("warnings", []).append(
                f"{rejected_quoting} rejected replies quote their own privileged context; they are kept as "
                "negatives (DPO pushes them down), but a grader that rewards such replies needs a look.")
        if rows_with_calls and not src.tools:
            report.setdefault("warnings", []).append(
                f"{rows_with_calls} of {n_out} rows make tool calls but were exported without tool schemas; "
                "the trainer cannot show the model the tools it calls. Pass tools=, or keep a <name>.meta.json "
                "sidecar beside the pairs file.")
        if rows_with_calls and not src.system:
            report.setdefault("warnings", []).append(
                f"{rows_with_calls} of {n_out} rows make tool calls but were exported without a system prompt. "
                "Pass system_prompt=, or keep a <name>.meta.json sidecar beside the pairs file.")
        report["system_prompt_source"] = src.system_source
        report["tools_source"] = src.tools_source
        report["rows_read"] = n_entries + skipped
        report["rows_skipped"] = skipped
        if src.path is not None:
            report["source_path"] = str(src.path)
            report["source_sha256"] = src.sha256

        if validate and roundtrip.invalid:
            rt = report["tool_call_roundtrip"]
            raise RoundtripInvalidError(
                f"tool_call_roundtrip_invalid: {rt['invalid']} of {rt['checked']} tool calls in the pairs do not "
                "parse back to structured arguments. Fix the rows or pass validate=False.", finish(report, started))
        if validate and leaks.n_leaked:
            raise PrivilegedLeakError(
                f"privileged_leak: {leaks.n_leaked} of {leaks.n_checked} chosen replies quote their own privileged "
                "context (reference, principle or hidden state); DPO would teach the model to say what only the "
                "grader was told. Drop those pairs (report['privileged_leaks']['leaked'] names them) or pass "
                "validate=False.", finish(report, started))
        if not n_out:
            if validate:
                raise NoPreferencePairsError(
                    "no_preference_pairs: nothing had a chosen and a rejected side. All-pass or all-fail runs "
                    "produce no contrast; regrade or raise difficulty, or pass validate=False to get the empty "
                    "report without a file.")
            report["path"] = None
            return finish(report, started)
        if dest is not None:
            report["sha256"] = spool.publish()
            report["path"] = str(dest)
            report["n_written"] = n_out
        return finish(report, started)
    finally:
        spool.discard()
