"""``export_dataset`` (= ``export_training``): training rows as a gated JSONL file (spec 5).

How an export streams (issue 2, point 4; issue 4). Every row is converted, gated and serialized
once, as it arrives; group fields (spec 3.11) depend on every row, so they are added in one of three
ways. In one process, a re-readable source (a JSONL path, a list) is first pre-scanned for each
row's task key and reward only, so every line is written final. A one-shot iterator (DECISIONS 5)
goes to a spool beside the destination and ``Spool.publish`` splices each line's group fields in at
the end. A big file over worker processes keeps its part files in the spool's format until every row
is seen, then the parent splices the fields in as it appends the parts in order (``_splice_parts``),
while a thread hashes the source (``SourceDigest``). Memory holds per-group state (the per-row group
index and reward go to a temporary file when no pre-scan is made; a byte a training row says whether it
was written), never rows, and nothing is published when a gate or a schema check fails.
"""

import contextlib
import json
import math
import re
import time

from .conversation import conversation, crashed_rollout
from .datasets_types import big_ints_of
from .errors import ExportError, PrivilegedLeakError, RoundtripInvalidError
from .exact_numbers import has_long_digit_run
from .gates import (
    ENCODINGS,
    LeakGate,
    RoundtripGate,
    check_format,
    count_tool_calls,
    leak_outcome,
    row_conversation_messages,
    scrub,
)
from .groups import GroupStats, row_summary, verdict
from .jsonl import _BLANK, dumps, dumps_reusing, iter_jsonl_lines, iter_jsonl_runs
from .masks import check_mask_mode
from .output import check_output, check_outputs, destination, published_one_of, refuse_source, with_elapsed
from .progress import check_progress, tick
from .rows import SchemaCheck, convert_row, training_problems
from .runs import SourceDigest, change_explains_failure, check_unchanged, file_stamp, resolve_source
from .sightings import Sightings
from .spool import Spool, spool_line
from .trl import (
    TRL_LOSS_COMPLETION,
    TRL_LOSS_MESSAGES,
    trl_completion_row,
    trl_training_row,
)
from .wire import (CALL_SHAPE_ADVICE, DROPPED_MESSAGES, LINK_ADVICE, MISSHAPEN_CALLS, NOT_TEXT, NOT_TEXT_ADVICE,
                   ROLE_ADVICE, ObjectTexts, WireStats, called_tool, check_tool_output_cap, declared_tool_names,
                   has_tool_calls, link_problem_in, opens_with_two_systems, tool_context_warnings)

# How the no-tools and no-system-prompt warnings end, for a caller of export_dataset. The pipeline has no
# such argument (it reads the run's sidecar) and puts its own advice in their place, found by these texts.
NO_TOOLS_ADVICE = "Pass tools=, or keep the run's <name>.meta.json sidecar beside the file."
NO_SYSTEM_ADVICE = "Pass system_prompt=, or keep the run's <name>.meta.json sidecar beside the file."
# and the two-system-turns warning (the pipeline has no system_prompt= either)
TWO_SYSTEMS_ADVICE = "Pass system_prompt=\"\" to keep only the rows' own, or take it out of the rows."
# and the failed-rows warning (the pipeline chooses the rows with its sft_rows option)
FAILED_ROWS_ADVICE = "Pass `scored.passes()` (or filter on reward) unless that is intended."
# and the undeclared-tool warning (the pipeline's tools come from the run's sidecar alone)
UNDECLARED_ADVICE = ("Add the tool's schema to the tools, or leave those rows out (validate names each call: "
                     "function_not_declared).")


class _SftPlan:
    """Everything the per-row work needs; picklable, so worker processes get the same plan."""

    def __init__(self, system, tools, strip_think, mask_mode, unroll, cap, format, json_rows=False):
        self.system, self.tools, self.strip_think = system, tools, strip_think
        self.json_rows = json_rows  # rows read from a JSONL file: ``wire.ObjectTexts`` may be used
        self.mask_mode, self.unroll, self.cap, self.format = mask_mode, unroll, cap, format
        self.trl = format == "trl"
        self.completion_rows = self.trl and (unroll or mask_mode == "final")
        # an openai row's loss_mask may leave assistant turns out, which OpenAI (reading ``weight``) trains
        self.masks_replies = not self.trl and (unroll or mask_mode == "final")
        self.grouping = not unroll
        self.summarize_groups = self.grouping  # off when a pre-scan already has every row's group
        self.encoding = ENCODINGS[format]
        self.tools_json = dumps(list(tools)) if tools else None  # every row's "tools", serialized once
        self.declared = declared_tool_names(tools)  # a call to another tool is a hallucinated one
        # whether every TRL row may hold an integer beyond int64 in its tools (``_big_ints``)
        self.tools_digits = self.trl and self.tools_json is not None and has_long_digit_run(self.tools_json)


