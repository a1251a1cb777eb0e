"""The two data gates (tool-call round-trip, privileged leak) and the metadata scrub.

Both gates are built as accumulators (``add`` one row at a time, ``report()`` at the end) so the
exporters can run them inside their single streaming pass; the list functions wrap them.
"""

import functools
import re
import unicodedata

import orjson

from .arguments import ROWS_AS_TEXT, check_rows, trajectories_of
from .errors import BadRowError, ExportError
from .conversation import conversation
from .text import answer_words, has_combining_mark, lower, normalize, normalize_answer, text
from .wire import arguments_are_structured, content_text, strip_think_blocks

ENCODINGS = {"openai": "json_string", "trl": "dict"}
CHECKED_FOR = {
    "json_string": "arguments parse back to a dict from their JSON string (OpenAI wire). "
    "A chat-template trainer needs dicts: export format='trl' for that.",
    "dict": "arguments are dicts, as HF chat templates render them (| tojson).",
}
ROUNDTRIP_ROWS_CAP = 20
LEAK_MIN_QUOTE_CHARS = 12
LEAK_ROWS_CAP = 20
LEAK_NEEDLE_CAP = 80
LEAK_FIELDS = ("reference", "principle", "hidden_state")
# how a leak summary that checked nothing ends for rows with a scenario_id (spec 6.3): the SDK's guess at why
SCRUBBED_BY_THE_EXPORT = (". These came through the export (rows(), save(), push()), which scrubs privileged at any "
                          "depth -- pass data.trajectories, which keeps it")
BLOCKED_KEYS = frozenset({"privileged", "principle", "hidden_state", "reference", "rubric", "vector"})
FORMATS = ("openai", "trl")


def check_format(format):
    if format not in FORMATS:
        raise ExportError(f"format must be one of {FORMATS!r}, got {format!r}: pass format='openai' (chat-completions "
                          "rows) or format='trl' (what TRL loads)")


# ---------------------------------------------------------------- scrub

def scrub(value):
    """Remove blocked keys at any depth (DECISIONS 8). Untouched containers keep their identity."""
    kind = type(value)
    if kind is dict or isinstance(value, dict):
        out = None
        if not BLOCKED_KEYS.isdisjoint(value):
            out = {k: v for k, v in value.items() if k not in BLOCKED_KEYS}
        for key, item in (out if out is not None else value).items():
            if type(item) in SCALAR_TYPES:
                continue
            new = scrub(item)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        new_items = None
        for i, item in enumerate(value):
            if type(item) in SCALAR_TYPES:
                continue
            new = scrub(item)
            if new is not item:
                if new_items is None:
                    new_items = list(value)
                new_items[i] = new
        if new_items is None:
            return value
        # a tuple stays a tuple, a namedtuple a namedtuple (``_make`` takes the items as one iterable); another
        # subclass, whose constructor may take them any way, becomes a plain tuple, which is written the same way
        if isinstance(value, tuple):
            make = getattr(kind, "_make", None)
            try:
                return make(new_items) if make is not None and kind is not tuple else tuple(new_items)
            except TypeError:  # a ``_make`` of another kind
                return tuple(new_items)
        return new_items
    return value


SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


# ---------------------------------------------------------------- round-trip gate

def count_tool_calls(messages, encoding, objects=None, known=(), declared=None):
    """(tool calls, calls whose arguments do not parse back to an object, the name of the first call to a tool
    ``declared`` does not hold or None) in these messages.

    ``objects``: the ``wire.ObjectTexts`` whose Fragments (objects by construction) these messages hold.
    ``known``: argument texts ``to_wire`` wrote from an object (``ObjectTexts.texts``), which read back as
    one: an ``openai`` row's are not parsed again (about 4 µs of a 20 KB bench row).
    ``declared``: the tool names the messages are written with (``wire.declared_tool_names``), None for no
    check. A model trained on a call to another tool learns to call a tool it is not given. The names are
    read in this loop over every call, as a second loop over a bench row's messages costs 4 µs.
    """
    checked = invalid = 0
    undeclared = None
    fragments = {id(fn) for fn, _ in objects.placed} if objects is not None else ()
    if encoding != "json_string":
        known = ()  # a text is never an object where arguments must be one
    for message in messages or ():
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or ():
            checked += 1
            fn = call.get("function") if isinstance(call, dict) else None
            if declared is not None and undeclared is None and isinstance(fn, dict):
                name = fn.get("name")
                if type(name) is str and name not in declared:
                    undeclared = name
            if fragments and id(fn) in fragments:
                continue
            arguments = fn.get("arguments") if isinstance(fn, dict) else None
            if known and type(arguments) is str and arguments in known:
                continue
            if not arguments_are_structured(arguments, encoding):
                invalid += 1
    return checked, invalid, undeclared


