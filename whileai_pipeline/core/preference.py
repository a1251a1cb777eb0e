"""``export_preference``: chosen/rejected pairs as DPO rows, behind both gates (spec 7, DECISIONS 12)."""

import enum
import time
from itertools import islice

from .arguments import refuse_pairs_with_report
from .conversation import conversation, crashed_rollout
from .errors import ExportError, NoPreferencePairsError, PrivilegedLeakError, RoundtripInvalidError
from .gates import (
    ENCODINGS,
    LeakGate,
    RoundtripGate,
    check_format,
    count_tool_calls,
    leak_outcome,
    leak_verdict,
    scrub,
)
from .jsonl import dumps, dumps_reusing
from .output import check_output, check_outputs, destination, published_one_of, refuse_source, with_elapsed
from .pairs import first_turn_note, is_pair, length_note
from .progress import check_progress, tick
from .rows import SchemaCheck, preference_problems, stamp
from .runs import SourceDigest, change_explains_failure, check_unchanged, file_stamp, resolve_source
from .sightings import Sightings
from .spool import Spool
from .trl import first_assistant_index, trl_preference_row
from .wire import (CALL_SHAPE_ADVICE, DROPPED_MESSAGES, LINK_ADVICE, MISSHAPEN_CALLS, NOT_TEXT, NOT_TEXT_ADVICE,
                   ROLE_ADVICE, ObjectTexts, WireStats, called_tool, declared_tool_names, has_tool_calls,
                   link_problem_in, opens_with_two_systems, to_wire, tool_context_warnings)

# How the no-tools and no-system-prompt warnings end, for a caller of export_preference. The pipeline has no
# such argument (it reads the run's sidecar) and puts its own advice in their place, found by these texts.
NO_TOOLS_ADVICE = "Pass tools=, or keep a <name>.meta.json sidecar beside the pairs file."
NO_SYSTEM_ADVICE = "Pass system_prompt=, or keep a <name>.meta.json sidecar beside the pairs file."
# and the two-system-turns warning (the pipeline has no system_prompt= either)
TWO_SYSTEMS_ADVICE = "Pass system_prompt=\"\" to keep only the sides' own, or take it out of the rows."
# and the undeclared-tool warning (the pipeline's tools come from the run's sidecar alone)
UNDECLARED_ADVICE = "Add the tool's schema to the tools, or leave those pairs out."

PAIR_KEYS = (
    "tie", "pairwise", "first_turn_differs", "chosen_score", "rejected_score", "margin",
    "chosen_model", "rejected_model", "same_policy", "length_delta", "chosen_reason",
    "rejected_reason", "rejected_failure_class", "lineage",
)


def _pair_source(pairs, system_prompt, tools):
    """Pairs from a list, an iterator (read once) or a JSONL path; system and tools as for rows,
    except that a falsy ``system_prompt`` (``False``, ``0``, ``[]``) means no system message: the
    preference exporter takes ``text(system_prompt or "")`` (spec 7.3 step 3), where ``training_rows``
    writes the text of any value but ``None`` (spec 3.2)."""
    if system_prompt is not None and not system_prompt:
        system_prompt = ""
    return resolve_source(pairs, system_prompt, tools, lists_are_rows=True)


class _PairPlan:
    """Everything the per-pair work needs; picklable, so worker processes get the same plan."""

    def __init__(self, system, tools, strip_think, drop_ties, format, json_rows=False):
        self.system, self.tools, self.strip_think, self.drop_ties = system, tools, strip_think, drop_ties
        self.json_rows = json_rows  # pairs read from a JSONL file: ``wire.ObjectTexts`` may be used
        self.format = format
        self.trl = format == "trl"
        self.encoding = ENCODINGS[format]
        self.tools_json = dumps(list(tools)) if tools else None  # every row's "tools", serialized once
        self.declared = declared_tool_names(tools)  # a call to another tool is a hallucinated one


class _Kind(enum.Enum):
    """What became of an entry that gives no DPO row. Members, unlike strings, come back from a worker
    process as themselves, so ``consume`` can tell them by identity (strings did not: a pooled export
    of a pairs file with ties failed with a nonsense schema error)."""

    SKIP = "skip"  # not a JSON object
    BAD = "bad"  # an object without a chosen and a rejected row
    TIE = "tie"  # dropped: a tie (drop_ties)
    DROPPED = "dropped"  # dropped: TRL found no completion


_SKIP, _BAD, _TIE, _DROPPED = _Kind


