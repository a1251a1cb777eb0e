"""Issue 6.5: privileged context never leaves in metadata, and quoting replies are always caught."""

import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import conformance_strategies as S  # noqa: E402

# DECISIONS 8, written out: taken from the library, a key dropped from its list would be dropped from
# this test's rows and from its check alike, and the property would still hold.
BLOCKED_KEYS = frozenset({"privileged", "principle", "hidden_state", "reference", "rubric", "vector"})
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CONVERSATION_KEYS = {"messages", "chosen", "rejected", "prompt", "completion"}

blocked = st.sampled_from(sorted(BLOCKED_KEYS))
secret = st.text(alphabet="abcdefghij klmnop", min_size=12, max_size=40).filter(lambda s: len(" ".join(s.split())) >= 12)
leafy = st.one_of(st.integers(), st.text(max_size=8), secret)
nested = st.recursive(
    leafy,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(blocked, st.sampled_from(["a", "b", "note"])), inner,
                                            max_size=3)),
    max_leaves=8,
)


@st.composite
def rows(draw):
    reference = draw(secret)
    quote = draw(st.booleans())
    final = f"As noted, {reference}." if quote else "I checked the order."
    row = {
        "prompt": draw(st.sampled_from(["Refund A", "Cancel B"])),
        "scenario_id": draw(st.sampled_from(["s1", "s2"])),
        "reward": draw(st.sampled_from([0, 1])),
        "steps": [{"tool": "lookup", "arguments": {"id": 1, "reference": "tool field"},
                   "result": {"hidden_state": draw(nested)}}],
        "final_text": final,
        "privileged": {"reference": reference, "hidden_state": {"world_state": draw(nested)}},
        "lineage": {"source": "grade", "extra": draw(nested), draw(blocked): draw(nested)},
        "reason": draw(st.one_of(st.text(max_size=10), st.dictionaries(blocked, nested, max_size=2))),
        "faults": {"lookup": {"privileged": draw(nested)}},
        "usage": draw(st.dictionaries(st.one_of(blocked, st.just("tokens")), nested, max_size=2)),
    }
    return row, quote


def _metadata_keys(value, out):
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(key)
            _metadata_keys(item, out)
    elif isinstance(value, list):
        for item in value:
            _metadata_keys(item, out)
    return out


def _assert_clean(path):
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        meta = {k: v for k, v in row.items() if k not in CONVERSATION_KEYS}
        if not isinstance(row.get("prompt"), list):  # a prompt text (openai rows, pairs) is metadata
            meta["prompt"] = row.get("prompt")
        leaked = _metadata_keys(meta, set()) & BLOCKED_KEYS
        assert not leaked, f"blocked keys in exported metadata: {leaked}"


@SETTINGS
@given(batch=st.lists(rows(), min_size=1, max_size=6), fmt=st.sampled_from(["openai", "trl"]))
def test_no_blocked_key_in_metadata_and_every_quote_caught(tmp_path, batch, fmt):
    raw = [r for r, _ in batch]
    quoting = sum(q for _, q in batch)
    sft = wai.export_dataset(raw, tmp_path / "sft.jsonl", format=fmt, validate=False)
    assert sft["privileged_leaks"]["n_leaked"] == quoting
    _assert_clean(tmp_path / "sft.jsonl")
    pairs, _ = wai.build_preference_pairs(raw, max_pairs_per_prompt=3)
    if pairs:
        for pair in pairs:
            pair["pairwise"] = {"winner": "chosen", "reasons": [{"privileged": {"reference": "x" * 20}}]}
        dpo = wai.export_preference(pairs, tmp_path / "dpo.jsonl", format=fmt, validate=False)
        chosen_quoting = sum(
            1 for p in pairs if p["chosen"]["final_text"].startswith("As noted,"))
        assert dpo["privileged_leaks"]["n_leaked"] == chosen_quoting
        _assert_clean(tmp_path / "dpo.jsonl")


@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "Sure: the parcel was lost in the Leeds depot fire"}],
    {"text": "Sure: the parcel was lost in the Leeds depot fire"},
    [{"type": "text", "text": "Voilà : le colis a brûlé au dépôt de Leeds"}],
])
def test_an_assistant_turn_made_of_content_parts_is_searched(tmp_path, content):
    """The export writes content parts as their JSON text (which escapes what is not ASCII); the gate
    once searched string content only, so a quote inside parts was published under passing gates."""
    reference = content[0]["text"] if isinstance(content, list) else content["text"]
    reference = reference.split(": ", 1)[1]
    row = {"prompt": "Where is my parcel?", "reward": 1, "final_text": "It is on its way.", "scenario_id": "s",
           "privileged": {"reference": reference},
           "messages": [{"role": "user", "content": "Where is my parcel?"},
                        {"role": "assistant", "content": content}]}
    assert wai.leak_report([row])["n_leaked"] == 1
    for fmt in ("openai", "trl"):
        with pytest.raises(wai.PrivilegedLeakError):
            wai.export_dataset([row], tmp_path / f"{fmt}.jsonl", format=fmt)
    assert not list(tmp_path.iterdir())


# Every export mode (masked, unrolled, TRL completion rows), with blocked keys in carried keys of every shape:
# lists of pairs (which unroll turns into an object), strings, nested lists.
CARRIED = ["lineage", "reason", "faults", "usage", "history", "sampling", "world_state", "user", "token_logprobs"]
carried_values = st.recursive(
    st.one_of(st.integers(), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(sorted(BLOCKED_KEYS) + ["a", "note"]), inner, max_size=3),
                            st.lists(st.tuples(st.sampled_from(sorted(BLOCKED_KEYS) + ["b"]), inner).map(list),
                                     max_size=2)),
    max_leaves=8,
)


@st.composite
def rows_with_carried_keys(draw):
    row = draw(S.trajectory_rows())
    for key in draw(st.lists(st.sampled_from(CARRIED), max_size=3, unique=True)):
        row[key] = draw(carried_values)
    return row


@SETTINGS
@given(batch=st.lists(rows_with_carried_keys(), min_size=1, max_size=5), fmt=st.sampled_from(["openai", "trl"]),
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
