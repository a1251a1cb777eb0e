"""Preference pairs from scored rollouts (spec 8.2, 8.4); the pairwise judge over them (8.5) is ``judge``.

Pair selection works on per-row summaries (score, prompt key, reply length, first-turn digest), so
the same plan can be made over a file without holding its rows; ``build_preference_pairs`` then
attaches the rows the plan names. The summaries are kept in typed arrays (``SummaryTable``: 49
bytes a row with where the row is in its file, and about 60 bytes a prompt), not as an object per
row: grouping by prompt needs every row's summary, but ``RowSummary`` objects in per-prompt lists
took about 400 bytes a row (433 MB of RSS for a million rows; 92 MB now).
"""

import array
import contextlib
import hashlib
import itertools
import json
import math
import numbers
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

from .arguments import check_rows, refuse_rows_with_report, trajectories_of, whole_number
from .conversation import AGENT_ERROR
from .gates import scrub
from .groups import KeyIndex
from .parallel import PartFiles, append_part, create_part
from .progress import check_progress, tick
from .text import normalize, text

MIN_MARGIN_ERROR = "min_margin must be positive; equal scores carry no preference"
LENGTH_CONFOUND_MIN_PAIRS, LENGTH_CONFOUND_SHARE, LENGTH_CONFOUND_ALL_FROM = 8, 0.75, 3


def length_note(c, n):
    if (n >= LENGTH_CONFOUND_MIN_PAIRS and c / n >= LENGTH_CONFOUND_SHARE) or (n >= LENGTH_CONFOUND_ALL_FROM and c == n):
        return (f"chosen is the longer reply in {c}/{n} pairs; a preference trainer learns length before "
                "behavior (Lambert 2025, chapter Direct Alignment)")
    return None


def first_turn_note(identical, n):
    return (
        f"{identical}/{n} pairs have identical first assistant turns (same opening tool call or line); their "
        "contrast is later in the rollout. The hosted DPO trainer compares first turns only and will drop them, "
        f"leaving {n - identical} (it needs at least 8). Keep [p for p in pairs if p['first_turn_differs']] to see "
        "what it will train on, or export_preference(pairs) for a trainer that reads whole conversations."
    )


def crosses_scenarios(chosen, rejected) -> bool:
    """Both rows name their scenario and the names differ (ours). Pairs group by prompt text (spec 8.2), so two
    scenarios that open with the same words (another hidden state, another persona) are paired: each side's
    reward was earned on its own task, and the chosen reply need not be the better answer to either."""
    a, b = chosen.get("scenario_id"), rejected.get("scenario_id")
    return bool(a) and bool(b) and text(a) != text(b)


def scenario_note(crossed, n):
    return (f"{crossed}/{n} pairs join rollouts of different scenarios (scenario_id) that share a prompt text: each "
            "side's reward was earned on its own task, so the chosen reply need not be the better answer to the "
            "same one. Give each scenario its own prompt text, or pair the rows of one scenario at a time.")


def range_note(k):
    return (f"{k} rows have a reward outside [0, 1] and were left out of pairing (pairs read rewards as scores from 0 "
            "to 1): with a grader on another scale, the rows it rewarded most are the ones left out, and a pair's "
            "chosen side may be a poor reply. Rescale the rewards to [0, 1] before pairing.")


# ---------------------------------------------------------------- row summaries

def score(row):
    """A reward usable for ranking: a real number in [0, 1] (bools, NaN, strings, None excluded)."""
    reward = row.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return None
    try:
        value = float(reward)
    except OverflowError:  # an integer beyond any float: outside [0, 1] anyway
        return None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        return None
    return value