class RoundtripGate:
    """Counts tool calls whose arguments do not parse back to an object for the chosen format."""

    def __init__(self, format="openai"):
        check_format(format)
        self.encoding = ENCODINGS[format]
        self.checked = 0
        self.invalid = 0
        self.rows = []

    def add(self, index, messages):
        self.record(index, *count_tool_calls(messages, self.encoding)[:2])

    def record(self, index, checked, invalid):
        self.checked += checked
        self.invalid += invalid
        if invalid and len(self.rows) < ROUNDTRIP_ROWS_CAP:
            self.rows.append(index)

    def report(self):
        return {
            "checked": self.checked,
            "invalid": self.invalid,
            "rows": list(self.rows),
            "encoding": self.encoding,
            "checked_for": CHECKED_FOR[self.encoding],
        }


def row_conversation_messages(row):
    """The messages a gate reads from an exported row: ``messages``, or ``prompt`` + ``completion``."""
    if "messages" in row:
        return row.get("messages")
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, list) or isinstance(completion, list):
        return list(prompt or []) + list(completion or [])
    return None


def tool_call_roundtrip(rows, *, format="openai"):
    """Spec 4.2: do the tool-call arguments of these rows parse back to objects?"""
    gate = RoundtripGate(format)
    check_rows(rows, "rows must be a list of row dicts", ROWS_AS_TEXT, error=TypeError)
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            problem = _uncountable(row)
            if problem:
                raise BadRowError.at(None, i, f"{problem}: fix that row (tool_call_roundtrip reads rows as "
                                              "training_rows() and export_dataset() write them)")
            gate.add(i, row_conversation_messages(row))
    return gate.report()


def _uncountable(row):
    """Why the round-trip gate cannot loop over this row's messages or calls, or None: a number (or
    another non-iterable) where a list belongs fails as a bare "'int' object is not iterable"."""
    keys = ("messages",) if "messages" in row else ("prompt", "completion")
    lists = [(key, row.get(key)) for key in keys]
    if "messages" not in row and not any(isinstance(value, list) for _, value in lists):
        return None  # no conversation to read
    for key, value in lists:
        if value and not hasattr(value, "__iter__"):
            return f"{key} must be a list of message objects, got {type(value).__name__} {value!r:.40}"
    for key, value in lists:
        for j, message in enumerate(value or ()):
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if calls and not hasattr(calls, "__iter__"):
                return (f"{key}[{j}].tool_calls must be a list of call objects, got {type(calls).__name__} "
                        f"{calls!r:.40}")
    return None


# ---------------------------------------------------------------- leak gate

def _needle_set(row, min_len):
    """(needles, the distinct longest words among them, the needles read loosely, the distinct longest words
    among those, those of them that are no needle's longest word, the needles seen), built once per privileged
    block. A needle is (field path, normalized text,
    its longest word, its loose readings: its ``normalize_answer`` text, and that of it without its invisible
    characters when it holds any, each left out when shorter than ``min_len``). A needle read loosely is (field
    path, normalized text, one loose reading); a needle seen is (field path, normalized text, that without its
    invisible characters, its longest word), left out when shorter than ``min_len``."""
    privileged = row.get("privileged")
    if not isinstance(privileged, dict):
        return _NO_NEEDLES
    try:  # the rollouts of one scenario share their privileged block: build its needles once
        key = (min_len, orjson.dumps(privileged, option=orjson.OPT_NON_STR_KEYS))
    except (orjson.JSONEncodeError, TypeError):
        return _with_words(_needles(privileged, min_len), min_len)
    found = _NEEDLE_CACHE.get(key)
    if found is None:
        found = _with_words(_needles(privileged, min_len), min_len)
        if len(_NEEDLE_CACHE) >= _NEEDLE_CACHE_SIZE:
            _NEEDLE_CACHE.pop(next(iter(_NEEDLE_CACHE)))
        _NEEDLE_CACHE[key] = found
    return found


