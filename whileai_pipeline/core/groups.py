"""Group stamping: rollouts of one task get shared reward statistics (spec 3.11).

Kept as per-row summaries (a group index and a float per row) so a streaming export can stamp
groups after one pass without holding rows.
"""

import array
import hashlib
import math

from .text import text

PASS_THRESHOLD = 0.5
GROUP_FIELDS = ("group_id", "k", "n0", "n1", "reward_mean", "reward_std")


def numeric_reward(value):
    """float(reward), or None for None, bools, NaN and values float() refuses."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


def task_key(row) -> str:
    return text(row.get("scenario_id") or row.get("task_id") or row.get("prompt") or "")


def row_summary(row):
    """(SHA-1 digest of the task key, or None when empty; numeric reward, NaN when there is none)."""
    key = task_key(row)
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).digest() if key else None
    reward = numeric_reward(row.get("reward"))
    return digest, (math.nan if reward is None else reward)


class GroupStats:
    """Accumulates (group, reward) per row; ``fields(i)`` gives row i's group fields or None."""

    def __init__(self):
        self._index = {}
        self._ids = []
        self._row_group = array.array("i")
        self._row_reward = array.array("d")
        self._counts = []
        self._fields = None

    def add(self, row) -> int:
        """Record one row; returns its group index (-1 for rows with no task key)."""
        return self.add_summary(*row_summary(row))

    def add_summary(self, digest, reward) -> int:
        """Record one row from ``row_summary``: (SHA-1 of its task key or None, numeric reward or NaN)."""
        g = -1
        if digest is None:
            self._row_group.append(-1)
        else:
            g = self._index.get(digest)
            if g is None:
                g = self._index[digest] = len(self._ids)
                self._ids.append(digest.hex()[:12])
                self._counts.append(0)
            self._counts[g] += 1
            self._row_group.append(g)
        self._row_reward.append(reward)
        return g

    @property
    def active(self) -> bool:
        """Groups are stamped only when some task key repeats."""
        return any(c > 1 for c in self._counts)

    @property
    def n_groups(self) -> int:
        return len(self._counts) if self.active else 0

    def release(self) -> None:
        """Drop the per-row summaries and per-group dicts once the caller holds the fields it needs.

        Keeps what ``active``/``n_groups`` read; ``add``/``finish`` must not be called afterwards.
        """
        self._index = self._ids = self._fields = None
        self._row_group = self._row_reward = None

    def finish(self) -> list:
        """Per-group field dicts (computed once, in row order, as the reference sums them)."""
        if self._fields is None:
            self._fields = list(self.iter_fields())
        return self._fields

    def iter_fields(self):
        """The group fields of each group in turn; compact arrays, so the peak stays small."""
        n = len(self._ids)
        sums, sq = array.array("d", bytes(8 * n)), array.array("d", bytes(8 * n))
        counts, n0, n1 = (array.array("i", bytes(4 * n)) for _ in range(3))
        for g, r in zip(self._row_group, self._row_reward):
            if g < 0 or math.isnan(r):
                continue
            sums[g] += r
            counts[g] += 1
            if r < PASS_THRESHOLD:
                n0[g] += 1
            elif r > PASS_THRESHOLD:
                n1[g] += 1
        means = array.array("d", (sums[g] / counts[g] if counts[g] else math.nan for g in range(n)))
        del sums
        for g, r in zip(self._row_group, self._row_reward):
            if g >= 0 and not math.isnan(r):
                sq[g] += (r - means[g]) ** 2
        for g in range(n):
            graded = counts[g]
            yield {
                "group_id": self._ids[g],
                "k": self._counts[g],
                "n0": n0[g],
                "n1": n1[g],
                "reward_mean": means[g] if graded else None,
                "reward_std": math.sqrt(sq[g] / graded) if graded else None,
            }

    def row_group(self, i) -> int:
        return self._row_group[i]


def stamp_groups(rows) -> int:
    """Stamp group fields onto a list of training rows in place; returns the number of groups."""
    stats = GroupStats()
    for row in rows:
        stats.add(row)
    if not stats.active:
        return 0
    fields = stats.finish()
    for i, row in enumerate(rows):
        g = stats.row_group(i)
        if g >= 0:
            row.update(fields[g])
    return stats.n_groups
