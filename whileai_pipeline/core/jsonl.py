"""JSONL on disk: the one JSON writer (``dumps``), streaming reads with file:line errors, hashing.

Big integers come back with every digit (``exact_numbers``, which also has the strict reads);
``write_jsonl`` and ``write_json`` write through ``atomic.atomic_file``, so a reader (or a crash)
never sees half a file.
"""

import dataclasses
import datetime
import enum
import errno
import hashlib
import json
import math
import os
from pathlib import Path

import orjson

from .arguments import check_path, check_rows
from .atomic import atomic_file
from .errors import BadJsonlError, ExportError
from .exact_numbers import TOO_DEEP_TO_READ_EXACTLY, exact_numbers, lines_with_runs, too_many_digits
from .text import unicode_values, unicode_text

_BOM = b"\xef\xbb\xbf"
_DUMP_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def jsonable(value):
    """The one conversion for values JSON has no type for (DECISIONS 1).

    Sets become sorted lists (insertion order when unsortable), bytes become UTF-8 text
    (replacement characters for invalid bytes), dates are ISO 8601, a tuple subclass (a namedtuple) is a
    list and a float subclass a number, as Python's json writes them; anything else is ``str(value)``.
    Enums, dataclasses and numpy values, which orjson writes itself, get what orjson gives them (their
    value, their fields, numbers and lists) where Python's json writes instead (NaN in arguments).
    """
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    # subclasses orjson does not write itself: a namedtuple is the list it holds, a float subclass its number
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def dumps(value, option=_DUMP_OPTS) -> bytes:
    """Compact UTF-8 JSON; non-finite floats become ``null`` (DECISIONS 1)."""
    try:
        return orjson.dumps(value, default=jsonable, option=option)
    except orjson.JSONEncodeError:
        # orjson refuses integers beyond 64 bits, text that is not Unicode and some exotic keys: fall
        # back to a copy with those parts made writable.
        try:
            plain = _plain(value)
            return orjson.dumps(plain, default=jsonable, option=option)
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (255 levels): Python's json,
            # which cannot write a Fragment but writes a big integer with all its digits itself
            return _stdlib_dumps(value, option)
        except RecursionError:
            raise _too_deep() from None


def _stdlib_dumps(value, option):
    indent = 2 if option & orjson.OPT_INDENT_2 else None
    separators = None if indent else (",", ":")
    try:
        plain = _plain(value, big_ints=False)  # json cannot write the Fragments orjson gets for big integers
        return json.dumps(plain, default=jsonable, ensure_ascii=False, allow_nan=False, indent=indent,
                          separators=separators).encode()
    except RecursionError:
        raise _too_deep() from None


def _too_deep():
    return ExportError("unwritable_value: a value is nested deeper than JSON can be written here (about "
                       "1,000 levels); flatten it (e.g. store it as a string) before exporting")


