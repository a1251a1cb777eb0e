"""Counting and markdown for asset metadata (plain Python, one row at a time, memory stays flat)."""

import math
import os
from collections import Counter

from whileai_pipeline.core.groups import KeyIndex, key_digest, task_key
from whileai_pipeline.core.rows import shape_problem

PREVIEW_ROWS = 5
# distinct finish reasons counted by name; the rest are counted together under OTHER_FINISH_REASONS. A
# simulator that writes its error text as the finish reason made one entry per row: 133 KB of
# metadata for 4,800 rows, every one of them stored in the event log at each new version of the run
FINISH_REASONS_SHOWN = 20
OTHER_FINISH_REASONS = "(other values)"


def _md_cell(value, width=60) -> str:
    text = "" if value is None else str(value)
    text = text.replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


def md_table(header, rows, width=60) -> str:
    """A markdown table; cells longer than ``width`` characters are cut (None: never)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(c, width) for c in row) + " |")
    return "\n".join(lines)


def tool_calls_in(row: dict) -> int:
    """Tool calls a row carries: in its ``messages`` if any, else its ``steps``, else ``tool_trace``."""
    messages = row.get("messages")
    if isinstance(messages, list) and messages:
        return sum(
            len(m.get("tool_calls") or ())
            for m in messages
            if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list)
        )
    steps = row.get("steps")
    if isinstance(steps, list) and steps:
        return sum(1 for s in steps if isinstance(s, dict) and s.get("tool") and not s.get("user"))
    trace = row.get("tool_trace")
    if isinstance(trace, list):
        return sum(1 for t in trace if isinstance(t, dict))
    return 0


def not_a_trajectory(value) -> str:
    """Why a line holding ``value`` (not a JSON object) is no trajectory; a list of objects is most likely
    the whole run written as one JSON array (``json.dump(rows, f)``), and the reason says so."""
    reason = f"expected a JSON object (one trajectory), got {type(value).__name__}"
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value[:100]):
        reason += (f" of {len(value)} objects: the whole run written as one JSON array (json.dump(rows, f)?); "
                   "JSONL holds each row on a line of its own (write_jsonl(path, rows) writes it)")
    return reason


class RawStats:
    """What a run holds: rows, prompts, groups, privileged rows, tool calls, finish reasons, a preview."""

    def __init__(self):
        self.rows = 0
        self.non_objects = 0
        # distinct prompts and groups, counted by a 64-bit digest of each in typed arrays (24 to 48
        # bytes a key); sets of 12-byte digests took about 105 bytes a key each (35 MB at 1M rows)
        self._prompts = KeyIndex()
        self._groups = KeyIndex()
        self.privileged_rows = 0
        self.privileged_text_rows = 0  # ``privileged`` as JSON text: the gates read only an object
        self.tool_calls = 0
        self.finish_reasons = Counter()  # the first FINISH_REASONS_SHOWN distinct values
        self.other_finish_reasons = 0  # rows with any other value
        self.preview = []

    @staticmethod
    def _digest(value) -> int:
        return key_digest(str(value))  # the 64 bits KeyIndex holds, as for the export's groups

    def add(self, row) -> None:
        self.add_facts(self.facts(row, preview=len(self.preview) < PREVIEW_ROWS))

    @classmethod
    def facts(cls, row, preview=True):
        """What ``add_facts`` needs of one row (for a row that is not a trajectory, the reason why): small
        and picklable, so worker processes can read a big run and send these back. ``preview``: also its
        preview line."""
        if not isinstance(row, dict):
            return not_a_trajectory(row)
        problem = shape_problem(row)
        if problem is not None:
            return problem
        prompt = row.get("prompt")
        group = task_key(row)  # the export's groups (spec 3.11)
        privileged = row.get("privileged")
        has_privileged = isinstance(privileged, dict) and bool(privileged)
        as_text = isinstance(privileged, str) and bool(privileged.strip())
        calls = tool_calls_in(row)
        line = None
        if preview:
            steps = row.get("steps")
            line = [
                row.get("scenario_id") or row.get("task_id") or "",
                row.get("rollout_index"),
                prompt,
                row.get("reward"),
                len(steps) if isinstance(steps, list) else "",
                calls,
                row.get("finish_reason"),
                "yes" if has_privileged else "as text" if as_text else "no",
            ]
        finish = str(row.get("finish_reason")) if row.get("finish_reason") is not None else "(none)"
        return (cls._digest(prompt) if prompt else None, cls._digest(group) if group else None,
                has_privileged, as_text, calls, finish, line)

    def add_facts(self, facts) -> None:
        """Count one row from its ``facts``."""
        if isinstance(facts, str):
            self.non_objects += 1
            return
        prompt, group, has_privileged, as_text, calls, finish, line = facts
        self.rows += 1
        if prompt is not None:
            self._prompts.index(prompt)
        if group is not None:
            self._groups.index(group)
        self.privileged_rows += has_privileged
        self.privileged_text_rows += as_text
        self.tool_calls += calls
        if finish in self.finish_reasons or len(self.finish_reasons) < FINISH_REASONS_SHOWN:
            self.finish_reasons[finish] += 1
        else:
            self.other_finish_reasons += 1
        if line is not None and len(self.preview) < PREVIEW_ROWS:
            self.preview.append(line)

    def finish_reasons_summary(self) -> dict:
        """Rows by finish reason, the first ``FINISH_REASONS_SHOWN`` values by name and the other rows as one
        count, so the metadata stays small whatever the run holds."""
        out = dict(sorted(self.finish_reasons.items()))
        if self.other_finish_reasons:
            out[OTHER_FINISH_REASONS] = self.other_finish_reasons
        return out

    @property
    def prompts(self) -> int:
        return self._prompts.n

    @property
    def groups(self) -> int:
        return self._groups.n

    def preview_markdown(self) -> str:
        header = ["scenario", "rollout", "prompt", "reward", "steps", "tool calls", "finish", "privileged"]
        return md_table(header, self.preview)


def num(value, default=0):
    """A report number for plotting: ints stay ints, None becomes ``default``."""
    if value is None or isinstance(value, bool):
        return default
    return value


def sft_numbers(report: dict) -> dict:
    rewards = report.get("rewards") or {}
    roundtrip = report.get("tool_call_roundtrip") or {}
    leaks = report.get("privileged_leaks") or {}
    return {
        "rows_written": num(report.get("n_written")),
        "rows": num(report.get("n")),
        "passes": num(rewards.get("n_pass")),
        "fails": num(rewards.get("n_fail")),
        "ungraded": num(rewards.get("n_ungraded")),
        "trained_messages": num(report.get("trained_messages")),
        "masked_messages": num(report.get("masked_messages")),
        "tool_calls_checked": num(roundtrip.get("checked")),
        "tool_calls_invalid": num(roundtrip.get("invalid")),
        "rows_checked": num(leaks.get("n_checked")),
        "rows_leaked": num(leaks.get("n_leaked")),
        "groups": num(report.get("groups")),
        "tool_outputs_truncated": num(report.get("tool_output_truncated")),
        "warnings": len(report.get("warnings") or ()),
    }


def dpo_numbers(report: dict) -> dict:
    roundtrip = report.get("tool_call_roundtrip") or {}
    leaks = report.get("privileged_leaks") or {}
    out = {
        "pairs": num(report.get("pairs")),
        "ties_dropped": num(report.get("ties_dropped")),
        "tool_calls_checked": num(roundtrip.get("checked")),
        "tool_calls_invalid": num(roundtrip.get("invalid")),
        "rows_checked": num(leaks.get("n_checked")),
        "rows_leaked": num(leaks.get("n_leaked")),
        "rejected_quoting": num(leaks.get("rejected_quoting")),
        "warnings": len(report.get("warnings") or ()),
    }
    out["mean_margin"] = real(report.get("mean_margin"))
    out["chosen_longer_frac"] = real(report.get("chosen_longer_frac"))
    return out


def real(value) -> float:
    """A number for a plotted metadata key, NaN when there is none (no pairs, no graded row): the key
    stays in every materialization, so a trend across re-exports shows a gap, not a missing series."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def export_summary_markdown(kind: str, reports: dict, outcomes: dict, status: str, validate: bool,
                            failed: dict, rejected_dir=None, root=None) -> str:
    """A short human summary of one export materialization. Folders under ``root`` (the storage root) are
    named from it: short, the same on every machine, and the full paths are their own entries."""
    lines = [f"**{kind} export: {status}** (validate: {str(bool(validate)).lower()})", ""]  # as configured
    header = ["format", "rows" if kind == "sft" else "pairs", "tool calls (invalid)", "rows checked (leaked)",
              "file"]
    rows = []
    # short cells, the sentences and the folder once under the table: the leak summary and absolute paths in
    # the cells pushed the table past the asset page's width, which cut the file column off (each path is
    # also its own <format>/published_path or rejected_path entry)
    folders = {os.path.dirname(o["path"]) for o in outcomes.values() if o and o.get("path")}
    leak_summaries = {}
    for fmt, report in reports.items():
        roundtrip = report.get("tool_call_roundtrip") or {}
        leaks = report.get("privileged_leaks") or {}
        n = report.get("n_written", report.get("n")) if kind == "sft" else report.get("pairs")
        outcome = outcomes.get(fmt) or {}
        path = outcome.get("path")
        where = (os.path.basename(path) if len(folders) == 1 else path) if path else "(nothing written)"
        if outcome.get("unchanged"):
            where += " (unchanged)"
        rows.append([fmt, n, f"{roundtrip.get('checked', 0)} ({roundtrip.get('invalid', 0)})",
                     f"{leaks.get('n_checked', 0)} ({leaks.get('n_leaked', 0)})", where])
        if leaks.get("summary"):
            leak_summaries.setdefault(leaks["summary"], []).append(fmt)
    lines.append(md_table(header, rows, width=None))
    if leak_summaries:
        lines += ["", "Leak check: " + ("; ".join(leak_summaries) if len(leak_summaries) == 1 else "; ".join(
            f"{', '.join(fmts)}: {text}" for text, fmts in leak_summaries.items())) + "."]
    if len(folders) == 1 and not rejected_dir:  # a refused candidate's folder is said just below
        lines += ["", f"In {_under_root(folders.pop(), root)}; the full paths are the `<format>/published_path` entries."]
    if failed:
        lines += ["", "Failed gates: " + "; ".join(f"{fmt}: {', '.join(g)}" for fmt, g in failed.items())]
    if rejected_dir:
        lines += ["", f"Candidate and reports kept in {_under_root(rejected_dir, root)}; the published files were not "
                  "touched."]
    warnings = [(fmt, w) for fmt, r in reports.items() for w in (r.get("warnings") or [])]
    if warnings:
        title = "Warnings:"
        if rejected_dir:  # candidates are always written with validate=False, hence the wording
            title = "Warnings in the refused candidate's report (written with validate=False to get the full report):"
        lines += ["", title] + [f"- ({fmt}) {w}" for fmt, w in warnings]
    return "\n".join(lines)


