"""The exporters: ``training_rows``, ``export_dataset`` (= ``export_training``), ``export_preference``.

How a file export streams (issue 2, point 4): the source is read once, row by row. Each row is
converted, checked by both gates and serialized straight into a spool file beside the destination;
what stays in memory is one group index and one reward per row (``GroupStats``). When the pass ends
and the gates agree, a second pass over the spool bytes splices each row's group fields onto the
end of its line (group fields are the last keys of a row) and the result is renamed onto the
destination. Nothing is published when a gate or a schema check fails.
"""

import array
import contextlib
import os
import tempfile
import time
from pathlib import Path

from .conversation import bridge_tool_trace, conversation
from .errors import (NoPreferencePairsError, OutputIsSourceError, PrivilegedLeakError,
                     RoundtripInvalidError, SchemaInvalidError)
from .gates import (LeakGate, RoundtripGate, check_format, leak_verdict, row_conversation_messages,
                    scrub)
from .groups import GroupStats, numeric_reward, stamp_groups
from .jsonl import TMP_SUFFIX, atomic_file, dumps, dumps_line, sha256_file
from .pairs import first_turn_note as _first_turn_note, length_note as _length_note
from .masks import check_mask_mode, loss_mask, unroll as unroll_entry
from .runs import resolve_source
from .text import text
from .trl import (TRL_LOSS_COMPLETION, TRL_LOSS_MESSAGES, trl_completion_row, trl_preference_row,
                  trl_training_row)
from .wire import WireStats, to_wire

PASS_THRESHOLD = 0.5
MESSAGE_EXAMPLES = 5
SCHEMA_KEY, SCHEMA_VERSION = "schema_version", "1"
CARRIED_KEYS = (
    "reward", "qwen_reward", "reason", "prompt", "scenario_id", "world_state", "faults",
    "fault_detected", "label_source", "failure_class", "judge_status", "judge_name", "lineage",
    "logprob", "n_tokens", "token_logprobs", "sampling", "policy_version", "writer_model",
    "user_model", "usage", "tier", "ask_family", "ask", "stance", "tone", "texture", "vagueness",
    "phrasing", "pressure", "user", "history", "length", "intent_known", "tool_known",
)
PAIR_KEYS = (
    "tie", "pairwise", "first_turn_differs", "chosen_score", "rejected_score", "margin",
    "chosen_model", "rejected_model", "same_policy", "length_delta", "chosen_reason",
    "rejected_reason", "rejected_failure_class", "lineage",
)


# ---------------------------------------------------------------- rows

def _stamp(row):
    if isinstance(row, dict) and SCHEMA_KEY not in row:
        row[SCHEMA_KEY] = SCHEMA_VERSION
    return row


def _convert(raw, system, tools, strip_think, mask_mode, unroll, cap):
    """One source row -> its training entries (one, or one per assistant turn when unrolling)."""
    row = bridge_tool_trace(raw)
    messages = row.get("messages") or conversation(row)
    stats = WireStats()
    wire = to_wire(messages, system=system, strip_think=strip_think, max_tool_output_chars=cap, stats=stats)
    entry = {"messages": wire}
    if stats.truncated:
        entry["tool_output_truncated"] = stats.truncated
        entry["tool_output_chars_cut"] = stats.chars_cut
    entry["loss_mask"] = loss_mask(wire, mode=mask_mode)
    if tools:
        entry["tools"] = list(tools)
    for key in CARRIED_KEYS:
        value = row.get(key)
        if value is not None:
            entry[key] = scrub(value)
    if unroll:
        return [_stamp(s) for s in unroll_entry(entry, row, stats.cuts)]
    return [_stamp(entry)]


def _training_problems(row):
    problems = []
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages_missing")
    elif any(not isinstance(m, dict) or not m.get("role") for m in messages):
        problems.append("message_without_role")
    if "tools" in row and not isinstance(row["tools"], list):
        problems.append("tools_not_list")
    mask = row.get("loss_mask")
    if "loss_mask" in row and (
        not isinstance(mask, list) or not isinstance(messages, list) or len(mask) != len(messages)
        or any(isinstance(b, bool) or b not in (0, 1) for b in mask)
    ):
        problems.append("loss_mask_invalid")
    return problems


def _preference_problems(row):
    problems = []
    for side in ("chosen", "rejected"):
        value = row.get(side)
        if not isinstance(value, list) or not value:
            problems.append(f"{side}_missing")
    return problems


class _SchemaCheck:
    """Collects the first few invalid rows, as ``schema_invalid in <where>: i:code; ...``."""

    def __init__(self, where):
        self.where = where
        self.bad = []

    def add(self, index, problems):
        if problems and len(self.bad) < MESSAGE_EXAMPLES:
            self.bad.append(f"{index}:{','.join(problems)}")

    def raise_if_bad(self):
        if self.bad:
            raise SchemaInvalidError(f"schema_invalid in {self.where}: {'; '.join(self.bad)}")