def _pair_outcomes(item, plans):
    """All one pair contributes to an export in each format of ``plans``: per plan, its kind, or
    (schema problems, gate facts, serialized row).

    The sides are converted and leak-checked once; only the TRL reshaping (which copies what it
    changes), the checks and the serialization are per format. A pure function of (item, plans), so
    it can run in any process; each format's ``_PairTally.consume`` adds the outcomes up in order,
    which keeps the output the same however the work was spread.
    """
    if not isinstance(item, dict):
        return [_SKIP] * len(plans)
    if not is_pair(item):
        return [_BAD] * len(plans)
    base = plans[0]
    if base.drop_ties and item.get("tie"):
        return [_TIE] * len(plans)
    entry = {"prompt": scrub(item.get("prompt"))}  # a pair field like the rest (DECISIONS 8); TRL replaces it
    rebuilt = {}  # each side's conversation, built once for the wire rows and the leak checks
    objects = ObjectTexts() if base.json_rows and any(plan.trl for plan in plans) else None
    stats = WireStats()  # ``unlinked``: whether a side's tool results may not pair up with its calls
    for side in ("chosen", "rejected"):
        row = item[side]
        messages = row.get("messages")
        if not messages:
            messages = rebuilt[side] = conversation(row)
        entry[side] = to_wire(messages, system=base.system, strip_think=base.strip_think, objects=objects,
                              stats=stats)
    if base.tools:
        entry["tools"] = list(base.tools)
    for key in PAIR_KEYS:
        value = item.get(key)
        if value is not None:
            entry[key] = scrub(value)
    stamp(entry)
    strip = base.strip_think  # the replies as written are searched too (leak_verdict)
    leak = leak_outcome(item["chosen"], rebuilt=rebuilt.get("chosen"), strip_think=strip)
    rejected_quotes = bool(leak_verdict(item["rejected"], rebuilt=rebuilt.get("rejected"), strip_think=strip))
    length_cut = item["chosen"].get("finish_reason") == "length"  # the reply the trainer pushes up stops mid-way
    crashed = crashed_rollout(item["chosen"]) or crashed_rollout(item["rejected"])  # a side the model never produced
    # where each side's reply starts (-1: none); the TRL reshape parts the same messages there
    chosen_at, rejected_at = first_assistant_index(entry["chosen"]), first_assistant_index(entry["rejected"])
    replied = chosen_at >= 0 and rejected_at >= 0
    same_reply = replied and _same_reply(entry["chosen"], chosen_at, entry["rejected"], rejected_at)
    empty_chosen = chosen_at >= 0 and _says_nothing(entry["chosen"], chosen_at)  # DPO prefers silence
    pairwise = item.get("pairwise")  # a judge's verdict against the rewards' order: the pair is kept (spec 7.6)
    judged_rejected = isinstance(pairwise, dict) and pairwise.get("winner") == "rejected"
    outcomes = []
    for plan in plans:
        row, placed = entry, None
        if plan.trl:
            row = trl_preference_row(entry, objects)  # a copy: the entry stays as it is for any other format
            if row is None:
                outcomes.append(_DROPPED)
                continue
            placed = objects
        delta, margin = row.get("length_delta"), row.get("margin")
        has_calls = bool(has_tool_calls(row["chosen"]) or has_tool_calls(row["rejected"]))
        chosen_calls = count_tool_calls(row["chosen"], plan.encoding, placed, declared=plan.declared)
        # DECISIONS 6: a side whose own messages open with a system message was exported with one (a TRL
        # pair's prompt is the chosen side's)
        with_system = _opens_with_system(entry["chosen"]) and (plan.trl or _opens_with_system(entry["rejected"]))
        facts = (
            chosen_calls[:2],
            count_tool_calls(row["rejected"], plan.encoding, placed)[:2],
            leak,
            rejected_quotes,
            has_calls,
            delta if isinstance(delta, int) else None,
            row.get("first_turn_differs") is False,
            margin if _counted_margin(margin) else None,
            plan.trl and (_speaks_for_user(row["chosen"]) or _speaks_for_user(row["rejected"])),
            # a side with nothing to train on (TRL drops such a pair: no completion)
            not plan.trl and not replied,
            length_cut,
            plan.trl and _other_context(entry, chosen_at, rejected_at),
            crashed,
            same_reply,
            empty_chosen,
            has_calls and not with_system,
            # the chosen side is the one DPO pushes up; a rejected call to a tool nobody gave is a fair negative
            chosen_calls[2],
            # a side's own system message right under the system prompt the export put first (a TRL pair's is its
            # prompt)
            bool(base.system) and (opens_with_two_systems(row["prompt"]) if plan.trl else
                                   opens_with_two_systems(row["chosen"]) or opens_with_two_systems(row["rejected"])),
            _side_link_problem(row, plan.trl) if stats.unlinked else None,
            stats.misshapen,
            stats.dropped,
            stats.textless,
            judged_rejected,
            plan.trl and (_holds_tool_result(row["chosen"]) or _holds_tool_result(row["rejected"])),
        )
        write = dumps_reusing if placed is None else placed.dumps
        outcomes.append((preference_problems(row), facts, write(row, "tools", plan.tools_json)))
    return outcomes