def reply_length(row) -> int:
    """Characters the agent said: assistant turns plus a final_text that is not already the last turn.

    The turns are those of ``conversation(row)``; for a row without ``messages`` they are read off
    its steps without building the conversation (pass 1 of ``build_pairs_file`` does this for every
    row of a run: 4.2 against 8.9 µs a bench row).
    """
    final = text(row.get("final_text") or "")
    messages = row.get("messages")
    if isinstance(messages, list) and messages:
        said = [text(m.get("content") or "") for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
        total = sum(map(len, said))
        return total + len(final) if final and (not said or final != said[-1]) else total
    said, ends_with_reply = _assistant_turns(row, final)
    total = sum(map(len, said))
    if not final:
        return total
    if final.strip() and final in said:  # conversation() adds no turn: the agent already said it
        return total if final == said[-1] else total + len(final)
    if ends_with_reply:  # conversation() puts final into a blank last turn, or leaves that turn be
        last = said[-1]
        if not last.strip():
            return total - len(last) + len(final)
        return total if final == last else total + len(final)
    return total + len(final)  # conversation() appends final as a turn of its own


def _assistant_turns(row, final):
    """(contents of ``conversation(row)``'s assistant turns before ``final_text`` is placed, whether
    the last message then is one of them), without building the messages."""
    said = []
    last_role = last_not_user = None  # the role of the last message; of the last that is not the user's
    opener = text(row.get("opener") or "")
    if opener:
        said.append(opener)
        last_role = last_not_user = "assistant"
    if text(row.get("prompt") or ""):
        last_role = "user"
    steps = row.get("steps")
    for step in steps if steps and isinstance(steps, (list, tuple)) else ():
        if not isinstance(step, dict):
            continue
        if step.get("user"):
            last_role = "user"
            continue
        spoken = text(step.get("text") or "")
        if step.get("tool"):
            said.append(spoken)  # the call's turn, followed by its tool message
            last_role = last_not_user = "tool"
        elif spoken:
            said.append(spoken)
            last_role = last_not_user = "assistant"
    # conversation() drops trailing user turns (keeping at least one message) unless the agent errored
    ends = last_role if final.startswith(AGENT_ERROR) else last_not_user
    return said, ends == "assistant"


def first_turn(row) -> str:
    """The agent's opening move: its first tool call (canonical JSON) or first line it said."""
    steps = row.get("steps")
    steps = steps if isinstance(steps, (list, tuple)) else ()
    for step in steps:
        if isinstance(step, dict) and step.get("tool"):
            arguments = step.get("arguments")
            if arguments is None:
                arguments = step.get("args")
            return _canonical({"name": step.get("tool"), "arguments": arguments or {}})
    for step in steps:
        if isinstance(step, dict) and text(step.get("text") or "").strip():
            return text(step.get("text")).strip()
    messages = row.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                content = text(message.get("content") or "").strip()
                if content:
                    return content
    return text(row.get("final_text") or "").strip()


def _canonical(value) -> str:
    """The spec's canonical JSON (sorted keys). Arguments whose keys cannot be sorted or written (an
    int beside a str, a tuple: rows built in memory) get their repr instead of a TypeError: the string
    is only compared with another row's."""
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):  # ValueError: a value that contains itself
        return repr(value)


@dataclass(frozen=True, slots=True)
class RowSummary:
    """What pair selection needs from one row."""

    index: int
    key: bytes
    score: float
    length: int
    first_turn: bytes
    model: str | None
    eval_sourced: bool


def summary_fields(row, _=None):
    """Everything of a RowSummary but the row's index (what a worker process sends back)."""
    if not isinstance(row, dict) or row.get("judge_status", "ok") != "ok":
        return None
    value = score(row)
    if value is None:
        return None
    key = normalize(text(row.get("prompt") or ""))
    if not key:
        return None
    model = row.get("model_version")
    lineage = row.get("lineage")
    return (
        hashlib.sha1(key.encode("utf-8", "surrogatepass")).digest(),
        value,
        reply_length(row),
        hashlib.sha1(first_turn(row).encode("utf-8", "surrogatepass")).digest()[:8],
        text(model) if model else None,
        isinstance(lineage, dict) and lineage.get("source") == "eval",
    )


OUT_OF_RANGE = 1  # ``pass1_fields`` of a row left out only for its reward's range
PAIR_ROW = 2  # ``pass1_fields`` of a preference pair given as a row


