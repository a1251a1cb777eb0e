"""The benchmark's run generator: deterministic, engine-shaped rows, groups of 4 to 8 (no timings here)."""

import collections
import json

import orjson
import pytest

from bench.generate import Generator, generate, meta_path

N = 240


@pytest.fixture(scope="module")
def run20(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "run.jsonl"
    generate(N, path, seed=7)
    return path


def _rows(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, run20):
    again = tmp_path / "again.jsonl"
    other = tmp_path / "other.jsonl"
    generate(N, again, seed=7)
    generate(N, other, seed=8)
    assert again.read_bytes() == run20.read_bytes()
    assert meta_path(again).read_bytes() == meta_path(run20).read_bytes()
    assert other.read_bytes() != run20.read_bytes()


def test_exact_row_count_and_streaming_generator():
    assert sum(1 for _ in Generator(3).rows(57)) == 57
    assert sum(1 for _ in Generator(3, row_kb=2).rows(4)) == 4
    assert list(Generator(3).rows(0)) == []


def test_row_shape(run20):
    rows = _rows(run20)
    assert len(rows) == N
    platform = [r for r in rows if "tool_trace" in r]
    engine = [r for r in rows if "steps" in r]
    assert platform and len(platform) + len(engine) == N
    for row in rows:
        assert row["schema_version"] == "1"
        assert isinstance(row["prompt"], str) and row["prompt"]
        assert isinstance(row["final_text"], str) and row["final_text"]
        assert row["scenario_id"].startswith("scn_")
        assert isinstance(row["rollout_index"], int)
        assert row["reward"] in (0, 1, 0.5) and not isinstance(row["reward"], bool)
        assert row["judge_status"] == "ok"
        assert row["model_version"] and row["finish_reason"] in ("stop", "length", "tool", "error")
        assert isinstance(row["lineage"], dict) and row["lineage"]["parent"] == row["scenario_id"]
    for row in platform:
        assert "steps" not in row and isinstance(row["tool_trace"], list)
        for call in row["tool_trace"]:
            assert set(call) == {"tool", "input", "output"} and isinstance(call["input"], dict)
    kinds = collections.Counter()
    for row in engine:
        assert 2 <= len(row["steps"]) <= 12
        assert set(row["privileged"]) >= {"reference", "principle", "hidden_state"}
        for step in row["steps"]:
            if "tool" in step:
                kinds["tool"] += 1
                assert isinstance(step["arguments"], dict)
                result = step["result"]
                size = len(result) if isinstance(result, str) else len(orjson.dumps(result))
                assert 100 <= size <= 5000
            elif "user" in step:
                kinds["user"] += 1
            else:
                kinds["text"] += 1
                assert isinstance(step["text"], str) and step["text"]
    assert kinds["tool"] > kinds["text"] > 0
    assert any("<think>" in s.get("text", "") for r in engine for s in r["steps"])


def test_privileged_text_is_never_quoted(run20):
    for row in _rows(run20):
        said = [row["final_text"]] + [s.get("text", "") for s in row.get("steps", [])]
        said = " ".join(said).lower()
        assert "zq" not in said
        if "privileged" in row:
            assert "zq" in row["privileged"]["reference"]


def test_groups_of_4_to_8_with_mixed_rewards(run20):
    rows = _rows(run20)
    groups = collections.defaultdict(list)
    for row in rows:
        groups[row["scenario_id"]].append(row)
    assert all(4 <= len(g) <= 8 for g in groups.values())
    for members in groups.values():
        assert len({r["prompt"] for r in members}) == 1
        assert [r["rollout_index"] for r in members] == list(range(len(members)))
    mixed = sum(1 for g in groups.values() if {0, 1} <= {r["reward"] for r in g})
    assert mixed >= 0.7 * len(groups)
    assert any(r["reward"] == 0.5 for r in rows)


def test_sidecar(run20):
    meta = json.loads(meta_path(run20).read_text())
    assert meta["system_prompt"]
    names = {t["function"]["name"] for t in meta["tools"]}
    used = {s["tool"] for r in _rows(run20) for s in r.get("steps", []) if "tool" in s}
    assert used <= names


def test_row_sizes(tmp_path):
    big, small = tmp_path / "big.jsonl", tmp_path / "small.jsonl"
    generate(300, big, seed=1, row_kb=20)
    generate(300, small, seed=1, row_kb=2)
    assert 14_000 < big.stat().st_size / 300 < 26_000
    assert 1_500 < small.stat().st_size / 300 < 3_000
    for row in _rows(small):
        assert 2 <= len(row.get("steps", [{}, {}])) <= 4


def test_bad_row_kb():
    with pytest.raises(ValueError):
        Generator(0, row_kb=5)
