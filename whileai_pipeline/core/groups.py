"""Group stamping: rollouts of one task get shared reward statistics (spec 3.11).

Kept as compact per-row summaries (a group index and a float per row, in typed arrays) and per-group
counters, so a streaming export can stamp groups after one pass without holding rows. A task key is
identified by the first 64 bits of its SHA-1 (``group_id`` is the first 48 of them, as the spec says):
two different keys would have to share 64 bits of SHA-1 to be merged.
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
    """(64-bit SHA-1 prefix of the task key, or None when empty; numeric reward, NaN when there is none)."""
    key = task_key(row)
    digest = None
    if key:
        digest = int.from_bytes(hashlib.sha1(key.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    reward = numeric_reward(row.get("reward"))
    return digest, (math.nan if reward is None else reward)


class GroupStats:
    """Accumulates (group, reward) per row; after ``compute()``, ``fields(g)`` gives group g's fields."""

    def __init__(self):
        self._index = {}  # task-key digest -> group index; the only per-group Python objects
        self._keys = array.array("Q")
        self._counts = array.array("i")
        self._row_group = array.array("i")
        self._row_reward = array.array("d")
        self._table = None
        self._repeats = False

    def add(self, row) -> int:
        """Record one row; returns its group index (-1 for rows with no task key)."""
        return self.add_summary(*row_summary(row))

    def add_summary(self, digest, reward) -> int:
        """Record one row from ``row_summary``: (digest of its task key or None, numeric reward or NaN)."""
        g = -1
        if digest is not None:
            g = self._index.get(digest)
            if g is None:
                g = self._index[digest] = len(self._keys)
                self._keys.append(digest)
                self._counts.append(0)
            self._counts[g] += 1
            self._repeats = self._repeats or self._counts[g] > 1
        self._row_group.append(g)
        self._row_reward.append(reward)
        return g

    @property
    def active(self) -> bool:
        """Groups are stamped only when some task key repeats."""
        return self._repeats


    def __len__(self) -> int:
        """Groups seen so far (task keys that occurred at least once)."""
        return len(self._keys)

    @property
    def n_groups(self) -> int:
        return len(self._counts) if self.active else 0

    def row_group(self, i) -> int:
        return self._row_group[i]

    def compute(self, keep_rows=False) -> None:
        """Reduce the per-row summaries to per-group statistics, summed in row order as the reference does.

        The index and the per-row rewards are dropped afterwards (the row -> group array too, unless
        ``keep_rows``); only ``fields``, ``active`` and ``row_group`` may follow.
        """
        if self._table is not None:
            return
        self._index = None
        n = len(self._keys)
        sums, sq = array.array("d", bytes(8 * n)), array.array("d", bytes(8 * n))
        graded, n0, n1 = (array.array("i", bytes(4 * n)) for _ in range(3))
        for g, r in zip(self._row_group, self._row_reward):
            if g < 0 or r != r:
                continue
            sums[g] += r
            graded[g] += 1
            if r < PASS_THRESHOLD:
                n0[g] += 1
            elif r > PASS_THRESHOLD:
                n1[g] += 1
        means = sums
        for g in range(n):
            means[g] = sums[g] / graded[g] if graded[g] else math.nan
        for g, r in zip(self._row_group, self._row_reward):
            if g >= 0 and r == r:
                sq[g] += (r - means[g]) ** 2
        self._row_reward = None
        if not keep_rows:
            self._row_group = None
        self._table = (graded, n0, n1, means, sq)

    def fields(self, g) -> dict:
        """Group ``g``'s fields, in the spec's key order."""
        graded, n0, n1, means, sq = self._table
        k = graded[g]
        return {
            "group_id": f"{self._keys[g] >> 16:012x}",
            "k": self._counts[g],
            "n0": n0[g],
            "n1": n1[g],
            "reward_mean": means[g] if k else None,
            "reward_std": math.sqrt(sq[g] / k) if k else None,
        }

    def finish(self) -> list:
        """Every group's fields, as a list (for in-memory row lists)."""
        self.compute()
        return [self.fields(g) for g in range(len(self._keys))]


def stamp_groups(rows) -> int:
    """Stamp group fields onto a list of training rows in place; returns the number of groups."""
    stats = GroupStats()
    groups = [stats.add(row) for row in rows]
    if not stats.active:
        return 0
    fields = stats.finish()
    for row, g in zip(rows, groups):
        if g >= 0:
            row.update(fields[g])
    return stats.n_groups