def _with_words(needles, min_len):
    words = tuple(dict.fromkeys(word for _, _, word, _ in needles))
    loose = tuple((path, needle, said) for path, needle, _, readings in needles for said in readings)
    loose_words = tuple(dict.fromkeys(max(said.split(" "), key=len) for _, _, said in loose))
    seen = []
    for path, needle, word, _ in needles:
        plain = _visible(needle)
        if plain is not needle:
            plain = normalize(plain)
            word = max(plain.split(" "), key=len)
        if len(plain) >= min_len:
            seen.append((path, needle, plain, word))
    others = tuple(word for word in loose_words if word not in words)
    return needles, words, loose, loose_words, others, tuple(seen)


_NO_NEEDLES = ([], (), (), (), (), ())


_NEEDLE_CACHE = {}
_NEEDLE_CACHE_SIZE = 256


def _needles(privileged, min_len):
    needles = []

    def walk(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}")
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, path)
        elif isinstance(value, str):
            needle = normalize(value)
            if len(needle) >= min_len:
                # plain ASCII words read the same loosely (normalize_answer costs 5 µs a needle)
                if needle.isascii() and needle.replace(" ", "").isalnum():
                    readings = (needle,)
                else:  # as the scorer reads it, and without its invisible characters (``_quote_in``)
                    seen = _visible(value)
                    readings = (normalize_answer(value),)
                    if seen is not value:
                        readings = tuple(dict.fromkeys(readings + (normalize_answer(seen),)))
                needles.append((path, needle, max(needle.split(" "), key=len),
                                tuple(words for words in readings if len(words) >= min_len)))

    for field in LEAK_FIELDS:
        value = privileged.get(field)
        if value:
            walk(value, field)
    return needles


def _reply_parts(row, rebuilt):
    """The texts the leak gate searches: the final text, then what every assistant turn says."""
    parts = [text(row.get("final_text") or "")]
    messages = row.get("messages")
    # a tuple is what the export writes too (``to_wire`` loops over it): rebuilding the conversation from
    # prompt and steps instead would search replies other than the ones written
    if not (isinstance(messages, (list, tuple)) and messages):
        messages = rebuilt if rebuilt is not None else conversation(row, tool_text=False)
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif content is not None:
                # Content parts (a list or an object) are exported as their JSON text (wire.content_text),
                # which escapes what is not ASCII: search that text and the strings inside it.
                parts.append(content_text(content))
                parts.extend(_strings_in(content))
    return parts


def _readings(lowered, joined):
    """``joined`` (whose ``lower`` is ``lowered``) as ``normalize_answer`` reads it before turning punctuation into
    spaces (NFKC, then case-folded); that without its invisible characters (``_visible``) so read; and
    ``_visible(lowered)``: each word of ``normalize_answer(joined)`` is a piece of the first, each of
    ``normalize_answer(_visible(joined))`` of the second. The characters are taken out before folding, as a reader
    sees the text: one between two that NFKC joins ("e", a zero-width space, a combining acute; Hangul letters)
    no longer keeps them apart. Text other than Latin-1 is folded as it was written, not lowered: "İ" lowers to "i"
    and a combining dot, which NFKC puts after a cedilla that follows, where case folding leaves it before.
    Most replies are all three already and are not copied: ASCII, and Latin-1 text without a character NFKC or
    case folding changes (a Latin-1 text is NFKC but for those: it holds no combining mark) or a soft hyphen."""
    if lowered.isascii():
        return lowered, lowered, lowered
    try:
        lowered.encode("latin-1")
    except UnicodeEncodeError:
        folded, shown = _folded(joined), _visible(lowered)
        return folded, (folded if shown is lowered else _folded(_visible(joined))), shown
    folded = lowered
    if any(c in lowered for c in _LATIN1_FOLDED):  # a search for each of 16 characters: 0.5 µs a bench row's replies
        folded = unicodedata.normalize("NFKC", lowered).casefold()
    if "\u00ad" not in lowered:
        return folded, folded, lowered
    # the soft hyphen is the one Latin-1 format character; no Latin-1 character NFKC changes joins one after it
    return folded, folded.replace("\u00ad", ""), lowered.replace("\u00ad", "")


