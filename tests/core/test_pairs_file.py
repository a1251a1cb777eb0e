"""File-to-file pair building gives the same pairs and report as the list API."""

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.pairs import build_pairs_file

row = st.fixed_dictionaries({
    "prompt": st.sampled_from(["Refund A", "refund  a", "Cancel B", "", "Track C"]),
    "reward": st.sampled_from([0, 1, 0.5, 0.25, None, True, 1.5]),
    "final_text": st.text(alphabet="ab <think>/", max_size=12),
}, optional={"model_version": st.sampled_from(["m1", "m2"]),
             "judge_status": st.sampled_from(["ok", "error"]),
             "steps": st.just([{"tool": "refund", "arguments": {"id": "A"}, "result": "ok"}])})


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row, max_size=25), max_pairs=st.integers(1, 3), margin=st.sampled_from([0.5, 1.0]),
       length_match=st.booleans())
def test_file_pairs_equal_list_pairs(tmp_path, rows, max_pairs, margin, length_match):
    src = tmp_path / "scored.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    opts = dict(max_pairs_per_prompt=max_pairs, min_margin=margin, length_match=length_match)
    pairs, report = wai.build_preference_pairs(list(wai.read_jsonl(src)), **opts)
    file_report = build_pairs_file(src, tmp_path / "pairs.jsonl", **opts)
    written = [orjson.loads(line) for line in (tmp_path / "pairs.jsonl").read_bytes().splitlines()]
    assert written == [orjson.loads(dumps(p)) for p in pairs]
    assert {k: v for k, v in file_report.items() if k not in ("path", "n_written", "sha256")} == report
    assert file_report["n_written"] == len(pairs)