def _sft_outcomes(raw, plans, long_run=None):
    """What one source row contributes to an export in each format of ``plans``, converted once.

    One outcome per plan: (leak facts, (cut by the token cap, carries weights, crashed, tool calls that are not
    call objects, the first message left out, the first turn whose content is not text: ``WireStats``), [(schema
    problems, group summary, written or None) per training row]). A pure function of (row, plans), so it can run in any
    process; each format's ``_SftTally`` then adds its outcomes up in source order, which keeps the
    output identical however the work was spread. None for a source line that is not an object.
    The plans share every conversion setting (``_plans``): only the format differs. ``long_run``:
    whether the source line holds 19 digits in a row (None: a row given in memory), see ``_big_ints``.
    """
    if not isinstance(raw, dict):
        return None
    base = plans[0]
    rebuilt = None if raw.get("messages") else conversation(raw)
    leak = leak_outcome(raw, rebuilt=rebuilt, strip_think=base.strip_think)  # the replies as written too
    entries = [[] for _ in plans]
    # the argument texts to_wire writes from objects: a TRL row carries them as they are, and the round-trip
    # gate knows they read back as objects (``count_tool_calls``)
    objects = ObjectTexts() if base.json_rows else None
    stats = WireStats()
    for entry in convert_row(raw, base.system, base.tools, base.strip_think, base.mask_mode, base.unroll, base.cap,
                             rebuilt, objects, stats):
        problems = training_problems(entry)
        group = row_summary(entry) if base.summarize_groups else None
        for plan, written in zip(plans, entries):
            written.append((problems, group, _serialized_row(entry, plan, objects, long_run, stats.unlinked)))
    flags = (raw.get("finish_reason") == "length", _carries_weights(raw.get("messages")), crashed_rollout(raw),
             stats.misshapen, stats.dropped, stats.textless, stats.emptied)
    return [(leak, flags, written) for written in entries]


def _carries_weights(messages) -> bool:
    """Whether a row's own messages carry OpenAI's per-message ``weight``: a row of a fine-tuning file given
    back as a run. The export writes its own ``loss_mask`` from ``mask_mode``, and no weight."""
    return isinstance(messages, (list, tuple)) and any(isinstance(m, dict) and "weight" in m for m in messages)


def _located_outcomes(raw, plans, src, position, long_run=None):
    """``_sft_outcomes``; a row it refuses is a BadRowError naming its place in ``src`` (``Source.bad_row``)."""
    try:
        return _sft_outcomes(raw, plans, long_run)
    except ExportError as exc:
        raise src.bad_row(position, exc) from None


def _serialized_row(entry, plan, objects=None, long_run=None, unlinked=True):
    """One format's share of a training row: (facts, serialized row, tail), or None when TRL drops it.

    A TRL conversion decodes the entry's messages in place (unrolled samples share them, so those are
    copied): ``_plans`` puts the TRL plan last, after any format that reads the entry as it is.
    Arguments ``objects`` holds stay text, written as they are (``wire.ObjectTexts``). ``unlinked``: whether
    ``to_wire`` saw a tool result that may not pair up with its call (``WireStats``).
    """
    row = entry
    known = objects.texts if objects is not None else ()
    if not plan.trl:
        objects = None
    else:
        if objects is not None:
            objects.placed.clear()  # a dropped unrolled sample's, if any
        row = (trl_completion_row(entry, copy=plan.unroll, objects=objects) if plan.completion_rows
               else trl_training_row(entry, copy=plan.unroll, objects=objects))
        if row is None:
            return None
    messages = row_conversation_messages(row)
    # TRL trains a prompt/completion row's completion only: a call in its prompt (an earlier turn, which the
    # unrolled rows after it repeat) is context the model is not trained to make
    if plan.declared is not None and "completion" in row:
        checked, invalid, _ = count_tool_calls(row.get("prompt"), plan.encoding, objects, known)
        more, more_invalid, undeclared = count_tool_calls(row["completion"], plan.encoding, objects, known,
                                                          plan.declared)
        checked, invalid = checked + more, invalid + more_invalid
    else:
        checked, invalid, undeclared = count_tool_calls(messages, plan.encoding, objects, known, plan.declared)
    if "completion" in row:
        trained, masked = len(row["completion"]), len(row["prompt"])
    else:
        trained = sum(entry["loss_mask"])
        masked = len(entry["loss_mask"]) - trained
    masks_a_reply = plan.masks_replies and any(
        not bit and m.get("role") == "assistant" for m, bit in zip(messages, entry["loss_mask"]))
    # nothing to train on: OpenAI refuses such a row, TRL trains a messages row's every token (completion
    # rows always start with an assistant turn: TRL drops the others). ``loss_mask`` trains at least one
    # assistant turn whenever there is one, in every mask mode: no 1 in it is no assistant turn.
    no_reply = "completion" not in row and not trained
    # an assistant turn the consumer trains that holds neither words nor a call (a reply that was only a <think>
    # block, stripped): the model learns to end its turn without a word. OpenAI and a TRL messages row train
    # every assistant turn; a completion row only its completion. And a reply strip_think could not clean (an
    # unclosed <think>, a </think> whose opening tag the template wrote): the caller asked for no thinking, and
    # the model would learn the reasoning and a stray tag.
    empty_reply, think_left = _trained_turns(row["completion"] if "completion" in row else messages, plan.strip_think)
    first = messages[0] if messages else None
    # the row's own system message right under the one the export put first (sidecar, profile or argument); one
    # between later turns is a note the run gave the agent, which it sees when it runs
    two_systems = bool(plan.system) and opens_with_two_systems(messages)
    if not unlinked:  # ``WireStats.unlinked``: most rows need no look
        links = None
    elif "completion" in row:
        links = link_problem_in(("prompt", row["prompt"]), ("completion", row["completion"]))
    else:
        links = link_problem_in(("messages", messages or ()))
    tail = b""
    if plan.grouping and "prompt_text" in row:
        row = dict(row)
        tail = dumps({"prompt_text": row.pop("prompt_text")})[1:-1]
    facts = (
        checked, invalid,
        bool(first and first.get("role") == "system"),
        bool(row.get("tools")),
        has_tool_calls(messages),
        row.get("tool_output_truncated", 0),
        row.get("tool_output_chars_cut", 0),
        trained, masked,
        verdict(row.get("reward")),
        "completion" in row and len(row["completion"]) > 1,  # goes on after its last assistant turn
        masks_a_reply,
        no_reply,
        empty_reply,
        two_systems,
        undeclared,
        links,
        think_left,
    )
    write = dumps_reusing if objects is None else objects.dumps
    body = write(row, "tools", plan.tools_json)
    big = _big_ints(body, long_run) if plan.trl and (long_run is not False or plan.tools_digits) else None
    return (*facts, big), body, tail


