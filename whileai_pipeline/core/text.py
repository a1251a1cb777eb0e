"""The few text conversions the spec names: text(x), PYJSON(x), sha1_12, whitespace normalization; and
``unicode_text``, which makes any str UTF-8 (the JSON writer and both JSON readers need it)."""

import functools
import hashlib
import json
import re
import unicodedata


def text(value) -> str:
    """The spec's text(x): Python ``str``."""
    return value if isinstance(value, str) else str(value)


def pyjson(value) -> str:
    """The spec's PYJSON: ``json.dumps`` defaults, unknown types as ``str``.

    This is what a tool result looks like to the model at run time, so it must match the reference
    byte for byte (DECISIONS 10). Files and arguments use compact orjson instead.
    """
    try:
        return _encode(value)
    except (TypeError, RecursionError):
        # TypeError: a type JSON has no form for somewhere inside, written as str() here. RecursionError:
        # a value that contains itself, which json.dumps reports as such (or one nested that deep).
        return json.dumps(value, default=str)


def _stdlib_encoder():
    """``json.dumps`` with its defaults, minus the setup it repeats on every call and its check for
    values that contain themselves (a tool result parsed from JSON never does; ``pyjson`` asks
    ``json.dumps`` again on a RecursionError). Same bytes; about 1.3 of 9.7 µs a bench tool result."""
    try:
        encode = json.encoder.c_make_encoder(
            None, None, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)

        def encode_prebuilt(value):
            return "".join(encode(value, 0))

        if encode_prebuilt(_PROBE) == json.dumps(_PROBE):
            return encode_prebuilt
    except TypeError:  # no _json accelerator (c_make_encoder is None), or its signature changed
        pass
    return json.JSONEncoder().encode


_PROBE = {"a": [1, 2.5, -0.0, 1e-05, None, True, "\u00e9\U0001f600\x7f\n"], 1: float("nan"), None: {}, "b": []}


_encode = _stdlib_encoder()


def sha1_12(value: str) -> str:
    return hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def normalize(value: str) -> str:
    """Collapse whitespace runs to one space, trim, lowercase (leak needles, pair grouping)."""
    return lower(" ".join(value.split()))


_WS = re.compile(r"\s+")


def normalize_answer(value) -> str:
    """NFKC, case-folded, punctuation to spaces, whitespace collapsed: how ``reference_match`` compares an
    answer with its reference, and how the leak gate reads a reply that repeats a privileged text. A combining
    mark is part of its word, not punctuation (``combining_marks``)."""
    return answer_words(unicodedata.normalize("NFKC", str(value)).casefold())


def answer_words(folded: str) -> str:
    """The last steps of ``normalize_answer``, for a text already NFKC-normalized and then case-folded: doing
    those twice is not doing them once ("ß" and a combining acute fold to "ss" and the acute, which NFKC
    then joins into "ś")."""
    return _WS.sub(" ", _punctuation().sub(" ", folded)).strip()


@functools.cache
def _punctuation():
    # punctuation (neither a word character, whitespace nor a combining mark), but for a decimal point or
    # thousands comma between digits: "2.5" must not hold the word "5"
    return re.compile(rf"(?:(?!(?<=\d)[.,]\d)[^\w\s{combining_marks()}])+")


@functools.cache
def combining_marks() -> str:
    """Every combining mark (Unicode category M) this Python knows, as the inside of a regex character class.

    Python's ``\\w`` leaves them out, so ``[^\\w\\s]`` took them for punctuation: the vowel signs of Devanagari
    or Thai, Arabic and Hebrew points, the dot that case folding leaves on "İ" became spaces, "किताब" read as
    the three words "क त ब", and a reply with the same consonants matched a reference it does not say.
    Planes 0, 1 and 14 hold them all (a test checks this Python's whole range); reading those takes 20 ms,
    once, at the first use.
    """
    category = unicodedata.category
    marks = [c for block in (range(0x20000), range(0xE0000, 0xF0000)) for c in block if category(chr(c))[0] == "M"]
    ranges = []
    for c in marks:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


def has_combining_mark(value: str) -> bool:
    return not value.isascii() and _mark().search(value) is not None


@functools.cache
def _mark():
    return re.compile(f"[{combining_marks()}]")


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


def unicode_text(value: str) -> str:
    """``value`` with each lone surrogate replaced by U+FFFD, as ``errors="replace"`` does; two
    surrogates in a row that make a pair become the one character they encode."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def unicode_values(value):
    """``value`` (what JSON reads to) with every string, keys included, made ``unicode_text``: two readers
    use it, so it is public here."""
    if isinstance(value, str):
        return unicode_text(value)
    if isinstance(value, dict):
        return {unicode_text(k): unicode_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unicode_values(v) for v in value]
    return value
