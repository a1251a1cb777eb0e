"""JSONL on disk: streaming reads with file:line errors, atomic writes, hashing.

Every file this project writes goes through ``atomic_file``: bytes land in a temporary file in the
destination's directory and are renamed over the destination only when complete, so a reader (or a
crash) never sees half a file.
"""

import contextlib
import datetime
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

import orjson

from .errors import BadJsonlError, WriteFailedError

_BOM = b"\xef\xbb\xbf"
_DUMP_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
TMP_SUFFIX = ".tmp"


def _default(value):
    """The one conversion for values JSON has no type for (DECISIONS 1).

    Sets become sorted lists (insertion order when unsortable), bytes become UTF-8 text
    (replacement characters for invalid bytes), dates are ISO 8601, anything else is ``str(value)``.
    """
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


def dumps(value) -> bytes:
    """Compact UTF-8 JSON; non-finite floats become ``null`` (DECISIONS 1)."""
    try:
        return orjson.dumps(value, default=_default, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        # orjson refuses integers beyond 64 bits and some exotic keys: fall back to a cleaned copy.
        return orjson.dumps(_plain(value), default=_default, option=_DUMP_OPTS)


def _plain(value):
    """``value`` with what orjson refuses made plain, everything else written as orjson writes it, so
    the fallback changes only the refused parts (a row's bytes do not depend on whether some other part
    of it needed the fallback)."""
    if isinstance(value, dict):
        return {_plain_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**64:
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _plain_key(key):
    """``key`` itself where orjson writes it (``OPT_NON_STR_KEYS``), else ``str(key)``. Keys are not
    converted here, so ``1`` and ``"1"`` stay two keys, as orjson writes them without the fallback."""
    if isinstance(key, str):
        return key
    try:
        orjson.dumps({key: None}, default=_default, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        return str(key)
    return key


def dumps_reusing(row, key, encoded) -> bytes:
    """``dumps(row)``, writing ``row[key]`` as ``encoded``: what ``dumps`` gave for that value before.

    An export puts the same tools list in every row. Serializing it once per export instead of once
    per row takes about 3 of the 17 µs that ``dumps`` spends on a 20 KB bench row. ``row[key]`` is
    replaced in place (by an ``orjson.Fragment``), so pass a row that is only being written out.
    """
    if encoded is not None and key in row:
        row[key] = orjson.Fragment(encoded)
    return dumps(row)


def dumps_line(value) -> bytes:
    return dumps(value) + b"\n"


def splice(body: bytes, suffix: bytes = b"", tail: bytes = b"") -> bytes:
    """Append keys to a serialized object: ``suffix`` starts with a comma, ``tail`` is ``"k":v`` pairs."""
    if not (suffix or tail):
        return body
    return body[:-1] + suffix + (b"," + tail if tail else b"") + b"}"


def read_jsonl(path):
    """Yield each JSON value of a JSONL file; blank lines are skipped (DECISIONS 7).

    Reads line by line, so memory does not grow with the file. A line that is not valid UTF-8 JSON
    raises ``BadJsonlError`` naming the file and the 1-based line number.
    """
    for _, value in iter_jsonl(path):
        yield value


_BLANK = object()


def parse_line(path, lineno, line, *, starts_file=None):
    """The JSON value of one raw line, or ``_BLANK`` for a blank one.

    A UTF-8 BOM on the file's first line and surrounding whitespace (CRLF included) are dropped;
    anything else that is not one JSON value raises ``BadJsonlError`` naming ``path:lineno``.
    ``starts_file`` says whether the line is the file's first (default: ``lineno == 1``), for a
    reader that knows where the line is but not its number.
    """
    if (lineno == 1 if starts_file is None else starts_file) and line.startswith(_BOM):
        line = line[len(_BOM):]
    line = line.strip()
    if not line:
        return _BLANK
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        value = _with_nonfinite_tokens(line)
        if value is _BLANK:
            raise BadJsonlError(path, lineno, _reason(exc, line)) from None
        return value


def _with_nonfinite_tokens(line):
    """Rows saved by the reference SDK spell NaN and infinities as bare ``NaN``/``Infinity`` tokens.

    Those lines are read (the values become floats, written back as null); anything else strict JSON
    refuses stays refused (``_BLANK`` here means "not readable").
    """
    if b"NaN" not in line and b"Infinity" not in line:
        return _BLANK
    try:
        value = json.loads(line)
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)  # lone surrogates and the like stay refused
    except (ValueError, TypeError, orjson.JSONEncodeError):
        return _BLANK
    return value


def iter_jsonl_lines(path, hasher=None):
    """Yield ``(line_number, raw line bytes, value)`` for every line (``_BLANK`` for blank ones).

    ``hasher`` sees every byte read, so one pass can both parse and hash the file.
    """
    try:
        fh = open(os.path.expanduser(path), "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"no such run file: {path} (check the path, or pass rows instead)") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            if hasher is not None:
                hasher.update(line)
            yield lineno, line, parse_line(path, lineno, line)


def iter_jsonl(path, hasher=None):
    """Like ``read_jsonl`` but yields ``(line_number, value)``."""
    for lineno, _, value in iter_jsonl_lines(path, hasher):
        if value is not _BLANK:
            yield lineno, value


def iter_jsonl_spans(path):
    """Yield ``(byte offset, byte length, value)`` for every non-blank line, so a later pass can read
    it back with one ``os.pread``."""
    offset = 0
    for _, line, value in iter_jsonl_lines(path):
        start, offset = offset, offset + len(line)
        if value is not _BLANK:
            yield start, len(line), value


def _reason(exc, line):
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as uexc:
        return f"invalid UTF-8 at byte {uexc.start}"
    msg = str(exc)
    if len(line) > 200:
        msg += f" (line is {len(line)} bytes)"
    return msg


def sha256_file(path) -> str:
    return sha256_of(path).hexdigest()


def sha256_of(path, chunk=1 << 20):
    """The ``hashlib`` SHA-256 object of a file's bytes, read into one reused buffer."""
    h = hashlib.sha256()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            h.update(view[:n])
    return h


def temp_beside(dest, kind="tmp"):
    """Create a temp file in ``dest``'s directory, named ``.<name>.<pid>.<random>.<kind>.tmp``.

    The pid in the name lets a later run tell a crashed writer's leftovers (``clean_stale_temps``)
    from a live writer's file. Returns (fd, path).
    """
    dest = Path(dest)
    clean_stale_temps(dest)
    return tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}.", suffix=f".{kind}{TMP_SUFFIX}", dir=dest.parent)


def clean_stale_temps(dest) -> list:
    """Delete temp files a killed writer left beside ``dest`` (their pid is gone); returns their names."""
    dest = Path(dest)
    removed = []
    prefix = f".{dest.name}."
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(TMP_SUFFIX)):
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dest.parent / name)
            removed.append(name)
    return removed