def _trained_turns(messages, strip_think):
    """(whether an assistant turn of these written messages holds neither words nor a call, whether one still
    holds a ``<think>`` or ``</think>`` tag after ``strip_think``), read in one pass: spec 3.6 strips whole
    blocks only, so one never closed, or closed without its opening tag (the chat template wrote it), stays."""
    empty = think_left = False
    for m in messages or ():
        if isinstance(m, dict) and m.get("role") == "assistant":
            content = m.get("content")
            if isinstance(content, str):
                if not content.strip():
                    empty = empty or not m.get("tool_calls")
                elif strip_think and "<" in content and _THINK_TAG.search(content):
                    think_left = True
            elif not content and not m.get("tool_calls"):
                empty = True
    return empty, think_left


_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)


def _big_ints(body, long_run):
    """``(where, value)`` of the paths of a written TRL row's conversational columns that hold an
    integer no int64 holds (``datasets.load_dataset`` loads it as a float or ``inf``, or refuses the
    file: the validator's ``datasets_big_int``), or None.

    Only a line with 19 digits in a row can hold one: the caller asks only for a row whose source line
    has such a run (``long_run``, found by the reader at no extra cost) or whose tools do; a row given
    in memory (``long_run`` None) is looked at in its written bytes first. The row is read back with
    Python's json, which keeps every digit.
    """
    if long_run is None and not has_long_digit_run(body):
        return None
    return big_ints_of(json.loads(body)) or None


def _sft_lines(raw, plans, long_run=None):
    """``_sft_outcomes`` split for a worker: (the outcomes without their bytes, each format's lines in
    its spool's format)."""
    outcomes = _sft_outcomes(raw, plans, long_run)
    if outcomes is None:
        return None, [() for _ in plans]
    slim, lines = [], []
    for leak, flags, entries in outcomes:
        kept, out = [], []
        for problems, group, written in entries:
            if written is not None:
                facts, body, tail = written
                out.append(spool_line(body, tail))
                written = (facts, None, bool(tail))
            kept.append((problems, group, written))
        slim.append((leak, flags, kept))
        lines.append(out)
    return slim, lines


