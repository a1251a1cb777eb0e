"""KeyIndex (the compact 64-bit key -> group index map) gives what a dict gives."""

from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.groups import KeyIndex

# keys that share their low bits (the table's slot) collide on purpose; 0 and 2**64-1 are keys too
KEYS = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 40).map(lambda k: k << 40), st.sampled_from([0, 2**64 - 1]))


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(KEYS, max_size=3000))
def test_dense_indexes_in_first_seen_order(keys):
    index, expected = KeyIndex(capacity=4), {}
    for key in keys:
        assert index.index(key) == expected.setdefault(key, len(expected))
    assert index.n == len(expected)
