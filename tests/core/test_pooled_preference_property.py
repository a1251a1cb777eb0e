"""``export_preference`` over worker processes equals one process on any pairs file: same bytes and
report, or the same error. Entries mix good pairs, ties, lines that are not objects, pairs without a
side, leaking and unparsable chosen rows, and rows TRL cannot make a completion of."""

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.jsonl import dumps

SECRET = "the parcel was lost in the Leeds depot fire"
ROWS = {
    "good": {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": {"s": 1}}],
             "final_text": "It shipped."},
    "spoken": {"prompt": "Where is order 7?", "steps": [{"text": "<think>hm</think>Let me look."}],
               "final_text": "On its way."},
    "messages": {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
    "leaks": {"prompt": "Where?", "final_text": f"Internally: {SECRET}.", "privileged": {"reference": SECRET}},
    "bad_arguments": {"prompt": "Where?", "steps": [{"tool": "lookup", "arguments": "{id: 7}", "result": "ok"}],
                      "final_text": "ok"},
    "silent": {"prompt": "Where?"},
    "trace": {"prompt": "Where?", "tool_trace": [{"tool": "lookup", "input": {"id": 1}, "output": "x"}],
              "final_text": "found"},
}
ROW = st.sampled_from(sorted(ROWS))


@st.composite
def entry(draw):
    kind = draw(st.sampled_from(["pair"] * 6 + ["not_an_object", "blank", "one_side"]))
    if kind == "not_an_object":
        return draw(st.sampled_from([b"7", b'"text"', b"[1, 2]", b"null"]))
    if kind == "blank":
        return b""
    pair = {"prompt": "Where?", "chosen": dict(ROWS[draw(ROW)]), "rejected": dict(ROWS[draw(ROW)])}
    if kind == "one_side":
        del pair[draw(st.sampled_from(["chosen", "rejected"]))]
    if draw(st.booleans()):
        pair["tie"] = draw(st.booleans())
    if draw(st.booleans()):
        pair.update(chosen_score=1.0, rejected_score=0.0, margin=1.0, length_delta=draw(st.integers(-9, 9)),
                    first_turn_differs=draw(st.booleans()), chosen_reason={"ok": True, "privileged": SECRET})
    return dumps(pair)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(entry(), min_size=1, max_size=25), fmt=st.sampled_from(["openai", "trl"]),
       validate=st.booleans(), drop_ties=st.booleans())
def test_pooled_preference_equals_one_process(entries, fmt, validate, drop_ties):
    home = Path(tempfile.mkdtemp())
    chunk_bytes = parallel.CHUNK_BYTES
    parallel.CHUNK_BYTES = 256  # a chunk or so per entry; read by this process only
    try:
        src = home / "pairs.jsonl"
        src.write_bytes(b"\n".join(entries) + b"\n")
        outcomes = []
        for workers in (1, 2):
            out = home / str(workers) / "dpo.jsonl"
            try:
                report = wai.export_preference(src, out, format=fmt, validate=validate, drop_ties=drop_ties,
                                               system_prompt="sys", workers=workers)
                outcome = ("ok", {k: v for k, v in report.items() if k not in ("path", "elapsed_seconds")},
                           out.read_bytes() if out.exists() else None)
            except Exception as exc:  # noqa: BLE001 - both runs must end the same way, whatever it is
                outcome = ("error", type(exc).__name__, str(exc))
            outcomes.append(outcome)
        assert outcomes[0] == outcomes[1]
    finally:
        parallel.CHUNK_BYTES = chunk_bytes
        shutil.rmtree(home)
