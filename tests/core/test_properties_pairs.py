"""Preference pairs keep spec 8.2's promises, and a pairs file exports as the same pairs in memory do.

Rows come from the conformance strategies: several rollouts of a few prompts (spelled with other case and
spacing), rewards of every kind (partial credit, bools, NaN, None, out of range), judge statuses.
"""

import json
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.pairs import build_pairs_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import conformance_strategies as S  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TOOLS = [{"type": "function", "function": {"name": n}} for n in S.TOOLS_NAMES]


def _key(prompt):
    return " ".join(str(prompt).lower().split())


def _score(row):
    reward = row.get("reward")
    ok = isinstance(reward, (int, float)) and not isinstance(reward, bool) and 0 <= reward <= 1
    return float(reward) if ok and row.get("judge_status", "ok") == "ok" else None


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=S.scored_rows_for_pairs(), knobs=S.pair_knobs())
def test_pairs_keep_the_promises_of_spec_8_2(rows, knobs):
    pairs, report = wai.build_preference_pairs(rows, **knobs)
    assert report["pairs"] == len(pairs)
    used, per_prompt = set(), {}
    for pair in pairs:
        chosen, rejected = pair["chosen"], pair["rejected"]
        assert id(chosen) not in used and id(rejected) not in used, "a row is in one pair at most"
        used |= {id(chosen), id(rejected)}
        assert (pair["chosen_score"], pair["rejected_score"]) == (_score(chosen), _score(rejected))
        assert pair["chosen_score"] - pair["rejected_score"] >= knobs["min_margin"]
        assert pair["margin"] == round(pair["chosen_score"] - pair["rejected_score"], 6)
        assert _key(chosen["prompt"]) == _key(rejected["prompt"]) != ""
        assert pair["prompt"] == chosen["prompt"]
        per_prompt[_key(chosen["prompt"])] = per_prompt.get(_key(chosen["prompt"]), 0) + 1
    assert all(n <= knobs["max_pairs_per_prompt"] for n in per_prompt.values())
    assert report["prompts_with_contrast"] == len(per_prompt)


@SETTINGS
@given(rows=S.scored_rows_for_pairs(), knobs=S.pair_knobs(), ties=st.lists(S.tie_values, max_size=8),
       fmt=st.sampled_from(["openai", "trl"]), validate=st.booleans(), drop_ties=st.booleans(),
       strip_think=st.booleans(), system_prompt=st.sampled_from([None, "SYS"]))
def test_a_pairs_file_exports_as_the_pairs_in_memory(tmp_path_factory, rows, knobs, ties, fmt, validate, drop_ties,
                                                     strip_think, system_prompt):
    """The file holds what JSON can (DECISIONS 1: a NaN is written null), so the pairs in memory are compared
    as the file gives them back; the file built from a file of the rows holds the same pairs."""
    tmp = tmp_path_factory.mktemp("pairs")
    pairs, _ = wai.build_preference_pairs(rows, **knobs)
    (tmp / "run.jsonl").write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    build_pairs_file(tmp / "run.jsonl", tmp / "built.jsonl", **knobs)
    assert [json.loads(line) for line in (tmp / "built.jsonl").read_bytes().splitlines()] == [
        json.loads(dumps(p)) for p in pairs]
    for pair, tie in zip(pairs, ties):
        pair["tie"] = tie
    (tmp / "pairs.jsonl").write_bytes(b"".join(dumps(p) + b"\n" for p in pairs))
    opts = dict(format=fmt, validate=validate, drop_ties=drop_ties, strip_think=strip_think,
                system_prompt=system_prompt, tools=TOOLS)

    def export(source, name):
        out = tmp / name
        try:
            report = wai.export_preference(source, out, **opts)
        except ValueError as exc:
            return type(exc).__name__, str(exc)
        written = ("path", "sha256", "elapsed_seconds", "source_path", "source_sha256")
        return {k: v for k, v in report.items() if k not in written}, out.read_bytes() if out.exists() else None

    assert export(tmp / "pairs.jsonl", "from_file.jsonl") == export(
        [json.loads(dumps(p)) for p in pairs], "from_memory.jsonl")
