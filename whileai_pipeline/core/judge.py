"""The pairwise judge (spec 8.5): a user's callable asked which side of each preference pair is better.

Each pair is asked in both orders; an answer that flips with the order is a tie, and the report says
how often the judge flipped and how often it preferred the rejected side. Apart from ``pairs`` because
it only reads pairs (from a list or a pairs file) and writes its verdict onto them: it shares no code
with how pairs are chosen.
"""

import copy
import hashlib
import json
import math
import numbers
import re
import threading

from .arguments import check_rows, refuse_pairs_with_report, whole_number
from .errors import JudgeStalledError
from .gates import scrub
from .pairs import is_pair
from .text import text

POSITION_FLIP_FLAG = 0.2
PREFERS_REJECTED_FLAG = 0.2
PROMPT_CUT, ERROR_CUT = 160, 200

_WINNER = re.compile(r'winner"?\s*:\s*"?(a|b|tie)', re.IGNORECASE)  # the reference's: a colon, no word end
_WINNERS = {"a": "A", "b": "B", "tie": "tie"}


def parse_verdict(answer):
    """(winner "A" | "B" | "tie" | None, reason) from whatever the judge returned."""
    if isinstance(answer, dict):
        winner = answer.get("winner")
        winner = _WINNERS.get(winner.strip().lower()) if isinstance(winner, str) else None
        return winner, answer.get("reason")
    if isinstance(answer, str):
        start, end = answer.find("{"), answer.rfind("}")
        if 0 <= start < end:
            try:
                parsed = json.loads(answer[start:end + 1])
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                winner, reason = parse_verdict(parsed)
                if winner is not None:
                    return winner, reason
        match = _WINNER.search(answer)
        return (_WINNERS[match.group(1).lower()] if match else None), None
    return None, NEITHER


NEITHER = "judge returned neither a dict nor a string"  # the reason spec 8.5 writes onto the pair


def _ask(judge, a, b, timeout=None):
    """(winner, reason, what the judge returned): the last only for saying why a judgment failed, and
    ``NO_ANSWER`` when the call did not answer within ``timeout`` seconds."""
    try:
        answer = judge(a, b) if timeout is None else _answer_within(judge, a, b, timeout)
    except _NoAnswer as exc:
        return None, f"TimeoutError: {exc}", NO_ANSWER
    except Exception as exc:  # a crashing judge is a failed judgment, not a failed run
        return None, f"{type(exc).__name__}: {exc}"[:ERROR_CUT], None
    winner, reason = parse_verdict(answer)
    return winner, reason, answer


class _NoAnswer(TimeoutError):
    pass


def _no_winner(answer) -> str:
    """Why a judge's answer named no winner: what it returned, and what a judge returns."""
    return (f"no winner in what the judge returned, {type(answer).__name__} {answer!r:.80}: a judge returns "
            "{'winner': 'A' | 'B' | 'tie', 'reason': ...} or text holding 'winner: A'")


NO_ANSWER = object()  # ``_ask``'s "what the judge returned" for a call that did not answer in time

# calls in a row that did not answer in time before judging stops: each leaves a thread behind, and a
# judge that answers none would otherwise be waited for ``timeout`` seconds a call, for every pair
STALLED_CALLS = 5
# calls left running after their timeout (in this process) before judging stops: a judge that hangs now
# and then, never five times in a row, would otherwise leave a thread behind each time until none can start
ABANDONED_CALLS = 32
ABANDONED_NAME = "judge-call-abandoned"


def _answer_within(judge, a, b, timeout):
    """``judge(a, b)``, or a TimeoutError once ``timeout`` seconds have passed without an answer.

    A call cannot be stopped from outside, so it runs in a daemon thread that is left behind when it
    hangs: a stalled connection to a judge model fails that one judgment instead of the whole step, and
    the process can still exit (a pool's thread would be waited for at exit)."""
    outcome = []

    def call():
        try:
            outcome.append((True, judge(a, b)))
        except BaseException as exc:  # handed to the caller, as a call in its own thread would raise it
            outcome.append((False, exc))

    worker = threading.Thread(target=call, name="judge-call", daemon=True)
    worker.start()
    worker.join(min(timeout, threading.TIMEOUT_MAX))  # a longer wait raises OverflowError: it is no limit anyway
    if not outcome:
        worker.name = ABANDONED_NAME  # counted by ``_abandoned_calls`` until it ends
        raise _NoAnswer(f"no answer within {timeout:g} s")
    answered, value = outcome[0]
    if not answered:
        raise value
    return value


