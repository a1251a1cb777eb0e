"""SHA-256 of inbox run files, spread over sensor ticks.

Dagster fails a sensor tick that runs past its timeout (60 s) and keeps the old cursor, so a run file
that takes longer than that to hash (tens of GB, or a few GB on slow network storage) failed every tick
and was never requested. ``ResumableHashes`` keeps a file's half-done hash in the code server's memory
between ticks and goes on from where it stopped, for as long as the file stays the same one (device and
inode: not another file moved over it) with the same size and mtime. A restarted code server starts
such a file over; nothing is lost but time.
"""

import hashlib
import os
import time

BLOCK = 8 << 20  # read between two looks at the clock: at 1 GB/s, under 10 ms


class ResumableHashes:
    """``sha256(path, deadline)``: the file's SHA-256 hex digest, or None when ``deadline`` (a
    ``time.monotonic()`` value) came first; the next call for the unchanged file goes on from there."""

    def __init__(self):
        self._partial = {}  # path -> ((device, inode, size, mtime_ns), hashlib object, bytes hashed)

    def sha256(self, path, deadline):
        key = os.fspath(path)
        with open(path, "rb", buffering=0) as fh:
            st = os.fstat(fh.fileno())
            size, same = st.st_size, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            kept = self._partial.pop(key, None)
            if kept is not None and kept[0] == same:
                h, done = kept[1], kept[2]
            else:  # new, or changed since: from the start
                h, done = hashlib.sha256(), 0
            fh.seek(done)
            buffer = bytearray(BLOCK)
            view = memoryview(buffer)
            while n := fh.readinto(buffer):  # at least one block a call, so every file gets on
                h.update(view[:n])
                done += n
                if done < size and time.monotonic() >= deadline:
                    self._partial[key] = (same, h, done)
                    return None
        return h.hexdigest()

    def progress(self, path):
        """(bytes hashed, size) of a file left half-done, else None."""
        kept = self._partial.get(os.fspath(path))
        return None if kept is None else (kept[2], kept[0][2])

    def forget_all_but(self, paths) -> None:
        """Drop the half-done hashes of files no longer in ``paths`` (removed, or renamed away)."""
        keep = {os.fspath(p) for p in paths}
        for key in [k for k in self._partial if k not in keep]:
            del self._partial[key]