class _SftTally:
    """Adds up row outcomes in source order: gates, schema check, groups, counters, spool lines."""

    def __init__(self, plan, spool, source_path=None, progress=None, groups=None):
        """``groups``: another format's ``GroupStats`` to share (every format's rows have the same
        groups); that tally adds the rows to it, this one only reads it."""
        self.plan, self.spool = plan, spool
        self.progress = progress
        self.source_path = source_path
        self.prescan = None
        self.owns_groups = groups is None
        self.groups = (GroupStats(spill=True) if groups is None else groups) if plan.grouping else None
        self.entry_written = bytearray()  # per training row: 1 if written (no pre-scan, with groups: for splicing)
        self.parts = []  # part files: pooled lines waiting for their group fields, in order
        self.roundtrip, self.leaks = RoundtripGate(plan.format), LeakGate()
        self.schema = SchemaCheck("training_rows")
        self.rewards = {"pass": 0, "fail": 0, "ungraded": 0}  # rows written, by ``verdict``
        self.rows_read = self.rows_skipped = self.n_entries = self.n_out = self.n_length_cut = self.dropped = 0
        self.with_system = self.with_tools = self.rows_with_calls = 0
        self.calls_without_system = 0  # rows with tool calls written with no system message first (DECISIONS 6)
        self.truncated = self.chars_cut = self.trained = self.masked = 0
        self.going_on = 0  # TRL completions that go on after their last assistant turn
        self.replies_masked = 0  # openai rows whose loss_mask leaves an assistant turn out
        self.no_reply = 0  # rows written with no assistant turn (nothing to train on)
        self.empty_reply = Sightings()  # rows written that train an assistant turn with no text and no tool call
        self.think_emptied = 0  # of those, rows where strip_think emptied a turn (``WireStats.emptied``)
        self.two_systems = 0  # rows with their own system message besides the export's system prompt
        # rows written, each seen at its output line (with what was seen there): that call a tool the export's tools
        # do not declare (and its name), that train a reply still holding a think tag, whose tool results do not
        # pair up with their calls (and where and how: ``link_problem_in``)
        self.undeclared, self.think_left, self.bad_links = Sightings(), Sightings(), Sightings()
        self.weighted = 0  # source rows whose messages carry a weight (``_carries_weights``)
        self.crashed = 0  # source rows the agent crashed in (``crashed_rollout``)
        # source rows (each seen at its index among the rows read): with tool calls that are not call objects
        # (``WireStats.misshapen``), with messages to_wire left out (``dropped``: and which), with a turn whose
        # content is not text (``textless``: and which)
        self.misshapen, self.left_out, self.textless = Sightings(), Sightings(), Sightings()
        self.big_int_rows = Sightings()  # TRL rows with an integer beyond int64 (``_big_ints``): (line, where, value)

    def use(self, prescan):
        """Take every row's group from a pre-scan: lines are then written final, as they come."""
        if prescan is not None:
            self.prescan, self.groups = prescan, prescan.groups
            self.written_seen = bytearray(len(prescan.groups))  # a flag per group, not a group per row

    def consume(self, outcome, line=None):
        """Add one source row's outcome; ``line`` is its line number when the source is a file."""
        self.rows_read += 1
        tick(self.progress, self.rows_read)
        if outcome is None:
            self.rows_skipped += 1
            return
        leak, (length_cut, weighted, crashed, misshapen, left_out, textless, emptied), entries = outcome
        self.leaks.record(leak)
        self.n_length_cut += length_cut
        self.weighted += weighted
        self.crashed += crashed
        if misshapen:
            self.misshapen.see(self.rows_read - 1)  # a file's and its rows' reports say the same
        if left_out is not None:
            self.left_out.see((self.rows_read - 1, left_out))
        if textless is not None:
            self.textless.see((self.rows_read - 1, textless))
        for problems, group, written in entries:
            if problems:
                self.schema.add(self.n_entries, problems, line and f"{self.source_path}:{line}")
            self.n_entries += 1
            if self.prescan is not None:
                g = self.prescan.groups.row_group(self.rows_read - 1)
            else:
                if group is not None and self.owns_groups:
                    self.groups.add_summary(*group)
                if self.groups is not None:  # no groups (unroll): nothing reads it
                    self.entry_written.append(0)
            if self.schema.bad:
                continue
            if written is None:
                self.dropped += 1
                continue
            facts, body, tail = written
            (checked, invalid, with_system, with_tools, has_calls, truncated, chars_cut, trained, masked,
             reward_verdict, goes_on, masks_a_reply, no_reply, empty_reply, two_systems, undeclared, links,
             think_left, big) = facts
            self.roundtrip.record(self.n_out, checked, invalid)
            self.with_system += with_system
            self.with_tools += with_tools
            self.rows_with_calls += has_calls
            self.calls_without_system += has_calls and not with_system
            self.truncated += truncated
            self.chars_cut += chars_cut
            self.trained += trained
            self.masked += masked
            self.rewards[reward_verdict] += 1
            self.going_on += goes_on
            self.replies_masked += masks_a_reply
            self.no_reply += no_reply
            if empty_reply:
                self.empty_reply.see(self.n_out + 1)
                self.think_emptied += emptied
            self.two_systems += two_systems
            if undeclared is not None:
                self.undeclared.see((self.n_out + 1, undeclared))
            if think_left:
                self.think_left.see(self.n_out + 1)
            if links is not None:
                self.bad_links.see((self.n_out + 1, links))
            if big:
                self.big_int_rows.see((self.n_out + 1, *big[0]))
            if body is not None:  # None: a worker process already serialized the line
                self.spool.write(body, tail, self.prescan.suffix(g) if self.prescan is not None else None)
            elif tail:  # a worker's line has a tail (True): the splice must look for it
                self.spool.has_tail = True
            if self.prescan is not None:
                if g >= 0:
                    self.written_seen[g] = 1
            elif self.groups is not None:
                self.entry_written[-1] = 1
            self.n_out += 1

    def written_group_count(self):
        """Distinct groups among the rows written (TRL drops rows, DECISIONS 16)."""
        if self.groups is None or not self.groups.active:
            return 0
        if self.prescan is not None:
            return self.written_seen.count(1)
        seen = bytearray(len(self.groups))
        for g in self._written_groups():
            if g >= 0:
                seen[g] = 1
        return seen.count(1)

    def _written_groups(self):
        return (g for g, written in zip(self.groups.iter_row_groups(), self.entry_written) if written)

    def suffixes(self):
        """Each written row's group fields as bytes to splice (``b",..."``), or None when lines are final."""
        if self.prescan is not None or self.groups is None or not self.groups.active:
            return None
        self.groups.compute(keep_rows=True)
        return _group_suffixes(self.groups, self._written_groups())


def _group_suffixes(groups, row_groups):
    last_g, last = None, b""
    for g in row_groups:
        if g != last_g:  # rollouts of one task usually sit together: serialize their fields once
            last_g, last = g, _fields_suffix(groups, g)
        yield last


def _fields_suffix(groups, g):
    """Group ``g``'s fields as bytes to splice onto the end of a serialized row (``b""`` for none)."""
    return b"," + dumps(groups.fields(g))[1:-1] if g >= 0 else b""


