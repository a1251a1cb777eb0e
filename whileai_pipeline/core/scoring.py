"""Scorers: put a reward on every row before export (pure Python, no Dagster).

A scorer is named by a string:

* ``existing`` (the default): keep the row's own ``reward`` (and ``reason``).
* ``reference_match``: the row's final answer (``<think>`` blocks left out) against its
  ``privileged.reference``, both normalized (Unicode NFKC, case-folded, punctuation to spaces,
  whitespace collapsed). Reward 1.0 when the
  reference is the whole answer or appears in it as a run of whole words, else 0.0; a (finite, non-bool)
  number reference passes when the answer writes a number of that value ("2.50" for 2.5). A row without a
  string or number reference is left ungraded (reward ``None``).
* ``module:function``: any importable callable ``f(row) -> reward`` where the reward is a number,
  ``None`` (ungraded) or a dict ``{"reward": ..., "reason": ...}``. The row passed in is a copy.

Every scored row gets ``scorer`` (the name above) and ``label_source`` (who put the reward there:
the row's own ``label_source`` is kept for ``existing``, otherwise the scorer's name), so a trained
model's data can always be traced to the scorer that chose it.
"""

import contextlib
import copy
import decimal
import hashlib
import importlib
import itertools
import math
import numbers
import re
import traceback
import unicodedata
from dataclasses import dataclass
from typing import Callable

from .gates import scrub
from .groups import KeyIndex, key_digest, numeric_reward, task_key, verdict
from .text import normalize_answer, text
from .wire import nonfinite_arguments_as_text, strip_think_blocks

BUILTIN_SCORERS = ("existing", "reference_match")


class ScorerError(ValueError):
    """A scorer name that cannot be resolved, or a scorer that returned something unusable."""


def final_answer(row) -> str:
    """``final_text``, else the last assistant message's string content that says something; ``<think>``
    blocks left out of both (the reasoning is not the answer, and the exports leave it out by default)."""
    final = row.get("final_text")
    if isinstance(final, str) and (answer := strip_think_blocks(final)):
        return answer
    for message in reversed(row.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str) and (answer := strip_think_blocks(content)):
                return answer
    return ""