def _side_link_problem(row, trl):
    """Where and how a written pair's side first has tool results that do not pair up with its calls
    (``wire.link_problem_in``; a TRL side is read after its prompt, the chosen side's), as text, or None."""
    head = (("prompt", row["prompt"]),) if trl else ()
    return link_problem_in(*head, ("chosen", row["chosen"])) or link_problem_in(*head, ("rejected", row["rejected"]))


def _opens_with_system(messages) -> bool:
    return bool(messages) and isinstance(messages[0], dict) and messages[0].get("role") == "system"


PAIR_SCHEMA_ADVICE = ("A pair needs a non-empty chosen and rejected conversation: give each side a prompt, steps "
                      "or messages (or pass system_prompt=), and fix or drop the pairs named.")


class _PairTally:
    """Adds up pair outcomes in order: gates, schema check, counters, spool lines."""

    def __init__(self, format, spool, progress, source_path=None):
        self.spool, self.progress = spool, progress
        self.source_path = source_path  # the pairs file, None for pairs given in memory
        self.roundtrip, self.leaks = RoundtripGate(format), LeakGate()
        self.schema = SchemaCheck("export_preference", PAIR_SCHEMA_ADVICE)
        self.n_entries = self.skipped = self.bad = self.ties = self.dropped = self.n_out = 0
        self.rejected_quoting = self.deltas = self.longer = self.identical = self.rows_with_calls = 0
        self.calls_without_system = 0  # pairs with tool calls written with a side that has no system message
        self.n_margins, self.margin_sum = 0, 0
        self.first_bad = None  # the line number (a file) or index (rows) of the first entry that is no pair
        self.user_turns = 0  # TRL pairs with a user or system turn inside a side
        self.no_reply = 0  # pairs written with a side that has no assistant turn
        self.length_cut = 0  # pairs written whose chosen row has finish_reason "length"
        self.other_context = 0  # TRL pairs whose rejected side began from other messages than the chosen side
        # pairs written, each seen at its output line: with a side whose final_text is an agent error, whose chosen
        # and rejected replies are the same, whose chosen reply has no words and no tool call
        self.crashed, self.same_reply, self.empty_chosen = Sightings(), Sightings(), Sightings()
        self.two_systems = 0  # pairs written with a side that opens with two system turns
        # pairs written, each seen at its output line (with what was seen there): whose chosen side calls a tool the
        # export's tools do not declare (and its name); with a side whose tool calls are not call objects
        # (``WireStats.misshapen``), holding messages to_wire left out (``dropped``: and which), holding a turn
        # whose content is not text (``textless``: and which), whose tool results do not pair up with its calls
        # (and where and how: ``_side_link_problem``); TRL pairs with a tool turn inside a side
        self.undeclared, self.misshapen, self.left_out = Sightings(), Sightings(), Sightings()
        self.textless, self.bad_links, self.tool_results = Sightings(), Sightings(), Sightings()
        self.judged_rejected = 0  # pairs written that the pairwise judge decided for the rejected side

    def consume(self, outcome, position):
        tick(self.progress, self.n_entries + self.skipped + 1)
        if outcome is _SKIP:
            self.skipped += 1
            return
        self.n_entries += 1
        if outcome is _BAD:
            if not self.bad:
                self.first_bad = position
            self.bad += 1
            return
        if self.bad:  # the export fails anyway; count the rest
            return
        if outcome is _TIE:
            self.ties += 1
            return
        if outcome is _DROPPED:
            self.dropped += 1
            return
        problems, facts, body = outcome
        if problems:  # the spec numbers the rows kept; say where the pair is too
            where = (f"{self.source_path}:{position}" if self.source_path is not None
                     else f"index {position} of the pairs given")
            self.schema.add(self.n_out, problems, where)
        if self.schema.bad:
            self.n_out += 1
            return
        (chosen_calls, rejected_calls, leak, rejected_quotes, has_calls, delta, identical, margin, user_turns,
         no_reply, length_cut, other_context, crashed, same_reply, empty_chosen, calls_without_system,
         undeclared, two_systems, links, misshapen, left_out, textless, judged_rejected,
         tool_results) = facts
        self.judged_rejected += judged_rejected
        if tool_results:
            self.tool_results.see(self.n_out + 1)
        self.roundtrip.record(2 * self.n_out, *chosen_calls)
        self.roundtrip.record(2 * self.n_out + 1, *rejected_calls)
        self.leaks.record(leak)
        self.rejected_quoting += rejected_quotes
        self.rows_with_calls += has_calls
        self.calls_without_system += calls_without_system
        if delta is not None:
            self.deltas += 1
            self.longer += delta > 0
        self.identical += identical
        self.user_turns += user_turns
        self.no_reply += no_reply
        self.length_cut += length_cut
        self.other_context += other_context
        for sightings, seen in ((self.crashed, crashed), (self.same_reply, same_reply),
                                (self.empty_chosen, empty_chosen)):
            if seen:
                sightings.see(self.n_out + 1)
        self.two_systems += two_systems
        if undeclared is not None:
            self.undeclared.see((self.n_out + 1, undeclared))
        if misshapen:
            self.misshapen.see(self.n_out + 1)
        if left_out is not None:
            self.left_out.see((self.n_out + 1, left_out))
        if textless is not None:
            self.textless.see((self.n_out + 1, textless))
        if links is not None:
            self.bad_links.see((self.n_out + 1, links))
        if margin is not None:
            self.n_margins += 1
            self.margin_sum += margin
        if body is not None:  # None: a worker process already wrote the line
            self.spool.write(body)
        self.n_out += 1