def _abandoned_calls() -> int:
    return sum(t.name == ABANDONED_NAME and t.is_alive() for t in threading.enumerate())


def check_timeout(timeout):
    """None (wait as long as the judge takes), or a positive number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, or None to wait as long as the judge "
                         f"takes; got {timeout!r}")
    return float(timeout)


def check_settings(**settings):
    """Each setting a real number (bools aside), checked before the judge is asked anything: the report
    compares them with counts only once every pair was judged, and a bare TypeError then wastes every call."""
    for name, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r:.40}; judging has not "
                            "started")


def _judge_name(judge):
    return getattr(judge, "__name__", None) or type(judge).__name__


def judge_pairs(pairs, judge=None, *, spec=None, swap=True, concurrency=8, api_key=None, examples=10,
                position_flip_flag=POSITION_FLIP_FLAG, prefers_rejected_flag=PREFERS_REJECTED_FLAG, timeout=None):
    """Ask a pairwise judge (a plain callable ``judge(a_row, b_row)``) about each pair, in both orders.

    Writes ``pairwise`` and ``tie`` onto each pair in place; an answer that flips with the order is a
    tie. Up to ``concurrency`` pairs are asked at once (spec 8.5; a judge is usually a remote model);
    results are recorded in order. Returns (pairs, report). ``spec`` and ``api_key`` are the reference's
    (a judge model it calls itself), taken and unused: this library makes no network calls. ``timeout``
    (ours): seconds a call may take before it counts as a failed judgment. Each call then runs in a thread
    of its own (a judge holding thread-bound state needs None), and one that timed out may still be running
    while the next is asked; judging stops (``JudgeStalledError``) after ``STALLED_CALLS`` unanswered calls
    in a row or with ``ABANDONED_CALLS`` left running. None waits as long as the judge takes.
    """
    judging = PairwiseJudging(judge, swap=swap, examples=examples, timeout=timeout)
    check_settings(position_flip_flag=position_flip_flag, prefers_rejected_flag=prefers_rejected_flag)
    refuse_pairs_with_report(pairs, "judge_pairs")
    check_rows(pairs, "judge_pairs takes pairs", "pass a list of pair dicts, e.g. read_jsonl(path) for a pairs "
               "file", error=TypeError)
    given = [(i, p) for i, p in enumerate(pairs) if isinstance(p, dict)]
    entries = [p for _, p in given]
    bad = [i for i, p in given if not is_pair(p)]  # the index in the pairs given, not among their dicts
    if bad:
        raise ValueError(f"{len(bad)} entries are not pairs (need chosen/rejected rows); first at {bad[0]} (index "
                         "of the pairs given): build pairs with build_preference_pairs, or leave those entries out")
    for pair, answers in _asked(judging, entries, concurrency):
        judging.record(pair, answers)
    return entries, judging.report(position_flip_flag, prefers_rejected_flag)


def _asked(judging, pairs, concurrency):
    """``(pair, judging.ask(pair))`` in order, with up to ``concurrency`` pairs asked at once and no more
    than twice that many waiting, so a streamed pairs file stays streamed."""
    concurrency = _check_concurrency(concurrency)
    if concurrency == 1:
        for pair in pairs:
            yield pair, judging.ask(pair)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(concurrency, thread_name_prefix="judge") as pool:
        waiting = deque()
        for pair in pairs:
            waiting.append((pair, pool.submit(judging.ask, pair)))
            if len(waiting) >= 2 * concurrency:
                pair, answers = waiting.popleft()
                yield pair, answers.result()
        while waiting:
            pair, answers = waiting.popleft()
            yield pair, answers.result()


def _check_concurrency(concurrency) -> int:
    if (n := whole_number(concurrency)) is None or n < 1:
        raise ValueError(f"concurrency must be a whole number of at least 1, got {concurrency!r}: how many "
                         "pairs the judge is asked about at once (1 for a judge that keeps state)")
    return n


class PairwiseJudging:
    """``judge_pairs`` one pair at a time: ``ask`` gets the judge's answers (from any thread),
    ``record`` writes them onto the pair and counts them, in order; ``report`` sums up. The pipeline
    streams a pairs file through it, so memory does not grow with the pairs."""

    def __init__(self, judge, *, swap=True, examples=10, timeout=None):
        if judge is None or not callable(judge):
            raise ValueError("judge_pairs needs a judge: a callable judge(a_row, b_row) returning "
                             "{'winner': 'A'|'B'|'tie', 'reason': ...}; this library makes no network calls")
        check_settings(examples=examples)
        self.judge, self.swap, self.examples = judge, swap, examples
        self.timeout = check_timeout(timeout)
        self._stalled = 0  # calls in a row that did not answer in time (any thread's)
        self._stalled_lock = threading.Lock()
        self.name = _judge_name(judge)
        self.n = self.judged = self.failed = self.flips = self.both_swapped = 0
        self.ties = self.agrees = self.prefers_rejected = 0
        self.disagreements = []
        self.first_failure = None  # why the first pair the judge could not judge was not judged

    def ask(self, pair):
        """The judge's answers about one pair (both orders unless ``swap`` is off), parsed; changes
        nothing, so pairs can be asked at once."""
        # copies of the rows: a judge that changes what it is given (pops ``privileged``) changes no pair
        chosen, rejected = pair["chosen"], pair["rejected"]
        answers = [self._call(copy.deepcopy(chosen), copy.deepcopy(rejected))]
        if self.swap:
            answers.append(self._call(copy.deepcopy(rejected), copy.deepcopy(chosen)))
        return answers

    def _call(self, a, b):
        """``_ask`` the judge; a JudgeStalledError once ``STALLED_CALLS`` calls in a row went unanswered."""
        if self.timeout is None:
            return _ask(self.judge, a, b)
        with self._stalled_lock:
            if self._stalled >= STALLED_CALLS:
                raise JudgeStalledError(
                    f"judge_stalled: the judge {self.name} answered none of {STALLED_CALLS} calls in a row within "
                    f"{self.timeout:g} s each; judging stopped there. Check that the judge's model or endpoint "
                    "is up, or raise the timeout (judge_timeout) if it is that slow.")
            if (left := _abandoned_calls()) >= ABANDONED_CALLS:
                raise JudgeStalledError(
                    f"judge_stalled: {left} calls of the judge {self.name} are still running after their "
                    f"{self.timeout:g} s timeout (each holds a thread); judging stopped there. Check the judge's "
                    "model or endpoint, or raise the timeout (judge_timeout) if it is that slow.")
        answer = _ask(self.judge, a, b, self.timeout)
        with self._stalled_lock:
            self._stalled = self._stalled + 1 if answer[2] is NO_ANSWER else 0
        return answer

    def record(self, pair, answers):
        """Write ``pairwise`` and ``tie`` onto ``pair`` from its ``ask`` answers, and count them."""
        self.n += 1
        first, reason1, answer1 = answers[0]
        first = {"A": "chosen", "B": "rejected", "tie": "tie"}.get(first)
        asked = [(reason1, answer1)]
        second = None
        if self.swap:
            second, reason2, answer2 = answers[1]
            second = {"A": "rejected", "B": "chosen", "tie": "tie"}.get(second)
            asked.append((reason2, answer2))
        # the reference's: given reasons only, as text; scrubbed first (DECISIONS 8), as pairs' chosen_reason
        reasons = [text(scrub(r)) for r, _ in asked if r]
        consistent = None
        if first is None or second is None:
            winner = first if first is not None else second
        else:
            self.both_swapped += 1
            consistent = first == second
            winner = first if consistent else "tie"
            self.flips += not consistent
        pair["pairwise"] = {"winner": winner, "position_consistent": consistent, "swapped": bool(self.swap),
                            "reasons": reasons, "judge": self.name}
        pair["tie"] = winner == "tie"
        if winner is None:
            self.failed += 1
            # scrubbed like ``reasons``: this goes to the pipeline's log and its judge_failed: error
            self.first_failure = self.first_failure or "; ".join(dict.fromkeys(
                text(scrub(r)) if r and r is not NEITHER else _no_winner(scrub(a)) for r, a in asked)) or "no verdict"
            return
        self.judged += 1
        self.ties += winner == "tie"
        self.agrees += winner == "chosen"
        if winner == "rejected":
            self.prefers_rejected += 1
            if len(self.disagreements) < self.examples:
                self.disagreements.append({
                    "prompt": text(pair.get("prompt") or "")[:PROMPT_CUT],
                    "chosen_score": pair.get("chosen_score"),
                    "rejected_score": pair.get("rejected_score"),
                    "reasons": reasons,
                })

    def report(self, position_flip_flag=POSITION_FLIP_FLAG, prefers_rejected_flag=PREFERS_REJECTED_FLAG):
        judged, flips, both_swapped = self.judged, self.flips, self.both_swapped
        flip_rate = round(flips / both_swapped, 4) if both_swapped else None
        warnings = []
        if flip_rate is not None and flip_rate >= position_flip_flag:
            warnings.append(f"position bias: the judge changed its answer when A and B were swapped in "
                            f"{flips}/{both_swapped} pairs; those pairs are ties, and the judge prompt needs work")
        if judged and self.prefers_rejected / judged >= prefers_rejected_flag:
            warnings.append(f"the pairwise judge prefers the rejected side in {self.prefers_rejected}/{judged} "
                            "pairs; the pointwise scores and the pairwise judge disagree on what good is")
        return {
            "n": self.n,
            "n_judged": judged,
            "failed": self.failed,
            "judge": self.name,
            "swap": bool(self.swap),
            "position_flip_rate": flip_rate,
            "tie_rate": round(self.ties / judged, 4) if judged else None,
            "agrees_with_scores": round(self.agrees / judged, 4) if judged else None,
            "prefers_rejected": self.prefers_rejected,
            "disagreements": self.disagreements,
            "warnings": warnings,
        }


def judge_pairs_file(source, output, judge=None, *, swap=True, concurrency=1, examples=10,
                     position_flip_flag=POSITION_FLIP_FLAG, prefers_rejected_flag=PREFERS_REJECTED_FLAG,
                     progress=None, timeout=None):
    """``judge_pairs`` from a pairs file to a pairs file, a few pairs at a time: memory does not grow with
    the pairs. ``output`` may be ``source`` (it is replaced whole once every pair is judged).
    ``concurrency`` is 1 here by default: the pipeline's judge is a user's callable, which may keep state.
    ``progress`` is called with the pairs judged so far after every pair (a judge is slow: each one counts).
    ``timeout``: as ``judge_pairs``'s.

    Returns the judge report plus ``path``, ``n_written``, ``sha256``, ``ties`` (pairs judged a tie) and
    ``first_failure`` (what the judge said or raised on the first pair it could not judge, or None).
    """
    from .atomic import atomic_file
    from .jsonl import dumps_line, iter_jsonl
    from .output import refuse_folder_name

    refuse_folder_name(output)
    judging = PairwiseJudging(judge, swap=swap, examples=examples, timeout=timeout)
    check_settings(position_flip_flag=position_flip_flag, prefers_rejected_flag=prefers_rejected_flag)
    _check_concurrency(concurrency)
    digest = hashlib.sha256()

    def entries():
        for lineno, entry in iter_jsonl(source):
            if not isinstance(entry, dict):
                continue  # judge_pairs leaves such entries out too
            if not is_pair(entry):
                raise ValueError(f"{source}:{lineno} is not a pair (need chosen/rejected rows); build pairs with "
                                 "build_pairs_file or build_preference_pairs")
            yield entry

    with atomic_file(output) as out:
        for entry, answers in _asked(judging, entries(), concurrency):
            judging.record(entry, answers)
            line = dumps_line(entry)
            digest.update(line)
            out.write(line)
            if progress is not None:
                progress(judging.n)
    report = judging.report(position_flip_flag, prefers_rejected_flag)
    report.update(path=str(output), n_written=judging.n, sha256=digest.hexdigest(), ties=judging.ties,
                  first_failure=judging.first_failure)
    return report