def out_of_range(row) -> bool:
    """A row pairing would take but for its reward: a number (not a bool, not NaN) outside [0, 1] (ours: the
    spec leaves it out without a word, though a grader on a 0-10 scale loses its best rows so)."""
    if not isinstance(row, dict) or row.get("judge_status", "ok") != "ok":
        return False
    reward = row.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or reward != reward:
        return False
    return score(row) is None and bool(normalize(text(row.get("prompt") or "")))


def pass1_fields(row, _=None):
    """``summary_fields``, or ``OUT_OF_RANGE`` for a row left out only for its reward's range (pass 1's task)."""
    fields = summary_fields(row)
    if fields is None:
        if out_of_range(row):
            return OUT_OF_RANGE
        if is_pair(row):
            return PAIR_ROW
    return fields


def is_pair(row) -> bool:
    """A preference pair (an object with a ``chosen`` and a ``rejected`` object), not a trajectory."""
    return isinstance(row, dict) and isinstance(row.get("chosen"), dict) and isinstance(row.get("rejected"), dict)


def refuse_pairs_as_rows(pair_rows, rows, eligible):
    """Preference pairs given where scored rows go (a pairs file as the source) carry no reward of their own:
    the spec pairs nothing and its note blames the rollouts. Refused when no row could be paired (ours)."""
    if pair_rows and not eligible:
        raise ValueError(
            f"build_preference_pairs takes scored rows, and {pair_rows} of the {rows} rows given are preference "
            "pairs (chosen/rejected), which carry no reward of their own: nothing can be paired from them. Pass the "
            "scored rollouts the pairs were built from; pairs built already go to judge_pairs or export_preference.")


# ---------------------------------------------------------------- selection

def check_max_pairs(max_pairs_per_prompt):
    """A whole number of at least 1, as the pipeline's config wants it: the reference compares whatever it
    is given with a count, so a string or None fails as a bare "'>=' not supported", and 0, -1 or
    False pair nothing without a word, 2.5 makes up to 3 pairs and True 1."""
    if (n := whole_number(max_pairs_per_prompt)) is not None and n >= 1:
        return
    number = isinstance(max_pairs_per_prompt, numbers.Real) and not isinstance(max_pairs_per_prompt, bool)
    unlimited = "; there is no value for no limit: pass the rollouts per prompt" if max_pairs_per_prompt is None else ""
    raise (ValueError if number else TypeError)(
        f"max_pairs_per_prompt must be a whole number of at least 1, got {type(max_pairs_per_prompt).__name__} "
        f"{max_pairs_per_prompt!r:.60}: how many pairs one prompt's rollouts may give at most, e.g. "
        f"max_pairs_per_prompt=1 (the default){unlimited}")


def margin_threshold(min_margin) -> float:
    """The least float difference of two rewards that meets ``min_margin`` (ours).

    A grader's rewards are decimals, and their difference in binary floating point can fall a rounding
    error short: 0.7 - 0.2 is 0.49999999999999994, so the reference pairs nothing at min_margin 0.5 and
    says the rewards must differ by at least 0.5, which they do. Rewards are ranked only in [0, 1]
    (``score``), where two parsed decimals and their subtraction err by less than 4 units in the last
    place of 1: a difference short of the margin by at most that meets it. Never zero or less, however
    small the margin: equal rewards carry no preference.
    """
    min_margin = float(min_margin)  # a Decimal (check_min_margin takes one) does not mix with float arithmetic
    # math.ulp(0.0): half the least subnormal margin (5e-324) is 0.0, which equal rewards would meet
    return max(min_margin - 4 * sys.float_info.epsilon * max(1.0, min_margin), min_margin / 2, math.ulp(0.0))


def check_min_margin(min_margin):
    """A positive, finite number. NaN, infinity and a number beyond the largest float are refused too: the
    reference takes them and silently pairs nothing (or fails with OverflowError)."""
    try:
        positive = bool(min_margin > 0)
    except ArithmeticError:  # Decimal("NaN")
        positive = False
    except (TypeError, ValueError):  # a string, None, an array of several numbers
        raise TypeError(f"min_margin must be a number, got {type(min_margin).__name__} {min_margin!r:.40}; "
                        "pass the smallest reward difference a pair must have, e.g. 1.0") from None
    if not positive:
        raise ValueError(f"{MIN_MARGIN_ERROR} (got {min_margin!r})")
    try:
        beyond = float(min_margin) == math.inf  # 10**400 and Decimal("1e400") too: no float is that big
    except OverflowError:
        beyond = True
    if beyond:
        shown = repr(min_margin)
        shown = shown if len(shown) <= 40 else f"{shown[:20]}... ({len(shown)} characters)"
        raise ValueError(f"min_margin must be finite and at most {sys.float_info.max:.4g} (got {shown}): no pair of "
                         "rewards is further apart, so it would pair nothing")


