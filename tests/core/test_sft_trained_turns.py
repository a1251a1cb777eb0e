"""What an SFT export trains that a fine-tuning run would not want, said in the report.

The spec (and the reference) write these rows as they are; the report must then name them, as it names rows with
no assistant turn: the trainer learns exactly what the row holds.
"""

import json
import re

import pytest

import whileai_pipeline.simulations as wai

EMPTY = re.compile(r"^(\d+) of (\d+) rows train an assistant turn with no text and no tool call")
TWO_SYSTEMS = re.compile(r"^(\d+) of (\d+) rows open with their own system message and were given the system "
                         r"prompt too")


def _warning(report, pattern):
    found = [m for m in (pattern.match(w) for w in report.get("warnings", [])) if m]
    assert len(found) <= 1, report.get("warnings")
    return (int(found[0].group(1)), int(found[0].group(2))) if found else None


# A reasoning agent whose last step was only a <think> block: strip_think leaves an empty reply, and the
# final_text is not used (the last turn was not blank before stripping, spec 1.4 step 9).
THINK_ONLY = {"prompt": "Where is order 7?", "steps": [{"text": "<think>I should answer.</think>"}],
              "final_text": "It shipped.", "reward": 1}
FINE = {"prompt": "Where is order 8?", "steps": [{"text": "It is on its way."}], "final_text": "It is on its way.",
        "reward": 1}
CALL_ONLY = {"prompt": "Where is order 9?", "steps": [{"tool": "lookup", "arguments": {"id": 9}, "result": "ok"}],
             "final_text": "", "reward": 1}


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("kw", [{}, {"mask_mode": "final"}, {"unroll": True}], ids=["assistant", "final", "unroll"])
def test_an_empty_reply_that_is_trained_is_named(tmp_path, fmt, kw):
    out = tmp_path / "out.jsonl"
    report = wai.export_dataset([THINK_ONLY, FINE, CALL_ONLY], out, format=fmt, system_prompt="You track orders.",
                                **kw)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    # the row really trains an empty assistant turn (the spec's conversion, not changed here)
    empty = [r for r in rows if any(m["role"] == "assistant" and not m["content"] and not m.get("tool_calls")
                                    for m in r.get("completion") or r.get("messages"))]
    assert len(empty) == 1
    assert _warning(report, EMPTY) == (1, report["n"]), report.get("warnings")


def test_no_empty_reply_warning_when_every_reply_has_words_or_a_call(tmp_path):
    report = wai.export_dataset([FINE, CALL_ONLY], tmp_path / "out.jsonl", system_prompt="You track orders.")
    assert _warning(report, EMPTY) is None
    # strip_think=False keeps the think block: the turn is not empty
    report = wai.export_dataset([THINK_ONLY], tmp_path / "keep.jsonl", strip_think=False)
    assert _warning(report, EMPTY) is None


# the run's own reply is blank: no <think> block was removed, and strip_think=False would not help
BLANK = {"messages": [{"role": "user", "content": "Where is order 6?"}, {"role": "assistant", "content": "  "}],
         "reward": 0}


def test_the_empty_reply_warning_names_the_first_row_and_says_what_emptied_it(tmp_path):
    """It said every empty turn was "e.g. a reply that was only a <think> block" and advised strip_think=False,
    also for a reply the run left blank, which that does not mend, and did not say where the first one was."""
    think, blank = (tmp_path / "think.jsonl", "thinking"), (tmp_path / "blank.jsonl", "blank")
    said = {}
    for (out, name), rows in ((think, [FINE, THINK_ONLY, BLANK]), (blank, [FINE, CALL_ONLY, BLANK])):
        report = wai.export_dataset(rows, out, system_prompt="You track orders.")
        said[name] = [w for w in report.get("warnings", []) if EMPTY.match(w)]
    assert said["thinking"] == [
        "2 of 3 rows train an assistant turn with no text and no tool call (first at line 2 of the output); in 1 "
        "of them strip_think removed a reply that was only a <think> block: the model learns to end its turn "
        "without a word. Leave those rows out of the export, or export with strip_think=False to keep the "
        "thinking."]
    assert said["blank"] == [
        "1 of 3 rows train an assistant turn with no text and no tool call (first at line 3 of the output), "
        "empty in the run itself: the model learns to end its turn without a word. Leave those rows out of the "
        "export."]
    rows = [json.loads(line) for line in think[0].read_text(encoding="utf-8").splitlines()]
    assert [r["messages"][-1]["content"] for r in rows] == ["It is on its way.", "", ""]


def test_trl_final_mode_counts_only_the_turn_trained(tmp_path):
    """An empty turn in the prompt of a prompt/completion row is context, not trained: no warning."""
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "   "},
                        {"role": "user", "content": "hello?"}, {"role": "assistant", "content": "Hi there."}],
           "reward": 1}
    report = wai.export_dataset([row], tmp_path / "trl.jsonl", format="trl", mask_mode="final")
    assert _warning(report, EMPTY) is None
    report = wai.export_dataset([row], tmp_path / "msgs.jsonl", format="trl")
    assert _warning(report, EMPTY) == (1, 1)


OWN_SYSTEM = {"messages": [{"role": "system", "content": "You track orders."}, {"role": "user", "content": "hi"},
                           {"role": "assistant", "content": "Hello."}], "reward": 1}