def load_callable(spec: str, what: str = "scorer") -> Callable:
    """Import ``module:function`` (the function part may be dotted: ``pkg.mod:Class.method``)."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ScorerError(f"{what} must be 'module:function', got {spec!r}")
    module_name, attr = spec.split(":")
    if not module_name or not attr:
        raise ScorerError(f"{what} must be 'module:function', got {spec!r}")
    if module_name.endswith(".py") or module_name.startswith(".") or "/" in module_name or "\\" in module_name:
        # a file name (`my_scorers.py:score`, `./my_scorers.py:score`): Python's own error gives no advice
        stem = re.split(r"[/\\]", module_name.removesuffix(".py"))[-1].lstrip(".")
        raise ScorerError(f"{what} {spec!r}: {module_name!r} is not a module name: name the module, "
                          f"'{stem}:{attr}', and put the folder that holds {stem}.py on PYTHONPATH "
                          "(PYTHONPATH=. for the working directory)")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        # the module itself not found (not one it imports): the command does not search the working directory
        hint = ("; put the folder that holds it on PYTHONPATH (PYTHONPATH=. for the working directory)"
                if getattr(exc, "name", None) == module_name.split(".")[0] else "")
        raise ScorerError(f"{what} {spec!r}: cannot import {module_name!r}: {exc}{hint}") from exc
    except Exception as exc:  # the module itself failed as it ran: a SyntaxError, a missing API key
        raise ScorerError(f"{what} {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ScorerError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ScorerError(f"{what} {spec!r} is not callable")
    return obj


def _existing(row):
    return row.get("reward"), None


def _reference_match(row):
    privileged = row.get("privileged")
    reference = privileged.get("reference") if isinstance(privileged, dict) else None
    if type(reference) is int or (type(reference) is float and math.isfinite(reference)):
        return _number_match(repr(reference), final_answer(row))  # a number in the run's JSON ({"reference": 42})
    if isinstance(reference, str) and (number := _number_text(reference)) and _decimal(number) is not None:
        return _number_match(number, final_answer(row))  # a number kept as text ({"reference": "42"})
    if not isinstance(reference, str) or not normalize_answer(reference):
        return None, "reference_match: no privileged reference on this row"
    ref = normalize_answer(reference)
    answer = normalize_answer(final_answer(row))
    if answer == ref:
        return 1.0, "reference_match: the final answer equals the reference"
    if answer and f" {ref} " in f" {answer} ":
        return 1.0, "reference_match: the final answer contains the reference"
    return 0.0, "reference_match: the final answer does not contain the reference"


# a number as a reply writes it: a sign only at its start (not the hyphen of "40-42"), thousands separated by commas
_NUMBER = re.compile(r"(?<![\w.])(?:[-+](?=\d))?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _number_text(reference):
    """A text reference that is one number as a reply writes it ("42", " -2.50", "1,000"), without the
    leading zero of an identifier ("007"), with the thousands commas dropped; else None."""
    reference = unicodedata.normalize("NFKC", reference).strip()
    if not _NUMBER.fullmatch(reference) or re.match(r"[-+]?0\d", reference):
        return None
    return reference.replace(",", "")


def _number_match(reference, answer):
    """A number reference (its text, ``_number_text`` or a JSON number's repr) against the numbers the answer
    writes, by value: a word match passes 42 in "41.42" or "-42" and fails 2.5 in "$2.50"."""
    value = _decimal(reference)
    for found in _NUMBER.findall(unicodedata.normalize("NFKC", answer)):
        if _decimal(found.replace(",", "")) == value:
            return 1.0, "reference_match: the final answer holds the reference number"
    return 0.0, "reference_match: the final answer does not hold the reference number"


def _decimal(number):
    """``Decimal(number)``, or None for a number whose exponent ``decimal`` cannot hold
    (``1e99999999999999999999``): a reply may write one, and it must fail that comparison, not the step."""
    try:
        return decimal.Decimal(number)
    except decimal.InvalidOperation:
        return None


def _wrap_callable(fn, name):
    def score(row):
        result = fn(copy.deepcopy(row))  # a copy it may change: nothing it does reaches the scored row
        reason = None
        if isinstance(result, dict):
            if "reward" not in result:
                raise ScorerError(f"scorer {name} returned a dict without 'reward': {sorted(result)!r}")
            reason = result.get("reason")
            result = result["reward"]
        if result is not None and (isinstance(result, bool) or not isinstance(result, numbers.Real)):
            raise ScorerError(f"scorer {name} returned {type(result).__name__} {result!r}; "
                              "expected a number, None or {'reward': ..., 'reason': ...}")
        if result is not None and type(result) not in (int, float):  # numpy scalars, Fraction: plain numbers
            result = int(result) if isinstance(result, numbers.Integral) else float(result)
        # scrubbed before it becomes text (DECISIONS 8): the text of a reason object holding the reference
        # would carry it into every export, out of the scrub's reach; text keeps the column one type
        return result, (None if reason is None else text(scrub(reason)))
    return score


def as_written(reward):
    """``reward`` as the stage file holds it: a NaN or infinite float is written as null (DECISIONS 1)."""
    return None if isinstance(reward, float) and not math.isfinite(reward) else reward


_OLD_VERDICT = ("reason", "grader_reason", "judge_meta")


@dataclass(frozen=True)
class Scorer:
    name: str
    fn: Callable

    def score_row(self, row: dict) -> dict:
        """A copy of ``row`` with the reward, reason, ``scorer`` and ``label_source`` set.

        A scorer other than ``existing`` replaces the old grader's whole verdict: its ``grader_reason``
        (which the export prefers to ``reason``) and ``judge_meta`` go, ``reason`` is the scorer's or
        none, and ``judge_status``/``judge_name`` say this scorer graded the row (pairing reads them).
        """
        reward, reason = self.fn(row)
        out = dict(row)
        if self.name != "existing":
            for stale in _OLD_VERDICT:
                out.pop(stale, None)
            out["reward"] = reward
            if reason:
                out["reason"] = reason
            out["judge_status"] = "ok" if as_written(reward) is not None else "missing_reward"
            out["judge_name"] = self.name
        if self.name != "existing" or not out.get("label_source"):
            out["label_source"] = self.name
        out["scorer"] = self.name
        return out


def resolve_scorer(spec: str = "existing") -> Scorer:
    spec = (spec or "existing").strip()
    if spec == "existing":
        return Scorer("existing", _existing)
    if spec == "reference_match":
        return Scorer("reference_match", _reference_match)
    if ":" not in spec:
        raise ScorerError(f"scorer must be one of {BUILTIN_SCORERS} or 'module:function', got {spec!r}")
    return Scorer(spec, _wrap_callable(load_callable(spec), spec))


def score_facts(row, _=None):
    """What ``ScoreStats`` reads of a row: (its raw reward, its group key); None for a non-object.

    Small and picklable, so worker processes can read a big file and send these back.
    """
    if not isinstance(row, dict):
        return None
    return as_written(row.get("reward")), task_key(row)  # count what the stage file will hold


def pair_side_facts(pair, _=None):
    """``score_facts`` of both sides of a pairs-file line, chosen then rejected (() for a non-object)."""
    if not isinstance(pair, dict):
        return ()
    return score_facts(pair.get("chosen")), score_facts(pair.get("rejected"))


def score_stats_of_file(path, workers=None, sides=False):
    """``ScoreStats`` over a JSONL file's rows, read by worker processes when the file is big.

    ``sides=True`` reads a pairs file and counts both rows of every pair.
    """
    from .jsonl import iter_jsonl
    from .parallel import WorkerPool, byte_chunks, map_rows, workers_for

    fn = pair_side_facts if sides else score_facts
    stats = ScoreStats()
    n = workers_for(path, workers)
    with contextlib.ExitStack() as stack:
        if n == 1:
            results = (fn(row) for _, row in iter_jsonl(path))
        else:
            pool = stack.enter_context(WorkerPool(n))
            jobs = ((chunk, fn, None) for chunk in byte_chunks(path))
            results = itertools.chain.from_iterable(pool.ordered(map_rows, path, jobs))
        for item in results:
            for facts in (item if sides else (item,)):
                stats.add_facts(facts)
    return stats


def score_file(source, out, scorer, stats, *, dest=None, progress=None, workers=None):
    """Score every row of a JSONL file into the open binary file ``out``; returns the SHA-256 of what it wrote.

    ``stats`` (a ``ScoreStats``) counts the scored rows. A built-in scorer runs over worker processes
    for a big file (``dest``, the output's path, says where their part files go); a user's
    ``module:function`` always runs here, once per row in order, as written: it may call a
    rate-limited service or keep state.
    """
    from .jsonl import dumps_line, iter_jsonl
    from .parallel import PartFiles, WorkerPool, append_part, byte_chunks, workers_for
    from .progress import tick

    digest = hashlib.sha256()
    n = workers_for(source, workers) if scorer.name in BUILTIN_SCORERS and dest is not None else 1
    if n == 1:
        # a user's scorer may take seconds a row (a model behind it): its progress counts every row
        every_row = progress is not None and scorer.name not in BUILTIN_SCORERS
        for lineno, row in iter_jsonl(source):
            if not every_row:
                tick(progress, stats.n + 1)
            if isinstance(row, dict):
                try:
                    row = scorer.score_row(row)
                except ScorerError as exc:
                    raise ScorerError(f"{source}:{lineno}: {exc}") from exc
                except Exception as exc:
                    raise ScorerError(f"scorer {scorer.name} failed on {source}:{lineno}: "
                                      f"{type(exc).__name__}: {exc}{_raised_at(exc)}") from exc
            stats.add(row)
            if every_row and isinstance(row, dict):
                progress(stats.n)
            line = dumps_line(nonfinite_arguments_as_text(row) if isinstance(row, dict) else row)
            digest.update(line)
            out.write(line)
        return digest.hexdigest()
    with PartFiles(dest, "scored") as parts, WorkerPool(n) as pool:  # the pool stops before parts go
        jobs = ((chunk, scorer.name, parts.name(k)) for k, chunk in enumerate(byte_chunks(source)))
        for facts, part in pool.ordered(_score_chunk, source, jobs, writes_beside=dest):
            for item in facts:
                stats.add_facts(item)
            if progress is not None:
                progress(stats.n)  # once per chunk
            append_part(part, out, digest)
    return digest.hexdigest()


def _raised_at(exc) -> str:
    """`` (raised at FILE:LINE in FUNCTION)`` for a user's scorer's exception, and the scorer's own line that
    called the code which raised it (``, called from ...``) when that was another file: the step's failure
    carries no traceback of the scorer, only this."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]  # not the wrapper's
    if not frames:
        return ""
    raised = frames[-1]
    said = f" (raised at {raised.filename}:{raised.lineno} in {raised.name}"
    own = [f for f in frames if f.filename == frames[0].filename]  # the scorer's module's frames
    if raised.filename != frames[0].filename:
        said += f", called from {own[-1].filename}:{own[-1].lineno} in {own[-1].name}"
    return said + ")"


def passing_rows_file(source, out, stats, *, dest=None, workers=None):
    """Copy the rows of a scored JSONL file whose reward passes (``verdict`` "pass") into the open binary
    file ``out``, counting them in ``stats``; over worker processes for a big file (part files beside
    ``dest``, the output's path). The same bytes either way: each row as ``dumps_line`` writes it.
    """
    from .jsonl import iter_jsonl
    from .parallel import PartFiles, WorkerPool, append_part, byte_chunks, workers_for, write_chunk

    n = workers_for(source, workers) if dest is not None else 1
    if n == 1:
        for _, row in iter_jsonl(source):
            facts, (lines,) = _passing_line(row)
            if facts is not None:
                stats.add_facts(facts)
                out.writelines(lines)
        return
    with PartFiles(dest, "passing") as parts, WorkerPool(n) as pool:  # the pool stops before parts go
        jobs = ((chunk, _passing_line, None, (parts.name(k),)) for k, chunk in enumerate(byte_chunks(source)))
        for outcomes, (part,), _ in pool.ordered(write_chunk, source, jobs, writes_beside=dest):
            for _, facts in outcomes:
                if facts is not None:
                    stats.add_facts(facts)
            append_part(part, out, None)


def _passing_line(row, _=None):
    """(``score_facts``, its line) of a passing row, (None, nothing) of any other line (a ``write_chunk`` task)."""
    if isinstance(row, dict) and verdict(row.get("reward")) == "pass":
        from .jsonl import dumps_line

        return score_facts(row), ((dumps_line(row),),)
    return None, ((),)


def _score_chunk(path, chunk, scorer_name, part):
    """A worker task: a chunk's rows scored by a built-in scorer into ``part``; their ``score_facts``."""
    from .jsonl import dumps_line
    from .parallel import chunk_rows, create_part

    scorer = resolve_scorer(scorer_name)
    facts = []
    with create_part(part) as out:
        for _, _, row, _ in chunk_rows(path, chunk):
            row = scorer.score_row(row) if isinstance(row, dict) else row
            facts.append(score_facts(row))
            out.write(dumps_line(nonfinite_arguments_as_text(row) if isinstance(row, dict) else row))
    return facts, part


SHOWN_GROUPS = 50  # groups ``groups_markdown`` lists by name; the others are only counted


class ScoreStats:
    """Running tallies over scored rows: verdict counts, mean reward, histogram, per-group rates.

    Per-group state is what the reports show: the verdict counts of the first ``SHOWN_GROUPS`` task
    keys (``shown_groups``, in first-seen order) and, for every other key, its 64-bit SHA-1 prefix in a
    ``KeyIndex`` (at most 48 bytes a key), so that the groups can be counted. A dict of every key and
    its counts took about 300 bytes a group: 50 MB at a million rows in 170k groups.
    """

    BINS = 10

    def __init__(self):
        self.n = 0
        self.counts = {"pass": 0, "fail": 0, "ungraded": 0}
        self.total = 0.0
        self.graded = 0
        self.histogram = [0] * self.BINS
        self.out_of_range = 0
        self.shown_groups = {}  # task key -> verdict counts, the first SHOWN_GROUPS keys only
        self._other_groups = KeyIndex()  # the 64-bit digests of the other keys
        self._keyless_other = False  # whether the empty key (rows with no task key) is among the others

    def add(self, row):
        self.add_facts(score_facts(row))

    def add_facts(self, facts):
        """Count one row from its ``score_facts`` (None for a line that is not an object)."""
        if facts is None:
            return
        raw_reward, key = facts
        self.n += 1
        v = verdict(raw_reward)
        self.counts[v] += 1
        reward = numeric_reward(raw_reward)
        if reward is not None and math.isfinite(reward):
            self.total += reward
            self.graded += 1
            if 0.0 <= reward <= 1.0:
                self.histogram[min(int(reward * self.BINS), self.BINS - 1)] += 1
            else:
                self.out_of_range += 1
        group = self.shown_groups.get(key)
        if group is not None:
            group[v] += 1
        elif len(self.shown_groups) < SHOWN_GROUPS:
            self.shown_groups[key] = {"pass": 0, "fail": 0, "ungraded": 0}
            self.shown_groups[key][v] += 1
        elif key:
            self._other_groups.index(key_digest(key))
        else:
            self._keyless_other = True

    @property
    def n_groups(self) -> int:
        """Distinct task keys seen, the empty key (rows with none) included."""
        return len(self.shown_groups) + self._other_groups.n + self._keyless_other

    @property
    def keyed_groups(self) -> int:
        """Distinct non-empty task keys: rows with no task key are not a group (spec 3.11)."""
        return self.n_groups - ("" in self.shown_groups or self._keyless_other)

    @property
    def mean_reward(self):
        return round(self.total / self.graded, 4) if self.graded else None

    def histogram_markdown(self) -> str:
        peak = max(self.histogram + [1])
        lines = ["| reward | rows | |", "|---|---:|---|"]
        for i, count in enumerate(self.histogram):
            lo, hi = i / self.BINS, (i + 1) / self.BINS
            label = f"[{lo:.1f}, {hi:.1f}{']' if i == self.BINS - 1 else ')'}"
            lines.append(f"| {label} | {count} | {'#' * round(20 * count / peak)} |")
        if self.out_of_range:
            lines.append(f"| outside [0, 1] | {self.out_of_range} | |")
        lines.append(f"| ungraded | {self.counts['ungraded']} | |")
        return "\n".join(lines)

    def groups_markdown(self, limit: int = SHOWN_GROUPS) -> str:
        """The first ``limit`` groups (at most ``SHOWN_GROUPS``: only those are kept) and how many more there are."""
        limit = min(limit, SHOWN_GROUPS)
        lines = ["| group | rollouts | pass | fail | ungraded | pass rate |", "|---|---:|---:|---:|---:|---:|"]
        for key, g in list(self.shown_groups.items())[:limit]:
            graded = g["pass"] + g["fail"]
            rate = f"{g['pass'] / graded:.0%}" if graded else "-"
            label = (key[:60] + "...") if len(key) > 60 else key
            label = label.replace("|", "\\|").replace("\n", " ") or "(no key)"
            lines.append(f"| {label} | {sum(g.values())} | {g['pass']} | {g['fail']} | {g['ungraded']} | {rate} |")
        if self.n_groups > limit:
            lines.append(f"| ... {self.n_groups - limit} more groups | | | | | |")
        return "\n".join(lines)
