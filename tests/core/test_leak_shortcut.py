"""The leak gate's shortcut (skip normalizing replies when no needle's longest word occurs) is exact, for
spec 6.2's reading of a quote and for the loose one (reference_match's reading of a repeat)."""

import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.conversation import conversation
from whileai_pipeline.core.gates import leak_verdict
from whileai_pipeline.core.scoring import normalize_answer  # how reference_match reads a repeat

# Letters whose case mapping is unusual (final sigma, dotted I, ligatures), and assorted whitespace.
# Punctuation and full-width letters exercise the loose reading (NFKC, punctuation to spaces).
# Invisible characters (zero-width space and joiner, word joiner, soft hyphen, BOM, a tag) hide nothing from it.
# Combining marks (Devanagari vowel signs, Arabic points, an acute accent, the diaeresis NFKC makes of "¨") are
# part of their words; Hangul letters that NFKC joins into syllables.
ALPHABET = st.sampled_from(list("abcXYZ Σσςİıßẞﬁǅ\u00a0\u2003\t\n\r\x1c.,-:")
                           + list("\u200b\u200d\u2060\u00ad\ufeff\U000e0041")
                           + ["ΟΔΟΣ", "İstanbul", "STRASSE", "ａｂｃ", "\u2014", "1.5", "'", "2", "9,", "_"]
                           + ["क", "त", "\u093f", "\u093e", "\u094b", "किताब", "\u064e", "e\u0301", "\u00a8"]
                           + ["\u0327", "\u0323", "\u1100", "\u1161", "가"])  # a cedilla and a dot below after "İ"; jamo
TEXT = st.lists(ALPHABET, max_size=40).map("".join)


def normalize(value: str) -> str:
    """Spec 6.2's normalize, written out here: whitespace runs to one space, trimmed, lowercased."""
    return " ".join(value.split()).lower()


def replies(row) -> str:
    """Spec 6.2's haystack before normalizing, built here rather than with the gate's own helper (the
    expected verdict must not come from the code under test): final_text, then the string content of
    every assistant message of ``conversation(row)`` (opener included), empty parts dropped, joined with
    newlines."""
    parts = [row.get("final_text") or ""]
    parts += [m["content"] for m in conversation(row) if m.get("role") == "assistant" and isinstance(m["content"], str)]
    return "\n".join(p for p in parts if p)


def visible(value: str) -> str:
    """``value`` without its format characters (Unicode category Cf), which the loose reading does not see."""
    return "".join(c for c in value if unicodedata.category(c) != "Cf")


def _slow_verdict(row, min_len=12):
    """The definition: every privileged string's normalized form, searched in the normalized replies, then so
    searched without invisible characters; then each one's words among the replies' words, each read as the
    scorer reads it and without its invisible characters."""
    needles = []
    for field in ("reference", "principle", "hidden_state"):
        value = row["privileged"].get(field)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and len(normalize(item)) >= min_len:
                needles.append((field, normalize(item), {normalize_answer(item), normalize_answer(visible(item))}))
    if not needles:
        return None
    haystack = normalize(replies(row))  # normalizes every reply, no shortcut
    for field, needle, _ in needles:
        if needle in haystack:
            return field, needle
    if visible(replies(row)) != replies(row):  # then the same without invisible characters
        haystack = normalize(visible(replies(row)))
        for field, needle, _ in needles:
            if len(normalize(visible(needle))) >= min_len and normalize(visible(needle)) in haystack:
                return field, needle
    # then the needle's words among the replies' words
    said = [f" {normalize_answer(replies(row))} ", f" {normalize_answer(visible(replies(row)))} "]
    for field, needle, readings in needles:
        if any(len(words) >= min_len and f" {words} " in text for words in readings for text in said):
            return field, needle
    return False


@settings(max_examples=400, deadline=None)
@given(replies=st.lists(TEXT, min_size=1, max_size=4), final=TEXT, secrets=st.lists(TEXT, max_size=3),
       quote=st.data())
def test_shortcut_gives_the_same_verdict(replies, final, secrets, quote):
    # some needles are cut out of the replies themselves (with their case and spacing changed), so
    # leaks happen as well as near misses
    joined = " ".join(replies)
    if joined:
        a = quote.draw(st.integers(0, len(joined)))
        b = quote.draw(st.integers(a, len(joined)))
        secrets = secrets + [joined[a:b].upper(), "  " + joined[a:b].replace(" ", "\u2003 ") + "\n"]
    row = {"prompt": "q", "steps": [{"text": r} for r in replies], "final_text": final,
           "privileged": {"reference": secrets[0] if secrets else "", "principle": secrets[1:]}}
    assert leak_verdict(row) == _slow_verdict(row)


