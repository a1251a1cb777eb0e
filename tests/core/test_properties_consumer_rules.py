"""What the exporters write passes the project's own consumer check (``validate``), or the report says why.

The rows here are clean (tool names a trainer accepts, arguments that encode an object, every call answered,
ids that link), so every error ``validate_file`` would find is the exporter's doing, except one the spec
makes it write: a row whose conversation has no assistant turn (an agent that stopped before it spoke),
which the export writes as the reference does and must then name in a warning.
"""

import json
import re
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.openai_format import validate_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import conformance_strategies as S  # noqa: E402

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NAMES = ["lookup", "refund"]
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in NAMES]
# Arguments in every encoding the spec decodes to an object (3.5): dicts, JSON text, twice-encoded text, and
# the falsy values written as {}.
ARGUMENTS = st.one_of(st.sampled_from(S.ARG_DICTS), st.sampled_from(S.ARG_DICTS).map(json.dumps),
                      st.sampled_from(S.ARG_DICTS).map(lambda d: json.dumps(json.dumps(d))),
                      st.sampled_from([None, {}, "null", [], 0]))
REPLIES = st.sampled_from(S.PLAIN_REPLIES + S.THINK_REPLIES)
OWN_IDS = st.sampled_from([None, None, "call_0000", "call_0001", "call_0002", "call_Ab1", "c9"])
NO_REPLY = re.compile(r"^(\d+) of (\d+) rows have no assistant turn")


@st.composite
def clean_messages(draw):
    """A ``messages`` conversation a consumer accepts: every call answered before the next turn, tool messages
    naming their call's id in any order or leaving it out in call order (DECISIONS 9)."""
    msgs = [{"role": "user", "content": draw(st.sampled_from(S.PROMPTS))}]
    used = set()
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["calls", "calls", "text", "user"]))
        if kind == "text":
            msgs.append({"role": "assistant", "content": draw(REPLIES)})
        elif kind == "user":
            if msgs[-1]["role"] != "user":
                msgs.append({"role": "user", "content": draw(st.sampled_from(S.USER_TURNS))})
        else:
            calls, ids = [], []
            for _ in range(draw(st.integers(1, 3))):
                call_id = draw(OWN_IDS)
                if call_id in used:
                    call_id = None
                used.add(call_id)
                fn = {"name": draw(st.sampled_from(NAMES)), "arguments": draw(ARGUMENTS)}
                call = {"type": "function", "function": fn} if draw(st.booleans()) else dict(fn)
                if call_id:
                    call["id"] = call_id
                calls.append(call)
                ids.append(call_id)
            msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), REPLIES)), "tool_calls": calls})
            named = [i for i in draw(st.permutations(range(len(calls)))) if ids[i] and draw(st.booleans())]
            for i in named:
                msgs.append({"role": "tool", "content": draw(st.sampled_from(S.RESULT_STRINGS + [S.LONG_RESULT])),
                             "tool_call_id": ids[i]})
            for i in (i for i in range(len(calls)) if i not in named):
                msgs.append({"role": "tool", "content": draw(st.sampled_from(S.RESULT_STRINGS))})
    if msgs[-1]["role"] != "assistant" or draw(st.booleans()):
        msgs.append({"role": "assistant", "content": draw(REPLIES)})
    return msgs


@st.composite
def clean_steps(draw):
    steps = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["tool", "text", "user"]))
        if kind == "tool":
            step = {"tool": draw(st.sampled_from(NAMES)), "arguments": draw(ARGUMENTS), "result": draw(S.tool_results)}
            if draw(st.booleans()):
                step["text"] = draw(REPLIES)
            steps.append(step)
        elif kind == "text":
            steps.append({"text": draw(REPLIES)})
        else:
            steps.append({"user": draw(st.sampled_from(S.USER_TURNS))})
    return steps


@st.composite
def clean_rows(draw, silent=True):
    """A clean row; with ``silent``, sometimes one whose agent never spoke (no assistant turn at all)."""
    row = {"prompt": draw(st.sampled_from(S.PROMPTS)), "scenario_id": draw(st.sampled_from(S.SCENARIOS)),
           "reward": draw(st.sampled_from([0, 1, 0.5])), "rollout_index": draw(st.integers(0, 3))}
    kind = draw(st.sampled_from(["messages", "steps", "steps"] + (["silent"] if silent else [])))
    if kind == "messages":
        row["messages"] = draw(clean_messages())
    elif kind == "steps":
        row["steps"] = draw(clean_steps())
        row["final_text"] = draw(REPLIES.filter(str.strip))
    else:  # the agent stopped before its first word: a user turn only
        row["steps"] = draw(st.sampled_from([[], [{"user": "hello?"}]]))
        row["final_text"] = ""
    return row


