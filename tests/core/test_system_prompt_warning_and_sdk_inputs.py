"""DECISIONS 6's no-system-prompt warning for rows and pairs that carry their own system message, and what the
SDK hands back (a `Run`, the `(rows, report)` tuple of `select_for_sft`) given to the exporters; found by a
differential review against whileai 0.105 on runs written by its SDK."""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object", "properties": {}}}}]


def _messages_row(system: str | None):
    """A training row given back to the exporter (e.g. the output of ``training_rows``): its own messages,
    opening with the run's system message, one id-less tool call."""
    msgs = [] if system is None else [{"role": "system", "content": system}]
    msgs += [
        {"role": "user", "content": "Where is ORD-1?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "ORD-1"}}]},
        {"role": "tool", "name": "lookup_order", "content": "shipped"},
        {"role": "assistant", "content": "It has shipped."},
    ]
    return {"messages": msgs, "reward": 1.0}


def test_no_system_prompt_warning_for_rows_that_carry_their_own(tmp_path):
    """DECISIONS 6 warns when a row with tool calls is exported with no system prompt. A row whose own
    messages open with a system message is exported with one (``with_system`` counts it), and
    ``system_prompt=""`` is what the two-systems warning tells the caller to pass for such rows: the export
    must not then claim they went out without a system prompt. Only the row without one is counted."""
    rows = [_messages_row("You are the shop's agent."), _messages_row(None)]
    for fmt in ("openai", "trl"):
        out = tmp_path / f"{fmt}.jsonl"
        rep = wai.export_dataset(rows, str(out), system_prompt="", tools=TOOLS, format=fmt)
        written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert [r["messages"][0]["role"] for r in written] == ["system", "user"]
        assert rep["with_system"] == 1
        no_system = [w for w in rep.get("warnings", []) if "exported without a system prompt" in w]
        assert no_system and no_system[0].startswith("1 of 2 rows make tool calls"), rep.get("warnings")


def test_no_system_prompt_warning_for_pairs_whose_sides_carry_their_own(tmp_path):
    """The same for export_preference: sides whose own messages open with a system message are written
    with one, so system_prompt="" must not warn that the pairs went out without a system prompt; a pair
    whose sides have none is still counted."""
    def pair(system):
        chosen, rejected = _messages_row(system), _messages_row(system)
        rejected["messages"][-1]["content"], rejected["reward"] = "No idea.", 0.0
        return {"prompt": "Where is ORD-1?", "chosen": chosen, "rejected": rejected}

    pairs = [pair("You are the shop's agent."), pair(None)]
    for fmt in ("openai", "trl"):
        out = tmp_path / f"{fmt}.jsonl"
        rep = wai.export_preference(pairs, str(out), system_prompt="", tools=TOOLS, format=fmt)
        written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        side = "chosen" if fmt == "openai" else "prompt"
        assert [r[side][0]["role"] for r in written] == ["system", "user"]
        no_system = [w for w in rep.get("warnings", []) if "exported without a system prompt" in w]
        assert no_system and no_system[0].startswith("1 of 2 rows make tool calls"), rep.get("warnings")


def test_build_preference_pairs_reads_a_load_run_run(tmp_path):
    """``load_run`` gives a ``Run`` that every exporter, ``training_rows`` and ``leak_report`` read as its
    rows; ``build_preference_pairs`` refused it as a path ("got Run ...: pass read_jsonl(path)"), while it
    pairs the reference SDK's own run object. It pairs a Run's trajectories like the same rows in a list."""
    rows = [{"prompt": "Where is ORD-1?", "final_text": text, "reward": reward, "scenario_id": "s1",
             "rollout_index": i} for i, (text, reward) in enumerate((("It has shipped.", 1.0), ("No idea.", 0.0)))]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pairs, report = wai.build_preference_pairs(wai.load_run(str(path)))
    assert (pairs, report) == wai.build_preference_pairs(rows)
    assert report["pairs"] == 1


def test_the_rows_report_tuple_of_select_for_sft_is_refused_by_name(tmp_path):
    """The SDK's ``scored.select_for_sft()`` returns ``(rows, report)``. Passed on whole, the export blamed
    the data (``schema_invalid ... 0:messages_missing ... give each row a prompt``) and
    ``build_preference_pairs`` paired nothing and said to raise rollouts_per_request; both now say what
    was passed, as export_preference does for build_preference_pairs' ``(pairs, report)``."""
    rows = [{"prompt": "Where is ORD-1?", "final_text": "It has shipped.", "reward": 1.0}]
    given = (rows, {"n": 1, "n_selected": 1, "target": 1000})
    calls = {
        "export_dataset": lambda: wai.export_dataset(given, str(tmp_path / "a.jsonl")),
        "export_datasets": lambda: wai.export_datasets(given, {"openai": str(tmp_path / "b.jsonl")}),
        "training_rows": lambda: wai.training_rows(given),
        "build_preference_pairs": lambda: wai.build_preference_pairs(given),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=r"is a \(rows, report\) tuple.*pass its first item") as refused:
            call()
        # the hint names no other function than the one called, when it names one
        hint = f"; {name}(rows, ...)" if name == "build_preference_pairs" else "; then pass rows"
        assert str(refused.value).endswith(hint), refused.value
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()
    assert wai.training_rows(rows)  # the rows themselves are fine


def test_a_pairs_file_without_tools_or_system_prompt_is_told_of_the_sidecar_beside_it(tmp_path):
    """The pipeline names the run's sidecar in these warnings; a caller of export_preference with a pairs
    file keeps the advice that fits it (its arguments, or the sidecar beside that file), and that sidecar
    is what the export then reads."""
    def pair():
        chosen, rejected = _messages_row(None), _messages_row(None)
        rejected["messages"][-1]["content"], rejected["reward"] = "No idea.", 0.0
        return {"prompt": "Where is ORD-1?", "chosen": chosen, "rejected": rejected}

    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(pair()) + "\n", encoding="utf-8")
    rep = wai.export_preference(str(path), str(tmp_path / "out.jsonl"))
    assert [w for w in rep["warnings"] if "make tool calls" in w] == [
        "1 of 1 rows make tool calls but were exported without tool schemas; the trainer cannot show the model "
        "the tools it calls. Pass tools=, or keep a <name>.meta.json sidecar beside the pairs file.",
        "1 of 1 rows make tool calls but were exported without a system prompt. Pass system_prompt=, or keep a "
        "<name>.meta.json sidecar beside the pairs file."]
    (tmp_path / "pairs.meta.json").write_text(json.dumps({"system_prompt": "You track orders.", "tools": TOOLS}))
    rep = wai.export_preference(str(path), str(tmp_path / "out.jsonl"))
    assert not [w for w in rep.get("warnings", []) if "make tool calls" in w], rep.get("warnings")