def _folded(value):
    """NFKC, then case-folded, as ``normalize_answer`` reads a text."""
    return (value if unicodedata.is_normalized("NFKC", value) else unicodedata.normalize("NFKC", value)).casefold()


# the lowercase Latin-1 characters NFKC and case folding change ("\u00a0", "\u00b5", "\u00df", "\u00bd"...):
# ``lowered`` holds no uppercase one (``text.lower``)
_LATIN1_FOLDED = "".join(c for c in map(chr, range(0x80, 0x100))
                         if c.lower() == c and unicodedata.normalize("NFKC", c).casefold() != c)

# The format characters (category Cf: zero-width space and joiners, word joiner, soft hyphen, byte-order mark,
# direction marks, tag characters...). A reader does not see them and NFKC keeps them, so one put inside a word
# of a recited reference would hide the quote from the loose reading: it reads text without them too, replies
# and needles alike. Unicode 14's (Python 3.11) and U+13439-U+1343F, which Unicode 15 added (Python 3.12 on;
# none since, up to Unicode 18): building the class from unicodedata at import would cost 0.2 s.
# (tests/core/test_leak_invisible.py checks the set against unicodedata.)
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _visible(value: str) -> str:
    """``value`` without its invisible characters (``_INVISIBLE``); ``value`` itself when it holds none.
    Searching a reply's 4,500 CJK or Cyrillic characters with the class takes 65 µs: a format character is
    never printable, and ``str.isprintable`` tells a text without any in about 15 µs."""
    if value.isascii() or all(line.isprintable() for line in value.split("\n")):
        return value
    return _INVISIBLE.sub("", value)


def _says(folded, said):
    """Whether ``normalize_answer(folded)`` holds the words ``said`` (``normalize_answer`` text) as a run of
    whole words. ``str.find`` skips to each occurrence of the first word, and a pattern is tried there only
    (normalizing the whole text first, or searching it with the pattern, costs about 200 µs of a bench row's
    replies); the pattern is compiled only for a text that holds that word. A try may run as far as the
    words go, so a text that repeats the word over and over (a reply stuck in a loop) against words that
    repeat it too would cost their product: after ``SAYS_TRIES`` tries the text is normalized once and
    searched in linear time."""
    first = said.split(" ", 1)[0]
    i = folded.find(first)
    if i == -1:
        return False
    pattern = _loose_pattern(said)
    for _ in range(SAYS_TRIES):
        if pattern.match(folded, i):
            return True
        i = folded.find(first, i + 1)
        if i == -1:
            return False
    return f" {said} " in f" {answer_words(folded)} "


SAYS_TRIES = 64  # one try per place the first word occurs; past this many, one linear reading costs less


# what ``normalize_answer`` turns into one space: whitespace and punctuation, but not a point or comma between
# digits (``text._punctuation``). Unlike there, a combining mark is a gap here (``\w`` leaves it out): ``_reader``
# reads a text that holds one by its words instead
_LOOSE_GAP = r"(?:\s|(?!(?<=\d)[.,]\d)[^\w\s])+"


@functools.lru_cache(maxsize=1024)
def _loose_pattern(said):
    """The pattern that matches the words ``said`` (``normalize_answer`` text) where they are a run of whole
    words of ``normalize_answer`` of a text, in the text NFKC-normalized and case-folded (``_readings``)."""
    words = said.split(" ")
    left = r"(?<!\w)" + (r"(?<!\d[.,])" if words[0][0].isdigit() else "")
    right = r"(?!\w)" + (r"(?![.,]\d)" if words[-1][-1].isdigit() else "")
    return re.compile(left + _LOOSE_GAP.join(map(re.escape, words)) + right)


def _lowered(parts):
    return lower(_joined(parts))


