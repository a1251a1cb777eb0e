"""Bad inputs, shared by the library and pipeline reliability tests.

Each case is a run file (bytes), an optional sidecar (bytes), and the outcome the library must give:
``ok`` (with a check on the report) or an error (the exception type, its leading token and, where a
line is to blame, the line number the message must name).
"""

import json
from dataclasses import dataclass, field

from whileai_pipeline.core.errors import (BadJsonlError, BadRowError, PrivilegedLeakError, RoundtripInvalidError,
                                         SchemaInvalidError)


def line(row) -> bytes:
    return json.dumps(row).encode() + b"\n"


GOOD = {"prompt": "Where is order 7?", "scenario_id": "s1", "reward": 1,
        "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": {"status": "shipped"}}],
        "final_text": "It shipped."}
GOOD_LINE = line(GOOD)


def with_(**changes):
    row = dict(GOOD)
    row.update(changes)
    return line(row)


@dataclass
class Case:
    name: str
    run: bytes
    sidecar: bytes | None = None
    error: type | None = None
    token: str = ""
    line: int | None = None
    says: str = ""                # what else the error message must say (after the token and place)
    n: int | None = None          # rows exported when ok
    report: dict = field(default_factory=dict)  # report entries that must hold when ok
    # Through the pipeline: "ok"; "raw:<token>" (raw_simulation_data fails, naming file:line when
    # `pipeline_line` is set); "gate:<check>" (that blocking check on sft_export fails the run).
    pipeline: str = "ok"
    pipeline_line: int | None = None


def _deep(depth):
    return b'{"prompt": "p", "x": ' + b"[" * depth + b"]" * depth + b"}\n"


