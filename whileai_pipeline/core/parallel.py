"""Spreading per-row work over processes while keeping source order (issue 4).

A JSONL file is cut into chunks of whole lines (byte ranges) by the parent, which can hash the file
as it goes. Each worker maps its own range of the file and parses lines out of the map, so input
bytes never cross a pipe and are not copied before orjson reads them. Work on a chunk returns small
per-row facts; an export's lines go to a part file beside the destination, which the parent appends
to the output in order and deletes. When the lines still need their group fields, the parts wait
until every row has been seen, and the parent then splices the fields in as it appends them
(``Spool.splice_part``).

Measured here, and why it is built this way: a part file beats the pool's result pipe (a large
pipe read in a thread of a busy parent waits on the GIL for every 64 KB: 0.55 GB/s); two workers
writing into one file at their own offsets double the system time; a second 2 GB of dirty pages
is throttled to disk speed, so parts are deleted as soon as they are appended.
"""

import collections
import concurrent.futures as cf
import contextlib
import errno
import glob
import itertools
import json
import mmap
import multiprocessing
import os
import re
import sys
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import orjson

from .arguments import whole_number
from .atomic import create_part, temp_prefix
from .errors import BadJsonlError, BadRowError, ExportError, WorkerLostError, WriteFailedError
from .exact_numbers import long_digit_runs
from .jsonl import _BLANK, parse_line
from .runs import change_explains_failure, file_stamp

CHUNK_BYTES = 8 << 20
BLOCK_BYTES = 1 << 20
MIN_PARALLEL_BYTES = 32 << 20
ENV_WORKERS = "WHILEAI_PIPELINE_WORKERS"
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}  # only writing raises these


@dataclass
class Chunk:
    """Whole lines ``[start, end)`` of the file, the first of them numbered ``first_line``.

    ``first_line`` is None when nobody counted the lines before the chunk (``byte_chunks``):
    ``chunk_rows`` then numbers its lines from 1, works out a line's number in the file only for an
    error, and records in ``lines`` how many lines it read, for the caller to count on with.
    """

    start: int
    end: int
    first_line: int | None
    lines: int = 0


def workers_for(path, requested=None) -> int:
    """How many processes to use: the request, else $WHILEAI_PIPELINE_WORKERS, else by size and ``usable_cores``.

    Always one when this process may not start workers (``can_start_workers``).
    """
    if requested is None:
        requested = env_workers()
    if requested is not None:
        n = _count(requested, "workers", "")
        return n if n == 1 or can_start_workers() else 1
    try:
        size = os.path.getsize(path)
    except OSError:
        return 1
    if size < MIN_PARALLEL_BYTES or not can_start_workers():
        return 1
    return max(1, min(usable_cores(), 4))