def iter_training_rows(source, *, system_prompt=None, tools=None, strip_think=True,
                       mask_mode="assistant", unroll=False, max_tool_output_chars=None):
    """Training rows one at a time, without group stamping (that needs every row's reward)."""
    check_mask_mode(mask_mode)
    src = resolve_source(source, system_prompt, tools)
    for raw in src.rows:
        if isinstance(raw, dict):
            yield from _convert(raw, src.system, src.tools, strip_think, mask_mode, unroll, max_tool_output_chars)


def training_rows(source, *, system_prompt=None, tools=None, strip_think=True, mask_mode="assistant",
                  unroll=False, max_tool_output_chars=None):
    """Spec 3: every source row as a chat-completions training row, groups stamped, checked."""
    rows = list(iter_training_rows(source, system_prompt=system_prompt, tools=tools, strip_think=strip_think,
                                   mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=max_tool_output_chars))
    if not unroll:
        stamp_groups(rows)
    check = _SchemaCheck("training_rows")
    for i, row in enumerate(rows):
        check.add(i, _training_problems(row))
    check.raise_if_bad()
    return rows


# ---------------------------------------------------------------- destinations

def _destination(output, source_path):
    if output:
        return Path(output)
    if source_path is None:
        return None
    suffix = source_path.suffix
    if suffix:
        return source_path.with_name(f"{source_path.stem}.train{suffix}")
    return source_path.with_name(f"{source_path.name}.train.jsonl")


def _refuse_source(dest, source_path):
    """DECISIONS 4: never write over the file being read (links and hard links included)."""
    same = Path(dest).resolve() == Path(source_path).resolve()
    if not same and Path(dest).exists():
        with contextlib.suppress(OSError):
            same = os.path.samefile(dest, source_path)
    if same:
        raise OutputIsSourceError(
            f"output_is_source: {dest} is the source file {source_path}; writing there would destroy "
            "the raw run. Pass another output path, or none to get <name>.train<suffix> beside it."
        )