def _counted_margin(margin) -> bool:
    """A numeric margin (bools count, spec 7.3) that a float can hold: the reference's mean of a
    400-digit integer margin fails with OverflowError, ours leaves it out of ``mean_margin``."""
    if not isinstance(margin, (int, float)):
        return False
    try:
        float(margin)
    except OverflowError:
        return False
    return True


def _other_context(entry, chosen_at, rejected_at) -> bool:
    """A pair whose sides differ before their first assistant turn (another system message, ask or user
    turn): the TRL prompt is the chosen side's (spec 4.1), so the rejected side's own is lost. The wire
    messages before a first assistant turn carry no tool calls, so they compare as TRL writes them.
    ``chosen_at``/``rejected_at``: each side's first assistant index (-1: none, the whole side compares)."""
    def before_reply(side, i):
        return side if i < 0 else side[:i]

    return before_reply(entry["chosen"], chosen_at) != before_reply(entry["rejected"], rejected_at)


def _same_reply(chosen, chosen_at, rejected, rejected_at) -> bool:
    """The wire sides' replies (from each first assistant turn on: what DPO scores) are the same, tool-call
    ids aside: they are generated per conversation or brought by the row, and no reply is told by them."""
    if len(chosen) - chosen_at != len(rejected) - rejected_at:
        return False
    return all(a == b or _same_message(a, b)
               for a, b in zip(islice(chosen, chosen_at, None), islice(rejected, rejected_at, None)))


def _says_nothing(side, start) -> bool:
    """The wire side's assistant turns from ``start`` on are blank (after strip_think, as written) and make no
    tool call: a reply that was only a think block, or whitespace."""
    return not any(m.get("tool_calls") or (m.get("content") or "").strip()
                   for m in islice(side, start, None) if m.get("role") == "assistant")


def _same_message(a, b) -> bool:
    """Two wire messages with the same role, content, tool name and calls, whatever their ids."""
    if a.get("role") != b.get("role") or a.get("content") != b.get("content") or a.get("name") != b.get("name"):
        return False
    calls_a, calls_b = a.get("tool_calls") or (), b.get("tool_calls") or ()
    return len(calls_a) == len(calls_b) and all(x["function"] == y["function"] for x, y in zip(calls_a, calls_b))


def _holds_tool_result(side) -> bool:
    """A TRL side holding a tool turn: DPOTrainer scores every token of a side, the tool's output too."""
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in side)


