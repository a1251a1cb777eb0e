"""Spec section 9, 'Groups and rewards': E37..E44 (spec 3.11, 5.5; DECISIONS 1)."""
from __future__ import annotations

import math

import pytest

import whileai_pipeline.simulations as wai

GROUP_KEYS = ["group_id", "k", "n0", "n1", "reward_mean", "reward_std"]


def _row(prompt="p", reward=None, **extra):
    row = {"prompt": prompt, "steps": [{"text": "a"}], "final_text": "a"}
    if reward is not None:
        row["reward"] = reward
    row.update(extra)
    return row


def _group(row):
    return {k: row[k] for k in GROUP_KEYS if k in row}


def test_e37_no_repeated_key_no_group_fields():
    rows = wai.training_rows([_row(scenario_id="s1", reward=1), _row(scenario_id="s2", reward=0)])
    for r in rows:
        assert _group(r) == {}
    rep = wai.export_dataset([_row(scenario_id="s1", reward=1), _row(scenario_id="s2", reward=0)])
    assert rep["groups"] == 0


def test_e38_one_repeated_key_stamps_all_groups_including_singletons():
    src = [_row("p1", 1), _row("p1", 0), _row("p1", 0.5), _row("p2", 1)]
    rows = wai.training_rows(src)
    for r in rows[:3]:
        assert r["group_id"] == "b78f576611ec"
        assert (r["k"], r["n0"], r["n1"]) == (3, 1, 1)
        assert r["reward_mean"] == 0.5
        assert r["reward_std"] == pytest.approx(0.408248290463863, rel=1e-12)
        # group fields come after schema_version, in this order
        assert list(r.keys())[-7:] == ["schema_version"] + GROUP_KEYS
    assert _group(rows[3]) == {
        "group_id": "c5fd961c9f73",
        "k": 1,
        "n0": 0,
        "n1": 1,
        "reward_mean": 1.0,
        "reward_std": 0.0,
    }
    assert wai.export_dataset(src)["groups"] == 2


def test_e39_half_reward_neither_n0_nor_n1_but_pass_in_report():
    src = [_row(reward=0.5, scenario_id="s"), _row(reward=0.5, scenario_id="s")]
    rows = wai.training_rows(src)
    for r in rows:
        assert (r["k"], r["n0"], r["n1"]) == (2, 0, 0)
        assert r["reward_mean"] == 0.5
        assert r["reward_std"] == 0.0
    rep = wai.export_dataset(src)
    assert rep["rewards"] == {"n_pass": 2, "n_fail": 0, "n_ungraded": 0}


def test_e40_mixed_reward_types_in_one_group():
    rewards = [True, float("nan"), "0.7", None, 1, "abc"]
    src = [_row(reward=r, scenario_id="s") for r in rewards]
    rows = wai.training_rows(src)
    assert len(rows) == 6
    for r in rows:
        assert (r["k"], r["n0"], r["n1"]) == (6, 0, 2)
        assert r["reward_mean"] == pytest.approx(0.85, rel=1e-12)
        assert r["reward_std"] == pytest.approx(0.15000000000000002, rel=1e-12)
    rep = wai.export_dataset(src)
    # "0.7" and 1 pass; True, NaN, None, "abc" are ungraded
    assert rep["rewards"] == {"n_pass": 2, "n_fail": 0, "n_ungraded": 4}


def test_e41_all_rewards_none():
    rows = wai.training_rows([_row(scenario_id="s"), _row(scenario_id="s")])
    for r in rows:
        assert _group(r) == {
            "group_id": "a0f1490a20d0",  # sha1_12("s")
            "k": 2,
            "n0": 0,
            "n1": 0,
            "reward_mean": None,
            "reward_std": None,
        }
        assert "reward" not in r


def test_e42_same_task_id_different_prompts_not_grouped():
    rows = wai.training_rows([_row("a", 1, task_id="T"), _row("b", 0, task_id="T")])
    for r in rows:
        assert _group(r) == {}
        assert "task_id" not in r


def test_e43_inf_and_zero_rewards_in_memory():
    rows = wai.training_rows([_row(reward=float("inf"), scenario_id="s"), _row(reward=0, scenario_id="s")])
    for r in rows:
        assert (r["k"], r["n0"], r["n1"]) == (2, 1, 1)
        assert r["reward_mean"] == float("inf")
        assert math.isnan(r["reward_std"])


def test_e43_inf_mean_nan_std_written_as_null_d1(tmp_path, read_jsonl_out):
    # Spec writes bare Infinity/NaN tokens; DECISIONS 1: non-finite floats become null.
    out = tmp_path / "out.jsonl"
    wai.export_dataset([_row(reward=float("inf"), scenario_id="s"), _row(reward=0, scenario_id="s")], out)
    raw = out.read_bytes()
    assert b"NaN" not in raw and b"Infinity" not in raw
    lines = read_jsonl_out(out)  # strict parse
    assert len(lines) == 2
    for line in lines:
        assert line["reward_mean"] is None
        assert line["reward_std"] is None
        assert (line["k"], line["n0"], line["n1"]) == (2, 1, 1)
    assert lines[0]["reward"] is None
    assert lines[1]["reward"] == 0


def test_e44_bool_reward_exports_as_ungraded(tmp_path, read_jsonl_out):
    out = tmp_path / "out.jsonl"
    rep = wai.export_dataset([_row(reward=True)], out)
    assert rep["rewards"] == {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}
    assert rep["n_written"] == 1
    lines = read_jsonl_out(out)
    assert lines[0]["reward"] is True