def usable_cores() -> int:
    """The CPUs this process may keep busy: the ones it may run on, fewer under a CPU quota.

    A container's CPU limit (``docker run --cpus``, a Kubernetes ``limits.cpu``) is a cgroup quota,
    which neither ``os.cpu_count`` nor the affinity mask shows: a pod limited to 2 CPUs on a 64-core
    node would otherwise start 4 CPU-bound workers, which the quota then throttles.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # macOS
    quota = cpu_quota_cores()
    return max(1, min(cores, quota) if quota else cores)


CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
SELF_MOUNTINFO = "/proc/self/mountinfo"


def cpu_quota_cores(root=None, self_cgroup=None, mountinfo=None) -> int | None:
    """The tightest CPU quota on this process's cgroup and the ones above it, in whole CPUs (rounded
    up: 1.5 CPUs keeps two workers busy part of the time); None when there is none or it cannot be
    read (no cgroups: macOS, a sandbox without /proc).

    cgroup v2 keeps the quota in ``cpu.max`` ("max 100000" for none, "150000 100000" for 1.5 CPUs),
    v1 in ``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``. Where each hierarchy is
    mounted, and which of its cgroups a mount shows, comes from ``/proc/self/mountinfo``, as the JDK
    and Go's automaxprocs read it: inside a container the process's own cgroup is usually the mount's
    root, on a host a path below it. Only the process's cgroup and those above it up to the mount are
    read; a cgroup that is not the mount's root or below it (a path with ``..``: outside this cgroup
    namespace) gives no quota through that mount. When mountinfo cannot be read or lists no cgroup
    mount, the hierarchies are taken to be where systemd and docker mount them, under ``root``
    (``_guessed_mounts``). A caller naming ``root`` or ``self_cgroup`` (a fake tree) and no
    ``mountinfo`` gets that guess, not this process's mounts.
    """
    if mountinfo is None and root is None and self_cgroup is None:
        mountinfo = SELF_MOUNTINFO
    try:
        entries = Path(self_cgroup or SELF_CGROUP).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    mounts = _cgroup_mounts(mountinfo) if mountinfo else []
    quotas, seen = [], set()
    for entry in entries:
        hierarchy, _, rest = entry.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            version, read = 2, _v2_quota
        elif "cpu" in controllers.split(","):
            version, read = 1, _v1_quota
        else:
            continue
        if mounts:
            places = [(top, point) for v, top, point in mounts if v == version]
        else:
            places = _guessed_mounts(root, version, controllers, path)
        for top, point in places:
            below = _below(path, top)
            if below is None:
                continue
            for depth in range(len(below.parts), -1, -1):  # the process's cgroup, then up to the mount point
                folder = Path(point, *below.parts[:depth])
                try:
                    info = folder.stat()
                except OSError:
                    continue
                # one cgroup seen through two mounts (bind mounts, v1's "cpu" link) is one folder: read it once
                key = (read, info.st_dev, info.st_ino)
                if key not in seen:
                    seen.add(key)
                    quotas.append(read(folder))
    quotas = [q for q in quotas if q]
    return min(quotas) if quotas else None


def _cgroup_mounts(mountinfo) -> list:
    """``(version, cgroup shown, mount point)`` of each cgroup v2 mount and v1 mount with the cpu
    controller in ``mountinfo``; empty when it cannot be read. A line not in the kernel's format
    (``ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS``) is skipped."""
    try:
        lines = os.fsdecode(Path(mountinfo).read_bytes()).splitlines()  # a mount point need not be UTF-8
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)  # the optional fields, any number of them, end here
            fstype, options = fields[dash + 1], fields[dash + 3].split(",")
        except (ValueError, IndexError):
            continue
        if fstype == "cgroup2" or (fstype == "cgroup" and "cpu" in options):
            mounts.append((2 if fstype == "cgroup2" else 1, _unescape(fields[3]), _unescape(fields[4])))
    return mounts


def _unescape(field) -> str:
    """A mountinfo path: the kernel writes a space, tab, newline or backslash in it as ``\\040`` and so on."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _guessed_mounts(root, version, controllers, path) -> list:
    """``(cgroup shown, mount point)`` pairs when mountinfo does not say: v2 at ``root``
    (/sys/fs/cgroup), v1 at ``root/<controllers>`` or the ``cpu`` link beside it. The mount shows the
    root cgroup when the path is a folder below it, else the process's own: a v1 container without a
    cgroup namespace sees its full path (/docker/<id>) with its own cgroup mounted as the root (a
    folder below it that happens to match part of the path is a child, not an ancestor)."""
    root = Path(root or CGROUP_ROOT)
    points = [root] if version == 2 else [root / "cpu", root / controllers]
    return [("/" if os.path.isdir(point / path.strip("/")) else path, point) for point in points]


def _below(path, top) -> PurePosixPath | None:
    """Cgroup ``path`` relative to cgroup ``top``; None unless it is ``top`` or a cgroup below it."""
    path, top = PurePosixPath(path), PurePosixPath(top)
    # ".." leads out of this cgroup namespace (``nsenter`` without moving the process, a process moved out
    # by the host): no folder of the mount is that cgroup or above it, the mount point included
    if ".." in path.parts or ".." in top.parts or not path.is_relative_to(top):
        return None
    return path.relative_to(top)


