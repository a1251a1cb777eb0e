"""The few text conversions the spec names: text(x), PYJSON(x), sha1_12, whitespace normalization."""

import hashlib
import json


def text(value) -> str:
    """The spec's text(x): Python ``str``."""
    return value if isinstance(value, str) else str(value)


def pyjson(value) -> str:
    """The spec's PYJSON: ``json.dumps`` defaults, unknown types as ``str``.

    This is what a tool result looks like to the model at run time, so it must match the reference
    byte for byte (DECISIONS 10). Files and arguments use compact orjson instead.
    """
    try:
        return _ENCODE(value)
    except TypeError:  # a type JSON has no form for somewhere inside: fall back to str() for it
        return json.dumps(value, default=str)


_ENCODE = json.JSONEncoder().encode


def sha1_12(value: str) -> str:
    return hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def normalize(value: str) -> str:
    """Collapse whitespace runs to one space, trim, lowercase (leak needles, pair grouping)."""
    return lower(" ".join(value.split()))


def lower(value: str) -> str:
    """``value.lower()``, several times faster for Latin-1 text that is not ASCII.

    ``str.lower`` looks every non-ASCII character up in the Unicode tables (about 3 ns each here:
    8 µs for the replies of a typical row). Every character below U+0100 lowers to one character
    below U+0100 and none of them is context-dependent (that is only the Greek capital sigma), so
    for such text a byte table gives the same string (checked for all 256 in the tests).
    """
    if value.isascii():
        return value.lower()
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value.lower()
    return raw.translate(_LATIN1_LOWER).decode("latin-1")


_LATIN1_LOWER = bytes(ord(chr(c).lower()) for c in range(256))
