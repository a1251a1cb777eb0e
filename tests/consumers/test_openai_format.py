"""The training-file validator (whileai_pipeline.core.openai_format) on hand-written rows.

Pure Python: no consumer package needed, so these run in every test run (no `consumers` marker).
Every rule has a row that breaks it and the code it must be reported under.
"""

import copy
import json
import tempfile
from pathlib import Path

import orjson
import pytest

import whileai_pipeline as wai

from whileai_pipeline.core.openai_format import (
    FORMATS,
    format_report,
    validate_file,
    validate_row,
)

SAMPLE_RUN = Path(__file__).resolve().parents[2] / "whileai_pipeline" / "sample" / "support_orders.jsonl"

TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "Look an order up.",
    "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}}]


def validate_rows(rows, format="openai", *, max_problems=50):
    """validate_file's report over rows written one a line to a temporary file (line numbers are 1-based
    positions), ``path`` left out."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
        report = validate_file(path, format, max_problems=max_problems, workers=1)
    report.pop("path", None)
    return report


def openai_good():
    return {
        "messages": [
            {"role": "system", "content": "Be exact."},
            {"role": "user", "content": "Where is order 7?"},
            {"role": "assistant", "content": None, "weight": 0, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "lookup_order", "arguments": "{\"id\":7}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "lookup_order", "content": "{\"status\": \"shipped\"}"},
            {"role": "assistant", "content": "It shipped.", "weight": 1},
        ],
        "tools": copy.deepcopy(TOOLS),
        "parallel_tool_calls": False,
    }


def openai_dpo_good():
    return {
        "input": {"messages": [{"role": "user", "content": "Where is order 7?"}], "tools": copy.deepcopy(TOOLS)},
        "preferred_output": [{"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"id\": 7}"}}]}],
        "non_preferred_output": [{"role": "assistant", "content": "It probably shipped."}],
    }


def our_pref_good():
    good = openai_good()["messages"]
    for m in good:
        m.pop("weight", None)
    return {"prompt": "Where is order 7?", "chosen": good,
            "rejected": good[:2] + [{"role": "assistant", "content": "No idea."}],
            "tools": copy.deepcopy(TOOLS), "margin": 1.0, "schema_version": "1"}


def trl_messages_good():
    return {"messages": [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "Where is order 7?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": {"id": 7}}}]},
        {"role": "tool", "name": "lookup_order", "tool_call_id": "call_1", "content": "shipped"},
        {"role": "assistant", "content": "It shipped."},
    ], "tools": copy.deepcopy(TOOLS), "reward": 1}


def trl_completion_good():
    messages = trl_messages_good()["messages"]
    return {"prompt": messages[:2], "completion": messages[2:], "tools": copy.deepcopy(TOOLS)}


def trl_pref_good():
    messages = trl_messages_good()["messages"]
    return {"prompt": messages[:2], "chosen": messages[2:],
            "rejected": [{"role": "assistant", "content": "No idea."}], "tools": copy.deepcopy(TOOLS)}


GOOD = [
    ("openai", openai_good, "messages"),
    ("openai", openai_dpo_good, "openai_preference"),
    ("openai", our_pref_good, "preference"),
    ("trl", trl_messages_good, "messages"),
    ("trl", trl_completion_good, "prompt_completion"),
    ("trl", trl_pref_good, "preference"),
]


@pytest.mark.parametrize("fmt,make,shape", GOOD, ids=[f"{f}-{m.__name__}" for f, m, _ in GOOD])
def test_good_rows_pass(fmt, make, shape):
    got_shape, problems = validate_row(make(), fmt)
    assert got_shape == shape
    assert [p for p in problems if p["severity"] == "error"] == []


def msg(row, i):
    return row["messages"][i]


def call(row, i=2, j=0):
    return row["messages"][i]["tool_calls"][j]


# (id, format, factory, mutation, expected code, expected where)
def _m(fn):
    return fn


BAD = [
    # ---- row shape
    ("not_object", "openai", lambda: [1, 2], None, "not_an_object", ""),
    ("no_messages", "openai", lambda: {"text": "hi"}, None, "unknown_shape", ""),
    ("messages_not_list", "openai", openai_good, lambda r: r.update(messages="hi"), "messages_not_list", "messages"),
    ("messages_empty", "openai", openai_good, lambda r: r.update(messages=[]), "messages_empty", "messages"),
    ("message_not_object", "openai", openai_good, lambda r: r["messages"].insert(0, "hi"), "message_not_object",
     "messages[0]"),
    # ---- roles and keys
    ("role_unknown", "openai", openai_good, lambda r: msg(r, 0).update(role="developer"), "role", "messages[0].role"),
    ("role_missing", "trl", trl_messages_good, lambda r: msg(r, 0).pop("role"), "role", "messages[0].role"),
    ("message_extra_key", "openai", openai_good, lambda r: msg(r, 1).update(mask=1), "message_unrecognized_key",
     "messages[1]"),
    ("no_assistant", "openai", openai_good, lambda r: r.update(messages=r["messages"][:2]), "no_assistant_message",
     "messages"),
    ("no_assistant_trl", "trl", trl_messages_good, lambda r: r.update(messages=r["messages"][:2]),
     "no_assistant_message", "messages"),
    # ---- content
    ("content_missing_user", "openai", openai_good, lambda r: msg(r, 1).pop("content"), "content_missing",
     "messages[1].content"),
    ("content_null_assistant_no_calls", "openai", openai_good, lambda r: msg(r, 4).update(content=None),
     "content_missing", "messages[4].content"),
    ("content_number", "openai", openai_good, lambda r: msg(r, 1).update(content=5), "content_not_string",
     "messages[1].content"),
    ("tool_content_parts", "openai", openai_good, lambda r: msg(r, 3).update(content=[{"type": "text", "text": "x"}]),
     "content_not_string", "messages[3].content"),
    ("user_content_bad_part", "openai", openai_good, lambda r: msg(r, 1).update(content=[{"type": "audio"}]),
     "content_part", "messages[1].content[0]"),
    ("trl_content_dict", "trl", trl_messages_good, lambda r: msg(r, 4).update(content={"a": 1}), "content_not_string",
     "messages[4].content"),
    ("name_empty", "openai", openai_good, lambda r: msg(r, 3).update(name=""), "name", "messages[3].name"),
    # ---- weight
    ("weight_2", "openai", openai_good, lambda r: msg(r, 4).update(weight=2), "weight", "messages[4].weight"),
    ("weight_bool", "openai", openai_good, lambda r: msg(r, 4).update(weight=True), "weight", "messages[4].weight"),
    ("weight_on_user", "openai", openai_good, lambda r: msg(r, 1).update(weight=1), "weight_not_assistant",
     "messages[1].weight"),
    # ---- tool calls
    ("tool_calls_not_list", "openai", openai_good, lambda r: msg(r, 2).update(tool_calls={"id": "x"}),
     "tool_calls_not_list", "messages[2].tool_calls"),
    ("tool_calls_empty", "openai", openai_good, lambda r: msg(r, 2).update(tool_calls=[], content="x"),
     "tool_calls_empty", "messages[2].tool_calls"),
    ("tool_call_not_object", "openai", openai_good, lambda r: msg(r, 2)["tool_calls"].append("lookup"),
     "tool_call_not_object", "messages[2].tool_calls[1]"),
    ("tool_calls_on_user", "openai", openai_good,
     lambda r: msg(r, 1).update(tool_calls=copy.deepcopy(msg(r, 2)["tool_calls"])), "tool_calls_not_assistant",
     "messages[1].tool_calls"),
    ("call_id_missing", "openai", openai_good, lambda r: call(r).pop("id"), "tool_call_id_missing",
     "messages[2].tool_calls[0].id"),
    ("call_id_duplicate", "openai", openai_good, lambda r: msg(r, 2)["tool_calls"].append(copy.deepcopy(call(r))),
     "tool_call_id_duplicate", "messages[2].tool_calls[1].id"),
    ("call_type_missing", "openai", openai_good, lambda r: call(r).pop("type"), "tool_call_type",
     "messages[2].tool_calls[0].type"),
    ("call_type_wrong_trl", "trl", trl_messages_good, lambda r: call(r).update(type="tool"), "tool_call_type",
     "messages[2].tool_calls[0].type"),
    ("call_flat", "openai", openai_good, lambda r: msg(r, 2).update(tool_calls=[
        {"id": "call_1", "type": "function", "name": "lookup_order", "arguments": "{}"}]),
     "tool_call_function_missing", "messages[2].tool_calls[0].function"),
    ("function_name_empty", "openai", openai_good, lambda r: call(r)["function"].update(name=""),
     "function_name_missing", "messages[2].tool_calls[0].function.name"),
    ("function_name_bad_chars", "openai", openai_good, lambda r: call(r)["function"].update(name="look up!"),
     "function_name", "messages[2].tool_calls[0].function.name"),
    ("arguments_missing", "openai", openai_good, lambda r: call(r)["function"].pop("arguments"), "arguments_missing",
     "messages[2].tool_calls[0].function.arguments"),
    ("arguments_dict_openai", "openai", openai_good, lambda r: call(r)["function"].update(arguments={"id": 7}),
     "arguments_not_string", "messages[2].tool_calls[0].function.arguments"),
    ("arguments_not_json", "openai", openai_good, lambda r: call(r)["function"].update(arguments="{id: 7}"),
     "arguments_not_json", "messages[2].tool_calls[0].function.arguments"),
    ("arguments_nan", "openai", openai_good, lambda r: call(r)["function"].update(arguments='{"x": NaN}'),
     "arguments_not_json", "messages[2].tool_calls[0].function.arguments"),
    ("arguments_list", "openai", openai_good, lambda r: call(r)["function"].update(arguments="[1, 2]"),
     "arguments_not_object", "messages[2].tool_calls[0].function.arguments"),
    ("arguments_double_encoded", "openai", openai_good,
     lambda r: call(r)["function"].update(arguments=json.dumps('{"id": 7}')),
     "arguments_not_object", "messages[2].tool_calls[0].function.arguments"),
    ("arguments_string_trl", "trl", trl_messages_good, lambda r: call(r)["function"].update(arguments='{"id": 7}'),
     "arguments_not_object", "messages[2].tool_calls[0].function.arguments"),
    ("parallel_false_two_calls", "openai", openai_good, lambda r: msg(r, 2)["tool_calls"].append(
        {"id": "call_2", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"id\":8}"}}),
     "parallel_tool_calls", "messages[2].tool_calls"),
    ("parallel_not_bool", "openai", openai_good, lambda r: r.update(parallel_tool_calls="no"),
     "parallel_tool_calls_type", "parallel_tool_calls"),
    # ---- tool messages
    ("tool_call_id_absent", "openai", openai_good, lambda r: msg(r, 3).pop("tool_call_id"), "tool_call_id_missing",
     "messages[3].tool_call_id"),
    ("tool_call_id_unknown", "openai", openai_good, lambda r: msg(r, 3).update(tool_call_id="call_9"),
     "tool_call_id_unknown", "messages[3].tool_call_id"),
    ("tool_before_call", "openai", openai_good,
     lambda r: r["messages"].insert(2, copy.deepcopy(msg(r, 3))), "tool_call_id_unknown",
     "messages[2].tool_call_id"),
    ("tool_answered_twice", "openai", openai_good,
     lambda r: r["messages"].insert(4, copy.deepcopy(msg(r, 3))), "tool_call_id_not_pending",
     "messages[4].tool_call_id"),
    ("tool_call_unanswered", "openai", openai_good, lambda r: r["messages"].pop(3), "tool_call_unanswered",
     "messages[3]"),
    ("tool_call_id_unknown_trl", "trl", trl_messages_good, lambda r: msg(r, 3).update(tool_call_id="nope"),
     "tool_call_id_unknown", "messages[3].tool_call_id"),
    # ---- tools schema
    ("tools_not_list", "openai", openai_good, lambda r: r.update(tools={"type": "function"}), "tools_not_list",
     "tools"),
    ("tool_not_object", "openai", openai_good, lambda r: r["tools"].append("lookup_order"), "tool_not_object",
     "tools[1]"),
    ("tool_type", "openai", openai_good, lambda r: r["tools"][0].update(type="retrieval"), "tool_type",
     "tools[0].type"),
    ("tool_function_missing", "openai", openai_good, lambda r: r["tools"][0].pop("function"), "tool_function_missing",
     "tools[0].function"),
    ("tool_name_missing", "openai", openai_good, lambda r: r["tools"][0]["function"].pop("name"), "tool_name",
     "tools[0].function.name"),
    ("tool_name_duplicate", "openai", openai_good, lambda r: r["tools"].append(copy.deepcopy(r["tools"][0])),
     "tool_name_duplicate", "tools[1].function.name"),
    ("tool_description_number", "openai", openai_good, lambda r: r["tools"][0]["function"].update(description=3),
     "tool_description", "tools[0].function.description"),
    ("tool_strict_string", "openai", openai_good, lambda r: r["tools"][0]["function"].update(strict="yes"),
     "tool_strict", "tools[0].function.strict"),
    ("parameters_string", "openai", openai_good,
     lambda r: r["tools"][0]["function"].update(parameters='{"type": "object"}'), "parameters_not_object",
     "tools[0].function.parameters"),
    ("parameters_type_array", "openai", openai_good,
     lambda r: r["tools"][0]["function"]["parameters"].update(type="array"), "parameters_type",
     "tools[0].function.parameters.type"),
    ("parameters_properties_list", "openai", openai_good,
     lambda r: r["tools"][0]["function"]["parameters"].update(properties=["id"]), "parameters_properties",
     "tools[0].function.parameters.properties"),
    ("parameters_property_string", "openai", openai_good,
     lambda r: r["tools"][0]["function"]["parameters"]["properties"].update(id="integer"), "parameters_property",
     "tools[0].function.parameters.properties.id"),
    ("parameters_required_unknown", "openai", openai_good,
     lambda r: r["tools"][0]["function"]["parameters"].update(required=["order"]), "parameters_required",
     "tools[0].function.parameters.required"),
    ("parameters_required_not_list", "trl", trl_messages_good,
     lambda r: r["tools"][0]["function"]["parameters"].update(required="id"), "parameters_required",
     "tools[0].function.parameters.required"),
    # ---- OpenAI's DPO shape
    ("dpo_input_not_object", "openai", openai_dpo_good, lambda r: r.update(input=[]), "input_not_object", "input"),
    ("dpo_input_extra_key", "openai", openai_dpo_good, lambda r: r["input"].update(system="x"),
     "input_unrecognized_key", "input.system"),
    ("dpo_two_outputs", "openai", openai_dpo_good,
     lambda r: r["preferred_output"].append({"role": "assistant", "content": "x"}), "output_not_single_message",
     "preferred_output"),
    ("dpo_output_user", "openai", openai_dpo_good,
     lambda r: r.update(non_preferred_output=[{"role": "user", "content": "x"}]), "output_not_assistant",
     "non_preferred_output[0].role"),
    # ---- this project's preference rows, openai format
    ("pref_side_missing", "openai", our_pref_good, lambda r: r.pop("rejected"), "side_missing", "rejected"),
    ("pref_prompt_list", "openai", our_pref_good, lambda r: r.update(prompt=[{"role": "user", "content": "x"}]),
     "prompt_type", "prompt"),
    ("pref_side_bad_arguments", "openai", our_pref_good,
     lambda r: r["chosen"][2]["tool_calls"][0]["function"].update(arguments={"id": 7}), "arguments_not_string",
     "chosen[2].tool_calls[0].function.arguments"),
    # ---- TRL shapes
    ("trl_keys_mixed", "trl", trl_completion_good, lambda r: r.update(messages=r["prompt"]), "trl_keys", ""),
    ("trl_keys_none", "trl", lambda: {"text": "hello"}, None, "trl_keys", ""),
    ("trl_prompt_string", "trl", trl_pref_good, lambda r: r.update(prompt="Where is order 7?"), "messages_not_list",
     "prompt"),
    ("trl_prompt_ends_odd_role", "trl", trl_completion_good,
     lambda r: r["prompt"].append({"role": "developer", "content": "x"}), "prompt_last_role", "prompt[2].role"),
    ("trl_user_turn_in_completion", "trl", trl_completion_good,
     lambda r: r["completion"].append({"role": "user", "content": "my card is 4111"}), "completion_not_model_output",
     "completion[3].role"),
    ("trl_chat_template_kwargs_null", "trl", trl_messages_good, lambda r: r.update(chat_template_kwargs=None),
     "chat_template_kwargs_type", "chat_template_kwargs"),
    ("trl_input_ids_column", "trl", trl_messages_good, lambda r: r.update(input_ids=[5, 6, 7]), "trl_reads_column",
     "input_ids"),
    ("trl_labels_column", "trl", trl_messages_good, lambda r: r.update(labels=[1, 2, 3]), "trl_reads_column",
     "labels"),
    ("trl_tools_string_not_json", "trl", trl_messages_good, lambda r: r.update(tools="[{oops"), "tools_not_json",
     "tools"),
    ("trl_tool_without_call", "trl", trl_messages_good,
     lambda r: r["messages"].insert(2, {"role": "tool", "content": "stray"}), "tool_without_call", "messages[2]"),
    ("trl_implicit_prompt_empty", "trl", lambda: {"chosen": [{"role": "assistant", "content": "a"}],
                                                  "rejected": [{"role": "assistant", "content": "b"}]},
     None, "implicit_prompt_empty", ""),
    ("openai_dpo_input_parallel_not_bool", "openai", openai_dpo_good,
     lambda r: r["input"].update(parallel_tool_calls="no"), "parallel_tool_calls_type", "input.parallel_tool_calls"),
    ("trl_completion_starts_user", "trl", trl_completion_good,
     lambda r: r["completion"].insert(0, {"role": "user", "content": "more"}), "completion_not_assistant",
     "completion[0].role"),
    ("trl_rejected_starts_tool", "trl", trl_pref_good,
     lambda r: r["rejected"].insert(0, {"role": "tool", "content": "x"}), "completion_not_assistant",
     "rejected[0].role"),
    ("trl_label_not_bool", "trl", trl_completion_good, lambda r: r.update(label="yes"), "label_type", "label"),
    ("trl_call_id_across_prompt", "trl", trl_completion_good,
     lambda r: r["completion"][1].update(tool_call_id="call_x"), "tool_call_id_unknown",
     "completion[1].tool_call_id"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_each_rule_has_a_failing_row(case):
    _, fmt, make, mutate, code, where = case
    row = make()
    if mutate is not None:
        mutate(row)
    _, problems = validate_row(row, fmt)
    errors = [(p["code"], p["where"]) for p in problems if p["severity"] == "error"]
    assert (code, where) in errors, problems


def test_warnings_do_not_fail_a_row():
    row = openai_good()
    row["messages"][2]["tool_calls"][0]["function"]["name"] = "cancel_order"  # not in tools
    row["messages"].append({"role": "user", "content": "thanks"})
    row["messages"].append({"role": "assistant", "content": "  "})
    _, problems = validate_row(row, "openai")
    assert {p["code"] for p in problems} == {"function_not_declared", "assistant_empty"}
    assert {p["severity"] for p in problems} == {"warning"}


def test_loss_mask_without_weight_is_flagged():
    row = openai_good()
    for m in row["messages"]:
        m.pop("weight", None)
    row["loss_mask"] = [0, 0, 0, 0, 1]
    _, problems = validate_row(row, "openai")
    assert [p["code"] for p in problems] == ["extra_keys", "loss_mask_ignored"]
    row["messages"][2]["weight"] = 0
    _, problems = validate_row(row, "openai")
    assert [p["code"] for p in problems] == ["extra_keys"]


def test_extra_keys_are_warnings_unless_strict(tmp_path):
    rows = [dict(openai_good(), reward=1, scenario_id="s") for _ in range(12)]
    path = tmp_path / "x.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = validate_file(path, "openai")
    assert report["ok"] and report["errors"] == 0 and report["warnings"] == 2
    assert report["extra_keys"] == {"reward": {"first_line": 1, "rows": 12, "severity": "warning"},
                                    "scenario_id": {"first_line": 1, "rows": 12, "severity": "warning"}}
    strict = validate_file(path, "openai", strict_keys=True)
    assert not strict["ok"] and strict["errors"] == 2 and strict["rows_with_errors"] == 12


def test_file_level_problems_carry_line_numbers(tmp_path):
    good = json.dumps(openai_good())
    bad_args = openai_good()
    bad_args["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{oops"
    lines = [good, good, "", "{not json", "[1]", json.dumps(bad_args), json.dumps(trl_messages_good())]
    path = tmp_path / "f.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"messages": "\xff"}\n')
    report = validate_file(path, "openai")
    assert not report["ok"]
    got = [(p["line"], p["code"]) for p in report["problems"]]
    assert got == [
        (3, "blank_line"), (4, "bad_json"), (5, "not_an_object"), (6, "arguments_not_json"),
        (7, "arguments_not_string"), (8, "not_utf8"), (None, "too_few_examples")]
    assert report["rows"] == 7 and report["rows_with_errors"] == 5
    text = format_report(report)
    assert text.startswith(f"INVALID: {path} as openai: 7 rows")
    assert f"{path}:6: error arguments_not_json at messages[2].tool_calls[0].function.arguments" in text


def test_bom_crlf_empty_and_mixed_shapes(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(openai_good()).encode() + b"\r\n")
    report = validate_file(path, "openai")
    assert [(p["line"], p["code"]) for p in report["problems"]][:2] == [(1, "crlf"), (1, "bom")]
    assert report["problems"][1]["message"].endswith(": write it without one (in Python, open it with "
                                                     "encoding='utf-8', not 'utf-8-sig')")  # what to do
    assert report["rows"] == 1 and report["rows_with_errors"] == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert validate_file(empty, "trl")["counts"] == {"empty_file": 1}
    mixed = validate_rows([trl_messages_good(), trl_completion_good()], "trl")
    assert not mixed["ok"] and mixed["problems"][0]["code"] == "mixed_shapes"
    assert mixed["problems"][0]["line"] == 2


def test_preference_note_and_format_argument():
    report = validate_rows([our_pref_good()], "openai")
    assert report["ok"] and report["shapes"] == {"preference": 1}
    assert "not OpenAI's hosted DPO shape" in report["notes"][0]
    assert FORMATS == ("openai", "trl")
    with pytest.raises(ValueError, match=r"format must be one of .*, got 'jsonl': pass format='openai' .* or "
                                         r"format='trl'"):
        validate_file("/nonexistent/x.jsonl", "jsonl")
    with pytest.raises(FileNotFoundError):
        validate_file("/nonexistent/x.jsonl", "openai")


def test_problem_list_is_capped_but_counted():
    bad = openai_good()
    bad["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{oops"
    report = validate_rows([bad] * 30, "openai", max_problems=5)
    assert len(report["problems"]) == 5 and report["problems_truncated"]
    assert report["counts"]["arguments_not_json"] == 30 and report["rows_with_errors"] == 30
    assert "more problems" in format_report(report, limit=3)


def test_run_validate_prints_and_returns_exit_codes(tmp_path):
    import io

    from whileai_pipeline.core.openai_format import run_validate, summary

    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(openai_good()) + "\n", encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(trl_messages_good()) + "\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert run_validate(good, "openai", out=out, err=err) == 0
    assert out.getvalue().startswith("OK: ")
    out = io.StringIO()
    assert run_validate(bad, "openai", out=out, err=err) == 1
    assert "arguments_not_string" in out.getvalue()
    out = io.StringIO()
    assert run_validate(bad, "trl", json_output=True, out=out, err=err) == 0
    assert json.loads(out.getvalue())["ok"] is True
    assert run_validate(tmp_path / "missing.jsonl", "openai", out=out, err=err) == 2
    assert run_validate(good, "csv", out=out, err=err) == 2
    assert "no such file" in err.getvalue() and "--format must be one of" in err.getvalue()
    digest = summary(validate_file(bad, "openai"))
    assert digest["ok"] is False and digest["errors"] == 1 and digest["extra_keys"] == ["reward"]
    assert digest["first_problems"][0].endswith("OpenAI wants arguments as a JSON string, got object "
                                                "(export format='openai')")
    json.dumps(digest)  # metadata-safe


@pytest.mark.parametrize("strict_keys", [False, True])
@pytest.mark.parametrize("fmt", FORMATS)
def test_workers_give_the_same_report(tmp_path, monkeypatch, fmt, strict_keys):
    """A file read by worker processes (many tiny chunks) gets the report one process gives."""
    from whileai_pipeline.core import parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 700)
    good = json.dumps(dict(openai_good(), reward=1)).encode()
    bad_args = openai_good()
    bad_args["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{oops"
    lines = []
    for i in range(90):
        lines.append([good, good + b"\r", b"", b"{not json", b"[1]", json.dumps(bad_args).encode(),
                      json.dumps(dict(trl_messages_good(), scenario_id=i)).encode(), b'{"messages": "\xff"}',
                      json.dumps(trl_completion_good()).encode()][i % 9])
    path = tmp_path / "messy.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n\n" + good)  # ends without a newline
    one = validate_file(path, fmt, strict_keys=strict_keys, max_problems=500, workers=1)
    two = validate_file(path, fmt, strict_keys=strict_keys, max_problems=500, workers=2)
    assert one == two
    assert one["rows"] == 81  # 90 lines, 10 of them blank, and the last one
    assert one["problems"][0]["line"] == 1
    if fmt == "openai":
        assert one["extra_keys"]["reward"]["first_line"] == 1
        assert one["extra_keys"]["scenario_id"]["first_line"] == 7
    assert {"blank_line", "bad_json", "not_utf8", "crlf", "bom"} <= set(one["counts"])


def test_trl_rows_that_trl_takes_pass():
    """What TRL 1.16's trainers accept: an implicit-prompt pair (TRL's extract_prompt takes the shared
    leading messages), tools as a JSON string (the trainers json.loads it), a dotted tool name, a prompt
    that ends on the system turn (an agent that speaks first; only maybe_apply_chat_template refuses it)."""
    ask = [{"role": "user", "content": "Where is order 7?"}]
    implicit = {"chosen": ask + [{"role": "assistant", "content": "On its way."}],
                "rejected": ask + [{"role": "assistant", "content": "No idea."}]}
    stringly = trl_messages_good()
    stringly["tools"] = json.dumps(TOOLS)
    dotted = trl_messages_good()
    dotted["tools"][0]["function"]["name"] = "orders.lookup"
    call = dotted["messages"][2]["tool_calls"][0]["function"]
    call["name"] = "orders.lookup"
    opener = {"prompt": [{"role": "system", "content": "Be exact."}],
              "completion": [{"role": "assistant", "content": "Hi, how can I help?"}]}
    for row, shape in ((implicit, "preference_implicit_prompt"), (stringly, "messages"), (dotted, "messages"),
                       (opener, "prompt_completion")):
        got, problems = validate_row(row, "trl")
        assert got == shape
        assert [p for p in problems if p["severity"] == "error"] == [], problems
    assert [p["code"] for p in validate_row(opener, "trl")[1]] == ["prompt_last_role"]


def test_a_user_turn_inside_a_dpo_side_is_a_warning_that_names_it():
    row = trl_pref_good()
    row["chosen"] += [{"role": "user", "content": "Also refund the fee."}, {"role": "assistant", "content": "Done."}]
    _, problems = validate_row(row, "trl")
    assert [(p["severity"], p["code"], p["where"]) for p in problems] == [  # the chosen side calls a tool too
        ("warning", "side_tool_output", "chosen[1].role"), ("warning", "side_not_model_output", "chosen[3].role")]
    assert "DPOTrainer scores the whole side as the model's words" in problems[1]["message"]


def test_blank_lines_and_a_bom_are_warnings_for_trl_and_errors_for_openai(tmp_path):
    """datasets.load_dataset reads both; OpenAI's upload check does not."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"\xef\xbb\xbf\n" + json.dumps(trl_messages_good()).encode() + b"\n\n")
    trl = validate_file(path, "trl")
    assert trl["ok"] and [(p["line"], p["code"], p["severity"], p.get("lines")) for p in trl["problems"]] == [
        (1, "bom", "warning", None), (1, "blank_line", "warning", 2)]  # a repeated warning: listed once
    assert trl["counts"] == {"bom": 1, "blank_line": 2} and trl["warnings"] == 3
    openai = validate_file(path, "openai")
    assert not openai["ok"]
    found = {(p["line"], p["code"], p["severity"]) for p in openai["problems"]}
    assert {(1, "bom", "error"), (1, "blank_line", "error"), (3, "blank_line", "error")} <= found