class _Prescan:
    """Group statistics from a quick first read of a re-readable source, for a one-process export.

    Each row is parsed for its task key and reward only, so every group's fields are known before any
    row is written, and each output line is written once, final. A file's first read also takes its
    SHA-256 (DECISIONS 15).
    """

    def __init__(self):
        self.groups = GroupStats()
        self._last = (None, b"")

    @classmethod
    def of_rows(cls, rows):
        scan = cls()
        for raw in rows:
            scan._add(_group_summary(raw))
        return scan._finish()

    @classmethod
    def of_file(cls, path, hasher):
        scan = cls()
        for _, _, raw in iter_jsonl_lines(path, hasher):
            if raw is not _BLANK:
                scan._add(_group_summary(raw))
        return scan._finish()

    def _add(self, summary):
        self.groups.add_summary(*(summary if summary is not None else (None, math.nan)))

    def _finish(self):
        self.groups.compute(keep_rows=True)
        return self

    def suffix(self, g):
        """Group ``g``'s fields as bytes to splice onto a line (``b""`` for none)."""
        if not self.groups.active:
            return b""
        if self._last[0] != g:  # rollouts of one task usually sit together: serialize their fields once
            self._last = (g, _fields_suffix(self.groups, g))
        return self._last[1]


def _group_summary(raw):
    """(task-key digest, reward) of the training row a source row becomes; None for a non-object."""
    if not isinstance(raw, dict):
        return None
    view = {}
    for key in ("scenario_id", "prompt", "reward"):  # the keys that decide a training row's group
        value = raw.get(key)
        if value is not None:
            view[key] = scrub(value)
    return row_summary(view)


def _rereadable(rows):
    try:
        return iter(rows) is not rows
    except TypeError:
        return False


def _run_pass(src, plans, tallies, spools, prescan_wanted, pool):
    """Feed every row's outcomes to the tallies (one per format): in this process, or over the worker
    pool for a big file.

    With a pool and groups to stamp, the parts stay on disk in the spool's format (``tally.parts``)
    until ``_splice_parts`` can give every line its group fields.
    """
    def consume(outcomes, line=None):
        if outcomes is None:
            for tally in tallies:
                tally.consume(None, line)
        else:
            for tally, outcome in zip(tallies, outcomes):
                tally.consume(outcome, line)

    if src.hashed is None:
        prescan = _Prescan.of_rows(src.rows) if prescan_wanted else None
        for tally in tallies:
            tally.use(prescan)
        for index, raw in enumerate(src.rows):
            consume(_located_outcomes(raw, plans, src, index))
        return
    from .parallel import byte_chunks, write_chunk

    if pool is None:
        prescan = _Prescan.of_file(src.path, src.hashed.sha256) if prescan_wanted else None
        for tally in tallies:
            tally.use(prescan)
        hasher = None if prescan is not None else src.hashed.sha256
        for line, raw, long_run in iter_jsonl_runs(src.path, hasher):
            consume(_located_outcomes(raw, plans, src, line, long_run), line)
        return
    # The parent leaves the source's hash for the end (``SourceDigest``): here it would take a core
    # from the workers, there one is free while the disk flushes the output.
    src.hashed.deferred = True
    jobs = ((chunk, _sft_lines, plans, tuple(spool.part(k) for spool in spools), True)
            for k, chunk in enumerate(byte_chunks(src.path)))
    before = 0  # lines of the chunks already consumed: the workers number each chunk's lines from 1
    for outcomes, parts, lines in pool.ordered(write_chunk, src.path, jobs, writes_beside=[s.dest for s in spools]):
        for line, outcome in outcomes:
            consume(outcome, before + line)
        before += lines
        for spool, tally, part in zip(spools, tallies, parts):
            if not plans[0].grouping:  # no group fields to stamp: its lines are final, appended as they come
                spool.append_part(part)
            else:
                tally.parts.append(part)


def _splice_parts(spool, tally):
    """Second half of a pooled export with groups: the parent appends the parts in order, each line
    with its group fields spliced in, and deletes each part as it goes. Each row is parsed once; a
    pre-scan would parse the whole file a second time (measured: 11.6-12.0 s against 10.7-11.2 s
    for 100k rows of 20 KB). Measured against workers splicing into second part files that the
    parent then appended: 0.75-0.78 s against 1.7-2.1 s for those rows, the same bytes (one write
    of the output instead of two, and no buffer allocated per block)."""
    suffixes = tally.suffixes()
    spool.final_lines = True
    for part in tally.parts:
        spool.splice_part(part, suffixes)
    tally.parts = []


def export_dataset(source, output=None, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                   mask_mode="assistant", unroll=False, max_tool_output_chars=None, format="openai",
                   workers=None, progress=None):
    """Spec 5: export training rows as JSONL behind the round-trip and leak gates; returns the report.

    ``workers`` (ours): processes for a large JSONL path source; None picks by file size and cores
    (or ``$WHILEAI_PIPELINE_WORKERS``), 1 forces one process. The output is the same bytes either way.
    ``progress`` (ours): a callable of the number of source rows done, called every few hundred rows.
    """
    check_format(format)
    check_output(output, "(the default) to write <name>.train<suffix> beside a JSONL source and no file for rows "
                 "in memory")
    return _export(source, {format: output}, system_prompt, tools, strip_think, validate, mask_mode, unroll,
                   max_tool_output_chars, workers, progress)[format]