class PromptGroups:
    """20-byte prompt-key digests -> dense group indexes in first-seen order, exactly, in typed arrays.

    A ``KeyIndex`` over a digest's first 64 bits finds its group, whose whole digest is kept (20 bytes
    a group) to confirm it; a digest whose first 64 bits an earlier digest took (two prompts sharing
    64 bits of SHA-1) gets its group from a dict. About 70 bytes a prompt, where a dict of bytes
    took about 130.
    """

    WIDTH = 20  # SHA-1

    def __init__(self):
        self._index = KeyIndex()  # first 64 bits -> entry
        self._entry_group = array.array("i")  # entry -> group
        self._digests = bytearray()  # group -> its digest
        self._others = {}  # digest -> group, for digests whose first 64 bits were taken

    def __len__(self):
        return len(self._digests) // self.WIDTH

    def group(self, digest: bytes) -> int:
        if self._index is None:
            raise RuntimeError("PromptGroups.group after seal(): a planned table takes no more rows")
        if len(digest) != self.WIDTH:
            raise ValueError(f"a prompt key is a {self.WIDTH}-byte digest, got {len(digest)} bytes")
        entry = self._index.index(int.from_bytes(digest[:8], "big"))
        if entry == len(self._entry_group):  # the first digest with these 64 bits
            g = len(self)
            self._entry_group.append(g)
            self._digests += digest
            return g
        g = self._entry_group[entry]
        if self._digests[self.WIDTH * g:self.WIDTH * (g + 1)] == digest:
            return g
        g = self._others.get(digest)
        if g is None:
            g = self._others[digest] = len(self)
            self._digests += digest
        return g

    def digest(self, g) -> bytes:
        return bytes(self._digests[self.WIDTH * g:self.WIDTH * (g + 1)])

    def seal(self):
        """No more digests will come: drop the lookup (about 45 bytes a prompt); ``digest`` still answers."""
        self._index = self._entry_group = self._others = None