def _pair_calling(arguments):
    """A trl preference row whose sides are one assistant turn calling lookup_order with ``arguments``."""
    side = [{"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": arguments}}]}]
    return {"prompt": [{"role": "user", "content": "Where is order 7?"}], "chosen": side, "rejected": side}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("later,code", [({"id": 7.5}, "datasets_int_as_float"),
                                        ({"id": "null"}, "datasets_decodes_string")])
def test_a_type_that_changes_between_rows_is_a_warning_at_its_path(tmp_path, later, code):
    """datasets.load_dataset gives each path one type: 7 next to 7.5 loads as 7.0, "null" next to 7 as None."""
    report = validate_file(_write(tmp_path / "f.jsonl", [_pair_calling({"id": 7}), _pair_calling(later)]), "trl")
    assert report["ok"]
    found = [(p["line"], p["severity"], p["where"]) for p in report["problems"] if p["code"] == code]
    line = 1 if code == "datasets_int_as_float" else 2  # the value that changes: the integer, the string
    assert found == [(line, "warning", f"{side}[].tool_calls[].function.arguments.id")
                     for side in ("chosen", "rejected")]


def test_a_type_change_under_json_text_or_one_type_per_path_is_not_reported(tmp_path):
    """Objects whose keys differ (messages with and without tool_calls) are stored as JSON text and come
    back as written, whatever they hold; one type per path is typed as written."""
    messages_rows = []
    for arguments in ({"id": 7}, {"id": 7.5}, {"id": "null"}):
        row = trl_messages_good()
        row["messages"][2]["tool_calls"][0]["function"]["arguments"] = arguments
        messages_rows.append(row)
    for rows in (messages_rows, [_pair_calling({"id": 7}), _pair_calling({"id": 8})],
                 [_pair_calling({"q": "null"}), _pair_calling({"q": "7"})]):
        report = validate_file(_write(tmp_path / "f.jsonl", rows), "trl")
        assert not [p for p in report["problems"] if p["code"].startswith("datasets_")], report["problems"]


