"""The leak gate's shortcut (skip normalizing replies when no needle's longest word occurs) is exact, for
spec 6.2's reading of a quote and for the loose one (reference_match's reading of a repeat)."""

import unicodedata

from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.conversation import conversation
from whileai_pipeline.core.gates import leak_verdict
from whileai_pipeline.core.scoring import normalize_answer  # how reference_match reads a repeat

# Letters whose case mapping is unusual (final sigma, dotted I, ligatures), and assorted whitespace.
# Punctuation and full-width letters exercise the loose reading (NFKC, punctuation to spaces).
# Invisible characters (zero-width space and joiner, word joiner, soft hyphen, BOM, a tag) hide nothing from it.
ALPHABET = st.sampled_from(list("abcXYZ Σσςİıßẞﬁǅ\u00a0\u2003\t\n\r\x1c.,-:")
                           + list("\u200b\u200d\u2060\u00ad\ufeff\U000e0041")
                           + ["ΟΔΟΣ", "İstanbul", "STRASSE", "ａｂｃ", "\u2014", "1.5", "'", "2", "9,", "_"])
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