def _speaks_for_user(side) -> bool:
    """A TRL side (which starts with the model's turn) that holds a user or system turn after it."""
    return any(isinstance(m, dict) and m.get("role") in ("user", "system") for m in side[1:])


def _dpo_lines(item, plans):
    """``_pair_outcomes`` split for a worker: (the outcomes without their bytes, each format's lines)."""
    outcomes, lines = [], []
    for outcome in _pair_outcomes(item, plans):
        if isinstance(outcome, tuple):
            outcomes.append((outcome[0], outcome[1], None))
            lines.append((outcome[2] + b"\n",))
        else:
            outcomes.append(outcome)
            lines.append(())
    return outcomes, lines


def _run_pairs(src, plans, tallies, spools, workers):
    """Feed every pair's outcomes to the tallies (one per format): in this process, or over worker
    processes for a big file written to files."""
    def consume(outcomes, position):
        for tally, outcome in zip(tallies, outcomes):
            tally.consume(outcome, position)

    if src.hashed is not None and all(spool.dest is not None for spool in spools):
        from .parallel import WorkerPool, byte_chunks, workers_for, write_chunk

        n = workers_for(src.path, workers)
        if n > 1:
            src.hashed.deferred = True  # hashed at the end, beside the output's flush (``SourceDigest``)
            with WorkerPool(n) as pool:
                jobs = ((chunk, _dpo_lines, plans, tuple(spool.part(k) for spool in spools))
                        for k, chunk in enumerate(byte_chunks(src.path)))
                lines_done = 0  # a chunk numbers its lines from 1
                for outcomes, parts, n_lines in pool.ordered(write_chunk, src.path, jobs,
                                                             writes_beside=[s.dest for s in spools]):
                    for lineno, outcome in outcomes:
                        consume(outcome, lines_done + lineno)
                    lines_done += n_lines
                    for spool, part in zip(spools, parts):
                        spool.append_part(part)
            return
    for position, item in src.numbered():
        try:
            outcomes = _pair_outcomes(item, plans)
        except ExportError as exc:
            raise src.bad_row(position, exc, "pairs") from None
        consume(outcomes, position)


def export_preference(pairs, output=None, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                      drop_ties=True, format="openai", progress=None, workers=None):
    """Spec 7 + DECISIONS 12: export chosen/rejected pairs behind the round-trip and leak gates.

    ``workers`` (ours): processes for a large JSONL path source, as for ``export_dataset``.
    """
    check_format(format)
    check_output(output, "(the default) to write no file and get the report only")
    return _export(pairs, {format: output}, system_prompt, tools, strip_think, validate, drop_ties, progress,
                   workers)[format]


def export_preferences(pairs, outputs, *, system_prompt=None, tools=None, strip_think=True, validate=True,
                       drop_ties=True, progress=None, workers=None):
    """``export_preference`` in several formats from one read of the pairs; returns ``{format: report}``.

    ``outputs`` maps each format (``"openai"``, ``"trl"``) to its output path. Each file and report is
    what ``export_preference(pairs, outputs[format], format=format, ...)`` gives with the same
    arguments (``elapsed_seconds`` is the whole call's), but each pair is parsed, converted and
    leak-checked once. With ``validate``, the first format in ``outputs`` whose export would raise
    raises that error and no file is written. Each file is put in place atomically, one after the other.
    """
    return _export(pairs, check_outputs(outputs, "export_preferences"), system_prompt, tools, strip_think, validate,
                   drop_ties, progress, workers, name="export_preferences")