def test_workers_give_the_same_type_change_report(tmp_path, monkeypatch):
    from whileai_pipeline.core import parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 700)
    rows = [_pair_calling({"id": 7})] * 40 + [_pair_calling({"id": 7.5}), _pair_calling({"id": "true"})] * 3
    path = _write(tmp_path / "f.jsonl", rows)
    one, two = validate_file(path, "trl", workers=1), validate_file(path, "trl", workers=2)
    assert one == two
    assert {p["code"] for p in one["problems"]} == {"datasets_decodes_string"}  # int, float and string: text


def test_tools_that_differ_only_in_a_number_type_are_still_read(tmp_path):
    """Rows usually repeat one tools list, which the check reads once; 7 next to 7.0 is still a change."""
    def row(default):
        tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
            "type": "object", "properties": {"id": {"type": "integer", "default": default}}}}}]
        return {**_pair_calling({"id": 7}), "tools": tools}

    report = validate_file(_write(tmp_path / "f.jsonl", [row(7), row(7), row(7.0)]), "trl")
    found = [(p["line"], p["where"]) for p in report["problems"] if p["code"] == "datasets_int_as_float"]
    assert found == [(1, "tools[].function.parameters.properties.id.default")]


def _final_mask_row():
    row = openai_good()
    for m in row["messages"]:
        m.pop("weight", None)
    row["loss_mask"] = [0, 0, 0, 0, 1]
    return row


