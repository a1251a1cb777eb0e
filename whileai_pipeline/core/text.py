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
    return " ".join(value.split()).lower()
