"""Spreading per-row work over processes while keeping source order (issue 4).

A JSONL file is cut into chunks of whole lines (byte ranges). Each worker reads its own range,
computes every row's outcome, writes the finished output lines of its chunk to a part file beside
the destination, and sends back only the small per-row facts. The parent adds the facts up in
source order and appends each part to the output (hashing it on the way), so neither input nor
output bytes cross a pipe and the result is the same bytes as the one-process path.
"""

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
from dataclasses import dataclass

from .jsonl import _BLANK, parse_line, splice

CHUNK_BYTES = 8 << 20
BLOCK_BYTES = 1 << 20
MIN_PARALLEL_BYTES = 32 << 20
ENV_WORKERS = "WHILEAI_PIPELINE_WORKERS"


@dataclass
class Chunk:
    """Whole lines ``[start, end)`` of the file; ``suffixes`` holds each row's group fields, if any."""

    start: int
    end: int
    first_line: int
    suffixes: list | None = None


def workers_for(path, requested=None) -> int:
    """How many processes to use: the request, else $WHILEAI_PIPELINE_WORKERS, else by size and cores."""
    if requested is None and os.environ.get(ENV_WORKERS):
        requested = int(os.environ[ENV_WORKERS])
    if requested is not None:
        return max(1, int(requested))
    try:
        size = os.path.getsize(path)
    except OSError:
        return 1
    if size < MIN_PARALLEL_BYTES:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), 4))


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
            lineno += block.count(b"\n")
            if pos - start >= chunk_bytes:
                cut = block.rfind(b"\n")
                if cut >= 0:
                    end = pos - len(block) + cut + 1
                    yield Chunk(start, end, first)
                    start, first = end, lineno - block.count(b"\n", cut + 1)
    if pos > start:
        yield Chunk(start, pos, first)


def _work(path, chunk, fn, plan, part):
    """(line, outcome) of one chunk's rows; their output lines go to ``part`` (bodies dropped from the facts)."""
    with open(path, "rb") as fh:
        fh.seek(chunk.start)
        data = fh.read(chunk.end - chunk.start)
    outcomes = []
    row = 0
    out = open(part, "wb", buffering=1 << 20) if part else None
    try:
        for lineno, line in enumerate(data.split(b"\n"), chunk.first_line):
            value = parse_line(path, lineno, line)
            if value is _BLANK:
                continue
            outcome = fn(value, plan)
            if outcome is not None:
                suffix = chunk.suffixes[row] if chunk.suffixes is not None else b""
                entries = []
                for problems, group, written in outcome[2]:
                    if written is not None:
                        facts, body, tail = written
                        if out is not None:
                            out.write(splice(body, suffix, tail) + b"\n")
                        written = (facts, None, None)
                    entries.append((problems, group, written))
                outcome = (outcome[0], outcome[1], entries)
            outcomes.append((lineno, outcome))
            row += 1
    except BaseException:
        if out is not None:
            out.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)
        raise
    if out is not None:
        out.close()
    return outcomes


def parallel_outcomes(path, chunks, fn, plan, workers, part_prefix=None):
    """Yield ``(outcomes, part file or None)`` per chunk, in file order, computed by ``workers`` processes."""
    context = multiprocessing.get_context("spawn")
    path = str(path)
    pending = []
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        try:
            for k, chunk in enumerate(chunks):
                part = f"{part_prefix}{k}.part.tmp" if part_prefix else None
                pending.append((pool.submit(_work, path, chunk, fn, plan, part), part))
                if len(pending) >= 2 * workers:
                    future, part = pending.pop(0)
                    yield future.result(), part
            while pending:
                future, part = pending.pop(0)
                yield future.result(), part
        finally:
            for future, part in pending:
                future.cancel()
            for future, part in pending:
                with contextlib.suppress(Exception):
                    future.result()
                if part:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(part)
