"""DECISIONS 8 in every export mode: no row written (SFT or DPO, either format, masked, unrolled, TRL
completion rows) holds a blocked key anywhere outside its conversation.

tests/reliability/test_no_leak_property.py checks the default modes; here blocked keys also sit in carried
keys of every shape (lists of pairs, which unroll turns into an object, strings, nested lists) and the
export modes vary.
"""

import json
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import conformance_strategies as S  # noqa: E402

# DECISIONS 8, written out (not taken from the library, whose list the test would then share)
BLOCKED = frozenset({"privileged", "principle", "hidden_state", "reference", "rubric", "vector"})
CONVERSATION = ("messages", "prompt", "completion", "chosen", "rejected")  # never edited by the scrub
CARRIED = ["lineage", "reason", "faults", "usage", "history", "sampling", "world_state", "user", "token_logprobs"]

nested = st.recursive(
    st.one_of(st.integers(), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(sorted(BLOCKED) + ["a", "note"]), inner, max_size=3),
                            st.lists(st.tuples(st.sampled_from(sorted(BLOCKED) + ["b"]), inner).map(list), max_size=2)),
    max_leaves=8,
)


@st.composite
def rows(draw):
    row = draw(S.trajectory_rows())
    for key in draw(st.lists(st.sampled_from(CARRIED), max_size=3, unique=True)):
        row[key] = draw(nested)
    return row


def _keys(value, out):
    if isinstance(value, dict):
        out.update(value)
        for item in value.values():
            _keys(item, out)
    elif isinstance(value, list):
        for item in value:
            _keys(item, out)
    return out


def _assert_clean(path):
    for line in path.read_bytes().splitlines():
        row = json.loads(line)
        metadata = {k: v for k, v in row.items() if k not in CONVERSATION}
        if not isinstance(row.get("prompt"), list):  # a prompt text (openai rows, pairs) is metadata
            metadata["prompt"] = row.get("prompt")
        assert not _keys(metadata, set()) & BLOCKED, line


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(rows(), min_size=1, max_size=5), fmt=st.sampled_from(["openai", "trl"]),
       mask_mode=st.sampled_from(["assistant", "final"]), unroll=st.booleans())
def test_no_blocked_key_leaves_in_any_mode(tmp_path_factory, batch, fmt, mask_mode, unroll):
    tmp = tmp_path_factory.mktemp("scrub")
    try:
        wai.export_dataset(batch, tmp / "sft.jsonl", format=fmt, mask_mode=mask_mode, unroll=unroll, validate=False)
    except wai.SchemaInvalidError:
        pass
    else:
        _assert_clean(tmp / "sft.jsonl")
    for i, row in enumerate(batch):  # every row a candidate: one prompt, rewards that differ
        row.update(prompt="Refund order A", reward=i % 2, judge_status="ok")
    pairs, _ = wai.build_preference_pairs(batch, max_pairs_per_prompt=3)
    for pair in pairs:
        pair["pairwise"] = {"winner": "chosen", "reasons": [{"privileged": {"reference": "a hidden reference"}}]}
    try:
        report = wai.export_preference(pairs, tmp / "dpo.jsonl", format=fmt, validate=False, system_prompt="SYS")
    except ValueError as exc:  # no pairs at all: nothing to check
        assert str(exc).startswith("no_preference_pairs:")
        return
    if report["pairs"]:
        _assert_clean(tmp / "dpo.jsonl")