def _v2_quota(folder) -> int | None:
    """Whole CPUs a cgroup v2 ``cpu.max`` allows; None for "max", a missing or unreadable file."""
    try:
        quota, period = (folder / "cpu.max").read_text().split()
        return _whole_cpus(int(quota), int(period)) if quota != "max" else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _v1_quota(folder) -> int | None:
    """Whole CPUs a cgroup v1 CFS quota allows; None for -1, a missing or unreadable file."""
    try:
        return _whole_cpus(int((folder / "cpu.cfs_quota_us").read_text()),
                           int((folder / "cpu.cfs_period_us").read_text()))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _whole_cpus(quota, period) -> int | None:
    """``quota / period`` rounded up, in integers; None unless both are positive."""
    return -(-quota // period) if quota > 0 and period > 0 else None


def env_workers():
    """``$WHILEAI_PIPELINE_WORKERS`` as a number of processes, None when unset; an ExportError naming the
    variable when it is not a whole number."""
    if not os.environ.get(ENV_WORKERS):
        return None
    return _count(os.environ[ENV_WORKERS], f"${ENV_WORKERS}", "; unset it to choose by file size and cores")


def _count(value, name, hint):
    """``value`` as a number of processes; 2.5 or True is an error, not 2 or 1, and so is 0 or -1, which
    other tools read as "choose for me" or "every core": not one process without a word."""
    n = whole_number(value, strings=True)
    if n is None:
        raise ExportError(f"{name} must be a whole number of worker processes (1 for one process{hint}), "
                          f"got {value!r}")
    if n < 1:
        raise ExportError(f"{name} must be at least 1 (1 for one process{hint}), got {value!r}")
    return n


def can_start_workers() -> bool:
    """False in a daemonic process (a ``multiprocessing.Pool`` worker, say): it may not have children,
    so such a caller gets one process instead of an error."""
    return not multiprocessing.current_process().daemon


@contextlib.contextmanager
def _main_hidden():
    """Start processes without telling them about the caller's ``__main__``.

    A spawned process re-imports the parent's main module before it runs anything, so a script that
    calls an export at top level (no ``if __name__ == "__main__":`` guard) would run again inside
    every worker, which dies with "An attempt has been made to start a new process..." and leaves a
    BrokenProcessPool; a script piped to ``python -`` has no file to import at all. Worker tasks
    are this package's functions with picklable plans, never objects of ``__main__``, so workers
    are started as if the parent had no main module. Only ``submit`` runs inside this (the moment
    a process is spawned), for a few microseconds.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is None:
            del sys.modules["__main__"]
        else:
            sys.modules["__main__"] = main


def line_chunks(path, hasher=None, chunk_bytes=None):
    """Chunks of whole lines of about ``chunk_bytes``, hashing the file on the way when asked."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    start = pos = 0
    lineno = first = 1
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK_BYTES):
            if hasher is not None:
                hasher.update(block)
            pos += len(block)
            lineno += _newlines(block)
            if pos - start >= chunk_bytes:
                cut = block.rfind(b"\n")
                if cut >= 0:
                    end = pos - len(block) + cut + 1
                    yield Chunk(start, end, first)
                    start, first = end, lineno - block.count(b"\n", cut + 1)
    if pos > start:
        yield Chunk(start, pos, first)