def _export(pairs, outputs, system_prompt, tools, strip_think, validate, drop_ties, progress, workers,
            name="export_preference"):
    """``export_preference`` for every ``{format: output}`` at once; returns ``{format: report}``. ``name`` is
    the function called, which the errors about what was passed as pairs name (and tell to call again)."""
    started = time.perf_counter()
    check_progress(progress)
    refuse_pairs_with_report(pairs, name)
    src = _pair_source(pairs, system_prompt, tools)
    dests = {fmt: destination(output, None) for fmt, output in outputs.items()}  # no default name: none, no file
    if src.path is not None:
        for dest in dests.values():
            if dest is not None:
                refuse_source(dest, src.path, "Pass another output path, or none to get the report only.")
    plans = [_PairPlan(src.system, src.tools, strip_think, drop_ties, fmt, src.hashed is not None) for fmt in outputs]
    stamp = file_stamp(src.path)
    spools = []
    try:
        for plan in plans:
            spools.append(Spool(dests[plan.format]))
        tallies = [_PairTally(plan.format, spool, progress if i == 0 else None,
                              src.path if src.hashed is not None else None)
                   for i, (plan, spool) in enumerate(zip(plans, spools))]
        with change_explains_failure(src.path, stamp):
            _run_pairs(src, plans, tallies, spools, workers)
        check_unchanged(src.path, stamp)
        if progress is not None:
            progress(tallies[0].n_entries + tallies[0].skipped)
        reports = {}
        source_digest = SourceDigest(src, stamp, reports.values())  # fills in the reports made below
        for plan, tally in zip(plans, tallies):
            report = reports[plan.format] = _checked_report(tally, src, plan.format, name)
            _raise_if_refused(tally, report, validate, started, source_digest)
        published = []  # the files put in place so far
        for plan, tally, spool in zip(plans, tallies, spools):
            report = reports[plan.format]
            if not tally.n_out:
                report["path"] = None
            elif spool.dest is not None:
                report["path"] = str(spool.dest)  # export_dataset's order: path, n_written, sha256
                report["n_written"] = tally.n_out
                with published_one_of(published):
                    report["sha256"] = spool.publish(alongside=source_digest)
                published.append(spool.dest)
        source_digest()
        return {fmt: with_elapsed(report, started) for fmt, report in reports.items()}
    finally:
        Spool.discard_all(spools)


