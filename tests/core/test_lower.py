"""``text.lower`` (the leak gate's fast lowering) equals ``str.lower`` on every input."""

from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.text import lower, normalize

# Latin-1 capitals and oddities (µ lowers to itself, ÿ's capital is outside Latin-1), ASCII, and
# characters beyond Latin-1 whose case mapping is unusual (final sigma, dotted I, ligatures)
ALPHABET = st.one_of(
    st.characters(max_codepoint=0xFF),
    st.sampled_from(list("ÀÉÖØÞßµÿ×÷Σσςİıẞﬁǅ\u0100\u2003") + ["ΟΔΟΣ", "İstanbul"]),
)


def test_every_latin1_character_lowers_like_str_lower():
    every = "".join(map(chr, range(256)))
    assert lower(every) == every.lower()
    assert lower(every) != every  # the table does lower: A-Z and À-Þ change
    for c in range(256):
        assert lower(chr(c) + "É") == (chr(c) + "É").lower()


@settings(max_examples=500, deadline=None)
@given(st.lists(ALPHABET, max_size=60).map("".join))
def test_lower_equals_str_lower(value):
    assert lower(value) == value.lower()
    assert normalize(value) == " ".join(value.split()).lower()