def test_a_warning_repeated_on_every_row_is_listed_once_with_its_count(tmp_path):
    """`loss_mask_ignored` (the same words on every row of a mask_mode='final' file) and CRLF endings came
    once per line and buried everything else; they are listed once, at the first line, with how many
    lines have them, as extra keys are. The counts still count each, and the problem list is not called
    truncated for them."""
    rows = [json.dumps(_final_mask_row()).encode() + b"\r" for _ in range(30)]
    bad = openai_good()
    bad["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{oops"
    rows[20] = json.dumps(bad).encode()  # an error after 20 lines of warnings
    path = tmp_path / "final.openai.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    report = validate_file(path, "openai")
    assert report["counts"] == {"loss_mask_ignored": 29, "crlf": 29, "arguments_not_json": 1}
    assert report["warnings"] == 29 + 29 + 1 and report["errors"] == 1  # + the loss_mask extra key
    assert [(p["line"], p["code"], p.get("lines")) for p in report["problems"]] == [
        (1, "crlf", 29), (1, "loss_mask_ignored", 29), (21, "arguments_not_json", None)]
    assert not report["problems_truncated"]
    text = format_report(report)
    assert len(text.splitlines()) == 5, text  # verdict, 3 problems, extra keys
    assert f"{path}:1: warning loss_mask_ignored at loss_mask: " in text
    assert "(and 28 more lines like it)" in text and "more problems" not in text
    assert f"{path}:21: error arguments_not_json" in text
    one = validate_file(path, "openai", max_problems=2)
    assert one["problems_truncated"] and "1 more problems" in format_report(one)
    assert validate_file(path, "openai", workers=1) == validate_file(path, "openai", workers=2)


def test_warnings_about_particular_rows_are_still_listed_per_row():
    """Only warnings with the same words on every line are listed once; one that names what is wrong in
    its row (an undeclared function's name) or marks a defect of that row to fix (an empty assistant
    turn) keeps a line per row."""
    rows = []
    for i in range(12):
        row = openai_good()
        row["messages"][2]["tool_calls"][0]["function"]["name"] = f"cancel_order_{i}"
        row["messages"] += [{"role": "user", "content": "thanks"}, {"role": "assistant", "content": " "}]
        rows.append(row)
    report = validate_rows(rows, "openai")
    assert report["counts"] == {"function_not_declared": 12, "assistant_empty": 12}
    assert [p["line"] for p in report["problems"]] == [line for line in range(1, 13) for _ in (0, 1)]
    assert all("lines" not in p for p in report["problems"])


def test_a_prompt_ending_on_the_system_turn_in_every_row_is_listed_once():
    """An agent that speaks first: every prompt is the system turn alone, the same warning on every row."""
    rows = [{"prompt": [{"role": "system", "content": "Greet the customer."}],
             "completion": [{"role": "assistant", "content": f"Hello, how can I help? ({i})"}]} for i in range(5)]
    report = validate_rows(rows, "trl")
    assert report["ok"] and report["counts"] == {"prompt_last_role": 5} and report["warnings"] == 5
    assert [(p["line"], p["where"], p["lines"]) for p in report["problems"]] == [(1, "prompt[0].role", 5)]



OTHER_FORMAT_CASES = [
    # (format checked, rows of the other format, what the note names)
    ("openai", trl_messages_good, "tool-call arguments as JSON objects"),
    ("openai", trl_completion_good, "prompt / completion lists of messages"),
    ("openai", trl_pref_good, "a prompt that is a list of messages"),
    ("trl", openai_good, "tool-call arguments as JSON strings"),
    ("trl", our_pref_good, "a prompt text beside chosen / rejected conversations"),
    ("trl", openai_dpo_good, "OpenAI's DPO keys"),
]


@pytest.mark.parametrize("fmt,make,tell", OTHER_FORMAT_CASES, ids=[f"{f}-{m.__name__}" for f, m, _ in OTHER_FORMAT_CASES])
def test_a_file_of_the_other_format_says_which_format_to_try(tmp_path, monkeypatch, fmt, make, tell):
    """`validate --format openai` on a TRL file (or the reverse) listed an error per line (unknown_shape,
    arguments_not_string, trl_keys...) and never said the obvious; the report now names the other format
    once, from what the one pass saw."""
    other = "trl" if fmt == "openai" else "openai"
    path = tmp_path / "other.jsonl"
    _write(path, [make() for _ in range(12)])
    report = validate_file(path, fmt)
    assert not report["ok"]
    assert report["looks_like"] == {"format": other, "rows": 12, "first_line": 1,
                                    "message": report["looks_like"]["message"]}
    assert tell in report["looks_like"]["message"]
    assert report["looks_like"]["message"].endswith(f"check it with --format {other}")
    lines = format_report(report).splitlines()
    assert lines[1] == f"note: {report['looks_like']['message']}"  # right under the verdict
    assert sum(line.startswith("note: the rows look like") for line in lines) == 1
    assert "not OpenAI's hosted DPO shape" not in "\n".join(lines)  # that note is about our own pairs
    assert validate_file(path, other)["looks_like"] is None
    from whileai_pipeline.core import parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 700)  # many chunks: the worker processes' events say it too
    assert validate_file(path, fmt, workers=2) == report