def _checked_report(tally, src, format, name="export_preference"):
    """One format's report; raises for entries that are not pairs and for schema problems."""
    t = tally
    n_entries, skipped, bad, ties, dropped, n_out = t.n_entries, t.skipped, t.bad, t.ties, t.dropped, t.n_out
    rejected_quoting, deltas, longer, identical = t.rejected_quoting, t.deltas, t.longer, t.identical
    rows_with_calls, roundtrip, leaks, schema = t.rows_with_calls, t.roundtrip, t.leaks, t.schema
    if bad:
        first = (f"line {t.first_bad} of {src.path}" if src.hashed is not None
                 else f"index {t.first_bad} of the pairs given")
        raise ValueError(
            f"{name} takes chosen/rejected pairs, and {bad} of {n_entries} entries have no "
            "chosen/rejected side. Build the pairs first: pairs, report = build_preference_pairs(rows); "
            f"{name}(pairs, ...) (or scored.select_for_preference()). The first is {first}.")
    schema.raise_if_bad()

    report = {"pairs": n_out, "format": format, "tool_call_roundtrip": roundtrip.report()}
    privileged = leaks.export_report()
    privileged["rejected_quoting"] = rejected_quoting
    report["privileged_leaks"] = privileged
    if ties:
        report["ties_dropped"] = ties
    if dropped:
        report["no_completion_dropped"] = dropped
    if t.user_turns:
        report["user_turns_in_sides"] = t.user_turns
    if deltas:
        report["chosen_longer_frac"] = round(longer / deltas, 3)
        note = length_note(longer, deltas)
        if note:
            report["warnings"] = [note]
    if identical:
        report["first_turn_identical"] = identical
        report.setdefault("warnings", []).append(first_turn_note(identical, n_out))
    if t.user_turns:
        report.setdefault("warnings", []).append(
            f"{t.user_turns} of {n_out} pairs have a user or system turn inside chosen or rejected (conversations "
            "with a later user message): DPOTrainer scores each side whole, so it counts those words as the "
            "model's. Pair single-turn conversations where that matters.")
    if t.tool_results:
        report.setdefault("warnings", []).append(
            f"{t.tool_results.n} of {n_out} pairs have a tool result inside chosen or rejected (first at line "
            f"{t.tool_results.first} of the output): DPOTrainer scores each side whole, so it counts the tool's "
            "output as the model's words, pushed up in chosen and down in rejected (spec 4.1's shape has no other "
            "place for it). Where that matters, pair one-turn replies: cut each side after its first assistant turn.")
    if t.other_context:
        report.setdefault("warnings", []).append(
            f"{t.other_context} of {n_out} pairs start the rejected side from other messages than the chosen side "
            "(another system message, ask or user turn before the first reply): the TRL prompt is the chosen "
            "side's, so DPOTrainer scores the rejected reply as the answer to a conversation it never saw. Pair "
            "rollouts of the same conversation, or use format='openai', whose sides keep their own messages.")
    if t.no_reply:
        report.setdefault("warnings", []).append(
            f"{t.no_reply} of {n_out} pairs have a side with no assistant turn (e.g. a run that ended before the "
            "agent replied): that side has no reply for DPO to score, and a chat-format check refuses it (validate: "
            "no_assistant_message). Leave those pairs out of the export.")
    if t.length_cut:  # export_dataset's length-cut warning (spec 5.6), for the side DPO pushes up
        report.setdefault("warnings", []).append(
            f"{t.length_cut} of {n_out} pairs have a chosen side cut by the reply token cap (finish_reason "
            "'length'): DPO pushes the model towards a reply that stops mid-thought. Filter the scored rows on "
            "finish_reason == 'stop' before pairing, or raise agent_max_tokens=.")
    if t.crashed:
        report.setdefault("warnings", []).append(
            f"{t.crashed.n} of {n_out} pairs have a side that is a crashed rollout (final_text '<agent error: ...>'; "
            f"first at line {t.crashed.first} of the output): DPO pushes that side up or down, though the model never "
            "produced it (the error text, or a run the crash cut short). Leave rows whose final_text starts with "
            "'<agent error' out of the pairing, or rerun them.")
    if t.same_reply:
        report.setdefault("warnings", []).append(
            f"{t.same_reply.n} of {n_out} pairs have the same reply as chosen and rejected (the same assistant text "
            f"and tool calls after the prompt, as written; first at line {t.same_reply.first} of the output): DPO gets "
            "no signal from them, and a grader that scored one reply both ways contradicts itself. Leave those pairs "
            "out of the export, and look at the grader's reasons for them.")
    if t.empty_chosen:
        report.setdefault("warnings", []).append(
            f"{t.empty_chosen.n} of {n_out} pairs have an empty chosen reply (no assistant text after strip_think, "
            "e.g. a reply that was only a <think> block, and no tool call; first at line "
            f"{t.empty_chosen.first} of the output): DPO pushes the model towards saying nothing. Leave those pairs "
            "out of the export, and look at why the grader preferred them.")
    if t.two_systems:
        report.setdefault("warnings", []).append(
            f"{t.two_systems} of {n_out} pairs have a side that opens with its own system message and was given the "
            f"system prompt too (from the {src.system_source}): two system turns open it, a context the model will "
            f"not see when it runs. {TWO_SYSTEMS_ADVICE}")
    if t.undeclared:
        line, name = t.undeclared.first
        report.setdefault("warnings", []).append(
            f"{t.undeclared.n} of {n_out} pairs have a chosen side that calls a tool the tools written with them (from "
            f"the {src.tools_source}) do not declare (first {called_tool(name)}, line {line} of the output): DPO "
            "pushes the model towards calling a tool it is not given (a rejected side's such call is a fair negative "
            f"and is not counted). {UNDECLARED_ADVICE}")
    if t.misshapen:
        report.setdefault("warnings", []).append(
            f"{t.misshapen.n} of {n_out} pairs have a side whose tool calls are not call objects (first at line "
            f"{t.misshapen.first} of the output): {MISSHAPEN_CALLS}. Written as the spec reads them, they are calls "
            f"with no name and arguments {{}} that pass the round-trip gate. {CALL_SHAPE_ADVICE}")
    if t.left_out:
        line, what = t.left_out.first
        report.setdefault("warnings", []).append(
            f"{t.left_out.n} of {n_out} pairs have a side holding {DROPPED_MESSAGES} (first at line {line} of the "
            f"output: {what}), as the spec reads them: DPO compares sides without them (the instructions the "
            f"replies followed, or a turn of the model's own). {ROLE_ADVICE}")
    if t.textless:
        line, what = t.textless.first
        report.setdefault("warnings", []).append(
            f"{t.textless.n} of {n_out} pairs have a side holding {NOT_TEXT} (first at line {line} of the output: "
            f"{what}): DPO compares that JSON (for OpenAI's content parts, [{{\"type\": \"text\", \"text\": "
            "...}]) instead of the words. " + NOT_TEXT_ADVICE)
    if t.bad_links:
        line, where = t.bad_links.first
        report.setdefault("warnings", []).append(
            f"{t.bad_links.n} of {n_out} pairs have a side whose tool results do not pair up with its calls (first at "
            f"line {line} of the output, {where}): written as the side links them (an id-less result takes the "
            "oldest call still waiting, even one an earlier turn left unanswered), it shows the model a result for "
            f"another call, or for none. {LINK_ADVICE}.")
    if t.judged_rejected:
        report.setdefault("warnings", []).append(
            f"{t.judged_rejected} of {n_out} pairs were decided for the rejected side by the pairwise judge "
            "(pairwise.winner 'rejected') and are exported as their rewards ordered them: DPO pushes up the reply "
            "the judge found worse. Leave them out, or look at why the grader and the judge disagree "
            "(pairwise.reasons).")
    if t.n_margins:
        report["mean_margin"] = round(t.margin_sum / t.n_margins, 4)
    if leaks.n_leaked:
        report.setdefault("warnings", []).append(
            f"{leaks.n_leaked} of {leaks.n_checked} chosen replies quote their own privileged context and are "
            "exported anyway (validate=False): DPO would push the model towards saying what only the grader "
            "was told; report['privileged_leaks']['leaked'] names them.")
    if rejected_quoting:
        report.setdefault("warnings", []).append(
            f"{rejected_quoting} rejected replies quote their own privileged context; they are kept as "
            "negatives (DPO pushes them down), but a grader that rewards such replies needs a look.")
    if context := tool_context_warnings(rows_with_calls, t.calls_without_system, n_out, bool(src.tools),
                                        NO_TOOLS_ADVICE, NO_SYSTEM_ADVICE):
        report.setdefault("warnings", []).extend(context)
    if skipped:  # DECISIONS 15 counts them; the spec skips them without a word
        report.setdefault("warnings", []).append(f"{_skipped_entries(skipped, n_entries)}.")
    report["system_prompt_source"] = src.system_source
    report["tools_source"] = src.tools_source
    report["rows_read"] = n_entries + skipped
    report["rows_skipped"] = skipped
    if src.path is not None:
        report["source_path"] = str(src.path)
        report["source_sha256"] = src.sha256  # None until SourceDigest fills it in
    return report


