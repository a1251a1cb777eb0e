"""A row that calls a tool its written tools do not declare is trained to call a tool it is not given.

Both exporters say so in a warning: how many rows (pairs: chosen sides), the first tool's name and the
output line it is on. A rejected side's such call is a fair negative and is not counted.
"""

import orjson
import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel

LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
UNDECLARED = "call a tool that the tools written with them"


def _row(tool, reward=1.0, n=0):
    return {"prompt": f"where is order {n}?", "scenario_id": f"s{n}", "rollout_index": 0, "reward": reward,
            "steps": [{"tool": tool, "arguments": {"id": n}, "result": "shipped"}, {"text": "It shipped."}],
            "final_text": "It shipped."}


def _write_run(path, rows, tools=(LOOKUP,)):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    path.with_name(path.name.replace(".jsonl", ".meta.json")).write_bytes(
        orjson.dumps({"system_prompt": "You help with orders.", "tools": list(tools)}))
    return path


def _warnings(report, words):
    return [w for w in report.get("warnings", []) if words in w]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_sft_export_counts_rows_calling_undeclared_tools(tmp_path, fmt):
    rows = [_row("lookup", n=0), _row("refund", n=1), _row("lookup", n=2), _row("cancel", n=3)]
    src = _write_run(tmp_path / "run.jsonl", rows)
    report = wai.export_dataset(src, tmp_path / "out.jsonl", format=fmt)
    (warning,) = _warnings(report, UNDECLARED)
    assert warning.startswith("2 of 4 rows call a tool that the tools written with them (from the sidecar) do not "
                              "declare (first 'refund', line 2 of the output)")
    written = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert "refund" in str(written[1]) and "refund" not in str(written[0])  # the line named makes the call


def test_sft_export_is_quiet_when_every_call_is_declared(tmp_path):
    src = _write_run(tmp_path / "run.jsonl", [_row("lookup", n=i) for i in range(3)])
    assert not _warnings(wai.export_dataset(src, tmp_path / "out.jsonl"), UNDECLARED)


def test_tools_passed_as_argument_are_the_ones_read(tmp_path):
    src = _write_run(tmp_path / "run.jsonl", [_row("lookup"), _row("refund", n=1)])
    refund = {"type": "function", "function": {"name": "refund"}}
    report = wai.export_dataset(src, tmp_path / "out.jsonl", tools=[refund])
    (warning,) = _warnings(report, UNDECLARED)
    assert warning.startswith("1 of 2 rows call a tool that the tools written with them (from the argument) do not "
                              "declare (first 'lookup', line 1 of the output)")


def test_flat_tool_schemas_declare_their_names_and_unreadable_ones_turn_the_check_off():
    from whileai_pipeline.core.wire import declared_tool_names

    assert declared_tool_names([LOOKUP, {"type": "function", "name": "refund"}]) == {"lookup", "refund"}
    assert declared_tool_names([LOOKUP, {"type": "function", "function": {"description": "no name"}}]) is None
    assert declared_tool_names([LOOKUP, "lookup"]) is None
    assert declared_tool_names([]) is None and declared_tool_names(None) is None


def test_a_tool_list_whose_names_cannot_be_read_gives_no_warning(tmp_path):
    nameless = {"type": "function", "function": {"description": "a tool with no name"}}
    src = _write_run(tmp_path / "run.jsonl", [_row("refund")], tools=[LOOKUP, nameless])
    assert not _warnings(wai.export_dataset(src, tmp_path / "out.jsonl", validate=False), UNDECLARED)


def test_pooled_export_gives_the_same_warning(tmp_path, monkeypatch):
    rows = [_row("lookup" if i % 3 else "refund", n=i) for i in range(120)]
    src = _write_run(tmp_path / "run.jsonl", rows)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)  # many chunks even for a small file
    one = wai.export_dataset(src, tmp_path / "one.jsonl", workers=1)
    two = wai.export_dataset(src, tmp_path / "two.jsonl", workers=2)
    assert _warnings(one, UNDECLARED) == _warnings(two, UNDECLARED)
    assert _warnings(two, UNDECLARED)[0].startswith("40 of 120 rows call a tool")


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_preference_export_counts_chosen_sides_only(tmp_path, fmt):
    good, bad = _row("lookup"), _row("refund", reward=0.0)
    pairs = [{"prompt": "where is order 0?", "chosen": good, "rejected": bad, "margin": 1.0},
             {"prompt": "where is order 0?", "chosen": bad, "rejected": good, "margin": 1.0},
             {"prompt": "where is order 0?", "chosen": bad, "rejected": bad, "margin": 1.0}]
    report = wai.export_preference(pairs, tmp_path / "dpo.jsonl", tools=[LOOKUP], system_prompt="S", format=fmt)
    (warning,) = _warnings(report, "calls a tool the tools written with them")
    assert warning.startswith("2 of 3 pairs have a chosen side that calls a tool the tools written with them (from "
                              "the argument) do not declare (first 'refund', line 2 of the output)")
    assert "rejected side" in warning  # says why a rejected side's call is not counted