@settings(max_examples=400, deadline=None)
@given(replies=st.lists(TEXT, min_size=1, max_size=4), secrets=st.lists(TEXT, max_size=3), quote=st.data())
def test_shortcut_gives_the_same_verdict_when_the_final_repeats_a_reply(replies, secrets, quote):
    # the gate searches a final text that repeats a reply once, for the words; the verdict must not change,
    # needles that run from the final text into the first reply included
    final = quote.draw(st.sampled_from(replies))
    joined = " ".join([final, *replies])
    a = quote.draw(st.integers(0, len(joined)))
    b = quote.draw(st.integers(a, len(joined)))
    secrets = secrets + [joined[a:b].upper(), "  " + joined[a:b].replace(" ", "\u2003 ") + "\n"]
    row = {"prompt": "q", "steps": [{"text": r} for r in replies], "final_text": final,
           "privileged": {"reference": secrets[0], "principle": secrets[1:]}}
    assert leak_verdict(row) == _slow_verdict(row)


@settings(max_examples=400, deadline=None)
@given(replies=st.lists(TEXT, min_size=1, max_size=4), final=TEXT, quote=st.data(), put_in=st.booleans())
def test_invisible_characters_hide_no_quote(replies, final, quote, put_in):
    # the only needle is a piece of the replies with their invisible characters taken out, or with zero-width
    # spaces put in between its characters: the loose reading must see the quote all the same
    joined = " ".join(replies)
    a = quote.draw(st.integers(0, len(joined)))
    b = quote.draw(st.integers(a, len(joined)))
    secret = "\u200b".join(joined[a:b]) if put_in else visible(joined[a:b])
    row = {"prompt": "q", "steps": [{"text": r} for r in replies], "final_text": final,
           "privileged": {"reference": secret}}
    assert leak_verdict(row) == _slow_verdict(row)


@settings(max_examples=300, deadline=None)
@given(replies=st.lists(TEXT, min_size=1, max_size=4), final=TEXT, secrets=st.lists(TEXT, max_size=3),
       quote=st.data())
def test_the_linear_reading_of_a_text_that_repeats_a_word_gives_the_same_verdict(replies, final, secrets, quote):
    """With no tries of the word-by-word search left (as for a reply stuck repeating one word), the words are
    read from the whole text at once; the verdict is the same."""
    from whileai_pipeline.core import gates

    joined = " ".join(replies)
    a = quote.draw(st.integers(0, len(joined)))
    b = quote.draw(st.integers(a, len(joined)))
    secrets = secrets + [joined[a:b].upper(), "  " + joined[a:b].replace(" ", "\u2003 ") + "\n"]
    row = {"prompt": "q", "steps": [{"text": r} for r in replies], "final_text": final,
           "privileged": {"reference": secrets[0], "principle": secrets[1:]}}
    tries = gates.SAYS_TRIES
    gates.SAYS_TRIES = quote.draw(st.integers(0, 2))
    try:
        assert leak_verdict(row) == _slow_verdict(row)
    finally:
        gates.SAYS_TRIES = tries


def test_a_reply_stuck_repeating_a_word_is_searched_a_bounded_number_of_times(monkeypatch):
    """Each try of the word-by-word search may run the length of the needle: a reply repeating one word 20,000
    times, against a needle repeating it 1,000 times, took 1,000 times 20,000 steps (3 s a row; 15 s at 50,000
    words), where the reference is linear. Counted, not timed: the tries stop at SAYS_TRIES."""
    from whileai_pipeline.core import gates

    class Counting:
        def __init__(self, pattern):
            self.pattern, self.tries = pattern, 0

        def match(self, text, at):
            self.tries += 1
            return self.pattern.match(text, at)

    made = []
    real = gates._loose_pattern
    monkeypatch.setattr(gates, "_loose_pattern", lambda said: made.append(Counting(real(said))) or made[-1])
    needle = " ".join(["sorry"] * 1000) + " ok"
    for reply, leaked in ((" ".join(["sorry"] * 20000), False), (" ".join(["sorry"] * 20000) + " ok", True)):
        row = {"prompt": "q", "steps": [{"text": reply}], "final_text": "done", "privileged": {"reference": needle}}
        assert bool(leak_verdict(row)) is leaked
        assert bool(_slow_verdict(row)) is leaked
    assert made and all(counting.tries <= gates.SAYS_TRIES for counting in made), [c.tries for c in made]


@pytest.mark.parametrize("reply, reference", [
    # folding twice is not folding once: "ß" and a combining acute fold to "ss" and the acute, NFKC joins "ś"
    ("Maß\u0301, und Ziel der Dinge", "maß\u0301 und ziel der dinge"),
    ("İ\u0327stanbul, bir şehir", "i\u0307\u0327stanbul bir şehir"),
    ("İ\u0327stanbul, bir şehir", "İ\u0327stanbul bir şehir"),
    # an invisible character between two that NFKC joins: taken out before folding, as a reader sees the text
    ("cafe\u200b\u0301 au lait noir", "CAFÉ AU LAIT NOIR"),
    ("xx \u1100\u200b\u1161" + "가" * 12 + " yy", "가" * 13 + " yy"),
])
def test_marks_and_invisible_characters_give_the_definition_s_verdict(reply, reference):
    row = {"prompt": "q", "steps": [{"text": reply}], "final_text": reply, "privileged": {"reference": reference}}
    assert leak_verdict(row) == _slow_verdict(row)