def test_the_other_format_note_needs_half_the_rows_with_errors(tmp_path):
    """One TRL row among openai rows with other errors is not a TRL file; a TRL file with some rows that
    OpenAI also takes (no tool call) still is."""
    bad = openai_good()
    bad["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{oops"
    stray = [trl_messages_good()] + [bad] * 3 + [openai_good()] * 8
    assert validate_rows(stray, "openai")["looks_like"] is None
    no_calls = trl_messages_good()
    no_calls["messages"] = [no_calls["messages"][1], no_calls["messages"][4]]
    mostly = [trl_messages_good()] * 3 + [no_calls] * 9
    report = validate_rows(mostly, "openai")
    assert report["rows_with_errors"] == 3 and report["looks_like"]["rows"] == 3
    assert "3 of 12 rows (the first at line 1) have tool-call arguments as JSON objects" in (
        report["looks_like"]["message"])
    good = validate_rows([openai_good()] * 12, "openai")
    assert good["looks_like"] is None and "note:" not in format_report(good)


def test_the_digest_carries_the_other_format_note_apart_from_the_problems(tmp_path):
    import io

    from whileai_pipeline.core.openai_format import run_validate, summary

    path = tmp_path / "sft.trl.jsonl"
    _write(path, [trl_completion_good() for _ in range(12)])
    out, err = io.StringIO(), io.StringIO()
    assert run_validate(path, "openai", out=out, err=err) == 1
    assert out.getvalue().splitlines()[1].startswith("note: the rows look like trl rows, not openai ones")
    digest = summary(validate_file(path, "openai"))
    assert digest["looks_like"]["format"] == "trl"
    assert all(" unknown_shape" in line or line.startswith("...") for line in digest["first_problems"])
    out = io.StringIO()
    assert run_validate(path, "openai", json_output=True, out=out, err=err) == 1
    assert json.loads(out.getvalue())["looks_like"]["format"] == "trl"


@pytest.mark.parametrize("workers", [1, 2])
def test_chat_template_kwargs_on_some_rows_only_is_an_error(tmp_path, monkeypatch, workers):
    """datasets.load_dataset fills a key a row lacks with None, and TRL passes
    ``**example.get("chat_template_kwargs", {})``: a row without the key in a file where another row has it
    raises TypeError (argument after ** must be a mapping, not NoneType) in maybe_apply_chat_template,
    SFTTrainer and DPOTrainer."""
    from whileai_pipeline.core import parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 700)
    with_kwargs = {**trl_messages_good(), "chat_template_kwargs": {"enable_thinking": False}}
    rows = [with_kwargs] * 5 + [trl_messages_good()] + [with_kwargs] * 5
    report = validate_file(_write(tmp_path / "f.jsonl", rows), "trl", workers=workers)
    assert not report["ok"]
    found = [(p["line"], p["severity"], p["where"]) for p in report["problems"]
             if p["code"] == "chat_template_kwargs_missing"]
    assert found == [(6, "error", "chat_template_kwargs")]
    message = next(p["message"] for p in report["problems"] if p["code"] == "chat_template_kwargs_missing")
    assert "line 1" in message and "None" in message
    # every row with it, or none: no problem
    for rows in ([with_kwargs] * 3, [trl_messages_good()] * 3):
        report = validate_file(_write(tmp_path / "g.jsonl", rows), "trl", workers=workers)
        assert report["ok"] and "chat_template_kwargs_missing" not in report["counts"]


