"""Integers beyond 64 bits read with every digit, where orjson alone would quietly give a float.

Only a line holding a run of 19 digits can hold such an integer: ``has_long_digit_run`` (one line) and
``long_digit_runs`` (a whole block, a word at a time) find those lines, and only they are read again
by Python's json (``exact_numbers``). ``strict_loads`` / ``strict_line`` are the RFC 8259 reads of the
round-trip gate and the validator, built on the same scan. Apart from ``jsonl`` because the chunk
splitter and the validator use the scan without the file reader.
"""

import json
import math
import sys
import threading

import orjson

from .text import unicode_values

# orjson reads an integer beyond 64 bits (a 24-digit id, a factorial a tool computed) as a float, and
# says nothing: 123456789012345678901234 comes back as 1.2345678901234568e+23. Python's json keeps it
# exact. Such a literal is a run of at least 19 digits (2**63 has 19), so a line without one parses
# the same with both, and a line with one is parsed again by json. A run inside a string, or a long
# fraction, only costs that second parse.
LONG_DIGIT_RUN = 19
TOO_DEEP_TO_READ_EXACTLY = ("nested too deep for Python's json, which reads the line again to keep its "
                            "integers of 19 or more digits exact")
_ZEROED_DIGITS = bytes.maketrans(b"0123456789", b"0" * 10)
_SCAN_BYTES = 1 << 20
_HIGH_NIBBLES, _ZEROS, _PAST_NINE, _HIGH_BITS = (int.from_bytes(bytes([b]) * 8, "little")
                                                 for b in (0xF0, 0x30, 0x76, 0x80))  # per byte of a word
_SMALL_LINE = 12 << 10  # below it bytes.translate (0.55 ns a byte) beats numpy's 7 µs a call
_scratch = threading.local()


def exact_numbers(line, value, long_run=None):
    """``value``, what orjson read from ``line`` (bytes-like), or ``line`` read again by Python's json
    when orjson may have turned a big integer into a float. ``long_run``: whether the line holds 19
    digits in a row, when the caller already knows (``lines_with_runs``)."""
    if not (has_long_digit_run(line) if long_run is None else long_run):
        return value
    return json.loads(bytes(line))


def strict_loads(text, *, exact=True):
    """RFC 8259 JSON (DECISIONS 3), as the round-trip gate and the validator read it: ``NaN`` and
    ``Infinity`` tokens, a number only a float beyond a double can hold (``1e400``) and a lone surrogate
    escape are refused (``orjson.JSONDecodeError``); an integer of any size is JSON (RFC 8259 sets no
    limit) and is read with every digit, as Python's json and the reference read it.

    ``exact=False``: a caller that only needs the value's type skips the second read of a text orjson
    accepted (``strict_line``).
    """
    if not exact:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return strict_line(data, exact=exact)[0]


def strict_line(data, *, exact=True, long_run=None):
    """``(value, long_run)``: ``data`` (bytes) read as ``strict_loads`` reads it, and whether it holds a
    run of 19 digits, the only text that can hold an integer beyond 64 bits (``long_run``: the caller
    already knows, from one ``long_digit_runs`` over a whole block of lines).

    orjson answers for everything but such a text: it refuses an integer beyond a double and reads one
    beyond 64 bits as a float, so that text is read again by Python's json.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        if not (has_long_digit_run(data) if long_run is None else long_run):
            raise
        try:
            return _strict_json(data), True
        except (ValueError, RecursionError):
            pass
        raise
    if not exact:
        return value, None
    if not (has_long_digit_run(data) if long_run is None else long_run):
        return value, False
    try:
        return json.loads(bytes(data)), True
    except RecursionError:  # nested deeper than Python's json reads: orjson's reading, floats and all
        return value, True


def too_many_digits(data):
    """Why Python's json refuses ``data`` (bytes) when an integer in it has more digits than Python
    converts (``sys.get_int_max_str_digits()``, 4,300 by default), or None for any other refusal. For
    an error message only: the line is read once more."""
    limit = sys.get_int_max_str_digits()
    if not limit:
        return None

    first_over = []

    def parse_int(text):  # the whole line is read: the limit is named only when nothing else refuses it
        n = len(text.lstrip("-"))
        if n > limit and not first_over:
            first_over.append(n)
        return 0

    try:
        json.loads(bytes(data), parse_int=parse_int, parse_float=lambda _: 0.0, parse_constant=lambda _: 0.0)
    except (ValueError, RecursionError):
        return None
    if not first_over:
        return None
    return (f"an integer of {first_over[0]} digits: Python converts at most {limit} "
            "(sys.get_int_max_str_digits()), and integers beyond 64 bits are read by Python's json to keep "
            "every digit; write such a number as a string in the run, or lift the limit for the whole "
            "process with the environment variable PYTHONINTMAXSTRDIGITS=0")


def _no_constant(token):
    raise ValueError(f"{token} is not JSON")


def _finite_float(literal):
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{literal[:20]} is beyond a double")
    return value


def _strict_json(data):
    """Python's json, refusing what orjson refuses but big integers (``strict_loads``)."""
    value = json.loads(bytes(data), parse_constant=_no_constant, parse_float=_finite_float)
    if b"\\u" in data and unicode_values(value) != value:  # a lone surrogate escape: not UTF-8 text
        raise ValueError("lone surrogate")
    return value