def export_datasets(source, outputs, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                    mask_mode="assistant", unroll=False, max_tool_output_chars=None, workers=None, progress=None):
    """``export_dataset`` in several formats from one read of the source; returns ``{format: report}``.

    ``outputs`` maps each format (``"openai"``, ``"trl"``) to its output path. Each file and report is
    what ``export_dataset(source, outputs[format], format=format, ...)`` gives with the same arguments
    (``elapsed_seconds`` is the whole call's), but each row is parsed, converted and leak-checked
    once, and a file source is read and hashed once. With ``validate``, the first format in
    ``outputs`` whose gate fails raises that format's error and no file is written. Each file is put
    in place atomically, one after the other.
    """
    return _export(source, check_outputs(outputs, "export_datasets"), system_prompt, tools, strip_think, validate,
                   mask_mode, unroll, max_tool_output_chars, workers, progress)


def _plans(formats, system, tools, strip_think, mask_mode, unroll, cap, json_rows=False):
    """One plan per format, in the order their rows are serialized: TRL last (``_serialized_row``)."""
    plans = [_SftPlan(system, tools, strip_think, mask_mode, unroll, cap, fmt, json_rows) for fmt in formats]
    return sorted(plans, key=lambda plan: plan.trl)


def _export(source, outputs, system_prompt, tools, strip_think, validate, mask_mode, unroll, max_tool_output_chars,
            workers, progress):
    """``export_dataset`` for every ``{format: output}`` at once; returns ``{format: report}``."""
    started = time.perf_counter()
    check_progress(progress)
    check_mask_mode(mask_mode)
    check_tool_output_cap(max_tool_output_chars)
    src = resolve_source(source, system_prompt, tools)
    # spec 5.3: no output names <name>.train<suffix> beside a path source; a run object's writes nothing
    dests = {fmt: destination(output, src.path if src.given_as_path else None) for fmt, output in outputs.items()}
    if src.path is not None:
        for dest in dests.values():
            if dest is not None:
                refuse_source(dest, src.path)
    plans = _plans(outputs, src.system, src.tools, strip_think, mask_mode, unroll, max_tool_output_chars,
                   json_rows=src.hashed is not None)
    base = plans[0]
    stamp = file_stamp(src.path)
    n = 1
    if src.hashed is not None:
        from .parallel import workers_for

        n = workers_for(src.path, workers)
    # one process: a pre-scan makes every line final at once; a pool splices group fields in after
    prescan_wanted = base.grouping and _rereadable(src.rows) and n == 1
    for plan in plans:
        plan.summarize_groups = plan.grouping and not prescan_wanted
    spools = []
    stack = contextlib.ExitStack()
    try:
        for plan in plans:
            spools.append(Spool(dests[plan.format], final_lines=prescan_wanted or not plan.grouping))
        pool = None
        if n > 1:
            from .parallel import WorkerPool

            pool = stack.enter_context(WorkerPool(n))
        tallies = []
        for i, (plan, spool) in enumerate(zip(plans, spools)):
            # one GroupStats for every format (each held its own: about 8 MB a format at 1M rows in 170k groups)
            tallies.append(_SftTally(plan, spool, src.path, progress if i == 0 else None,
                                     groups=tallies[0].groups if tallies else None))
        with change_explains_failure(src.path, stamp):
            _run_pass(src, plans, tallies, spools, prescan_wanted, pool)
        check_unchanged(src.path, stamp)
        if progress is not None:
            progress(tallies[0].rows_read)
        tallies[0].schema.raise_if_bad()  # the checks read the rows before any format's own conversion
        by_format = {plan.format: (plan, spool, tally) for plan, spool, tally in zip(plans, spools, tallies)}
        reports = {fmt: _sft_report(by_format[fmt][2], src, by_format[fmt][0], max_tool_output_chars)
                   for fmt in outputs}
        source_digest = SourceDigest(src, stamp, reports.values())
        stack.callback(source_digest.close)
        for fmt, report in reports.items():
            tally = by_format[fmt][2]
            roundtrip, leaks = tally.roundtrip, tally.leaks
            if validate and roundtrip.invalid:
                rt = report["tool_call_roundtrip"]
                source_digest()
                raise RoundtripInvalidError(
                    f"tool_call_roundtrip_invalid: {rt['invalid']} of {rt['checked']} tool calls do not parse back "
                    f"to structured arguments (rows {rt['rows']}); training on them teaches string-wrapped "
                    "arguments. Fix the rows or pass validate=False.", with_elapsed(report, started))
            if validate and leaks.n_leaked:
                source_digest()
                raise PrivilegedLeakError(_leak_message(leaks), with_elapsed(report, started))

        published = []  # the files put in place so far
        for fmt, report in reports.items():
            plan, spool, tally = by_format[fmt]
            dest = dests[fmt]
            if dest is not None:
                if tally.parts:
                    # the splice runs in this process alone: the source's hash takes the other core
                    source_digest.start()
                    _splice_parts(spool, tally)
                report["path"] = str(dest)
                report["n_written"] = tally.n_out
                with published_one_of(published):
                    report["sha256"] = spool.publish(None if spool.final_lines else tally.suffixes(),
                                                     alongside=source_digest)
                published.append(dest)
        source_digest()
        return {fmt: with_elapsed(report, started) for fmt, report in reports.items()}
    finally:
        stack.close()
        Spool.discard_all(spools)


