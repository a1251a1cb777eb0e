"""Divergences from the reference (whileai 0.105) found by black-box differential testing that no
DECISIONS point explains. Each expected value is the spec's (EXPORT_SPEC.md) and was checked against
whileai 0.105; the section each test cites says why it is the right one."""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

PAIR = {
    "prompt": "Refund A",
    "chosen": {"prompt": "Refund A", "final_text": "Refunded."},
    "rejected": {"prompt": "Refund A", "final_text": "No."},
}


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ------------------------------------------------------------ spec 7.3 step 3


@pytest.mark.parametrize("falsy", [False, 0, 0.0, []], ids=["False", "0", "0.0", "empty-list"])
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_export_preference_falsy_system_prompt_writes_no_system_message(tmp_path, falsy, fmt):
    """Spec 7.3 step 3: ``system = text(system_prompt or "")``, so ``system_prompt=False`` (or 0, []) is
    no system prompt. (training_rows differs on purpose: spec 3.2 writes text() of any non-None value.)
    whileai 0.105: chosen starts with the user turn; ours wrote a system message "False" / "0"."""
    out = tmp_path / "pairs.jsonl"
    wai.export_preference([dict(PAIR)], out, system_prompt=falsy, format=fmt, validate=False)
    (row,) = _lines(out)
    first = row["prompt"][0] if fmt == "trl" else row["chosen"][0]
    assert first == {"role": "user", "content": "Refund A"}
    if fmt == "openai":
        assert row["rejected"][0] == {"role": "user", "content": "Refund A"}


def test_export_preference_string_zero_system_prompt_is_still_a_system_message(tmp_path):
    """The other side of the same rule: "0" is a non-empty string, so it is a system prompt."""
    out = tmp_path / "pairs.jsonl"
    wai.export_preference([dict(PAIR)], out, system_prompt="0", validate=False)
    (row,) = _lines(out)
    assert row["chosen"][0] == {"role": "system", "content": "0"}


# ------------------------------------------------------------ spec 3.11 (reward_std, bit for bit)


@pytest.mark.parametrize(
    "rewards,std",
    [
        ([0.2, 0.5, 0.1], 0.1699673171197595),  # ours was 0.16996731711975951 (math.sqrt), one ULP off
        ([1, 0, 0.5], 0.408248290463863),  # spec 3.11's own example
        ([1, 0.7], 0.15000000000000002),  # E40's numbers
    ],
)
def test_group_reward_std_is_the_reference_value_to_the_last_bit(tmp_path, rewards, std):
    """Spec 3.11: ``reward_std`` is the population standard deviation, "not rounded"; conformance is
    judged on parsed JSON, so a float that differs in its last bit is a different value. whileai 0.105
    writes 0.1699673171197595 for rewards 0.2, 0.5, 0.1 (as ``variance ** 0.5`` gives it)."""
    rows = [{"prompt": "p", "final_text": f"a{i}", "reward": r} for i, r in enumerate(rewards)]
    got = {row["reward_std"] for row in wai.training_rows(rows)}
    assert got == {std}
    out = tmp_path / "sft.jsonl"
    wai.export_dataset(rows, out)
    assert {row["reward_std"] for row in _lines(out)} == {std}


# ------------------------------------------------------------ DECISIONS 8 (pair fields)


def test_export_preference_scrubs_blocked_keys_from_a_structured_pair_prompt(tmp_path):
    """DECISIONS 8: every exported preference row is free of the blocked keys at any depth of its carried
    metadata. In the openai format the pair's ``prompt`` is such a field (spec 7.3: entry = {"prompt":
    pair.prompt}, the conversation is in chosen/rejected); every other pair field was scrubbed, the
    prompt was not (the SFT exporter scrubs its carried ``prompt``)."""
    pair = dict(PAIR, prompt={"text": "Refund A", "reference": "order A was refunded on Monday",
                              "meta": [{"privileged": {"principle": "x"}, "k": 1}]})
    out = tmp_path / "pairs.jsonl"
    wai.export_preference([pair], out, validate=False)
    (row,) = _lines(out)
    assert row["prompt"] == {"text": "Refund A", "meta": [{"k": 1}]}


