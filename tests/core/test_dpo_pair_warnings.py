"""Pairs a DPO trainer would train on wrongly, which the spec writes without a word and the preference
export therefore says out loud (ours, beside DECISIONS 12's warnings):

* a chosen side cut by the reply token cap (``finish_reason: "length"``): ``export_dataset`` warns of
  such rows (spec 5.6 item 2) because a model trained on them learns to stop mid-thought; as the
  chosen side of a pair, DPO pushes the model towards that reply just the same.
"""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

LENGTH_CUT = "cut by the reply token cap"


def _side(prompt, text, *, user=None, **extra):
    steps = ([{"user": user}] if user else []) + [{"text": text}]
    return {"prompt": prompt, "steps": steps, "final_text": text, **extra}


def _pair(chosen, rejected):
    return {"prompt": chosen["prompt"], "chosen": chosen, "rejected": rejected, "margin": 1.0}


def _warnings(report, needle):
    return [w for w in report.get("warnings", []) if needle in w]


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_chosen_side_cut_by_the_token_cap_is_exported_with_a_warning(tmp_path, fmt):
    cut = _pair(_side("Refund A", "Let me check the order and then I will", finish_reason="length"),
                _side("Refund A", "No.", finish_reason="stop"))
    fine = _pair(_side("Refund B", "Refunded B.", finish_reason="stop"), _side("Refund B", "No."))
    out = tmp_path / f"pairs.{fmt}.jsonl"
    report = wai.export_preference([cut, fine], out, system_prompt="SYS", format=fmt)
    assert report["pairs"] == 2 and len(_lines(out)) == 2  # exported, as the spec writes them
    (said,) = _warnings(report, LENGTH_CUT)
    assert said.startswith("1 of 2 pairs have a chosen side cut by the reply token cap (finish_reason 'length')")


def test_a_rejected_side_cut_by_the_token_cap_is_no_chosen_side_cut(tmp_path):
    pair = _pair(_side("Refund A", "Refunded A."), _side("Refund A", "Let me", finish_reason="length"))
    report = wai.export_preference([pair], tmp_path / "pairs.jsonl")
    assert not _warnings(report, LENGTH_CUT)
