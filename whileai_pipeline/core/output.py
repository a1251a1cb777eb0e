"""Where an export goes: the destination name, the source guard, and the file rows are spooled to."""

import contextlib
import glob
import hashlib
import os
import time
from pathlib import Path

from .errors import OutputIsSourceError, WriteFailedError
from .jsonl import TMP_SUFFIX, atomic_file, splice, temp_beside
from .parallel import append_part


def destination(output, source_path):
    if output:
        return Path(output)
    if source_path is None:
        return None
    suffix = source_path.suffix
    if suffix:
        return source_path.with_name(f"{source_path.stem}.train{suffix}")
    return source_path.with_name(f"{source_path.name}.train.jsonl")


def refuse_source(dest, source_path):
    """DECISIONS 4: never write over the file being read (links and hard links included)."""
    same = Path(dest).resolve() == Path(source_path).resolve()
    if not same and Path(dest).exists():
        with contextlib.suppress(OSError):
            same = os.path.samefile(dest, source_path)
    if same:
        raise OutputIsSourceError(
            f"output_is_source: {dest} is the source file {source_path}; writing there would destroy "
            "the raw run. Pass another output path, or none to get <name>.train<suffix> beside it."
        )


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
        if dest is not None:
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd, self.tmp = temp_beside(dest, "spool")
            except OSError as exc:
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
        """Append a worker's final lines (a part file) to the output, hashing them, then delete the part."""
        try:
            append_part(part, self.fh, self.sha256)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def discard(self):
        """Remove the spool and any part file a worker left (after an error)."""
        if self.fh is not None:
            self.fh.close()
            self.fh = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        if self.dest is not None:
            for part in glob.glob(glob.escape(self.tmp) + ".*.part" + TMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)

    def publish(self, suffixes=None):
        """Write the final file and return its SHA-256.

        ``suffixes`` (without ``final_lines``) is an iterator giving each written row's group fields
        (``b",..."`` or ``b""``), in row order.
        """
        try:
            return self._publish(suffixes)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def _publish(self, suffixes):
        self.fh.close()
        self.fh = None
        try:
            if self.final_lines or (suffixes is None and not self.has_tail):
                if not self.final_lines:
                    self.sha256 = _hash_file(self.tmp)
                with open(self.tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                os.replace(self.tmp, self.dest)
            else:
                self.sha256 = hashlib.sha256()
                with atomic_file(self.dest) as out:
                    _splice_segment(self.tmp, out, self.sha256, suffixes, self.has_tail)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        return self.sha256.hexdigest()


SPLICE_BLOCK = 8 << 20


def _splice_segment(path, out, hasher, suffixes, has_tail, block_bytes=SPLICE_BLOCK):
    """Copy spooled lines to ``out``, each with its group fields spliced in and its tail moved after them.

    ``hasher`` (None for none) sees every byte written."""
    rest = b""
    with open(path, "rb") as fh:
        while block := fh.read(block_bytes):
            data = rest + block if rest else block
            end = data.rfind(b"\n") + 1
            rest = data[end:]
            chunk = _splice_lines(data, end, suffixes, has_tail)
            if hasher is not None:
                hasher.update(chunk)
            out.write(chunk)
    if rest:
        raise ValueError(f"spooled lines of {path} do not end with a newline")  # our own files always do


def _splice_lines(data, end, suffixes, has_tail):
    view = memoryview(data)
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
    return b"".join(pieces)


def _hash_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h


def finish(report, started):
    report["elapsed_seconds"] = round(time.perf_counter() - started, 3)
    return report