def _plain(value, big_ints=True):
    """``value`` with what orjson refuses made writable, everything else written as orjson writes it,
    so the fallback changes only the refused parts (a row's bytes do not depend on whether some other
    part of it needed the fallback).

    An integer beyond 64 bits is written with all its digits, as Python's json writes it. A string
    holding a lone surrogate (half of an emoji cut by a token cap, a byte kept by ``surrogateescape``)
    cannot be UTF-8: each lone half becomes U+FFFD (``unicode_text``).
    """
    if isinstance(value, dict):
        return {_plain_key(k): _plain(v, big_ints) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, big_ints) for v in value]
    if isinstance(value, str):
        return unicode_text(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**64:
        return orjson.Fragment(int.__repr__(value)) if big_ints else int(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _plain_key(key):
    """``key`` itself where orjson writes it (``OPT_NON_STR_KEYS``), else ``str(key)``. Keys are not
    converted here, so ``1`` and ``"1"`` stay two keys, as orjson writes them without the fallback."""
    if isinstance(key, str):
        return unicode_text(key)
    try:
        orjson.dumps({key: None}, default=jsonable, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        return str(key)
    return key


def dumps_reusing(row, key, encoded, undo=None) -> bytes:
    """``dumps(row)``, writing ``row[key]`` as ``encoded``: what ``dumps`` gave for that value before.

    An export puts the same tools list in every row. Serializing it once per export instead of once
    per row takes about 3 of the 17 µs that ``dumps`` spends on a 20 KB bench row. ``row[key]`` is
    replaced in place (by an ``orjson.Fragment``), so pass a row that is only being written out.
    ``undo``: puts back the other Fragments the caller placed in ``row`` (``dumps_fragments``).
    """
    if encoded is None or key not in row:
        return dumps(row) if undo is None else dumps_fragments(row, undo)
    original = row[key]
    row[key] = orjson.Fragment(encoded)

    def put_back():
        row[key] = original
        if undo is not None:
            undo()

    return dumps_fragments(row, put_back)


def dumps_fragments(value, undo) -> bytes:
    """``dumps(value)`` for a value holding ``orjson.Fragment`` parts; ``undo()`` puts back the values
    they stand for. A value orjson refuses falls back to code that cannot read a Fragment (Python's
    json, past orjson's 255 levels): that rare value is written with its own parts instead.
    """
    try:
        return orjson.dumps(value, default=jsonable, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        undo()
        return dumps(value)


def dumps_line(value) -> bytes:
    return dumps(value) + b"\n"


def splice(body: bytes, suffix: bytes = b"", tail: bytes = b"") -> bytes:
    """Append keys to a serialized object: ``suffix`` starts with a comma, ``tail`` is ``"k":v`` pairs."""
    if not (suffix or tail):
        return body
    return body[:-1] + suffix + (b"," + tail if tail else b"") + b"}"


def read_jsonl(path):
    """An iterator of each JSON value of a JSONL file; blank lines are skipped (DECISIONS 7).

    Reads line by line, so memory does not grow with the file. A line that is not valid UTF-8 JSON
    raises ``BadJsonlError`` naming the file and the 1-based line number. A ``path`` that is no path is
    refused here, at the call, not at the first ``next()``.
    """
    path = check_path(path, "read_jsonl takes the path of a .jsonl file", "e.g. read_jsonl('runs/my_run.jsonl'); "
                      "rows already in memory need no reading")
    return (value for _, value in iter_jsonl(path))


_BLANK = object()


def parse_line(path, lineno, line, *, starts_file=None, long_run=None):
    """The JSON value of one raw line, or ``_BLANK`` for a blank one.

    A UTF-8 BOM on the file's first line and surrounding whitespace (CRLF included) are dropped;
    anything else that is not one JSON value raises ``BadJsonlError`` naming ``path:lineno``.
    ``starts_file`` says whether the line is the file's first (default: ``lineno == 1``), for a
    reader that knows where the line is but not its number. ``long_run``: whether the line holds 19
    digits in a row, when the reader already knows (``exact_numbers.lines_with_runs``).
    """
    if (lineno == 1 if starts_file is None else starts_file) and line.startswith(_BOM):
        line = line[len(_BOM):]
    line = line.strip()
    if not line:
        return _BLANK
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        stripped = _unicode_stripped(line)
        if stripped is not None and not stripped:
            return _BLANK  # only Unicode whitespace (U+3000, U+00A0, U+0085, ...): blank, as str.strip() sees it
        value = lenient_loads_line(line if stripped is None else stripped)
        if value is _BLANK:
            raise BadJsonlError(path, lineno, _reason(exc, line)) from None
        return value
    try:
        return exact_numbers(line, value, long_run)
    except RecursionError:
        raise BadJsonlError(path, lineno, TOO_DEEP_TO_READ_EXACTLY) from None


def _unicode_stripped(line):
    """``line`` with surrounding whitespace removed as Python's ``str.strip`` does (spec 5.8: the
    reference strips each line of its text-mode read, so Unicode whitespace such as U+00A0, U+3000,
    U+0085 or U+2028 around the JSON is dropped too, and a line of only that is blank); ``None`` when
    the line is not UTF-8 (its error is reported as it stands)."""
    try:
        return line.decode("utf-8").strip().encode("utf-8")
    except UnicodeError:
        return None


def lenient_loads_line(line):
    """A line orjson refuses that Python's json reads, as the reference SDK does: bare ``NaN`` and
    ``Infinity`` tokens, numbers beyond a double (``1e400``), lone surrogate escapes (``"\\ud83d"``,
    what an ``ensure_ascii`` writer makes of half an emoji). The infinities are written back as null
    (DECISIONS 1), a lone surrogate as U+FFFD (``unicode_text``). Anything else stays refused, invalid
    UTF-8 included: ``_BLANK`` here means "not readable".
    """
    try:
        value = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return _BLANK
    return unicode_values(value) if b"\\u" in line else value


def iter_jsonl_lines(path, hasher=None):
    """Yield ``(line_number, raw line bytes, value)`` for every line (``_BLANK`` for blank ones).

    ``hasher`` sees every byte read, so one pass can both parse and hash the file.
    """
    for lineno, line, value, _ in _iter_lines(path, hasher):
        yield lineno, line, value


def iter_jsonl_runs(path, hasher=None):
    """Like ``iter_jsonl`` but yields ``(line_number, value, long_run)``: whether the line holds 19 digits
    in a row, the only line that can hold an integer beyond 64 bits (found once per block, no extra cost)."""
    for lineno, _, value, long_run in _iter_lines(path, hasher):
        if value is not _BLANK:
            yield lineno, value, long_run


def _iter_lines(path, hasher):
    try:
        fh = open(os.path.expanduser(path), "rb")
    except OSError:  # missing, or a directory: say which
        require_file(Path(path).expanduser(), "run file", "check the path, or pass rows instead")
        raise
    with fh:
        for lineno, (line, long_run) in enumerate(lines_with_runs(fh), 1):
            if hasher is not None:
                hasher.update(line)
            yield lineno, line, parse_line(path, lineno, line, long_run=long_run), long_run


def iter_jsonl(path, hasher=None):
    """Like ``read_jsonl`` but yields ``(line_number, value)``."""
    for lineno, _, value in iter_jsonl_lines(path, hasher):
        if value is not _BLANK:
            yield lineno, value


def iter_jsonl_spans(path):
    """Yield ``(byte offset, byte length, value, long_run)`` for every non-blank line, so a later pass can
    read it back with one ``os.pread`` (``long_run``: as ``iter_jsonl_runs`` gives it)."""
    offset = 0
    for _, line, value, long_run in _iter_lines(path, None):
        start, offset = offset, offset + len(line)
        if value is not _BLANK:
            yield start, len(line), value, long_run


COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip -k"), (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"),
              (b"BZh", "bzip2", "bunzip2 -k"), (b"\xfd7zXZ\x00", "xz", "unxz -k"))


def compressed_kind(head: bytes):
    """(kind, the command that decompresses it) when ``head`` (a file's first bytes) is a compressor's
    magic number, else None: such a file read as JSONL fails on "invalid UTF-8" at its first line."""
    for magic, kind, tool in COMPRESSED:
        if head.startswith(magic):
            return kind, tool
    return None


def compressed_file(path):
    """``compressed_kind`` of the file at ``path`` (None for one that cannot be read): what the commands say
    of a compressed run or training file instead of reading it line by line."""
    try:
        with open(path, "rb") as fh:
            return compressed_kind(fh.read(6))
    except OSError:
        return None


def _reason(exc, line):
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as uexc:
        packed = compressed_kind(line)
        if packed:
            return (f"invalid UTF-8 at byte {uexc.start}: the file is {packed[0]}-compressed, not JSONL; "
                    f"decompress it first ({packed[1]} FILE) and read the .jsonl it gives")
        return f"invalid UTF-8 at byte {uexc.start}"
    msg = too_many_digits(line) or str(exc)
    if len(line) > 200:
        msg += f" (line is {len(line)} bytes)"
    if line.strip() in (b"[", b"{"):
        msg += (f"; a line of only {line.strip().decode()!r} opens a JSON document written over several lines "
                "(json.dump with indent?): JSONL holds each row on one line (write_jsonl(path, rows) writes it)")
    if b"\r" in line.rstrip(b"\r\n"):
        msg += ("; the line holds a bare CR (old Mac line endings?): JSONL lines end with LF, convert the file "
                "with tr '\\r' '\\n' < in.jsonl > out.jsonl")
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


def require_file(path, what, hint):
    """Raise unless ``path`` is a file: a directory gets its own error, as it is not "missing"; a name
    longer than the filesystem takes (``stat`` raises "File name too long"), or one that starts like
    JSON, is most likely the rows' text passed as a path, and the error says so."""
    try:
        if path.is_file():
            return
        is_dir = path.is_dir()
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        text = "; it looks like JSON text, not a path" if looks_like_json_text(path) else ""
        raise OSError(errno.ENAMETOOLONG, f"no such {what}: got a name of {len(str(path)):,} characters "
                      f"{str(path)!r:.60}, longer than a file name can be{text} ({hint})") from None
    if is_dir:
        raise IsADirectoryError(f"{path} is a directory, not a {what}: pass a .jsonl file in it, e.g. "
                                f"{path / '<name>.jsonl'}")
    if path.exists():  # a pipe (``<(zcat run.gz)``), a device, a socket: there, but not a file to copy
        raise FileNotFoundError(f"{path} is not a regular file (a pipe, device or socket), not a {what}: write it "
                                f"to a file first ({hint})")
    if looks_like_json_text(path):
        raise FileNotFoundError(f"no such {what}: got {str(path)!r:.60}, which looks like JSON text, not a path "
                                f"({hint})")
    raise FileNotFoundError(f"no such {what}: {path} ({hint})")


def looks_like_json_text(name) -> bool:
    """A file name that starts like a JSON object or array and holds a double quote (every key of a row
    has them; a file name like ``[2026-01] night.jsonl`` does not): most likely rows passed as their text."""
    name = str(name)
    return name.lstrip()[:1] in ("{", "[") and '"' in name


def write_jsonl(dest, rows) -> int:
    """Write rows atomically, one compact JSON object a line; returns the number of rows."""
    dest = check_path(dest, "write_jsonl(dest, rows) takes the file to write first",
                      "e.g. write_jsonl('rows.jsonl', rows)")
    check_rows(rows, "write_jsonl(dest, rows) takes rows", "pass a list of row dicts", error=TypeError)
    n = 0
    with atomic_file(dest) as fh:
        for row in rows:
            fh.write(dumps_line(row))
            n += 1
    return n


def json_document(value, *, indent=True) -> bytes:
    """The bytes ``write_json`` writes for ``value``, so a caller can tell a file that already holds them."""
    return dumps(value, _DUMP_OPTS | (orjson.OPT_INDENT_2 if indent else 0)) + b"\n"


def write_json(dest, value, *, indent=True) -> None:
    """Write one JSON document atomically (reports, sidecars)."""
    with atomic_file(dest) as fh:
        fh.write(json_document(value, indent=indent))


def read_json(path):
    """Read one JSON document; a broken file is a ``BadJsonlError`` naming it (line 1)."""
    data = Path(path).read_bytes()
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        return exact_numbers(data, orjson.loads(data))
    except orjson.JSONDecodeError as exc:
        try:  # orjson says "surrogates not allowed ... (char 0)" for a byte that is not UTF-8: say which
            data.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise BadJsonlError(path, 1, f"invalid UTF-8 at byte {uexc.start}") from None
        raise BadJsonlError(path, 1, str(exc)) from None