def has_long_digit_run(data) -> bool:
    """Whether ``data`` (bytes-like) holds ``LONG_DIGIT_RUN`` ASCII digits in a row."""
    if len(data) < _SMALL_LINE:
        return bytes(data).translate(_ZEROED_DIGITS).find(b"0" * LONG_DIGIT_RUN) >= 0
    return bool(long_digit_runs(data, 0, len(data)))


def long_digit_runs(buffer, start, end) -> list:
    """Offsets of the runs of ``LONG_DIGIT_RUN`` or more ASCII digits in ``buffer[start:end]``, in order.

    A run of 15 or more digits fills at least one 8-byte word counted from ``start``. numpy finds
    those words (``_digit_words``), and only their neighbourhoods are read byte by byte.
    """
    runs = []
    pos = reach = start  # the bytes before ``reach`` belong to a run already measured
    while pos < end:
        n = min(_SCAN_BYTES, end - pos)  # a multiple of 8 but at the end: words stay counted from start
        for word in _digit_words(buffer, pos, n // 8):
            first = last = pos + 8 * word
            if first < reach:
                continue
            while first > start and 48 <= buffer[first - 1] <= 57:
                first -= 1
            while last < end and 48 <= buffer[last] <= 57:
                last += 1
            if last - first >= LONG_DIGIT_RUN:
                runs.append(first)
            reach = last
        pos += n
    return runs


def _digit_words(buffer, pos, count) -> list:
    """Indexes of the 8-byte words at ``pos``, ``pos + 8``, ... (``count`` of them) made of ASCII digits.

    Two passes over the words: those whose bytes all have the high nibble 3 (digits and ``:;<=>?``),
    then, on those few, the exact test (each byte xor 0x30 is at most 9). Measured over 8 MB chunks
    of a bench run: 0.09-0.12 ns a byte (about 2 µs a 20 KB row), against 0.13 for a byte-wise numpy
    test and 0.55 for ``bytes.translate``.
    """
    import numpy as np  # noqa: PLC0415 (loaded when a big buffer needs it)

    if count <= 0:
        return []
    scratch = getattr(_scratch, "words", None)
    if scratch is None or len(scratch[0]) < _SCAN_BYTES // 8:  # one per thread, reused: fresh memory page-faults
        constants = tuple(np.uint64(c) for c in (_HIGH_NIBBLES, _ZEROS, _PAST_NINE, _HIGH_BITS))
        scratch = _scratch.words = (np.empty(_SCAN_BYTES // 8, np.uint64), np.empty(_SCAN_BYTES // 8, np.bool_),
                                    constants)
    high_nibbles, zeros, past_nine, high_bits = scratch[2]
    words = np.frombuffer(buffer, np.uint64, count, pos)
    nibbles, same = scratch[0][:count], scratch[1][:count]
    np.bitwise_and(words, high_nibbles, out=nibbles)
    np.equal(nibbles, zeros, out=same)
    maybe = same.nonzero()[0]
    if not maybe.size:
        return []
    low = words[maybe] ^ zeros  # a digit becomes 0..9, anything else 10 or more
    return maybe[((low | (low + past_nine)) & high_bits) == 0].tolist()


READ_BLOCK = 8 << 20


def lines_with_runs(fh):
    """``(raw line, whether it holds 19 digits in a row)`` for every line of a binary file, each line kept
    with its newline, as iterating the file gives them. The digit runs are found once per 8 MB block
    (``long_digit_runs``, about 0.1 ns a byte), not once per line (``has_long_digit_run``: 7-13 µs a
    20 KB line, nearly all of it the cost of a call); blocks are not copied together, only the line
    that straddles two of them is."""
    rest = b""
    while block := fh.read(READ_BLOCK):
        start = 0
        if rest:
            nl = block.find(b"\n")
            if nl < 0:
                rest += block
                continue
            line = rest + block[:nl + 1]
            yield line, has_long_digit_run(line)
            start = nl + 1
        cut = max(block.rfind(b"\n") + 1, start)
        yield from split_with_runs(block, start, cut)
        rest = block[cut:]
    if rest:
        yield rest, has_long_digit_run(rest)


def split_with_runs(data, start, end):
    """``lines_with_runs`` of the lines in ``data[start:end]`` (each kept with its newline)."""
    runs = iter(long_digit_runs(data, start, end))
    next_run = next(runs, end)
    find = data.find
    pos = start
    while pos < end:
        nl = find(b"\n", pos, end)
        stop = end if nl < 0 else nl + 1
        yield data[pos:stop], next_run < stop
        while next_run < stop:
            next_run = next(runs, end)
        pos = stop