def _alive(pid) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

def require_file(path, what, hint):
    """Raise unless ``path`` is a file: a directory gets its own error, as it is not "missing"."""
    if path.is_file():
        return
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a {what}: pass a .jsonl file in it, e.g. "
                                f"{path / '<name>.jsonl'}")
    raise FileNotFoundError(f"no such {what}: {path} ({hint})")


@contextlib.contextmanager
def atomic_file(dest):
    """Open a temporary file beside ``dest`` for binary writing; rename it onto ``dest`` on success.

    On any exception the temporary file is removed and ``dest`` is untouched. The data is fsynced
    before the rename so a crash leaves either the old file or the complete new one.
    """
    dest = Path(dest).expanduser()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_beside(dest, "write")
    except OSError as exc:
        raise WriteFailedError(dest, exc) from exc
    try:
        fh = os.fdopen(fd, "wb", buffering=1 << 20)
        try:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        except OSError as exc:
            raise WriteFailedError(dest, exc) from exc
        finally:
            close_quietly(fh)
        try:
            os.replace(tmp, dest)
        except OSError as exc:
            raise WriteFailedError(dest, exc) from exc
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(dest.parent)


def close_quietly(fh):
    """Close a file that failed, whatever is left in its buffer: its close would flush that buffer and
    fail again (a full disk), and that second error would replace the first."""
    if not fh.closed:
        with contextlib.suppress(OSError):
            fh.close()


def fsync_dir(directory):
    """Make a rename in ``directory`` durable (best effort: some filesystems refuse a directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_jsonl(dest, rows) -> int:
    """Write rows atomically, one compact JSON object a line; returns the number of rows."""
    n = 0
    with atomic_file(dest) as fh:
        for row in rows:
            fh.write(dumps_line(row))
            n += 1
    return n


def write_json(dest, value, *, indent=True) -> None:
    """Write one JSON document atomically (reports, sidecars)."""
    opts = _DUMP_OPTS | (orjson.OPT_INDENT_2 if indent else 0)
    with atomic_file(dest) as fh:
        fh.write(orjson.dumps(value, default=_default, option=opts) + b"\n")


def read_json(path):
    """Read one JSON document; a broken file is a ``BadJsonlError`` naming it (line 1)."""
    data = Path(path).read_bytes()
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadJsonlError(path, 1, str(exc)) from None