def _joined(parts):
    return "\n".join(p for p in parts if p)


def _strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings_in(item)


def leak_verdict(row, min_len=LEAK_MIN_QUOTE_CHARS, rebuilt=None, strip_think=False):
    """None when the row carries nothing to check, else (field, needle) of its first quote or False.

    ``strip_think``: the export removes ``<think>`` blocks from the replies (spec 3.6). The raw replies
    are searched first (spec 6.2: a quote inside a block the export strips still counts); when they hold
    none, the replies as the export writes them are searched too, where a block inside a quote is gone
    and its two halves meet in the text the model is trained on.
    """
    needle_set = _needle_set(row, min_len)
    if not needle_set[0]:
        return None
    parts = _reply_parts(row, rebuilt)
    found = _quote_in(parts, needle_set)
    if found or not strip_think:
        return found
    stripped = [strip_think_blocks(p) if "<" in p else p for p in parts]
    if stripped == parts:
        return False
    return _quote_in(stripped, needle_set)


def _quote_in(parts, needle_set):
    """(field, needle) of the first needle the replies ``parts`` quote, or False.

    A quote is first what spec 6.2 searches: the needle in the normalized replies, then in those replies
    without their invisible characters (``_INVISIBLE``), which a reader does not see: in Thai or Chinese,
    whose words run on without spaces, zero-width spaces put inside a quote would hide it from the search for
    whole words below (a Thai text may break its words with them). Failing that, the needle's words in the
    replies' words, both read as ``reference_match`` reads a repeat (``normalize_answer``: NFKC, case-folded,
    punctuation to spaces), and both read so once their invisible characters are taken out, each needle's
    reading in each of the replies': a reply that says the reference with other punctuation, in full-width
    letters or as "SS" for "ß" recites it all the same, and the scorer pays for it; so does one with a
    zero-width space inside a word, which a reader does not see. The scorer's reading is kept too: where a
    zero-width space is the only thing between two words (a Thai text's word break, or one put between "code"
    and "ALPHA-7731"), it is a break, and taking it out joins the words.

    Normalizing the replies (splitting them into words) is most of the cost, so it is skipped when
    no needle's longest word occurs in the lowercased replies. That shortcut is exact: a needle's
    words hold no whitespace, so inside the normalized replies each lies within one of their words,
    and those are pieces of the lowercased replies (lowercasing twice changes nothing). The loose reading
    takes the same shortcut over the replies NFKC-normalized and case-folded (``_readings``), which
    ``normalize_answer`` changes only by turning punctuation into spaces.
    """
    needles, words, loose, loose_words, other_words, seen = needle_set
    # The words hold no whitespace either, so each lies within one part (lowercasing does not reach across
    # the newline between two): a final text that repeats a reply (a conversation ends on it) is searched
    # once, not twice (28% of a bench row's text; 2.5 µs of a 20 KB row).
    repeated = parts[0] and parts[0] in parts[1:]
    joined = _joined(parts[1:] if repeated else parts)
    lowered = lower(joined)
    hit = any(word in lowered for word in words)
    if hit:
        haystack = normalize(_lowered(parts) if repeated else lowered)
        for field, needle, _, _ in needles:
            if needle in haystack:
                return field, needle
    folded, visible, shown = _readings(lowered, joined)
    if visible is not folded:  # the same search in the replies as a reader sees them, without invisible characters
        # (with the same shortcut)
        if any(word in shown for _, _, _, word in seen):
            haystack = normalize(_visible(_lowered(parts)) if repeated else shown)
            for field, needle, plain, _ in seen:
                if plain in haystack:
                    return field, needle
    if not loose:
        return False
    # replies that folding leaves as they are and that hold no needle's longest word can hold only the
    # longest loose words that are no needle's longest word
    probes = other_words if folded is lowered and visible is folded and not hit else loose_words
    if not any(word in folded for word in probes) and (visible is folded or not any(w in visible for w in probes)):
        return False
    if repeated:  # the whole text, for words that run from the final text into the first reply
        joined = _joined(parts)
        lowered = lower(joined)
        folded, visible, _ = _readings(lowered, joined)
    says = _reader(folded, folded is not lowered)
    says_visible = _reader(visible, visible is not lowered) if visible is not folded else None
    for field, needle, said in loose:
        # whole words, as reference_match reads a repeat, or once the invisible characters are out
        if says(said) or (says_visible is not None and says_visible(said)):
            return field, needle
    return False


