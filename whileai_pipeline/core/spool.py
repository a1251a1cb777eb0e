"""The spool: an export's serialized rows in a temp file beside the destination, published at the end.

Rows are written (or, from worker processes, appended and spliced as part files) as they come, then
the file is fsynced, hashed and renamed into place; thread helpers hash the file and flush it to
disk while it is still being written (``TrailingHash``, ``EarlyWriteback``). Apart from ``output``,
which checks where an export may go before any byte is written: this is how the bytes get there.
"""

import concurrent.futures as cf
import contextlib
import functools
import glob
import hashlib
import os
import threading

from .atomic import TMP_SUFFIX, atomic_file, close_quietly, fsync_dir, make_parents, remove_made, temp_beside
from .errors import WriteFailedError
from .jsonl import sha256_of, splice
from .parallel import append_part


def spool_line(body, tail=b""):
    """A serialized row as the spool holds it until its group fields are spliced in."""
    return body + b"\t" + tail + b"\n" if tail else body + b"\n"


class Spool:
    """Serialized rows on their way to ``dest``: a temp file beside it, published only at the end.

    With ``final_lines`` every line is written as it will be published, and hashed on the way. Without
    it, a line's group fields are not known yet: ``publish`` splices them in at the end of each line,
    in one streaming pass. A line may carry a tail (keys that must follow the group fields, e.g. TRL's
    ``prompt_text``) after a tab; compact JSON never contains a raw tab, so the split is unambiguous.
    """

    def __init__(self, dest, final_lines=True):
        self.dest = dest
        self.fh = None
        self.final_lines = final_lines
        self.has_tail = False
        self.sha256 = hashlib.sha256()  # of final lines, taken as they are written (no re-read)
        self.hash_at_publish = False  # set once a part is appended unhashed
        self.trailing = None  # the hash that follows spliced parts as they are written
        self.writeback = None  # the flushes that follow them (EarlyWriteback)
        self.made = []  # the folders made for ``dest``: gone again if nothing is published there
        if dest is not None:
            try:
                self.made = make_parents(dest.parent)
                fd, self.tmp = temp_beside(dest, "spool")
            except OSError as exc:
                remove_made(self.made)
                raise WriteFailedError(dest, exc) from exc
            self.fh = os.fdopen(fd, "wb", buffering=1 << 20)

    def write(self, body, tail=b"", suffix=None):
        """Write one serialized row: final with ``suffix`` (its group fields, known from a pre-scan),
        else with its tail (keys that go after the group fields) kept aside for ``publish``."""
        if self.fh is None:
            return
        if suffix is not None:
            line = splice(body, suffix, tail) + b"\n"
        else:
            self.has_tail |= bool(tail)
            line = spool_line(body, tail)
        try:
            self._write(line)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def _write(self, line):
        if self.final_lines:
            self.sha256.update(line)
        self.fh.write(line)

    def part(self, k):
        """The name of worker part file ``k``: beside the spool (same directory, same filesystem)."""
        return f"{self.tmp}.{k}.part{TMP_SUFFIX}"

    def append_part(self, part):
        """Append a worker's final lines (a part file) to the output, then delete the part.

        The part is not hashed here: ``publish`` hashes the whole file while the disk flushes it,
        when this process would otherwise wait (measured: the parent, which appends and hashes while
        the workers compute, is the busiest process of a pooled export).
        """
        self.hash_at_publish = True
        try:
            append_part(part, self.fh, None)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def splice_part(self, part, suffixes):
        """Append a worker's spooled part with each line's group fields spliced in, then delete it.

        The parts are spliced by this process alone, once the workers are done, so a thread hashes
        what is written right behind it (``TrailingHash``) on the core that would otherwise idle.
        """
        try:
            self.fh.flush()
            fd = self.fh.fileno()
            if self.trailing is None:
                self.trailing = TrailingHash(self.tmp)
                self.writeback = EarlyWriteback(fd, WRITEBACK_STEP)
            try:
                splice_file(part, functools.partial(writev_all, fd), suffixes, self.has_tail)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
            size = os.lseek(fd, 0, os.SEEK_CUR)
            self.trailing.advance(size)
            self.writeback.advance(size)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def discard(self):
        """Remove the spool and any part file a worker left (after an error)."""
        if self.trailing is not None:
            self.trailing.stop()
            self.trailing = None
        if self.writeback is not None:
            self.writeback.stop()
            self.writeback = None
        if self.fh is not None:
            close_quietly(self.fh)
            self.fh = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        if self.dest is not None:
            for part in glob.glob(glob.escape(self.tmp) + ".*.part" + TMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)

    @staticmethod
    def discard_all(spools):
        """``discard`` every spool, then remove the folders they made that hold nothing (an export that
        failed, or one that had nothing to write): one folder may hold the spools of several formats."""
        for spool in spools:
            spool.discard()
        for spool in reversed(spools):
            remove_made(spool.made)

    def publish(self, suffixes=None, alongside=None):
        """Write the final file and return its SHA-256.

        ``suffixes`` (without ``final_lines``) is an iterator giving each written row's group fields
        (``b",..."`` or ``b""``), in row order. ``alongside`` (None for none) is called before the
        file is put in place, in a thread while the disk flushes it when the file is hashed then;
        if it raises, nothing is published.
        """
        try:
            return self._publish(suffixes, alongside)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def _publish(self, suffixes, alongside):
        if self.writeback is not None:  # its last flush ends before the file is closed
            writeback, self.writeback = self.writeback, None
            writeback.finish()
        self.fh.close()
        self.fh = None
        try:
            if self.final_lines or (suffixes is None and not self.has_tail):
                with open(self.tmp, "rb+") as fh:
                    if self.trailing is not None:
                        trailing, self.trailing = self.trailing, None
                        self.sha256 = _fsync_and_hash(fh, alongside, trailing.finish)
                    elif self.final_lines and not self.hash_at_publish:
                        os.fsync(fh.fileno())
                        if alongside is not None:
                            alongside()
                    else:
                        self.sha256 = _fsync_and_hash(fh, alongside)
                os.replace(self.tmp, self.dest)
                fsync_dir(self.dest.parent)  # as atomic_file does: the rename itself survives a crash
            else:
                if alongside is not None:
                    alongside()
                self.sha256 = hashlib.sha256()

                def write(pieces):
                    data = b"".join(pieces)
                    self.sha256.update(data)
                    out.write(data)

                with atomic_file(self.dest) as out:
                    splice_file(self.tmp, write, suffixes, self.has_tail)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        return self.sha256.hexdigest()