def _with_nested(row, depth):
    """``row``'s JSON line with its ``"@"`` value replaced by ``depth`` nested objects (too deep for json.dumps)."""
    return json.dumps(row).replace('"@"', '{"a": ' * depth + "1" + "}" * depth) + "\n"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_value_nested_past_arrows_limit_is_an_error_not_a_crash(tmp_path, monkeypatch, workers):
    """Arrow refuses a column value nested 63 containers deep (datasets.load_dataset: ArrowInvalid:
    Recursion level in ArrowSchema struct exceeded); under a path kept as JSON text it loads. The walk
    over such a value recursed once per level and raised RecursionError past about 990 levels."""
    from whileai_pipeline.core import parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 700)
    # chosen[] (2 levels) .tool_calls[] (4) .function (5) .arguments (6), its x 57 more: 63
    for depth, ok in ((56, True), (57, False), (1000, False)):
        path = tmp_path / "f.jsonl"  # one key set per path: nothing kept as JSON text
        path.write_text(_with_nested(_pair_calling({"x": "@"}), depth) * 8, encoding="utf-8")
        report = validate_file(path, "trl", workers=workers)
        found = [(p["line"], p["severity"], p["where"].split(".x.")[0]) for p in report["problems"]
                 if p["code"] == "datasets_too_deep"]
        assert report["ok"] is ok, (depth, report["problems"])
        assert found == ([] if ok else [(1, "error", f"{side}[].tool_calls[].function.arguments")
                                        for side in ("chosen", "rejected")])
    # under messages, whose objects' keys differ, the loader keeps the value as JSON text
    row = trl_messages_good()
    row["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"x": "@"}
    path = tmp_path / "g.jsonl"
    path.write_text(_with_nested(row, 999) * 3, encoding="utf-8")
    report = validate_file(path, "trl", workers=workers)
    assert report["ok"] and "datasets_too_deep" not in report["counts"], report["problems"]


def test_a_line_with_19_digits_nested_1000_deep_gets_a_report_not_a_crash(tmp_path):
    """A line with 19 digits in a row is searched for integers beyond int64, and such an integer under a
    path kept as JSON text is looked up again in every row: both walks recursed once per level, and a
    value nested about 990 deep (orjson reads 1,024) raised RecursionError out of validate_file."""
    row = trl_messages_good()
    row["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"x": "@"}
    path = tmp_path / "f.jsonl"
    path.write_text(_with_nested(row, 990).replace(": 1}", f": {10**25}}}", 1) * 2, encoding="utf-8")
    report = validate_file(path, "trl", workers=1)
    assert report["ok"] and report["rows"] == 2, report["problems"]
    # not so deep, the integer is found and reported at its path
    path.write_text(_with_nested(row, 100).replace(": 1}", f": {10**25}}}", 1) * 2, encoding="utf-8")
    report = validate_file(path, "trl", workers=1)
    found = [(p["line"], p["where"].split(".x.")[0]) for p in report["problems"] if p["code"] == "datasets_big_int"]
    assert found == [(1, "messages[].tool_calls[].function.arguments")]


def test_chosen_and_rejected_too_deep_to_compare_get_a_report_not_a_crash(tmp_path):
    """chosen + rejected without a prompt: their shared leading messages are found by comparing them
    (as TRL's extract_prompt does), and comparing two values nested ~1,010 deep raised RecursionError."""
    first = {"role": "user", "content": "Where is order 7?", "meta": "@"}
    row = {"chosen": [first, {"role": "assistant", "content": "Shipped."}],
           "rejected": [first, {"role": "assistant", "content": "No idea."}]}
    path = tmp_path / "f.jsonl"
    path.write_text(_with_nested(row, 1010).replace('"@"', '{"a": ' * 1010 + "1" + "}" * 1010), encoding="utf-8")
    report = validate_file(path, "trl", workers=1)
    assert not report["ok"] and report["counts"].get("implicit_prompt_too_deep") == 1, report["problems"]


@pytest.mark.parametrize("null", ["null", "missing"])
def test_a_prompt_ending_on_an_assistant_turn_with_no_content_is_a_warning(null):
    """TRL 1.16's maybe_apply_chat_template continues a prompt's final assistant turn
    (continue_final_message=True), and transformers raises when that turn's content is None ('the final
    message has no "content" to continue'), under every template; the trainers' own tokenizing adds a
    generation prompt instead and take the row: a warning, as for a prompt ending on the system turn."""
    call = {"type": "function", "function": {"name": "lookup_order", "arguments": {"id": 7}}}
    last = {"role": "assistant", "tool_calls": [call]}
    if null == "null":
        last["content"] = None
    row = {"prompt": [{"role": "user", "content": "Where is order 7?"}, last],
           "completion": [{"role": "assistant", "content": "Let me check."}]}
    report = validate_rows([row, copy.deepcopy(row)], "trl")
    assert report["ok"], report["problems"]
    assert report["counts"] == {"prompt_last_content": 2} and report["warnings"] == 2
    [entry] = report["problems"]
    assert (entry["line"], entry["severity"], entry["where"], entry["lines"]) == (
        1, "warning", "prompt[1].content", 2)
    assert "maybe_apply_chat_template" in entry["message"] and "continue" in entry["message"]
    with_text = copy.deepcopy(row)
    with_text["prompt"][1]["content"] = "Let me look that up."
    assert validate_row(with_text, "trl")[1] == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_value_nested_past_arrows_limit_outside_the_conversation_is_an_error_too(tmp_path, monkeypatch, workers):
    """datasets.load_dataset refuses the whole file for a value nested 63 containers deep in any column
    (a run's lineage), not only in the conversational ones; under a path kept as JSON text it loads."""
    from whileai_pipeline.core import parallel

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 700)
    for depth, ok in ((61, True), (62, False), (1000, False)):  # lineage (1) .x (2) and depth more
        row = trl_messages_good()
        row["lineage"] = {"x": "@"}
        path = tmp_path / "f.jsonl"
        path.write_text(_with_nested(row, depth) * 6, encoding="utf-8")
        report = validate_file(path, "trl", workers=workers)
        found = [(p["line"], p["severity"], p["where"][:10]) for p in report["problems"]
                 if p["code"] == "datasets_too_deep"]
        assert report["ok"] is ok, (depth, report["problems"])
        assert found == ([] if ok else [(1, "error", "lineage.x.")]), report["problems"]
        assert "in the lineage column" in "".join(p["message"] for p in report["problems"]) or ok
        assert set(report["counts"]) <= {"datasets_too_deep"}, report["counts"]  # no type warning off the conversation
    # objects whose keys differ from row to row: the loader keeps the column as JSON text
    rows = []
    for i in range(4):
        row = trl_messages_good()
        row["lineage"] = {f"k{i}": "@"}
        rows.append(_with_nested(row, 200))
    path = tmp_path / "g.jsonl"
    path.write_text("".join(rows), encoding="utf-8")
    report = validate_file(path, "trl", workers=workers)
    assert report["ok"] and "datasets_too_deep" not in report["counts"], report["problems"]


def test_a_completion_ending_on_a_tool_turn_is_a_warning():
    """A run that stopped after a call, exported with mask_mode="final": the completion is the call and the
    tool's result (DECISIONS 16), and TRL trains every token of it, the result included. validate called
    the file OK with no warning."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": {"id": 7}}}
    row = {"prompt": [{"role": "user", "content": "Where is order 7?"}],
           "completion": [{"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"lost\"}"}]}
    report = validate_rows([row, copy.deepcopy(row), trl_completion_good()], "trl")
    assert report["ok"], report["problems"]
    assert report["counts"] == {"completion_ends_on_tool": 2}
    [entry] = report["problems"]
    assert (entry["line"], entry["severity"], entry["where"], entry["lines"]) == (1, "warning", "completion[1].role", 2)
    assert "tool's result" in entry["message"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_simulation_run_checked_before_its_export_says_to_export_it_first(tmp_path, monkeypatch, fmt):
    """`validate` on the run itself listed 164 problems (tool calls without ids, trl_keys) and never said
    that the file is a run, which the export turns into a training file."""
    from whileai_pipeline.core import parallel

    run = tmp_path / "run.jsonl"
    rows = [orjson.loads(line) for line in SAMPLE_RUN.read_bytes().splitlines()]
    _write(run, rows)
    report = validate_file(run, fmt)
    note = next(n for n in report["notes"] if "simulation run" in n)
    assert note.startswith(f"all {len(rows)} rows have steps, final_text, privileged: this looks like a "
                           "simulation run, not ")
    assert f"export_dataset(FILE, OUT, format='{fmt}')), then validate the file it writes" in note
    assert format_report(report).splitlines()[-1] == f"note: {note}"
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 20_000)  # many chunks: the workers' events say it too
    assert validate_file(run, fmt, workers=2) == report
    monkeypatch.undo()
    half = tmp_path / "half.jsonl"  # a training file with one stray run row is not a run
    exported = tmp_path / "exported.jsonl"
    wai.export_dataset(run, exported, format=fmt)
    _write(half, [orjson.loads(line) for line in exported.read_bytes().splitlines()] + rows[:1])
    assert not any("simulation run" in n for n in validate_file(half, fmt)["notes"])
    assert not any("simulation run" in n for n in validate_file(exported, fmt)["notes"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_pretty_printed_json_file_is_said_to_be_one_document_not_jsonl(tmp_path, fmt):
    """`validate` on rows saved with json.dump(rows, f, indent=2), or on an export's *.report.json, listed a
    bad_json error for every line and never said that the file is one JSON document, not JSONL."""
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}] * 12
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(rows, indent=2))
    report = validate_file(array, fmt)
    assert not report["ok"] and report["counts"]["bad_json"] == report["rows"]
    note = next(n for n in report["notes"] if "one JSON document" in n)
    assert note == (f"the whole file is one JSON document (an array of 12 values) over {report['rows']} lines, "
                    "not JSONL (one JSON value per line): write each row on a line of its own, e.g. with "
                    "whileai_pipeline.write_jsonl(path, rows), then validate that file")
    assert format_report(report).splitlines()[-1] == f"note: {note}"

    exported = tmp_path / "sft.openai.jsonl"
    wai.export_dataset(SAMPLE_RUN, exported, format="openai")
    summary = tmp_path / "sft.openai.report.json"
    summary.write_text(json.dumps({"path": str(exported), "n_written": 32, "warnings": []}, indent=2))
    note = next(n for n in validate_file(summary, fmt)["notes"] if "one JSON document" in n)
    assert note == (f"the whole file is one JSON document (an object) over 5 lines, not JSONL (one JSON value "
                    f"per line): it looks like an export's report; validate the file it describes, {exported}")
    # JSONL with a few broken lines is not one document
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(json.dumps(r) for r in rows) + "\n{\n")
    assert not any("one JSON document" in n for n in validate_file(broken, fmt)["notes"])