class SummaryTable:
    """The ``RowSummary`` of every eligible row, a column per field in typed arrays (41 bytes a row),
    the prompt keys as dense group indexes (``PromptGroups``) and the model names interned.

    With ``spans`` (rows of a file: ``add_span``), each row is kept with where it is in the file (its
    byte offset and length, for pass 2 to read it back) and whether its line holds 19 digits in a row
    instead of its index (50 bytes a row), and its ``RowSummary.index`` is its place in the table.
    """

    def __init__(self, spans=False):
        self.index = None if spans else array.array("q")  # the row's index (RowSummary.index)
        self.offset = array.array("q") if spans else None  # where the row's line starts
        self.span = array.array("q") if spans else None  # its bytes, to the next row
        # 1 when its line holds 19 digits in a row: pass 2 reads only those again for big integers
        self.long_run = bytearray() if spans else None
        self.group = array.array("i")  # its prompt group
        self.score = array.array("d")
        self.length = array.array("q")
        self.first_turn = array.array("Q")  # the 8-byte first-turn digest, as an int
        self.model = array.array("i")  # an index into ``models``, -1 for none
        self.eval_sourced = bytearray()
        self.prompts = PromptGroups()
        self.models, self._model_ids = [], {}

    def __len__(self):
        return len(self.score)

    def add(self, index, fields):
        """Add row ``index`` from its ``summary_fields`` (not None)."""
        self.index.append(index)
        self._add(fields)

    def add_span(self, offset, span, fields, long_run):
        """Add the row of a file at ``offset`` (``span`` bytes) from its ``summary_fields`` (not None);
        ``long_run``: whether its line holds 19 digits in a row (``exact_numbers``)."""
        self.offset.append(offset)
        self.span.append(span)
        self.long_run.append(1 if long_run else 0)
        self._add(fields)

    def _add(self, fields):
        key, score_, length, first, model, eval_sourced = fields
        self.group.append(self.prompts.group(key))
        self.score.append(score_)
        self.length.append(length)
        self.first_turn.append(int.from_bytes(first, "big"))
        if model is None:
            self.model.append(-1)
        else:
            m = self._model_ids.get(model)
            if m is None:
                m = self._model_ids[model] = len(self.models)
                self.models.append(model)
            self.model.append(m)
        self.eval_sourced.append(1 if eval_sourced else 0)

    def summary(self, i) -> "RowSummary":
        """The ``RowSummary`` of the ``i``-th row added."""
        m = self.model[i]
        index = self.index[i] if self.index is not None else i
        return RowSummary(index, self.prompts.digest(self.group[i]), self.score[i], self.length[i],
                          self.first_turn[i].to_bytes(8, "big"), self.models[m] if m >= 0 else None,
                          bool(self.eval_sourced[i]))

    def plan(self, *, max_pairs_per_prompt=1, min_margin=1.0, length_match=True) -> "PairPlan":
        """Greedy pairing within each prompt group (groups in first-seen order, each group's rows in row
        order, ranked by score, best first; the rejected side the candidate closest in length)."""
        check_max_pairs(max_pairs_per_prompt)
        check_min_margin(min_margin)
        self.prompts.seal()
        n_groups = len(self.prompts)
        # each group's rows, in row order: a counting sort of the rows by group (4 bytes a row)
        starts = array.array("q", bytes(8 * (n_groups + 1)))
        for g in self.group:
            starts[g + 1] += 1
        for g in range(n_groups):
            starts[g + 1] += starts[g]
        order = array.array("i", bytes(4 * len(self.group)))
        fill = starts[:-1]
        for i, g in enumerate(self.group):
            order[fill[g]] = i
            fill[g] += 1
        del fill
        score, length = self.score, self.length
        chosen, rejected = array.array("i"), array.array("i")
        with_contrast = 0
        threshold = margin_threshold(min_margin)
        for g in range(n_groups):
            ranked = sorted(order[starts[g]:starts[g + 1]], key=lambda i: -score[i])
            used = set()
            made = 0
            for c in ranked:
                if made >= max_pairs_per_prompt:
                    break
                if c in used:
                    continue
                c_score = score[c]
                candidates = [r for r in ranked if r not in used and r != c and c_score - score[r] >= threshold]
                if not candidates:
                    # the rows after c score no higher and nothing was marked used: none of them has a
                    # candidate either (c itself is no margin below them), so the group is done
                    break
                if length_match:
                    c_length = length[c]
                    r = min(candidates, key=lambda i: abs(length[i] - c_length))
                else:
                    r = candidates[0]
                used.update((c, r))
                chosen.append(c)
                rejected.append(r)
                made += 1
            with_contrast += made > 0
        return PairPlan(self, chosen, rejected, n_groups, with_contrast)


class PairPlan:
    """The pairs a ``SummaryTable.plan`` chose, as two arrays of the table's rows (8 bytes a pair)."""

    def __init__(self, table, chosen, rejected, prompts_seen, with_contrast):
        self.table, self.chosen, self.rejected = table, chosen, rejected
        self.prompts_seen, self.with_contrast = prompts_seen, with_contrast

    def __len__(self):
        return len(self.chosen)

    def pairs(self):
        """(chosen, rejected) ``RowSummary`` of each pair, in order, made as they are asked for."""
        summary = self.table.summary
        for c, r in zip(self.chosen, self.rejected):
            yield summary(c), summary(r)