def _spliced_pieces(data, view, end, suffixes, has_tail):
    """The lines of ``data[:end]`` with their group fields spliced in, as a list of buffers (slices of
    ``view``, a memoryview of ``data``, and suffix bytes): nothing is copied."""
    find = data.find
    pieces = []
    add = pieces.extend
    pos = 0
    while pos < end:
        nl = find(b"\n", pos, end)
        suffix = next(suffixes) if suffixes is not None else b""
        tab = find(b"\t", pos, nl) if has_tail else -1
        if tab >= 0:
            add((view[pos:tab - 1], suffix, b",", view[tab + 1:nl], b"}\n"))
        else:
            add((view[pos:nl - 1], suffix, b"}\n"))
        pos = nl + 1
    return pieces


def splice_file(path, write, suffixes, has_tail, block_bytes=1 << 20):
    """Pass a spooled file's lines, with their group fields spliced in, to ``write`` (a callable that
    takes a list of buffers), a block at a time.

    One buffer is read into and reused, and the pieces handed out are slices of it: no copy is made
    here (measured: a fresh megabyte touched costs up to 2 ms of system time on this kind of virtual
    machine, more than copying it). A line longer than the buffer makes it grow.
    """
    buffer = bytearray(block_bytes)
    held = 0
    with open(path, "rb", buffering=0) as fh:
        while True:
            if held == len(buffer):
                buffer.extend(bytes(len(buffer)))
            with memoryview(buffer) as view:
                n = fh.readinto(view[held:])
                if not n:
                    break
                held += n
                end = buffer.rfind(b"\n", 0, held) + 1
                if end:
                    write(_spliced_pieces(buffer, view, end, suffixes, has_tail))
            if end:
                buffer[:held - end] = buffer[end:held]  # the unfinished line moves to the front
                held -= end
    if held:
        raise ValueError(f"spooled lines of {path} do not end with a newline")  # our own files always do