CASES = [
    # ------------------------------------------------------------ the file itself
    Case("truncated_last_line", GOOD_LINE + b'{"prompt": "c", "fin', error=BadJsonlError, token="bad_jsonl:", line=2, pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("invalid_utf8", GOOD_LINE + b'{"prompt": "\xff\xfe"}\n', error=BadJsonlError, token="bad_jsonl:", line=2, pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("utf8_bom", b"\xef\xbb\xbf" + GOOD_LINE, n=1),
    # a mark of the file's encoding belongs at its start: inside (two files joined with cat) it is in a line
    Case("utf8_bom_on_line_2", GOOD_LINE + b"\xef\xbb\xbf" + GOOD_LINE, error=BadJsonlError, token="bad_jsonl:", line=2,
         says="byte order mark", pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("crlf_line_endings", GOOD_LINE.replace(b"\n", b"\r\n") * 2, n=2),
    Case("array_line", GOOD_LINE + b"[1, 2]\n", n=1, report={"rows_skipped": 1}, pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("number_line", b"42\n" + GOOD_LINE, n=1, report={"rows_skipped": 1}, pipeline="raw:bad_jsonl:", pipeline_line=1),
    Case("string_line", b'"hello"\n' + GOOD_LINE, n=1, report={"rows_skipped": 1}, pipeline="raw:bad_jsonl:", pipeline_line=1),
    Case("null_line", b"null\n" + GOOD_LINE, n=1, report={"rows_skipped": 1}, pipeline="raw:bad_jsonl:", pipeline_line=1),
    Case("empty_file", b"", n=0, report={"rows_read": 0}, pipeline="raw:empty_run:"),
    Case("only_blank_lines", b"\n\n   \n\t\n", n=0, report={"rows_read": 0}, pipeline="raw:empty_run:"),
    Case("blank_lines_between_rows", b"\n" + GOOD_LINE + b"\n\n" + GOOD_LINE, n=2),
    Case("single_50mb_line", with_(steps=[{"tool": "lookup", "arguments": {"id": 7}, "result": "x" * (50 << 20)}]),
         n=1),
    Case("nesting_10000_deep", GOOD_LINE + _deep(10_000), error=BadJsonlError, token="bad_jsonl:", line=2, pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("duplicate_keys_last_wins", b'{"prompt": "p", "final_text": "a", "reward": 0, "reward": 1}\n', n=1,
         report={"rewards": {"n_pass": 1, "n_fail": 0, "n_ungraded": 0}}),
    Case("trailing_garbage", GOOD_LINE.rstrip(b"\n") + b" x\n", error=BadJsonlError, token="bad_jsonl:", line=1, pipeline="raw:bad_jsonl:", pipeline_line=1),
    Case("two_objects_one_line", GOOD_LINE.rstrip(b"\n") + GOOD_LINE, error=BadJsonlError, token="bad_jsonl:",
         line=1, pipeline="raw:bad_jsonl:", pipeline_line=1),
    Case("nul_byte", GOOD_LINE.rstrip(b"\n") + b"\x00\n", error=BadJsonlError, token="bad_jsonl:", line=1, pipeline="raw:bad_jsonl:", pipeline_line=1),
    Case("open_brace_only", GOOD_LINE + b"{\n" + GOOD_LINE, error=BadJsonlError, token="bad_jsonl:", line=2, pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("python_repr_line", GOOD_LINE + b"{'prompt': 'p'}\n", error=BadJsonlError, token="bad_jsonl:", line=2, pipeline="raw:bad_jsonl:", pipeline_line=2),
    # The reference SDK writes NaN rewards as bare NaN tokens (spec E52): such files are read.
    Case("bare_nan_token", b'{"prompt": "p", "final_text": "a", "reward": NaN}\n', n=1,
         report={"rewards": {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}}),
    # Strict JSON orjson refuses but Python's json (and so the reference) reads: kept, written as the
    # documented conversions (null, U+FFFD); tests/core/test_exact_numbers.py checks the bytes.
    Case("number_beyond_a_double", b'{"prompt": "p", "final_text": "a", "reward": 1e400}\n', n=1,
         report={"rewards": {"n_pass": 1, "n_fail": 0, "n_ungraded": 0}}),  # inf passes, as in the reference
    Case("lone_surrogate_escape", b'{"prompt": "p", "final_text": "half an emoji: \\ud83d"}\n', n=1),
    Case("integer_beyond_64_bits", with_(steps=[{"tool": "lookup", "arguments": {"id": 2 ** 80}, "result": "ok"}]),
         n=1, report={"tool_call_roundtrip": {"invalid": 0}}),
    # ------------------------------------------------------------ rows
    Case("empty_object_row", GOOD_LINE + b"{}\n", error=SchemaInvalidError,
         token="schema_invalid in training_rows: 1:messages_missing", line=2),
    Case("steps_not_a_list", with_(steps="lookup then answer"), n=1),
    Case("steps_a_dict", with_(steps={"tool": "lookup"}), n=1),
    Case("messages_with_non_dict_items",
         line({"messages": ["x", 3, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}), n=1),
    Case("messages_only_non_dicts", line({"messages": ["x", 3]}), error=SchemaInvalidError,
         token="schema_invalid in training_rows: 0:messages_missing", line=1),
    # Shapes the exporters cannot read: the library says what is wrong and where (it once raised a bare
    # TypeError, or made up empty rows and nameless calls), the pipeline's raw stage refuses the line.
    Case("messages_a_number", GOOD_LINE + with_(messages=3), error=BadRowError, token="bad_row:", line=2,
         says="messages must be a list of message objects, got int 3", pipeline="raw:bad_jsonl:", pipeline_line=2),
    Case("messages_a_string", GOOD_LINE + with_(messages="see the steps"), error=SchemaInvalidError,
         token="schema_invalid in training_rows: 1:messages_missing", line=2, pipeline="raw:bad_jsonl:",
         pipeline_line=2),
    Case("tool_calls_true", line({"messages": [{"role": "user", "content": "q"},
                                              {"role": "assistant", "content": "a", "tool_calls": True}]}),
         error=BadRowError, token="bad_row:", line=1, says="tool_calls must be a list of call objects, got bool True",
         pipeline="raw:bad_jsonl:",
         pipeline_line=1),
    Case("tool_calls_of_strings", line({"messages": [{"role": "user", "content": "q"},
                                                    {"role": "assistant", "content": "a", "tool_calls": ["lookup"]}]}),
         n=1, pipeline="raw:bad_jsonl:", pipeline_line=1),
    # A DPO export (or a pairs file) given as the run: each row a prompt with no reply (the library exports it
    # as such and says it has no assistant turn; the pipeline ended with nothing to publish, exit 0)
    Case("a_preference_pair", GOOD_LINE + line({
        "prompt": "Where is order 7?", "chosen": [{"role": "user", "content": "Where is order 7?"},
                                                  {"role": "assistant", "content": "It shipped."}],
        "rejected": [{"role": "user", "content": "Where is order 7?"}, {"role": "assistant", "content": "No idea."}],
        "chosen_score": 1.0, "rejected_score": 0.0, "margin": 1.0}), n=2, pipeline="raw:bad_jsonl:", pipeline_line=2),
    # the same in OpenAI's preference format (a DPO export made with format "openai"): no prompt, no reply
    Case("an_openai_preference_pair", GOOD_LINE + line({
        "input": {"messages": [{"role": "user", "content": "Where is order 7?"}]},
        "preferred_output": [{"role": "assistant", "content": "It shipped."}],
        "non_preferred_output": [{"role": "assistant", "content": "No idea."}]}),
         error=SchemaInvalidError, token="schema_invalid in training_rows: 1:messages_missing", line=2,
         pipeline="raw:bad_jsonl:", pipeline_line=2),
    # a trajectory that keeps its own "chosen"/"rejected" notes (an arena-style run) is still a trajectory
    Case("a_trajectory_with_chosen_and_rejected_keys", line({"prompt": "Where is order 7?", "final_text": "It shipped.",
                                                            "reward": 1, "chosen": "reply A", "rejected": "reply B"}),
         n=1),
    Case("arguments_invalid_json", with_(steps=[{"tool": "lookup", "arguments": "{id: 7}", "result": "ok"}]),
         error=RoundtripInvalidError, token="tool_call_roundtrip_invalid: 1 of 1", pipeline="gate:tool_call_roundtrip"),
    Case("arguments_doubly_encoded",
         with_(steps=[{"tool": "lookup", "arguments": json.dumps(json.dumps({"id": 7})), "result": "ok"}]), n=1,
         report={"tool_call_roundtrip": {"invalid": 0}}),
    Case("arguments_null", with_(steps=[{"tool": "lookup", "arguments": None, "result": "ok"}]), n=1),
    Case("arguments_a_list", with_(steps=[{"tool": "lookup", "arguments": [1, 2], "result": "ok"}]),
         error=RoundtripInvalidError, token="tool_call_roundtrip_invalid:", pipeline="gate:tool_call_roundtrip"),
    Case("reward_nan_as_string", with_(reward="NaN"), n=1,
         report={"rewards": {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}}),
    Case("reward_bool", with_(reward=True), n=1, report={"rewards": {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}}),
    Case("reward_string", with_(reward="great"), n=1,
         report={"rewards": {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}}),
    Case("reward_above_one", with_(reward=1.5), n=1, report={"rewards": {"n_pass": 1, "n_fail": 0, "n_ungraded": 0}}),
    Case("reward_negative", with_(reward=-1), n=1, report={"rewards": {"n_pass": 0, "n_fail": 1, "n_ungraded": 0}}),
    # (1e200 - mean) ** 2 overflows: the reference raises OverflowError; the group's spread is inf (null)
    Case("reward_whose_spread_overflows", with_(reward=1e200) + with_(reward=0), n=2,
         report={"rewards": {"n_pass": 1, "n_fail": 1, "n_ungraded": 0}}),
    Case("reply_quotes_privileged",
         with_(final_text="Internally: the parcel was lost in the Leeds depot fire.",
               privileged={"reference": "the parcel was lost in the Leeds depot fire"}),
         error=PrivilegedLeakError, token="privileged_leak: 1 of 1", pipeline="gate:privileged_leak"),
    Case("privileged_not_an_object", with_(privileged="the parcel was lost in the Leeds depot fire"), n=1,
         report={"privileged_leaks": {"checked": False}}),
    # ------------------------------------------------------------ the sidecar
    Case("sidecar_not_json", GOOD_LINE, sidecar=b"{system_prompt: oops", error=ValueError, token="bad_sidecar:", pipeline="raw:bad_sidecar:"),
    Case("sidecar_system_prompt_not_text", GOOD_LINE, sidecar=b'{"system_prompt": {"text": "Be exact."}}',
         error=ValueError, token="bad_sidecar:", pipeline="raw:bad_sidecar:"),  # it was written as a repr
    Case("sidecar_tools_not_a_list", GOOD_LINE, sidecar=b'{"system_prompt": "S", "tools": {"name": "lookup"}}',
         error=ValueError, token="bad_sidecar:", pipeline="raw:bad_sidecar:"),
    Case("sidecar_an_array", GOOD_LINE, sidecar=b"[]", error=ValueError, token="bad_sidecar:", pipeline="raw:bad_sidecar:"),
    Case("sidecar_tools_not_schemas", GOOD_LINE, sidecar=b'{"system_prompt": "S", "tools": [1, "two", null]}',
         error=ValueError, token="bad_sidecar:", pipeline="raw:bad_sidecar:"),
    Case("sidecar_missing", GOOD_LINE, n=1, report={"system_prompt_source": "none", "tools_source": "none"}),
    Case("sidecar_good", GOOD_LINE, sidecar=b'{"system_prompt": "S", "tools": []}', n=1,
         report={"system_prompt_source": "sidecar", "with_system": 1}),
]