def pair_fields(c, r, chosen, rejected):
    """The pair record, in the spec's key order."""
    same = c.model == r.model if c.model and r.model else None
    return {
        "prompt": chosen.get("prompt"),
        "chosen": chosen,
        "rejected": rejected,
        "chosen_score": c.score,
        "rejected_score": r.score,
        "margin": round(c.score - r.score, 6),
        "chosen_model": c.model,
        "rejected_model": r.model,
        "same_policy": same,
        "length_delta": c.length - r.length,
        "first_turn_differs": c.first_turn != r.first_turn,
        # scrubbed before text(): a reason object must not smuggle its privileged block into a string
        "chosen_reason": text(scrub(chosen.get("reason")) or ""),
        "rejected_reason": text(scrub(rejected.get("reason")) or ""),
        "rejected_failure_class": rejected.get("failure_class"),
        "lineage": {"chosen": chosen.get("lineage"), "rejected": rejected.get("lineage")},
    }


def pairs_report(plan, prompts_seen, with_contrast, min_margin, crossed=0, left_out=0):
    """Spec 8.2's report over a plan of (chosen, rejected) summaries, read once (an iterator will do).
    Ours, warned of after the spec's notes: ``crossed`` pairs whose sides are of different scenarios
    (``crosses_scenarios``), ``left_out`` rows whose reward is a number outside [0, 1] (``out_of_range``)."""
    margins, deltas = array.array("d"), array.array("q")  # 16 bytes a pair
    identical = same = mixed = eval_sourced = partial = chosen_longer = 0
    for c, r in plan:
        margins.append(round(c.score - r.score, 6))
        delta = c.length - r.length
        deltas.append(delta)
        chosen_longer += delta > 0
        identical += c.first_turn == r.first_turn
        if c.model and r.model:
            same += c.model == r.model
            mixed += c.model != r.model
        eval_sourced += bool(c.eval_sourced or r.eval_sourced)
        partial += c.score not in (0.0, 1.0) or r.score not in (0.0, 1.0)
    n = len(margins)
    warnings = []
    if deltas:
        note = length_note(chosen_longer, len(deltas))
        if note:
            warnings.append(note)
    if identical:
        warnings.append(first_turn_note(identical, n))
    if mixed:
        warnings.append(f"{mixed}/{n} pairs mix policies (chosen and rejected from different models); on-policy "
                        "pairs train better (Lambert 2025, chapter Preference Data)")
    if eval_sourced:
        warnings.append(f"{eval_sourced} pair(s) carry rewards from evaluate() (lineage.source == 'eval'); training "
                        "on them turns the held-out scorer into the reward model")
    if crossed:
        warnings.append(scenario_note(crossed, n))
    if left_out:
        warnings.append(range_note(left_out))
    return {
        "pairs": n,
        "prompts_seen": prompts_seen,
        "prompts_with_contrast": with_contrast,
        "min_margin": min_margin,
        "mean_margin": round(sum(margins) / n, 4) if n else None,
        "partial_score_pairs": partial,
        "first_turn_identical": identical,
        "trainer_pairs": n - identical,
        "same_policy_pairs": same,
        "mixed_policy_pairs": mixed,
        "eval_sourced": eval_sourced,
        "length": {
            "median_delta": sorted(deltas)[n // 2] if n else None,
            "chosen_longer": chosen_longer,
            "chosen_longer_frac": round(chosen_longer / n, 3) if n else None,
        },
        "warnings": warnings,
        "note": "" if n else (
            f"pairs require the same prompt to have two rollouts whose rewards differ by at least {min_margin}; "
            "raise rollouts_per_request to create contrast"),
    }


def build_preference_pairs(rows, *, max_pairs_per_prompt=1, min_margin=1.0, length_match=True):
    """Spec 8.2: (pairs, report). Each pair holds the chosen and rejected rows themselves."""
    check_max_pairs(max_pairs_per_prompt)
    check_min_margin(min_margin)
    rows = trajectories_of(rows)
    _check_rows(rows)
    rows = list(rows)
    table = SummaryTable()  # the rows are held anyway: the table is what the file path keeps, not a saving here
    left_out = pair_rows = 0
    for i, row in enumerate(rows):
        fields = pass1_fields(row)
        if fields == OUT_OF_RANGE:
            left_out += 1
        elif fields == PAIR_ROW:
            pair_rows += 1
        elif fields is not None:  # eligible: an ok judge status, a valid score and a prompt
            table.add(i, fields)
    refuse_pairs_as_rows(pair_rows, len(rows), len(table))
    plan = table.plan(max_pairs_per_prompt=max_pairs_per_prompt, min_margin=min_margin, length_match=length_match)
    pairs = [pair_fields(c, r, rows[c.index], rows[r.index]) for c, r in plan.pairs()]
    crossed = sum(crosses_scenarios(p["chosen"], p["rejected"]) for p in pairs)
    return pairs, pairs_report(plan.pairs(), plan.prompts_seen, plan.with_contrast, min_margin, crossed, left_out)


def _check_rows(rows):
    """Refuse what ``list(rows)`` would misread without a word: a path's characters or a row's keys are
    no rows, so the reference pairs nothing and reports "no contrast"."""
    refuse_rows_with_report(rows, "the rows given to build_preference_pairs", "build_preference_pairs")
    check_rows(rows, "build_preference_pairs takes rows", "for a JSONL run pass read_jsonl(path), or build the "
               "pairs file to file with build_pairs_file")


def build_pairs_file(source, output, *, max_pairs_per_prompt=1, min_margin=1.0, length_match=True, progress=None,
                     workers=None):
    """``build_preference_pairs`` from a JSONL file to a JSONL file, holding summaries, not rows.

    Pass 1 keeps one summary and where the row is in the file (offset, length) per eligible row, in
    typed arrays (``SummaryTable``: about 50 bytes a row; worker processes summarize a big file's
    chunks, ``workers`` as for ``export_dataset``); pass 2 reads back the rows each pair names, the
    plan read a pair at a time.
    Returns the pair report plus ``path``, ``n_written`` and ``sha256`` of the written file.
    """
    check_max_pairs(max_pairs_per_prompt)
    check_min_margin(min_margin)
    check_progress(progress)
    for name, value in (("source", source), ("output", output)):
        if not isinstance(value, (str, os.PathLike)) or not value:
            raise TypeError(f"build_pairs_file needs an output path and a source path (str or os.PathLike), got "
                            f"{name} {type(value).__name__} {value!r:.60}: e.g. build_pairs_file('scored.jsonl', "
                            "'pairs.jsonl'); for rows in memory use build_preference_pairs")
    from .output import refuse_folder_name, refuse_source

    refuse_folder_name(output)
    source, output = os.path.expanduser(source), os.path.expanduser(output)
    from .atomic import atomic_file
    from .jsonl import iter_jsonl_spans, require_file
    from .parallel import WorkerPool, byte_chunks, map_row_spans, workers_for
    from .runs import change_explains_failure, check_unchanged, file_stamp

    require_file(Path(source), "source file", "pass the scored JSONL run to pair")
    refuse_source(output, source, "Pass another output path for the pairs.")

    table = SummaryTable(spans=True)  # each eligible row's summary and where it is in the file
    rows = left_out = pair_rows = 0
    n = workers_for(source, workers)
    stamp = file_stamp(source)  # pass 2 reads rows back where pass 1 found them: the file must not change
    with contextlib.ExitStack() as stack:
        stack.enter_context(change_explains_failure(source, stamp))
        parts = stack.enter_context(PartFiles(output, "pairs"))  # removed after the pool has stopped
        pool = stack.enter_context(WorkerPool(n)) if n > 1 else None  # one pool for both passes

        if pool is None:
            spans = ((offset, length, pass1_fields(row), long_run)
                     for offset, length, row, long_run in iter_jsonl_spans(source))
        else:
            jobs = ((chunk, pass1_fields, None) for chunk in byte_chunks(source))
            spans = itertools.chain.from_iterable(pool.ordered(map_row_spans, source, jobs))
        for offset, length, fields, long_run in spans:
            rows += 1
            tick(progress, rows)
            if fields == OUT_OF_RANGE:
                left_out += 1
            elif fields == PAIR_ROW:
                pair_rows += 1
            elif fields is not None:
                table.add_span(offset, length, fields, long_run)
        refuse_pairs_as_rows(pair_rows, rows, len(table))

        plan = table.plan(max_pairs_per_prompt=max_pairs_per_prompt, min_margin=min_margin,
                          length_match=length_match)
        if progress is not None:
            progress(rows)
        digest = hashlib.sha256()
        offsets, spans, long_runs = table.offset, table.span, table.long_run

        def jobs():  # made as pass 2 takes them, not held: a pair's summaries and where its rows are
            for c, r in plan.pairs():
                yield (c, r, (offsets[c.index], spans[c.index], long_runs[c.index]),
                       (offsets[r.index], spans[r.index], long_runs[r.index]))

        crossed = [0]  # pairs whose sides are of different scenarios, counted as pass 2 reads their rows
        with atomic_file(output) as out:
            if pool is None or len(plan) < 2 * PAIRS_PER_TASK:
                for line in _pair_lines(source, jobs(), crossed):
                    digest.update(line)
                    out.write(line)
            else:
                crossed[0] = _write_pairs_over(pool, source, jobs(), output, out, digest, parts)
            check_unchanged(source, stamp)
    report = pairs_report(plan.pairs(), plan.prompts_seen, plan.with_contrast, min_margin, crossed[0], left_out)
    report.update(path=str(output), n_written=len(plan), sha256=digest.hexdigest())
    return report


PAIRS_PER_TASK = 500


def _write_pairs_over(pool, source, jobs, output, out, digest, parts):
    """Pass 2 over worker processes: runs of pairs go to part files, appended here in order. ``jobs``
    is read a run at a time, as the pool takes them. Returns the pairs that cross scenarios."""
    jobs = iter(jobs)
    crossed = 0
    tasks = ((run, parts.name(k)) for k, run in zip(itertools.count(0, PAIRS_PER_TASK),
                                                     iter(lambda: list(itertools.islice(jobs, PAIRS_PER_TASK)), [])))
    for part, n in pool.ordered(write_pairs_part, source, tasks, writes_beside=output):
        append_part(part, out, digest)
        crossed += n
    return crossed


def _pair_lines(source, jobs, crossed=None):
    """Each planned pair as a JSONL line, reading its two rows back where pass 1 found them; ``crossed[0]``
    (a one-item list) counts the pairs whose sides are of different scenarios (``crosses_scenarios``).

    One ``os.pread`` a row (measured: 2.4 against 11.3 µs for a seek and a buffered readline of a
    20 KB row), parsed as it comes, and read again by Python's json only when pass 1 saw 19 digits in a
    row in it (searching a 20 KB line again costs 21 µs, against 31 µs to parse it); a line orjson refuses
    as it stands (a BOM, NaN tokens) goes through ``parse_line`` as in pass 1. Tool-call arguments holding
    NaN or an infinity are written as JSON text (``nonfinite_arguments_as_text``), as the scored stage does:
    orjson would write them as null, and the DPO export of the file would pass calls that the export of the
    same pairs in memory refuses.
    """
    from .exact_numbers import exact_numbers
    from .jsonl import dumps_line, parse_line
    from .wire import nonfinite_arguments_as_text

    fd = os.open(source, os.O_RDONLY)
    try:
        def row_at(offset, length, long_run):
            line = os.pread(fd, length, offset)
            try:  # orjson never reads a NaN or an infinity
                return exact_numbers(line, orjson.loads(line), bool(long_run))
            except orjson.JSONDecodeError:
                # the number only tells parse_line whether a BOM may lead the line
                row = parse_line(source, 1 if offset == 0 else 2, line, long_run=bool(long_run))
                return nonfinite_arguments_as_text(row) if isinstance(row, dict) else row

        for c, r, chosen_at, rejected_at in jobs:  # each side: (offset, length, long_run)
            chosen, rejected = row_at(*chosen_at), row_at(*rejected_at)
            if crossed is not None:
                crossed[0] += crosses_scenarios(chosen, rejected)
            yield dumps_line(pair_fields(c, r, chosen, rejected))
    finally:
        os.close(fd)


def write_pairs_part(source, jobs, part):
    """A worker task: a run of planned pairs written to a part file beside the output; (the part, how many of
    the pairs cross scenarios)."""
    crossed = [0]
    try:
        with create_part(part) as fh:
            for line in _pair_lines(source, jobs, crossed):
                fh.write(line)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
        raise
    return part, crossed[0]


