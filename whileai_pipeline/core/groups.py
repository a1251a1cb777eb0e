"""Group stamping: rollouts of one task get shared reward statistics (spec 3.11).

Kept as compact per-row summaries (a group index and a float per row, in typed arrays, or spilled to
a temporary file) and per-group counters, so a streaming export can stamp groups after one pass
without holding rows. A task key is
identified by the first 64 bits of its SHA-1 (``group_id`` is the first 48 of them, as the spec says):
two different keys would have to share 64 bits of SHA-1 to be merged.
"""

import array
import hashlib
import math
import tempfile

from .text import text

PASS_THRESHOLD = 0.5
SPILL_ROWS = 1 << 16


def numeric_reward(value):
    """float(reward), or None for None, bools, NaN and values float() refuses."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


def verdict(value) -> str:
    """``pass`` (reward >= 0.5), ``fail`` (< 0.5) or ``ungraded``: the export report's rule (spec 5.5),
    which the scorers' counts and the SFT report's ``rewards`` share."""
    reward = numeric_reward(value)
    if reward is None:
        return "ungraded"
    return "pass" if reward >= PASS_THRESHOLD else "fail"


def task_key(row) -> str:
    return text(row.get("scenario_id") or row.get("task_id") or row.get("prompt") or "")


def key_digest(key: str) -> int:
    """The first 64 bits of the SHA-1 of a (task) key, as an int: what ``KeyIndex`` holds."""
    return int.from_bytes(hashlib.sha1(key.encode("utf-8", "surrogatepass")).digest()[:8], "big")


def row_summary(row):
    """(64-bit SHA-1 prefix of the task key, or None when empty; numeric reward, NaN when there is none)."""
    key = task_key(row)
    digest = key_digest(key) if key else None
    reward = numeric_reward(row.get("reward"))
    return digest, (math.nan if reward is None else reward)


class KeyIndex:
    """64-bit keys -> dense indexes 0, 1, 2, ... in two typed arrays (open addressing).

    24 to 48 bytes a key (the table doubles when half full), where a dict of Python ints takes about
    110: at a million rows in 170k groups that is the difference between flat and growing memory
    (issue 4).
    """

    __slots__ = ("_keys", "_slots", "_mask", "n")

    def __init__(self, capacity=1024):
        self._mask = capacity - 1
        self._keys = array.array("Q", bytes(8 * capacity))
        self._slots = array.array("i", [-1]) * capacity
        self.n = 0

    def index(self, key) -> int:
        """The index of ``key`` (a new one, ``n - 1``, when it was not seen before)."""
        keys, slots, mask = self._keys, self._slots, self._mask
        i = key & mask  # keys are SHA-1 bits, uniform already
        while (g := slots[i]) >= 0:
            if keys[i] == key:
                return g
            i = (i + 1) & mask
        g = self.n
        keys[i], slots[i] = key, g
        self.n += 1
        if 2 * self.n > mask:
            self._grow()
        return g

    def _grow(self):
        old_keys, old_slots, n = self._keys, self._slots, self.n
        self.__init__(2 * (self._mask + 1))
        keys, slots, mask = self._keys, self._slots, self._mask
        for key, g in zip(old_keys, old_slots):
            if g >= 0:
                i = key & mask
                while slots[i] >= 0:
                    i = (i + 1) & mask
                keys[i], slots[i] = key, g
        self.n = n

    def __eq__(self, other):
        """The same keys given the same indexes (two tallies of the same rows in the same order are equal)."""
        if not isinstance(other, KeyIndex):
            return NotImplemented
        return self.n == other.n and self._keys == other._keys and self._slots == other._slots

    __hash__ = None


class GroupStats:
    """Accumulates (group, reward) per row; after ``compute()``, ``fields(g)`` gives group g's fields.

    With ``spill``, the per-row summaries go to an anonymous temporary file in blocks (they are only
    ever read in order), so memory holds per-group state alone.
    """

    def __init__(self, spill=False):
        self._index = KeyIndex()  # task-key digest -> group index
        self._keys = array.array("Q")
        self._counts = array.array("i")
        self._row_group = array.array("i")
        self._row_reward = array.array("d")
        self._spill = [] if spill else None  # (groups file, rewards file) once the first block is full
        self._table = None
        self._repeats = False

    def add(self, row) -> int:
        """Record one row; returns its group index (-1 for rows with no task key)."""
        return self.add_summary(*row_summary(row))

    def add_summary(self, digest, reward) -> int:
        """Record one row from ``row_summary``: (digest of its task key or None, numeric reward or NaN)."""
        g = -1
        if digest is not None:
            g = self._index.index(digest)
            if g == len(self._keys):
                self._keys.append(digest)
                self._counts.append(0)
            self._counts[g] += 1
            self._repeats = self._repeats or self._counts[g] > 1
        self._row_group.append(g)
        self._row_reward.append(reward)
        if self._spill is not None and len(self._row_group) >= SPILL_ROWS:
            self._flush()
        return g

    def _flush(self):
        if not self._spill:
            self._spill[:] = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self._row_group.tofile(self._spill[0])
        self._row_reward.tofile(self._spill[1])
        del self._row_group[:], self._row_reward[:]

    def _rows(self):
        """(group, reward) of every row, in order."""
        if self._spill is None:
            yield from zip(self._row_group, self._row_reward)
            return
        self._flush()
        for fh in self._spill:
            fh.flush()
            fh.seek(0)
        while True:
            groups, rewards = array.array("i"), array.array("d")
            for block, fh in ((groups, self._spill[0]), (rewards, self._spill[1])):
                try:
                    block.fromfile(fh, SPILL_ROWS)
                except EOFError:  # the last, short block: what was there is read all the same
                    pass
            if not groups:
                return
            yield from zip(groups, rewards)

    def iter_row_groups(self):
        """Each row's group, in order."""
        if self._spill is None:
            return iter(self._row_group)
        return (g for g, _ in self._rows())

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
        """Row ``i``'s group (not with ``spill``: use ``iter_row_groups``)."""
        return self._row_group[i]

    def compute(self, keep_rows=False) -> None:
        """Reduce the per-row summaries to per-group statistics, summed in row order as the reference does.

        The index is dropped afterwards, and so are the in-memory per-row rewards (only the statistics
        read them); each row's group too unless ``keep_rows`` (``row_group``, ``iter_row_groups``;
        spilled ones stay readable).
        """
        if self._table is not None:
            return
        self._index = None
        n = len(self._keys)
        sums, sq = array.array("d", bytes(8 * n)), array.array("d", bytes(8 * n))
        graded, n0, n1 = (array.array("i", bytes(4 * n)) for _ in range(3))
        for g, r in self._rows():
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
        for g, r in self._rows():
            if g >= 0 and r == r:
                try:
                    sq[g] += (r - means[g]) ** 2
                except OverflowError:  # a finite reward like 1e200: the spread is infinite (written as null)
                    sq[g] = math.inf
        if self._spill is None:
            self._row_reward = None  # 8 bytes a row that nothing reads any more
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
            # ``** 0.5``, not math.sqrt: the two differ in the last bit for about one group in a thousand
            # (rewards 0.2, 0.5, 0.1), and the spec's numbers are the reference's, bit for bit (spec 3.11)
            "reward_std": (sq[g] / k) ** 0.5 if k else None,
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