def _under_root(folder, root) -> str:
    """``folder`` in backticks, as ``published/<run>/`` under the storage root when it is there."""
    if root is not None:
        rel = os.path.relpath(folder, root)
        if rel != os.curdir and not rel.startswith(os.pardir):
            return f"`{rel}/` under the storage root"
    return f"`{folder}`"


def raw_facts(path, hasher=None, workers=None):
    """(line number, ``RawStats.facts``) of every non-blank line of a run file, in order, hashing the
    file on the way when asked. A big file is parsed by worker processes (issue 4), which send back
    only these facts; a line that is not JSON raises ``BadJsonlError`` naming ``path`` and the line."""
    from whileai_pipeline.core.jsonl import iter_jsonl
    from whileai_pipeline.core.parallel import WorkerPool, line_chunks, workers_for

    n = workers_for(path, workers)
    if n == 1:
        yield from _numbered_facts(iter_jsonl(path, hasher))
        return
    with WorkerPool(n) as pool:
        for facts in pool.ordered(_raw_chunk_facts, path, ((chunk,) for chunk in line_chunks(path, hasher))):
            yield from facts


def _raw_chunk_facts(path, chunk):
    """A worker task: (line number, facts) of a chunk's rows; its first few rows carry preview lines."""
    from whileai_pipeline.core.parallel import chunk_rows

    return list(_numbered_facts((lineno, row) for lineno, _, row, _ in chunk_rows(path, chunk)))


def _numbered_facts(numbered_rows):
    shown = 0
    for lineno, row in numbered_rows:
        facts = RawStats.facts(row, preview=shown < PREVIEW_ROWS)
        shown += not isinstance(facts, str)
        yield lineno, facts