def _run(tmp_path, rows, meta):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "run.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_sidecar_prompt_given_to_rows_with_their_own_system_message_is_named(tmp_path, fmt):
    path = _run(tmp_path, [OWN_SYSTEM, FINE], {"system_prompt": "You track orders.", "tools": []})
    out = tmp_path / f"{fmt}.jsonl"
    report = wai.export_dataset(path, out, format=fmt)
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert [m["role"] for m in first["messages"]][:2] == ["system", "system"]  # the spec's conversion, as it is
    assert _warning(report, TWO_SYSTEMS) == (1, 2), report.get("warnings")
    # system_prompt="" keeps only the rows' own (spec 3.2): nothing to say
    report = wai.export_dataset(path, tmp_path / f"{fmt}.own.jsonl", format=fmt, system_prompt="")
    assert _warning(report, TWO_SYSTEMS) is None


def test_rows_without_their_own_system_message_are_not_named(tmp_path):
    report = wai.export_dataset([FINE], tmp_path / "out.jsonl", system_prompt="You track orders.")
    assert _warning(report, TWO_SYSTEMS) is None
    report = wai.export_dataset([OWN_SYSTEM], tmp_path / "own.jsonl")
    assert _warning(report, TWO_SYSTEMS) is None


# a runtime's note to the agent in the middle of the conversation: the export's system prompt still opens it alone
MID_SYSTEM = {"messages": [{"role": "user", "content": "Where is order 7?"},
                           {"role": "assistant", "content": "Let me look."},
                           {"role": "system", "content": "The customer's identity is verified."},
                           {"role": "assistant", "content": "It shipped on Monday."}], "reward": 1}


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_system_message_later_in_the_conversation_is_no_second_opening_turn(tmp_path, fmt):
    """The warning is about rows that open with two system turns (their own prompt under the one given): a
    system message the run put between later turns is context the model does see when it runs."""
    out = tmp_path / f"{fmt}.jsonl"
    report = wai.export_dataset([MID_SYSTEM, OWN_SYSTEM], out, format=fmt, system_prompt="You track orders.")
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    roles = [[m["role"] for m in row["messages"]] for row in written]
    assert roles == [["system", "user", "assistant", "system", "assistant"], ["system", "system", "user", "assistant"]]
    assert _warning(report, TWO_SYSTEMS) == (1, 2), report.get("warnings")


def test_rows_of_an_openai_file_given_back_as_a_run_are_said_to_lose_their_weights(tmp_path):
    """A fine-tuning file's rows (``weight`` on each assistant message) exported again: the export drops the
    weights and writes its own loss_mask, so the turn weighted 0 is trained; it said nothing."""
    weighted = {"messages": [{"role": "user", "content": "Refund order A"},
                             {"role": "assistant", "content": "Let me look.", "weight": 0},
                             {"role": "user", "content": "Please do."},
                             {"role": "assistant", "content": "Refunded.", "weight": 1}], "reward": 1}
    plain = {"messages": [{"role": "user", "content": "Refund order B"},
                          {"role": "assistant", "content": "Refunded."}], "reward": 1}
    for fmt in ("openai", "trl"):
        report = wai.export_dataset([weighted, plain, plain], tmp_path / f"{fmt}.jsonl", format=fmt)
        said = [w for w in report.get("warnings", []) if "weight" in w]
        writes = ("drops the weights (a TRL row has none)" if fmt == "trl" else
                  "writes its own loss_mask from mask_mode='assistant' and no weight")
        assert said == [f"1 of 3 rows carry a per-message weight (rows of an OpenAI fine-tuning file, not of a "
                        f"simulation run?): the export {writes}, so a turn weighted 0 there may be trained here. "
                        "Export the run those rows were made from."]
        first = json.loads((tmp_path / f"{fmt}.jsonl").read_text().splitlines()[0])
        assert all("weight" not in m for m in first["messages"])
    report = wai.export_dataset([plain], tmp_path / "plain.jsonl")
    assert not [w for w in report.get("warnings", []) if "weight" in w]


def test_crashed_rollouts_exported_as_sft_targets_are_said(tmp_path):
    """A rollout the agent crashed in (final_text '<agent error: ...>', spec 1.1) ends on the error text as an
    assistant turn: exported, the model learns to answer with it. The preference export warned of such
    sides; the SFT export, which trains the text itself, said nothing (an ungraded row has no reward warning)."""
    crashed = {"prompt": "Refund order A", "steps": [{"tool": "lookup", "arguments": {"id": "A"}, "result": "ok"}],
               "final_text": "<agent error: RateLimitError: 429>"}
    fine = {"prompt": "Refund order B", "final_text": "Refunded.", "reward": 1}
    for fmt in ("openai", "trl"):
        report = wai.export_dataset([crashed, fine, fine], tmp_path / f"{fmt}.jsonl", format=fmt)
        said = [w for w in report.get("warnings", []) if "crashed" in w]
        assert said == ["1 of 3 rows are crashed rollouts (final_text '<agent error: ...>'): exported as SFT targets, "
                        "they teach the model the error text as its reply. Leave rows whose final_text starts with "
                        "'<agent error' out of the export, or rerun them."]
        first = json.loads((tmp_path / f"{fmt}.jsonl").read_text().splitlines()[0])
        assert first["messages"][-1] == {"role": "assistant", "content": "<agent error: RateLimitError: 429>"}
    report = wai.export_dataset([fine], tmp_path / "fine.jsonl")
    assert not [w for w in report.get("warnings", []) if "crashed" in w]