def _raise_if_refused(tally, report, validate, started, digest):
    """The gates, then an empty export: what refuses one format's file (``digest()`` completes the
    report's source hash first)."""
    roundtrip, leaks = tally.roundtrip, tally.leaks
    if validate and roundtrip.invalid:
        rt = report["tool_call_roundtrip"]
        digest()
        raise RoundtripInvalidError(
            f"tool_call_roundtrip_invalid: {rt['invalid']} of {rt['checked']} tool calls in the pairs do not "
            "parse back to structured arguments. Fix the rows or pass validate=False.", with_elapsed(report, started))
    if validate and leaks.n_leaked:
        digest()
        raise PrivilegedLeakError(
            f"privileged_leak: {leaks.n_leaked} of {leaks.n_checked} chosen replies quote their own privileged "
            "context (reference, principle or hidden state); DPO would teach the model to say what only the "
            "grader was told. Drop those pairs (report['privileged_leaks']['leaked'] names them) or pass "
            "validate=False.", with_elapsed(report, started))
    if not tally.n_out and validate:
        digest()
        raise NoPreferencePairsError(_no_pairs_message(tally))


def _skipped_entries(skipped, n_entries):
    return (f"{skipped} of {skipped + n_entries} entries are not objects and were skipped (a whole JSON array "
            "of pairs written on one line of a file is one such entry: a JSONL file has one pair object a line)")


def _no_pairs_message(tally):
    """Spec 7.3 step 9's text when there were no pairs; when there were and every one was dropped, why."""
    reasons = []
    if tally.ties:
        reasons.append(f"{tally.ties} of {tally.n_entries} pairs are ties (a truthy tie, e.g. from judge_pairs) "
                       "and were dropped; pass drop_ties=False to export them with their tie field")
    if tally.dropped:
        reasons.append(f"{tally.dropped} of {tally.n_entries} pairs have a side with no assistant turn after its "
                       "first message (it opens with the agent's greeting and there is no system prompt, or the "
                       "agent never replied), which leaves TRL no prompt or no completion (no_completion_dropped); "
                       "pass system_prompt=, or format='openai'")
    if not reasons:
        said = ("no_preference_pairs: nothing had a chosen and a rejected side. All-pass or all-fail runs "
                "produce no contrast; regrade or raise difficulty, or pass validate=False to get the empty "
                "report without a file.")
        return f"{said} Here {_skipped_entries(tally.skipped, tally.n_entries)}." if tally.skipped else said
    return (f"no_preference_pairs: every pair was dropped: {'; '.join(reasons)}. Or pass validate=False to get "
            "the empty report without a file.")