def writev_all(fd, pieces, batch=1024):
    """``os.writev`` every piece to ``fd``, in batches the kernel takes (IOV_MAX), finishing short writes."""
    for i in range(0, len(pieces), batch):
        group = pieces[i:i + batch]
        done = os.writev(fd, group)
        total = sum(map(len, group))
        if done < total:  # a regular file writes everything unless something is wrong; finish or fail
            rest = b"".join(group)[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


def _fsync_and_hash(fh, alongside=None, digest=None):
    """fsync an open file and return its SHA-256 object, hashing the file while the disk flushes it.

    The flush waits on the disk and the hash on one core (hashlib lets go of the GIL for large
    blocks), so ``alongside`` (a callable, e.g. the source's own hash) gets the other core.
    ``digest`` (a callable returning the hash object) replaces hashing the whole file here.
    """
    with cf.ThreadPoolExecutor(2) as threads:
        waits = [threads.submit(os.fsync, fh.fileno())]
        if alongside is not None:
            waits.append(threads.submit(alongside))
        try:
            digest = digest() if digest is not None else sha256_of(fh.name)
        finally:
            for wait in waits:
                wait.result()
    return digest


WRITEBACK_STEP = 256 << 20


class EarlyWriteback:
    """fdatasync a file that is still being appended to, in a thread, every ``step`` bytes written.

    A pooled export splices 2 GB into its output in about a second and must then fsync it: the
    publish step after the splice took 1.3-1.4 s, mostly the disk working alone. Flushing as the
    splice goes lets the disk work while the splice and the hashes do, so the final fsync has little
    left to write. Measured on the 100k-row bench run: publish 0.5-0.7 s, the splice 0.2-0.4 s
    longer, the export 9.19-9.53 s before and 8.95-9.10 s after (three runs each). One flush runs at
    a time; a failed one raises at the next ``advance`` or at ``finish``.
    """

    def __init__(self, fd, step):
        self._fd, self._step = fd, step
        self._flushed = 0
        self._running = None
        self._thread = cf.ThreadPoolExecutor(1)

    def advance(self, size):
        """The file now holds ``size`` bytes; flush them if ``step`` bytes came since the last flush."""
        if size - self._flushed < self._step:
            return
        if self._running is not None:
            if not self._running.done():
                return  # the disk is still busy with the last flush: the next one takes both
            self._running.result()
        self._flushed = size
        self._running = self._thread.submit(getattr(os, "fdatasync", os.fsync), self._fd)  # macOS has no fdatasync

    def finish(self):
        """Wait for the last flush (and raise its error); the file's own fsync comes after."""
        try:
            if self._running is not None:
                self._running.result()
        finally:
            self._thread.shutdown()

    def stop(self):
        """Give up (the export failed); waits for a running flush to end."""
        self._thread.shutdown(wait=True)


class TrailingHash:
    """The SHA-256 of a file that is still being appended to, taken by a thread that reads the new
    bytes back (from the page cache) as the writer reports them with ``advance``."""

    def __init__(self, path, block_bytes=1 << 20):
        self._path, self._block = path, block_bytes
        self._limit, self._last = 0, False
        self._more = threading.Condition()
        self._thread = cf.ThreadPoolExecutor(1)
        self._digest = self._thread.submit(self._run)

    def advance(self, size):
        """The file now holds ``size`` bytes that will not change."""
        with self._more:
            self._limit = size
            self._more.notify()

    def finish(self):
        """The hash object of the file as it stands after the last ``advance``."""
        with self._more:
            self._last = True
            self._more.notify()
        try:
            return self._digest.result()
        finally:
            self._thread.shutdown()

    def stop(self):
        """Give up (the export failed); waits for the thread to end."""
        with self._more:
            self._last, self._limit = True, -1
            self._more.notify()
        self._thread.shutdown()

    def _run(self):
        h = hashlib.sha256()
        buffer = bytearray(self._block)
        done = 0
        with open(self._path, "rb", buffering=0) as fh, memoryview(buffer) as view:
            while True:
                with self._more:
                    while done >= self._limit and not self._last:
                        self._more.wait()
                    limit, last = self._limit, self._last
                if limit < 0:
                    return None
                while done < limit:
                    n = fh.readinto(view[:min(self._block, limit - done)])
                    if not n:
                        raise OSError(f"{self._path} is shorter than the {limit} bytes written to it")
                    h.update(view[:n])
                    done += n
                if last:
                    return h