def _no_reply_warning(report):
    found = [NO_REPLY.match(w) for w in report.get("warnings", [])]
    found = [m for m in found if m]
    assert len(found) <= 1, report["warnings"]
    return (int(found[0].group(1)), int(found[0].group(2))) if found else None


def test_a_row_the_agent_never_replied_in_is_named_in_the_report(tmp_path):
    """A run whose agent stopped before it spoke becomes a row with no assistant turn: OpenAI refuses a file
    holding one, and TRL trains a ``messages`` row's every token (assistant_only_loss aside), so the prompt
    would be learned as the model's words. The export writes it as the spec does, and says so."""
    rows = [{"prompt": "Where is order 7?", "final_text": "It shipped.", "reward": 1},
            {"prompt": "Where is order 8?", "final_text": "", "reward": 0}]
    for fmt in ("openai", "trl"):
        out = tmp_path / f"{fmt}.jsonl"
        report = wai.export_dataset(rows, out, format=fmt, system_prompt="You track orders.")
        assert report["n_written"] == 2
        errors = [p for p in validate_file(out, fmt)["problems"] if p["severity"] == "error"]
        assert [(p["line"], p["code"]) for p in errors] == [(2, "no_assistant_message")]
        assert _no_reply_warning(report) == (1, 2), report.get("warnings")
    # a TRL completion row cannot be made of it: dropped, and said so by that warning instead
    report = wai.export_dataset(rows, tmp_path / "final.jsonl", format="trl", mask_mode="final")
    assert report["no_completion_dropped"] == 1 and _no_reply_warning(report) is None
    report = wai.export_dataset(rows[:1], tmp_path / "fine.jsonl", system_prompt="You track orders.")
    assert _no_reply_warning(report) is None


@SETTINGS
@given(rows=st.lists(clean_rows(), min_size=1, max_size=4), fmt=st.sampled_from(["openai", "trl"]),
       mask_mode=st.sampled_from(["assistant", "final"]), unroll=st.booleans(),
       cap=st.sampled_from([None, 5, 0]), strip_think=st.booleans())
def test_clean_rows_export_to_files_their_consumer_accepts(tmp_path_factory, rows, fmt, mask_mode, unroll, cap,
                                                          strip_think):
    out = tmp_path_factory.mktemp("rows") / "out.jsonl"
    report = wai.export_dataset(rows, out, format=fmt, mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=cap,
                                strip_think=strip_think, system_prompt="You are the shop assistant.", tools=TOOLS)
    errors = [p for p in validate_file(out, fmt, max_problems=10_000)["problems"] if p["severity"] == "error"]
    if not report["n_written"]:  # every row dropped (TRL completion rows): an empty file, and the report says why
        assert [p["code"] for p in errors] == ["empty_file"]
        assert report["no_completion_dropped"] == len(rows)
        return
    silent = [p for p in errors if p["code"] == "no_assistant_message"]
    assert errors == silent, errors
    assert _no_reply_warning(report) == ((len(silent), report["n_written"]) if silent else None)


NO_REPLY_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side with no assistant turn")


def _no_reply_pairs_warning(report):
    found = [m for m in (NO_REPLY_PAIRS.match(w) for w in report.get("warnings", [])) if m]
    assert len(found) <= 1, report["warnings"]
    return (int(found[0].group(1)), int(found[0].group(2))) if found else None


def test_a_pair_side_the_agent_never_replied_in_is_named_in_the_report(tmp_path):
    """The same for the DPO export: an openai pair whose rejected agent never spoke is written as the spec
    writes it (a TRL one is dropped and counted), and the report says how many such pairs it wrote."""
    answered = {"prompt": "Refund A", "final_text": "Refunded.", "reward": 1}
    silent = {"prompt": "Refund A", "final_text": "", "reward": 0}
    pairs = [{"prompt": "Refund A", "chosen": answered, "rejected": silent},
             {"prompt": "Refund A", "chosen": answered, "rejected": dict(answered, final_text="No.")}]
    out = tmp_path / "dpo.jsonl"
    report = wai.export_preference(pairs, out, system_prompt="You refund orders.")
    errors = [p for p in validate_file(out, "openai")["problems"] if p["severity"] == "error"]
    assert [(p["line"], p["code"], p["where"]) for p in errors] == [(1, "no_assistant_message", "rejected")]
    assert _no_reply_pairs_warning(report) == (1, 2), report.get("warnings")
    trl = wai.export_preference(pairs, tmp_path / "dpo.trl.jsonl", format="trl", system_prompt="You refund orders.")
    assert trl["no_completion_dropped"] == 1 and _no_reply_pairs_warning(trl) is None
    assert _no_reply_pairs_warning(wai.export_preference(pairs[1:], tmp_path / "fine.jsonl")) is None


