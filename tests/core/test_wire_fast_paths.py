"""The wire helpers' fast paths give what their definitions give: ``lenient_loads`` (orjson first,
``json.loads`` where orjson would differ) decodes every text as ``json.loads`` does, errors included,
and ``has_nonfinite`` (common leaves skipped by type) finds every NaN and infinity."""

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.wire import has_nonfinite, lenient_loads

LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2 ** 70), 2 ** 70), st.floats(),
                 st.text(), st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=2))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                     max_leaves=10)
NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?\Z")


def _same(a, b):
    """Equal values of equal types all the way down (1 and 1.0 differ; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.isnan(a) and math.isnan(b) or a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _outcome(loads, text):
    try:
        return "ok", loads(text)
    except ValueError as exc:
        return "error", type(exc)
    except RecursionError:
        return "error", RecursionError


@settings(max_examples=1500, deadline=None)
@given(st.one_of(VALUE.map(json.dumps), VALUE.map(lambda v: json.dumps(v, indent=1, ensure_ascii=False)),
                 NUMBER, st.text(max_size=30), VALUE.map(json.dumps).map(lambda t: t[:-1])))
def test_lenient_loads_equals_json_loads(text):
    ours, theirs = _outcome(lenient_loads, text), _outcome(json.loads, text)
    assert ours[0] == theirs[0]
    if ours[0] == "ok":
        assert _same(ours[1], theirs[1]), (text, ours, theirs)
    else:
        assert ours[1] is theirs[1]


@pytest.mark.parametrize("text", ["18446744073709551616", "-9223372036854775809", '{"id": 123456789012345678901}',
                                  "NaN", "[Infinity, -Infinity]", "1e400", '"\\ud800"'])
def test_where_orjson_alone_would_differ(text):
    assert _same(lenient_loads(text), json.loads(text))


def _nonfinite_by_definition(value):
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_nonfinite_by_definition(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_nonfinite_by_definition(v) for v in value)
    return False


class _Float(float):
    pass


NESTED = st.recursive(
    st.one_of(LEAF, st.floats().map(_Float), st.sampled_from([math.nan, math.inf, -math.inf])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=1000, deadline=None)
@given(NESTED)
def test_has_nonfinite_equals_its_definition(value):
    assert has_nonfinite(value) == _nonfinite_by_definition(value)