def byte_chunks(path, chunk_bytes=None):
    """Chunks of whole lines of about ``chunk_bytes``, cut by seeking: this process reads only the few
    bytes after each cut, where ``line_chunks`` reads and counts the whole file (measured on a 1.9 GB
    run: 0.5 core-seconds less for the parent, 0.2 s less for the export). Their lines are not
    counted (``first_line`` None): for callers that need a line's number only in an error."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    size = os.path.getsize(path)
    start = 0
    with open(path, "rb") as fh:
        while start < size:
            end = _line_end_from(fh, start + chunk_bytes - 1, size)
            yield Chunk(start, end, None)
            start = end


def _line_end_from(fh, pos, size, window=1 << 16):
    """The offset just past the first newline at or after ``pos`` (``size`` when there is none)."""
    while pos < size:
        fh.seek(pos)
        block = fh.read(window)
        if not block:
            break
        cut = block.find(b"\n")
        if cut >= 0:
            return pos + cut + 1
        pos += len(block)
    return size


def lines_before(path, offset) -> int:
    """How many lines end before byte ``offset`` (the number of the line there, minus one)."""
    n = 0
    with open(path, "rb") as fh:
        while offset > 0 and (block := fh.read(min(BLOCK_BYTES, offset))):
            n += block.count(b"\n")
            offset -= len(block)
    return n


def _newlines(block) -> int:
    """``block.count(b"\\n")``, three times as fast (13 against 4 GB/s here): the parent counts the
    lines of every byte it hands out, while the workers wait for their next chunk."""
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(block, np.uint8) == 10))


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # fault the chunk in at once


def chunk_rows(path, chunk):
    """(line number, byte offset, parsed value, long run) of a chunk's non-blank lines; long run: whether
    the line holds 19 digits in a row (``iter_jsonl_runs``).

    Lines are parsed straight out of a read-only map of the chunk, with no copy of its bytes (measured:
    23 against 27.5 µs a 20 KB row for read + split + parse). A line orjson refuses as it stands
    (a BOM, a blank line, a bad line) goes through ``parse_line``, which gives the value or the error
    the one-process path gives; a line orjson accepts as it stands parses to the same value there. A
    line with a run of 19 digits is read again by Python's json, as there (``exact_numbers``).
    """
    counted = chunk.first_line is not None
    if chunk.end <= chunk.start:
        chunk.lines = 0
        return
    base = chunk.start - chunk.start % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), chunk.end - base, flags=_MAP_FLAGS, prot=mmap.PROT_READ,
                                            offset=base) as mapped:
        view = memoryview(mapped)
        try:
            find, loads = mapped.find, orjson.loads
            first = chunk.first_line if counted else 1
            pos, end, lineno = chunk.start - base, chunk.end - base, first
            long_runs = iter(long_digit_runs(mapped, pos, end))  # where orjson may misread a big integer
            next_run = next(long_runs, end)
            while pos < end:
                nl = find(b"\n", pos, end)
                if nl < 0:
                    nl = end
                try:
                    value = loads(view[pos:nl])
                    if next_run < nl:
                        value = json.loads(mapped[pos:nl])
                except (orjson.JSONDecodeError, RecursionError):  # parse_line says what is wrong, and where
                    try:
                        value = parse_line(path, lineno, bytes(view[pos:nl]), starts_file=base + pos == 0)
                    except BadJsonlError as exc:
                        if counted:
                            raise
                        raise BadJsonlError(path, lines_before(path, chunk.start) + lineno, exc.reason) from None
                long_run = next_run < nl
                while next_run < nl:
                    next_run = next(long_runs, end)
                if value is not _BLANK:
                    yield lineno, base + pos, value, long_run
                pos, lineno = nl + 1, lineno + 1
            chunk.lines = lineno - first
        finally:
            view.release()


def map_rows(path, chunk, fn, arg):
    """``fn(value, arg)`` of every row of a chunk, in order (a worker task)."""
    return [fn(value, arg) for _, _, value, _ in chunk_rows(path, chunk)]


def map_row_spans(path, chunk, fn, arg):
    """``(byte offset, byte length, fn(value, arg), long_run)`` of every row of a chunk, in order (a worker
    task); ``long_run``: whether the line holds 19 digits in a row (``chunk_rows``).

    A row's span runs to the next row (or the chunk's end): its line, its newline and any blank lines
    after it, which read back as the same value.
    """
    rows = [(offset, fn(value, arg), long_run) for _, offset, value, long_run in chunk_rows(path, chunk)]
    ends = [offset for offset, _, _ in rows[1:]] + [chunk.end]
    return [(offset, end - offset, fields, long_run) for (offset, fields, long_run), end in zip(rows, ends)]


def write_chunk(path, chunk, fn, plan, parts, runs=False):
    """A worker task: ``fn(value, plan)`` of each row of a chunk, which returns (outcome, output lines
    for each of ``parts``); ``runs``: ``fn(value, plan, long_run)``, whether the line holds 19 digits
    in a row (``chunk_rows``).

    The lines go to the part files (one per output: an export in several formats writes several); the
    (line number, outcome) pairs come back, so output bytes never cross the pipe. Returns (outcomes,
    parts, the chunk's number of lines); line numbers count from the chunk's first line when its
    ``first_line`` is None. A row ``fn`` refuses (an ExportError) is a BadRowError naming its line.
    """
    outcomes = []
    with contextlib.ExitStack() as stack:
        writes = [stack.enter_context(create_part(part)).write for part in parts]
        for lineno, _, value, long_run in chunk_rows(path, chunk):
            try:
                outcome, lines_per_part = fn(value, plan, long_run) if runs else fn(value, plan)
            except ExportError as exc:
                if chunk.first_line is None:
                    lineno += lines_before(path, chunk.start)
                raise BadRowError.at(path, lineno, exc) from None
            for write, lines in zip(writes, lines_per_part):
                for line in lines:
                    write(line)
            outcomes.append((lineno, outcome))
    return outcomes, parts, chunk.lines


def append_part(part, out, digest):
    """Copy a part file into the open file ``out``, hashing it on the way (``digest``, None for
    none), then delete the part."""
    try:
        with open(part, "rb") as fh:
            while block := fh.read(1 << 20):
                if digest is not None:
                    digest.update(block)
                out.write(block)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)


def _output_failed(exc, outputs):
    """The output among ``outputs`` (one, a list, or None) that a worker's ``exc`` is a write failure of:
    the one whose part file it names, else, for an error only writing raises (``WRITE_ERRNOS``), the
    first; None when it is no write failure of theirs."""
    if outputs is None:
        return None
    outputs = [outputs] if isinstance(outputs, (str, os.PathLike)) else [o for o in outputs if o is not None]
    named = next((output for output in outputs if _names_a_part(exc, output)), None)
    if named is None and exc.errno in WRITE_ERRNOS and outputs:
        return outputs[0]
    return named


def _names_a_part(exc, output) -> bool:
    """Whether ``exc`` is about one of the temp or part files beside ``output`` (the output's folder
    removed or made read-only under a running export): the output's error, not a bare
    ``FileNotFoundError`` naming a hidden part file the user never asked for."""
    if not exc.filename:
        return False
    where = Path(os.path.abspath(exc.filename))
    output = Path(os.path.abspath(output))
    return where.parent == output.parent and where.name.startswith(temp_prefix(output))


_PART_WRITERS = itertools.count()  # one number per PartFiles of this process


class PartFiles:
    """Names for worker part files beside an output (``append_part`` them in order); the ones left
    when the work ends, however it ends, are removed. Enter it before the ``WorkerPool`` whose tasks
    write the parts: the pool then stops (its running tasks end) before they are removed.

    They are named like every temp file beside the output (``.<name>.<pid>.…tmp``), so a crashed
    run's leftovers are cleaned by the next writer (``atomic.clean_stale_temps``). A number of their own
    keeps two writers of one output in one process (two threads) from meeting in each other's parts.
    """

    def __init__(self, output, kind):
        output = Path(os.path.abspath(output))
        self._prefix = str(output.parent / f"{temp_prefix(output)}{os.getpid()}.{kind}.{next(_PART_WRITERS)}.")

    def name(self, k):
        return f"{self._prefix}{k}.part.tmp"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for part in glob.glob(glob.escape(self._prefix) + "*.part.tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)


def _one_thread_each(parent):
    """A worker's numeric libraries run on one thread: the pool already has a process per core, and
    numpy's OpenBLAS would start a thread per core in every worker at import. An explicit setting of
    the user's is kept. The worker also ends with ``parent``, the pid of the process that started it
    (``_exit_with_parent``)."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    _exit_with_parent(parent)


PARENT_POLL_SECONDS = 0.5


def _exit_with_parent(parent):
    """End this worker once the process that started it is gone.

    A worker waits for its next task on a queue its parent feeds; when the parent is SIGKILLed (the OOM
    killer, a CI timeout, ``kill -9`` of the CLI) nothing ever closes that queue, so the worker waited
    forever, holding its memory and the killed command's stdout and stderr (a caller reading them until
    EOF hung too). A thread notices the worker being handed to another parent and exits the process.
    ``parent`` is the pid the parent gave: a worker still starting up when its parent died already has
    another parent here, which ``os.getppid()`` would have taken for its own.
    """

    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class WorkerPool:
    """Spawned worker processes that run chunk tasks, results handed back in submission order."""

    def __init__(self, workers):
        self.workers = workers
        self._pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_one_thread_each, initargs=(os.getpid(),))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pool.shutdown(wait=True, cancel_futures=True)

    def ordered(self, task, path, jobs, writes_beside=None):
        """Yield ``task(path, *job)`` for each job, in order; a few jobs per worker stay in flight.

        A failure is SourceChangedError when ``path`` changed meanwhile, and WorkerLostError for a
        worker that died of something other than an error of its own (a signal, the OOM killer).
        When the tasks write part files beside an output (``writes_beside``: one, or a list when each
        format of an export has its own), a full disk, a quota, a file size limit or a read-only
        filesystem there, or a part file gone with its folder, is WriteFailedError for that output.
        """
        path = str(path)
        pending = collections.deque()
        stamp = file_stamp(path)
        try:
            with change_explains_failure(path, stamp):
                try:
                    for job in jobs:
                        with _main_hidden():  # a submit may spawn a worker process
                            pending.append(self._pool.submit(task, path, *job))
                        if len(pending) >= 2 * self.workers:
                            yield pending.popleft().result()
                    while pending:
                        yield pending.popleft().result()
                except cf.process.BrokenProcessPool as exc:  # SourceChangedError instead if the file changed
                    raise WorkerLostError(path) from exc
                except OSError as exc:
                    output = _output_failed(exc, writes_beside)
                    if output is not None:
                        raise WriteFailedError(output, exc) from exc
                    raise
        finally:
            for future in pending:
                future.cancel()
