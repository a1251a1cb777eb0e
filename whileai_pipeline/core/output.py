"""Where an export goes: the destination name, the source guard, and the file rows are spooled to."""

import contextlib
import hashlib
import os
import time
from pathlib import Path

from .errors import OutputIsSourceError, WriteFailedError
from .jsonl import atomic_file, splice, temp_beside


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


class Spool:
    """Serialized rows on their way to ``dest``: a temp file beside it, published only at the end.

    A line may carry a tail (keys that must follow the group fields, e.g. TRL's ``prompt_text``)
    after a tab; compact JSON never contains a raw tab, so the split is unambiguous.
    """

    def __init__(self, dest):
        self.dest = dest
        self.fh = None
        self.has_tail = False
        self.sha256 = hashlib.sha256()  # of the final bytes, taken as they are written (no re-read)
        if dest is not None:
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd, self.tmp = temp_beside(dest, "spool")
            except OSError as exc:
                raise WriteFailedError(dest, exc) from exc
            self.fh = os.fdopen(fd, "wb", buffering=1 << 20)

    def write(self, body, tail=b"", suffix=None):
        """Write one row; with ``suffix`` (its group fields, known from a pre-scan) the line is final."""
        if self.fh is None:
            return
        try:
            self._write(body, tail, suffix)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def _write(self, body, tail, suffix):
        if suffix is not None:
            line = splice(body, suffix, tail) + b"\n"
        elif tail:
            self.has_tail = True
            line = body + b"\t" + tail + b"\n"
        else:
            line = body + b"\n"
        self.sha256.update(line)
        self.fh.write(line)

    def part_prefix(self):
        """A name prefix for worker part files, beside the spool (same directory, same filesystem)."""
        return f"{self.tmp}."

    def append_part(self, part):
        """Append a worker's finished lines (a part file) to the output, then delete the part."""
        try:
            with open(part, "rb") as src:
                while block := src.read(1 << 20):
                    self.sha256.update(block)
                    self.fh.write(block)
            os.unlink(part)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def discard(self):
        if self.fh is not None:
            self.fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            self.fh = None

    def publish(self, suffix_of_row=None):
        """Write the final file (splicing group fields and tails when needed); returns its SHA-256."""
        try:
            return self._publish(suffix_of_row)
        except OSError as exc:
            raise WriteFailedError(self.dest, exc) from exc

    def _publish(self, suffix_of_row):
        self.fh.close()
        self.fh = None
        try:
            if self.has_tail or suffix_of_row is not None:
                self.sha256 = hashlib.sha256()
                with atomic_file(self.dest) as out, open(self.tmp, "rb") as spool:
                    for i, line in enumerate(spool):
                        body, _, tail = line[:-1].partition(b"\t")
                        suffix = suffix_of_row(i) if suffix_of_row is not None else b""
                        line = splice(body, suffix, tail) + b"\n"
                        self.sha256.update(line)
                        out.write(line)
            else:
                with open(self.tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                os.replace(self.tmp, self.dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        return self.sha256.hexdigest()


def finish(report, started):
    report["elapsed_seconds"] = round(time.perf_counter() - started, 3)
    return report