class _Spool:
    """Serialized rows on their way to ``dest``: a temp file beside it, published only at the end.

    A line may carry a tail (keys that must follow the group fields, e.g. TRL's ``prompt_text``)
    after a tab; compact JSON never contains a raw tab, so the split is unambiguous.
    """

    def __init__(self, dest):
        self.dest = dest
        self.fh = None
        self.has_tail = False
        if dest is not None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, self.tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".spool" + TMP_SUFFIX,
                                            dir=dest.parent)
            self.fh = os.fdopen(fd, "wb", buffering=1 << 20)

    def write(self, body, tail=b""):
        if self.fh is None:
            return
        if tail:
            self.has_tail = True
            self.fh.write(body + b"\t" + tail + b"\n")
        else:
            self.fh.write(body + b"\n")

    def discard(self):
        if self.fh is not None:
            self.fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            self.fh = None

    def publish(self, suffix_of_row=None):
        """Write the final file (splicing group fields and tails when needed); returns its SHA-256."""
        self.fh.close()
        self.fh = None
        try:
            if self.has_tail or suffix_of_row is not None:
                with atomic_file(self.dest) as out, open(self.tmp, "rb") as spool:
                    for i, line in enumerate(spool):
                        body, _, tail = line[:-1].partition(b"\t")
                        suffix = suffix_of_row(i) if suffix_of_row is not None else b""
                        if suffix or tail:
                            body = body[:-1] + suffix + (b"," + tail if tail else b"") + b"}"
                        out.write(body + b"\n")
            else:
                with open(self.tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                os.replace(self.tmp, self.dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        return sha256_file(self.dest)


# ---------------------------------------------------------------- export_dataset

def _has_tool_calls(messages):
    return any(isinstance(m, dict) and m.get("tool_calls") for m in messages or ())


def _reward_counts(rewards, reward):
    value = numeric_reward(reward)
    if value is None:
        rewards["n_ungraded"] += 1
    elif value >= PASS_THRESHOLD:
        rewards["n_pass"] += 1
    else:
        rewards["n_fail"] += 1


def export_dataset(source, output=None, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                   mask_mode="assistant", unroll=False, max_tool_output_chars=None, format="openai"):
    """Spec 5: export training rows as JSONL behind the round-trip and leak gates; returns the report."""
    started = time.perf_counter()
    check_format(format)
    check_mask_mode(mask_mode)
    src = resolve_source(source, system_prompt, tools)
    dest = _destination(output, src.path)
    if dest is not None and src.path is not None:
        _refuse_source(dest, src.path)
    trl = format == "trl"
    completion_rows = trl and (unroll or mask_mode == "final")
    groups = None if unroll else GroupStats()
    row_groups = array.array("q")
    roundtrip, leaks = RoundtripGate(format), LeakGate()
    schema = _SchemaCheck("training_rows")
    rewards = {"n_pass": 0, "n_fail": 0, "n_ungraded": 0}
    rows_read = n_entries = n_out = n_length_cut = dropped = 0
    with_system = with_tools = truncated = chars_cut = trained = masked = rows_with_calls = 0
    spool = _Spool(dest)
    try:
        for raw in src.rows:
            rows_read += 1
            if not isinstance(raw, dict):
                continue
            leaks.add(raw)
            if raw.get("finish_reason") == "length":
                n_length_cut += 1
            for entry in _convert(raw, src.system, src.tools, strip_think, mask_mode, unroll, max_tool_output_chars):
                problems = _training_problems(entry)
                schema.add(n_entries, problems)
                n_entries += 1
                group = groups.add(entry) if groups is not None else -1
                if schema.bad:
                    continue
                row = entry
                if trl:
                    row = trl_completion_row(entry) if completion_rows else trl_training_row(entry)
                    if row is None:
                        dropped += 1
                        continue
                messages = row_conversation_messages(row)
                roundtrip.add(n_out, messages)
                first = messages[0] if messages else None
                with_system += bool(first and first.get("role") == "system")
                with_tools += bool(row.get("tools"))
                rows_with_calls += _has_tool_calls(messages)
                truncated += row.get("tool_output_truncated", 0)
                chars_cut += row.get("tool_output_chars_cut", 0)
                if "completion" in row:
                    trained += len(row["completion"])
                    masked += len(row["prompt"])
                else:
                    ones = sum(entry["loss_mask"])
                    trained += ones
                    masked += len(entry["loss_mask"]) - ones
                _reward_counts(rewards, row.get("reward"))
                tail = b""
                if groups is not None and "prompt_text" in row:
                    row = dict(row)
                    tail = dumps({"prompt_text": row.pop("prompt_text")})[1:-1]
                spool.write(dumps(row), tail)
                row_groups.append(group)
                n_out += 1
        schema.raise_if_bad()

        report = {
            "n": n_out,
            "format": format,
            "with_system": with_system,
            "with_tools": with_tools,
            "groups": groups.n_groups if groups is not None else 0,
            "tool_call_roundtrip": roundtrip.report(),
            "mask_mode": "final (unrolled)" if unroll else mask_mode,
            "unrolled": unroll,
            "max_tool_output_chars": max_tool_output_chars,
            "tool_output_truncated": truncated,
            "tool_output_chars_cut": chars_cut,
            "trained_messages": trained,
            "masked_messages": masked,
            "privileged_leaks": leaks.export_report(),
            "rewards": rewards,
        }
        warnings = []
        if leaks.n_leaked:
            warnings.append(
                f"{leaks.n_leaked} of {leaks.n_checked} rows quote their own privileged context in an assistant "
                "turn and are exported anyway (validate=False); report['privileged_leaks']['leaked'] names them.")
        if n_length_cut:
            warnings.append(
                f"{n_length_cut} of {rows_read} rows were cut by the reply token cap (finish_reason 'length') and "
                "are exported as SFT targets; a model trained on them learns to stop mid-thought. Filter on "
                "finish_reason == 'stop' or raise agent_max_tokens=.")
        if rewards["n_fail"]:
            warnings.append(
                f"{rewards['n_fail']} of {n_out} rows have reward below 0.5 and are exported as SFT targets; a "
                "model trained on them learns the failure. Pass `scored.passes()` (or filter on reward) unless "
                "that is intended.")
        if rows_with_calls and not src.tools:
            warnings.append(
                f"{rows_with_calls} of {n_out} rows make tool calls but were exported without tool schemas; "
                "the trainer cannot show the model the tools it calls. Pass tools=, or keep the run's "
                "<name>.meta.json sidecar beside the file.")
        if rows_with_calls and not src.system:
            warnings.append(
                f"{rows_with_calls} of {n_out} rows make tool calls but were exported without a system "
                "prompt. Pass system_prompt=, or keep the run's <name>.meta.json sidecar beside the file.")
        if dropped:
            warnings.append(
                f"{dropped} rows have no assistant turn after the first message and were dropped: a TRL "
                "prompt/completion row needs a completion to train on.")
        if warnings:
            report["warnings"] = warnings
        if dropped:
            report["no_completion_dropped"] = dropped
        if trl:
            report["trl_loss"] = TRL_LOSS_COMPLETION if completion_rows else TRL_LOSS_MESSAGES
        report["system_prompt_source"] = src.system_source
        report["tools_source"] = src.tools_source
        report["rows_read"] = rows_read
        if src.path is not None:
            report["source_path"] = str(src.path)
            if src.sha256 is not None:
                report["source_sha256"] = src.sha256

        if validate and roundtrip.invalid:
            rt = report["tool_call_roundtrip"]
            raise RoundtripInvalidError(
                f"tool_call_roundtrip_invalid: {rt['invalid']} of {rt['checked']} tool calls do not parse back to "
                f"structured arguments (rows {rt['rows']}); training on them teaches string-wrapped arguments. "
                "Fix the rows or pass validate=False.", _finish(report, started))
        if validate and leaks.n_leaked:
            raise PrivilegedLeakError(_leak_message(leaks), _finish(report, started))

        if dest is not None:
            suffix_of_row = None
            if groups is not None and groups.active:
                fields = [b"," + dumps(f)[1:-1] for f in groups.finish()]
                suffix_of_row = lambda i: fields[row_groups[i]] if row_groups[i] >= 0 else b""  # noqa: E731
            digest = spool.publish(suffix_of_row)
            report["path"] = str(dest)
            report["n_written"] = n_out
            report["sha256"] = digest
        return _finish(report, started)
    finally:
        spool.discard()


def _finish(report, started):
    report["elapsed_seconds"] = round(time.perf_counter() - started, 3)
    return report


def _leak_message(leaks):
    return (
        f"privileged_leak: {leaks.n_leaked} of {leaks.n_checked} rows quote their own privileged context "
        "(reference, principle or hidden state) in an assistant turn; the export scrubs the key, not the reply, "
        "so training on them teaches the model to say what only the grader was told. Drop those rows "
        "(leak_report(...)['leaked'] names them) or pass validate=False."
    )


export_training = export_dataset


# ---------------------------------------------------------------- export_preference

def _pair_source(pairs, system_prompt, tools):
    """Pairs from a list, an iterator (read once) or a JSONL path; system and tools as for rows."""
    return resolve_source(pairs, system_prompt, tools)


def export_preference(pairs, output=None, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                      drop_ties=True, format="openai"):
    """Spec 7 + DECISIONS 12: export chosen/rejected pairs behind the round-trip and leak gates."""
    started = time.perf_counter()
    check_format(format)
    src = _pair_source(pairs, system_prompt, tools)
    dest = Path(output) if output else None
    if dest is not None and src.path is not None:
        _refuse_source(dest, src.path)
    trl = format == "trl"
    roundtrip, leaks = RoundtripGate(format), LeakGate()
    schema = _SchemaCheck("export_preference")
    n_entries = bad = ties = dropped = n_out = rejected_quoting = 0
    deltas = longer = identical = 0
    margins = []
    spool = _Spool(dest)
    try:
        for item in src.rows:
            if not isinstance(item, dict):
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
            _stamp(entry)
            if trl:
                entry = trl_preference_row(entry)
                if entry is None:
                    dropped += 1
                    continue
            schema.add(n_out, _preference_problems(entry))
            if schema.bad:
                n_out += 1
                continue
            roundtrip.add(2 * n_out, entry["chosen"])
            roundtrip.add(2 * n_out + 1, entry["rejected"])
            leaks.add(item["chosen"])
            if leak_verdict(item["rejected"]):
                rejected_quoting += 1
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
            note = _length_note(longer, deltas)
            if note:
                report["warnings"] = [note]
        if identical:
            report["first_turn_identical"] = identical
            report.setdefault("warnings", []).append(_first_turn_note(identical, n_out))
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
        report["system_prompt_source"] = src.system_source
        report["tools_source"] = src.tools_source
        report["rows_read"] = n_entries
        if src.path is not None:
            report["source_path"] = str(src.path)
            report["source_sha256"] = src.sha256

        if validate and roundtrip.invalid:
            rt = report["tool_call_roundtrip"]
            raise RoundtripInvalidError(
                f"tool_call_roundtrip_invalid: {rt['invalid']} of {rt['checked']} tool calls in the pairs do not "
                "parse back to structured arguments. Fix the rows or pass validate=False.", _finish(report, started))
        if validate and leaks.n_leaked:
            raise PrivilegedLeakError(
                f"privileged_leak: {leaks.n_leaked} of {leaks.n_checked} chosen replies quote their own privileged "
                "context (reference, principle or hidden state); DPO would teach the model to say what only the "
                "grader was told. Drop those pairs (report['privileged_leaks']['leaked'] names them) or pass "
                "validate=False.", _finish(report, started))
        if not n_out:
            if validate:
                raise NoPreferencePairsError(
                    "no_preference_pairs: nothing had a chosen and a rejected side. All-pass or all-fail runs "
                    "produce no contrast; regrade or raise difficulty, or pass validate=False to get the empty "
                    "report without a file.")
            report["path"] = None
            return _finish(report, started)
        if dest is not None:
            report["sha256"] = spool.publish()
            report["path"] = str(dest)
            report["n_written"] = n_out
        return _finish(report, started)
    finally:
        spool.discard()