# ------------------------------------------------------------ spec 2.3 / 3.2 (run objects)

REF_TEXT = "the entity does not exist: report it missing"


class _RowsWithTrajectories(list):
    """A list whose items are not its trajectories (e.g. a selection that also carries its run)."""


def test_a_list_subclass_with_trajectories_is_exported_from_its_trajectories():
    """Spec 2.3 / 3.2: *any* object with a ``trajectories`` attribute is a run for the exporters: rows come
    from ``.trajectories``. (Only leak_report, spec 6.1, keeps a list's own items.) whileai 0.105 exports
    the trajectory and its leak check sees it; ours exported the list's items and checked those."""
    source = _RowsWithTrajectories([{"prompt": "p", "final_text": "list item"}])
    source.trajectories = [{"prompt": "p", "final_text": REF_TEXT, "privileged": {"reference": REF_TEXT}}]
    rows = wai.training_rows(source)
    assert [r["messages"][-1]["content"] for r in rows] == [REF_TEXT]
    report = wai.export_dataset(source, validate=False)
    assert report["privileged_leaks"]["n_leaked"] == 1


def test_preference_pairs_in_a_list_subclass_with_trajectories_are_the_list_items():
    """Spec 7.1 / 7.3: export_preference has no source resolution; it iterates the pairs it is given."""
    pairs = _RowsWithTrajectories([dict(PAIR)])
    pairs.trajectories = [{"prompt": "p", "final_text": "not a pair"}]
    assert wai.export_preference(pairs, validate=False)["pairs"] == 1


# ------------------------------------------------------------ DECISIONS 6 (explicit arguments win)

EXPECTED_ROW = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "p"},
                             {"role": "assistant", "content": "x"}],
                "loss_mask": [0, 0, 1], "prompt": "p", "schema_version": "1"}


@pytest.mark.parametrize("sidecar", ["{not json", '["a list"]', '{"system_prompt": 5, "tools": {"name": "x"}}'],
                         ids=["not-json", "array", "wrong-types"])
def test_sidecar_replaced_by_both_explicit_arguments_is_not_read(tmp_path, sidecar):
    """DECISIONS 6: explicit ``system_prompt=`` and ``tools=`` always win; the sidecar only supplies what
    the caller did not pass. With both passed it supplies nothing, so a broken sidecar must not stop the
    export (whileai 0.105, which never reads sidecars, writes the row below; ours raised bad_sidecar)."""
    src = tmp_path / "run.jsonl"
    src.write_text(json.dumps({"prompt": "p", "final_text": "x"}) + "\n", encoding="utf-8")
    (tmp_path / "run.meta.json").write_text(sidecar, encoding="utf-8")
    assert wai.training_rows(str(src), system_prompt="S", tools=[]) == [EXPECTED_ROW]
    report = wai.export_dataset(str(src), system_prompt="S", tools=[])
    assert (report["n"], report["with_system"], report["with_tools"]) == (1, 1, 0)
    assert (report["system_prompt_source"], report["tools_source"]) == ("argument", "argument")
    assert _lines(tmp_path / "run.train.jsonl") == [EXPECTED_ROW]


def test_sidecar_is_still_read_when_one_argument_is_missing(tmp_path):
    """The other side: with only ``system_prompt=`` passed, the sidecar still supplies the tools, so a
    broken one is still reported (bad_sidecar), not silently ignored."""
    src = tmp_path / "run.jsonl"
    src.write_text(json.dumps({"prompt": "p", "final_text": "x"}) + "\n", encoding="utf-8")
    (tmp_path / "run.meta.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="^bad_sidecar: "):
        wai.export_dataset(str(src), system_prompt="S")
