"""``pyjson`` (a prebuilt stdlib C encoder without the circular check) gives ``json.dumps(value,
default=str)`` exactly, errors included: the text a tool result shows the model (DECISIONS 10)."""

import datetime
import json

import pytest
from hypothesis import given, settings, strategies as st

from whileai_pipeline.core import text
from whileai_pipeline.core.text import pyjson

LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2 ** 80), 2 ** 80), st.floats(),
                 st.text(), st.text(st.characters(min_codepoint=0x7F, max_codepoint=0x10FFFF), max_size=4),
                 st.sampled_from([datetime.date(2026, 11, 29), {1, 2}, b"raw", 1.5j, (1, "t")]))
KEY = st.one_of(st.text(max_size=5), st.integers(), st.floats(), st.booleans(), st.none())
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                                                     st.dictionaries(KEY, inner, max_size=4)),
                     max_leaves=15)


def _outcome(fn, value):
    try:
        return "ok", fn(value)
    except (TypeError, ValueError) as exc:
        return "error", type(exc)


@settings(max_examples=2000, deadline=None)
@given(VALUE)
def test_equals_json_dumps_with_str_fallback(value):
    assert _outcome(pyjson, value) == _outcome(lambda v: json.dumps(v, default=str), value)


def test_the_prebuilt_encoder_is_the_one_in_use():
    """Else the test above would only show that the fallback equals itself."""
    assert text._encode.__name__ == "encode_prebuilt"


def test_a_value_that_contains_itself_gets_json_dumps_error():
    loop = {"a": 1}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        pyjson(loop)
    items = [1]
    items.append(items)
    with pytest.raises(ValueError, match="Circular reference"):
        pyjson({"items": items})


def test_without_the_c_encoder_or_with_a_changed_signature_it_is_the_json_encoder(monkeypatch):
    """A Python without _json, or a later one whose C encoder takes other arguments, gets the plain
    ``JSONEncoder().encode``: slower, same bytes."""
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encode = text._stdlib_encoder()
    assert encode.__name__ == "encode" and encode(text._PROBE) == json.dumps(text._PROBE)

    def other_signature(*args):
        raise TypeError(f"make_encoder() takes 10 arguments ({len(args)} given)")

    monkeypatch.setattr(json.encoder, "c_make_encoder", other_signature)
    assert text._stdlib_encoder().__name__ == "encode"
