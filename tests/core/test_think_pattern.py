"""``wire._THINK`` (think blocks, written with its lazy body unrolled for speed) removes exactly what
the plain pattern ``<think>.*?</think>\\s*`` (IGNORECASE, DOTALL) removes, on every input."""

import re

from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.wire import _THINK, strip_think_blocks

PLAIN = re.compile(r"<think>.*?</think>\s*", re.IGNORECASE | re.DOTALL)

# tags in every case, broken tags, characters that fold to letters of the tags (Kelvin sign, dotless i,
# dotted capital I), whitespace of several kinds, and plain text
PIECES = st.sampled_from([
    "<think>", "</think>", "<THINK>", "</Think>", "<thinK>", "</THINK>", "<", ">", "/", "</", "<t", "</thin",
    "<think", "think>", "<\u212athink>", "<thin\u212a>", "</th\u0131nk>", "<th\u0130nk>", "<<think>>", "<//think>",
    " ", "\n", "\t", "\u00a0", "\u3000", "a", "é", "x y", "<b>", "<>",
])


def test_plain_cases():
    for text in ("<think>a</think> b", "x<THINK>a\nb</Think>\n\n y", "<think>a<b</think>c", "<think>a",
                 "a</think>", "<think>a</think><think>b</think>c", "<think><think>a</think>b</think>",
                 "<thin\u212a>a</thin\u212a>b", "<think>a< /think>b</think>c"):
        assert _THINK.sub("", text) == PLAIN.sub("", text), text
    assert strip_think_blocks("<think>plan</think>\n Answer ") == "Answer"


@settings(max_examples=2000, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_same_matches_as_the_plain_pattern(text):
    assert _THINK.sub("", text) == PLAIN.sub("", text)
    assert [m.span() for m in _THINK.finditer(text)] == [m.span() for m in PLAIN.finditer(text)]