@SETTINGS
@given(rows=st.lists(clean_rows(), min_size=2, max_size=8), fmt=st.sampled_from(["openai", "trl"]),
       strip_think=st.booleans(), system_prompt=st.sampled_from(["You are the shop assistant.", None]))
def test_clean_pairs_export_to_files_their_consumer_accepts(tmp_path_factory, rows, fmt, strip_think, system_prompt):
    for i, row in enumerate(rows):  # one prompt, so every pair of rewards that differ can pair
        row["prompt"], row["reward"] = "Refund order A", i % 3 / 2
    pairs, _ = wai.build_preference_pairs(rows, max_pairs_per_prompt=4, min_margin=0.5)
    if not pairs:
        return
    out = tmp_path_factory.mktemp("pairs") / "dpo.jsonl"
    report = wai.export_preference(pairs, out, format=fmt, strip_think=strip_think, system_prompt=system_prompt,
                                   tools=TOOLS, validate=False)
    if not report["pairs"]:
        assert report["no_completion_dropped"] == len(pairs) and not out.exists()
        return
    checked = validate_file(out, fmt, max_problems=10_000)
    errors = [p for p in checked["problems"] if p["severity"] == "error"]
    silent = {p["line"] for p in errors if p["code"] == "no_assistant_message"}
    assert [p for p in errors if p["code"] != "no_assistant_message"] == []
    assert _no_reply_pairs_warning(report) == ((len(silent), report["pairs"]) if silent else None)


@st.composite
def answered_calls(draw):
    """Assistant turns of calls (ids of their own or none, ints among them), each call's arguments and its tool
    result naming the call's number: tool messages that name their id come in any order, the others in call
    order, so the linking rule (DECISIONS 9) has exactly one right answer."""
    msgs, number, used = [{"role": "user", "content": "q"}], 0, set()
    for _ in range(draw(st.integers(1, 4))):
        calls = []
        for _ in range(draw(st.integers(1, 3))):
            call_id = draw(st.sampled_from([None, None, None, "call_0000", "call_0001", "call_0003", "call_Ab1", 7]))
            if call_id is not None and str(call_id) in used:
                call_id = None
            used.add(str(call_id))
            call = {"type": "function", "function": {"name": "lookup", "arguments": {"call": number}}}
            if call_id is not None:
                call["id"] = call_id
            calls.append((number, call_id, call))
            number += 1
        msgs.append({"role": "assistant", "content": "", "tool_calls": [c for _, _, c in calls]})
        named = [c for c in draw(st.permutations(calls)) if c[1] is not None and draw(st.booleans())]
        for n, call_id, _ in named:
            msgs.append({"role": "tool", "content": f"result of {n}", "tool_call_id": call_id})
        for n, _, _ in (c for c in calls if c not in named):
            msgs.append({"role": "tool", "content": f"result of {n}"})
        if draw(st.booleans()):
            msgs.append({"role": "assistant", "content": "ok"})
    return msgs


@settings(max_examples=300, deadline=None, derandomize=True)
@given(messages=answered_calls(), fmt=st.sampled_from(["openai", "trl"]))
def test_every_tool_message_links_to_the_call_it_answers(messages, fmt):
    rows = wai.training_rows([{"messages": messages}])
    if fmt == "trl":
        rows = wai.to_trl(rows)
    calls = {}
    for message in rows[0]["messages"]:
        for call in message.get("tool_calls") or ():
            assert call["id"] not in calls, "two calls with one id"
            arguments = call["function"]["arguments"]
            if fmt == "openai":
                assert isinstance(arguments, str)
                arguments = json.loads(arguments)  # the round-trip: a JSON string that parses to the object
            calls[call["id"]] = arguments["call"]
        if message["role"] == "tool":
            assert calls[message["tool_call_id"]] == int(message["content"].rsplit(" ", 1)[1])