def test_pooled_preference_export_gives_the_same_warnings(tmp_path, monkeypatch):
    own = {"role": "system", "content": "Own rules."}
    good, bad = _row("lookup"), _row("refund", reward=0.0)
    with_system = {"messages": [own, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    pairs = [{"prompt": "q", "chosen": bad if i % 4 == 0 else good, "rejected": with_system if i % 5 == 0 else bad,
              "margin": 1.0} for i in range(80)]
    src = tmp_path / "pairs.jsonl"
    src.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in pairs))
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)  # many chunks even for a small file
    kwargs = dict(tools=[LOOKUP], system_prompt="S", validate=False)
    one = wai.export_preference(src, tmp_path / "one.jsonl", workers=1, **kwargs)
    two = wai.export_preference(src, tmp_path / "two.jsonl", workers=2, **kwargs)
    assert one["warnings"] == two["warnings"]
    assert [w for w in two["warnings"] if w.startswith("20 of 80 pairs have a chosen side that calls a tool")]
    assert [w for w in two["warnings"] if w.startswith("16 of 80 pairs have a side that opens with its own system")]


@pytest.mark.parametrize("fmt, kwargs, expected", [
    ("trl", {"unroll": True}, ("1 of 6", 3)),  # the sample after it repeats the call in its prompt
    ("trl", {"mask_mode": "final"}, None),  # the call is in the prompt: the final reply is all TRL trains
    ("openai", {"unroll": True}, ("2 of 6", 3)),  # OpenAI trains every assistant turn of a row
    ("openai", {"mask_mode": "final"}, ("1 of 3", 2)),
])
def test_a_trl_prompt_completion_row_counts_the_calls_of_its_completion_only(tmp_path, fmt, kwargs, expected):
    """TRL trains a prompt/completion row's completion only: a call in its prompt is not learned, and each
    unrolled sample after the call repeats it there, so counting those rows said the model learns the call in
    rows that do not teach it."""
    src = _write_run(tmp_path / "run.jsonl", [_row("lookup", n=0), _row("refund", n=1), _row("lookup", n=2)])
    report = wai.export_dataset(src, tmp_path / "out.jsonl", format=fmt, **kwargs)
    found = _warnings(report, UNDECLARED)
    if expected is None:
        assert not found, found
    else:
        (warning,) = found
        count, line = expected
        assert warning.startswith(f"{count} rows call a tool"), warning
        assert f"(first 'refund', line {line} of the output)" in warning, warning


NAMELESS = [{"function": {"name": None, "arguments": "{}"}}, {"function": {"arguments": "{}"}}, "lookup",
            {"function": "lookup"}]


def _own_messages(call, content="It shipped."):
    return {"prompt": "where is order 7?", "reward": 1.0,
            "messages": [{"role": "user", "content": "where is order 7?"},
                         {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "content": "shipped"}, {"role": "assistant", "content": content}]}


@pytest.mark.parametrize("call", NAMELESS, ids=["name-none", "no-name", "call-a-string", "function-a-string"])
def test_a_call_without_a_name_is_said_to_be_one(tmp_path, call):
    """The export writes such a call with the name "" (which validate refuses): the warning said "first ''"
    and to add that tool's schema, which no schema can be."""
    src = tmp_path / "run.jsonl"
    src.write_bytes(orjson.dumps(_own_messages(call)) + b"\n")
    report = wai.export_dataset(src, tmp_path / "out.jsonl", tools=[LOOKUP], system_prompt="S")
    (warning,) = _warnings(report, UNDECLARED)
    assert "(first a call with no function name, which validate refuses: function_name_missing, line 1 of the " \
           "output)" in warning, warning
    pair = {"prompt": "where is order 7?", "chosen": _own_messages(call), "rejected": _own_messages(call, "No."),
            "margin": 1.0}
    report = wai.export_preference([pair], tmp_path / "dpo.jsonl", tools=[LOOKUP], system_prompt="S")
    (warning,) = _warnings(report, "calls a tool the tools written with them")
    assert "(first a call with no function name, which validate refuses" in warning, warning