def _reader(folded, may_hold_marks):
    """``said -> _says(folded, said)``. The patterns ``_says`` tries read a combining mark as punctuation,
    as ``\\w`` does; ``normalize_answer`` keeps it in its word. A text that holds one (``may_hold_marks``: it
    is not ``lowered`` Latin-1, which holds none) is normalized once and its words searched instead."""
    if may_hold_marks and has_combining_mark(folded):
        words = f" {answer_words(folded)} "
        return lambda said: f" {said} " in words
    return functools.partial(_says, folded)


def leak_outcome(row, min_len=LEAK_MIN_QUOTE_CHARS, rebuilt=None, strip_think=False):
    """What ``LeakGate.record`` needs from a row: (verdict, has scenario_id key, scenario_id, rollout_index)."""
    verdict = leak_verdict(row, min_len, rebuilt, strip_think)
    if verdict:
        return verdict, "scenario_id" in row, row.get("scenario_id"), row.get("rollout_index")
    return verdict, "scenario_id" in row, None, None


class LeakGate:
    """Counts rows whose assistant turns quote their own privileged context (spec 6)."""

    def __init__(self, min_len=LEAK_MIN_QUOTE_CHARS):
        self.min_len = min_len
        self.n_rows = 0
        self.n_checked = 0
        self.n_leaked = 0
        self.leaked = []
        self.uncheckable_exported = False

    def add(self, row, rebuilt=None):
        # the replies with their think blocks stripped too, as the exports write them by default: a row an
        # export refuses is one leak_report names (the refusal says to drop the rows it names)
        if isinstance(row, dict):
            self.record(leak_outcome(row, self.min_len, rebuilt, strip_think=True))

    def record(self, outcome):
        """Count one row from its ``leak_outcome``."""
        verdict, has_scenario_key, scenario_id, rollout_index = outcome
        self.n_rows += 1
        if verdict is None:
            self.uncheckable_exported |= has_scenario_key
            return
        self.n_checked += 1
        if verdict:
            self.n_leaked += 1
            if len(self.leaked) < LEAK_ROWS_CAP:
                field, needle = verdict
                self.leaked.append({
                    "scenario_id": scenario_id,
                    "rollout_index": rollout_index,
                    "field": field,
                    "needle": needle[:LEAK_NEEDLE_CAP],
                })

    @property
    def rate(self):
        return round(self.n_leaked / self.n_checked, 4) if self.n_checked else 0.0

    def summary(self):
        if not self.n_checked:
            text_ = (f"checked 0 of {self.n_rows} rows: none carried privileged context, "
                     "so this says nothing about leaks")
            if self.uncheckable_exported:
                text_ += SCRUBBED_BY_THE_EXPORT
            return text_
        if not self.n_leaked:
            return f"checked {self.n_checked} of {self.n_rows} rows: no reply quoted its privileged context"
        return (f"checked {self.n_checked} of {self.n_rows} rows: {self.n_leaked} quoted "
                f"privileged context ({self.rate:.0%})")

    def report(self):
        return {
            "n_rows": self.n_rows,
            "n_checked": self.n_checked,
            "n_leaked": self.n_leaked,
            "rate": self.rate,
            "checked": self.n_checked > 0,
            "leaked": list(self.leaked),
            "summary": self.summary(),
        }

    def export_report(self):
        """The subset an export report carries (spec 5.5)."""
        full = self.report()
        return {k: full[k] for k in ("checked", "n_checked", "n_leaked", "leaked", "summary")}


def leak_report(rows, *, min_len=LEAK_MIN_QUOTE_CHARS):
    """Spec 6: which rows quote their own privileged block in an assistant turn."""
    rows = trajectories_of(rows)
    check_rows(rows, "leak_report takes rows", ROWS_AS_TEXT, error=TypeError)  # not a false "checked 0 of 0"
    gate = LeakGate(min_len)
    for row in rows:
        gate.add(row)
    return gate.report()