def _sft_report(tally, src, plan, max_tool_output_chars):
    t = tally
    report = {
        "n": t.n_out,
        "format": plan.format,
        "with_system": t.with_system,
        "with_tools": t.with_tools,
        "groups": t.written_group_count(),
        "tool_call_roundtrip": t.roundtrip.report(),
        "mask_mode": "final (unrolled)" if plan.unroll else plan.mask_mode,
        "unrolled": plan.unroll,
        "max_tool_output_chars": max_tool_output_chars,
        "tool_output_truncated": t.truncated,
        "tool_output_chars_cut": t.chars_cut,
        "trained_messages": t.trained,
        "masked_messages": t.masked,
        "privileged_leaks": t.leaks.export_report(),
        "rewards": {f"n_{v}": count for v, count in t.rewards.items()},
    }
    warnings = []
    if t.leaks.n_leaked:
        warnings.append(
            f"{t.leaks.n_leaked} of {t.leaks.n_checked} rows quote their own privileged context in an assistant "
            "turn and are exported anyway (validate=False); report['privileged_leaks']['leaked'] names them.")
    if t.n_length_cut:
        warnings.append(
            f"{t.n_length_cut} of {t.rows_read} rows were cut by the reply token cap (finish_reason 'length') and "
            "are exported as SFT targets; a model trained on them learns to stop mid-thought. Filter on "
            "finish_reason == 'stop' or raise agent_max_tokens=.")
    if t.rewards["fail"]:
        warnings.append(
            f"{t.rewards['fail']} of {t.n_out} rows have reward below 0.5 and are exported as SFT targets; a "
            f"model trained on them learns the failure. {FAILED_ROWS_ADVICE}")
    warnings += tool_context_warnings(t.rows_with_calls, t.calls_without_system, t.n_out, bool(src.tools),
                                      NO_TOOLS_ADVICE, NO_SYSTEM_ADVICE)
    if t.big_int_rows:
        line, where, value = t.big_int_rows.first
        digits = int.__repr__(value)
        shown = digits if len(digits) <= 30 else f"{digits[:12]}...({len(digits)} digits)"
        warnings.append(
            f"{t.big_int_rows.n} of {t.n_out} rows hold an integer no int64 holds (first at line {line} of the file, "
            f"{where}: {shown}): datasets.load_dataset loads such a value as a float (inf beyond a double), or "
            "refuses the file where the path also holds other kinds of value, and the chat template renders what "
            "it loads; write such ids as strings in the run. validate --format trl names each path "
            "(datasets_big_int).")
    if t.dropped:
        warnings.append(
            f"{t.dropped} rows have no assistant turn after the first message and were dropped: a TRL "
            "prompt/completion row needs a completion to train on.")
    if t.going_on:
        warnings.append(
            f"{t.going_on} of {t.n_out} rows go on after their last assistant turn (the run ends on a tool "
            "result or a user turn): a completion is that turn and what follows (DECISIONS 16), and TRL trains "
            "every message of a completion, so these rows teach the model those words as its own. End the runs "
            "on an assistant reply, or export with mask_mode='assistant' (messages rows, assistant turns "
            "trained).")
    if t.replies_masked:
        warnings.append(
            f"{t.replies_masked} of {t.n_out} rows leave assistant turns out of loss_mask, but OpenAI fine-tuning "
            "reads only a message's weight: uploaded to OpenAI as they are, these rows train every assistant "
            "turn. For OpenAI, give the turns left out weight 0; for TRL, export format='trl' (prompt/completion "
            "rows, only the completion trained).")
    if t.weighted:
        writes = ("drops the weights (a TRL row has none)" if plan.trl else
                  f"writes its own loss_mask from mask_mode={plan.mask_mode!r} and no weight")
        warnings.append(
            f"{t.weighted} of {t.rows_read} rows carry a per-message weight (rows of an OpenAI fine-tuning file, not "
            f"of a simulation run?): the export {writes}, so a turn weighted 0 there may be trained here. Export "
            "the run those rows were made from.")
    if t.crashed:
        warnings.append(
            f"{t.crashed} of {t.rows_read} rows are crashed rollouts (final_text '<agent error: ...>'): exported as "
            "SFT targets, they teach the model the error text as its reply. Leave rows whose final_text starts "
            "with '<agent error' out of the export, or rerun them.")
    if t.misshapen:
        warnings.append(
            f"{t.misshapen.n} of {t.rows_read} rows hold tool calls that are not call objects (first: row "
            f"{t.misshapen.first} of the source, counting from 0): {MISSHAPEN_CALLS}. Written as the spec reads "
            "them (text a call per character, a call that is not an object as {}, the call itself for its "
            "function), they train calls with no name and arguments {} that pass the round-trip gate. "
            f"{CALL_SHAPE_ADVICE}")
    if t.left_out:
        row, what = t.left_out.first
        warnings.append(
            f"{t.left_out.n} of {t.rows_read} rows hold {DROPPED_MESSAGES} (first: row {row} of the source, "
            f"counting from 0: {what}), as the spec reads them: the model is trained on "
            f"those conversations without them (its instructions, or a turn of its own). {ROLE_ADVICE}")
    if t.textless:
        row, what = t.textless.first
        warnings.append(
            f"{t.textless.n} of {t.rows_read} rows hold {NOT_TEXT} (first: row {row} of the source, counting from "
            f"0: {what}): the model is trained on, or to say, that JSON (for OpenAI's "
            "content parts, [{\"type\": \"text\", \"text\": ...}]) instead of the words. " + NOT_TEXT_ADVICE)
    if t.rows_skipped:  # DECISIONS 15 counts them; the spec skips them without a word
        warnings.append(
            f"{t.rows_skipped} of {t.rows_read} rows are not objects and were skipped (a whole JSON array of rows "
            "written on one line of a file is one such row: a JSONL file has one row object a line).")
    if t.no_reply:
        consumer = ("OpenAI fine-tuning refuses a file that holds one" if not plan.trl else
                    "TRL trains every token of a messages row unless SFTConfig(assistant_only_loss=True), so the "
                    "prompt would be learned as the model's words")
        warnings.append(
            f"{t.no_reply} of {t.n_out} rows have no assistant turn (e.g. a run that ended before the agent "
            f"replied), so nothing to train on: {consumer}. Leave those rows out of the export (validate names "
            "them: no_assistant_message).")
    if t.empty_reply:
        cause = (f"; in {t.think_emptied} of them strip_think removed a reply that was only a <think> block"
                 if t.think_emptied else ", empty in the run itself")
        warnings.append(
            f"{t.empty_reply.n} of {t.n_out} rows train an assistant turn with no text and no tool call (first at line "
            f"{t.empty_reply.first} of the output){cause}: the model learns to end its turn without a word. Leave "
            "those rows out of the export" + (", or export with strip_think=False to keep the thinking."
                                              if t.think_emptied else "."))
    if t.think_left:
        warnings.append(
            f"{t.think_left.n} of {t.n_out} rows train an assistant turn that still holds a <think> or </think> tag "
            f"after strip_think (first at line {t.think_left.first} of the output): strip_think removes whole "
            "<think>...</think> blocks only, so a reply whose thinking was never closed, or whose opening tag the "
            "chat template wrote, is written with its reasoning and the stray tag, and the model learns to say "
            "them. Close or remove the tags in the run, or leave those rows out of the export.")
    if t.two_systems:
        warnings.append(
            f"{t.two_systems} of {t.n_out} rows open with their own system message and were given the system prompt "
            f"too (from the {src.system_source}): two system turns open them, a context the model will not see when "
            f"it runs. {TWO_SYSTEMS_ADVICE}")
    if t.undeclared:
        line, name = t.undeclared.first
        warnings.append(
            f"{t.undeclared.n} of {t.n_out} rows call a tool that the tools written with them (from the "
            f"{src.tools_source}) do not declare (first {called_tool(name)}, line {line} of the output): trained on "
            f"them, the model learns to call a tool it is not given. {UNDECLARED_ADVICE}")
    if t.bad_links:
        line, where = t.bad_links.first
        warnings.append(
            f"{t.bad_links.n} of {t.n_out} rows have tool results that do not pair up with their calls (first at line "
            f"{line} of the output, {where}): written as the rows link them (an id-less result takes the oldest "
            "call still waiting, even one an earlier turn left unanswered), such a row shows the model a result for "
            f"another call, or for none, and OpenAI refuses it. {LINK_ADVICE} (validate names each: tool_call_id_*, "
            "tool_call_unanswered).")
    if not t.rows_read and src.hashed is None and not _rereadable(src.rows):  # an empty list or file: as spec E47
        warnings.append(
            "the iterator given as the source gave no rows, so the file has none; an iterator or generator is "
            "read once (DECISIONS 5), so one an earlier export read is used up: export every format from one "
            "read with export_datasets, or pass a list of rows.")
    if warnings:
        report["warnings"] = warnings
    if t.dropped:
        report["no_completion_dropped"] = t.dropped
    if plan.trl:
        report["trl_loss"] = TRL_LOSS_COMPLETION if plan.completion_rows else TRL_LOSS_MESSAGES
    report["system_prompt_source"] = src.system_source
    report["tools_source"] = src.tools_source
    report["rows_read"] = t.rows_read
    report["rows_skipped"] = t.rows_skipped  # lines that were JSON but not an object
    if src.path is not None:
        report["source_path"] = str(src.path)
        if src.hashed is not None:
            report["source_sha256"] = src.sha256  # None until SourceDigest fills it in
    return report


def _leak_message(leaks):
    return (
        f"privileged_leak: {leaks.n_leaked} of {leaks.n_checked} rows quote their own privileged context "
        "(reference, principle or hidden state) in an assistant turn; the export scrubs the key, not the reply, "
        "so training on them teaches the model to say what only the grader was told. Drop those rows "
        "(leak_report(...)['leaked'] names them) or pass validate=False."
    )


export_training = export_dataset
