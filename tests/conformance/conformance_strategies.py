"""Hypothesis strategies for realistic simulated-agent trajectory rows (EXPORT_SPEC section 1).

Everything here is plain data: the same generated rows are deep-copied and fed to the reference
(whileai 0.105) and to whileai_pipeline, and the outputs are compared by the harness.

Design notes
* Texts come from small pools so that prompts and scenario_ids repeat (groups form, pairs form) and
  so that privileged strings are quoted verbatim (or with case/whitespace changes) by replies.
* Privileged strings are >= 12 normalized characters (LEAK_MIN_QUOTE_CHARS), with a few short ones
  that must not count.
* Tool-call arguments cover dict / JSON string / 2x..5x string-encoded / malformed / None / "" /
  lists / scalars / NaN; results cover objects, strings, long strings (truncation), scalars, None.
* Explicit ids brought by input tool calls mostly look like OpenAI's (``call_AbC12``), and sometimes
  like the ids the export generates (``call_0001``), so the harness's prediction of an id that skips
  one the row brings (DECISIONS 9) is exercised.
* Non-string message content (dict/list/number/bool/None) appears only in ``messages`` rows and never
  carries privileged text (its text differs between the reference and us by DECISIONS 10, and the
  leak check reads string content only).
"""

from __future__ import annotations

import json
import os

from hypothesis import strategies as st

NAN = float("nan")
INF = float("inf")

# --------------------------------------------------------------------------------------------
# Pools
# --------------------------------------------------------------------------------------------

PROMPTS = [
    "Where is order 7?",
    "Refund order A",
    "Refund  order A",  # groups with "refund order a" in build_preference_pairs, not in training groups
    "refund order a",
    "Cancel my subscription, please.",
    "Réservez une table pour deux à 20h",
    "注文をキャンセルしてください",
    "Why was I charged twice? 🙂",
]

SCENARIOS = ["s1", "s2", "s3", "scn-Refund"]

TOOLS_NAMES = ["lookup", "refund", "search_orders", "cancel_subscription"]

REFERENCES = [
    "the entity does not exist: report it missing and do not act",
    "Order 7 was already refunded on Monday; do not refund it again",
    "the subscription renews tomorrow, cancel it before midnight",
]
PRINCIPLES = [
    "never refund without verifying the order first",
    "Tell the user when a tool failed instead of guessing",
]
HIDDEN_STATES = [
    {"world_state": "order delayed in transit", "tool_condition": "lookup returns stale data for order 7"},
    {
        "world_state": "the warehouse is closed for inventory",
        "faults": {"lookup": {"kind": "timeout", "note": "the first lookup call times out"}},
        "history": ["customer called twice about it", "agent promised a callback"],
    },
    {"world_state": "duplicate charge pending reversal", "count": 2, "flag": True},
]
SHORT_PRIVILEGED = ["n/a", "late", "refund it"]  # < 12 chars: never a needle

PLAIN_REPLIES = [
    "It shipped yesterday.",
    "I refunded order A.",
    "I could not find that order.",
    "Done.",
    "Votre table est réservée. 🍷",
    "キャンセルしました。",
    "The lookup tool failed, so I cannot confirm the status.",
    "No.",
]

THINK_REPLIES = [
    "<think>check the order first</think>It shipped yesterday.",
    "<THINK>maybe refund?</Think>  I refunded order A.",
    "Sure <think>plan</think> thing",
    "a<think>1\n2</think>\n\nb",
    "<think>one</think>x<think>two</think>y",
    "<think>unclosed thought, never finished",
    "  padded reply  ",
    "   ",
    "",
]

USER_TURNS = ["Also, is it insured?", "Thanks!", "No, the other one.", "¿Y el reembolso?", "ok"]

RESULT_STRINGS = ["ok", "not found", "shipped", "Refund issued: ref R-19, €12.50"]

LONG_RESULT = (
    "ORDER LOG\n" + "\n".join(f"line {i}: status=shipped carrier=DHL note=é" for i in range(30))
)

ARG_DICTS = [
    {"id": 7},
    {"id": 7, "q": "é"},
    {"order": "A", "amount": 12.5, "currency": "EUR"},
    {"filters": {"status": ["open", "late"], "since": "2024-01-02"}, "limit": 3},
    {"reference": "R-19", "note": "customer reference"},  # a legitimate argument named like a blocked key
    {"query": "日本語 🙂", "exact": False, "page": None},
    # floats Python's json and orjson spell differently (1e-07 and 1e-7, 1e-05 and 0.00001, 1e+300 and 1e300)
    {"amount": 1e-07, "rate": 1e-05, "cap": 1e300, "price": 0.1},
]

RESULT_OBJECTS = [
    {"status": "shipped"},
    {"ok": True},
    {"ok": False, "error": "timeout"},
    {"items": [1, "é"], "total": 2},
    {"hidden_state": "a result field with a blocked name", "ok": True},  # conversation: never scrubbed
]


# Debugging aid only (never set in CI): CONFORMANCE_EXCLUDE="nanstr,json4" leaves those argument
# kinds out, so that one known difference does not hide the next one while investigating.
EXCLUDED_KINDS = frozenset(filter(None, os.environ.get("CONFORMANCE_EXCLUDE", "").split(",")))


def _enc(value, times: int):
    for _ in range(times):
        value = json.dumps(value)
    return value


# --------------------------------------------------------------------------------------------
# Leaf strategies
# --------------------------------------------------------------------------------------------

arg_dicts = st.sampled_from(ARG_DICTS)


@st.composite
def tool_arguments(draw):
    """Arguments of a tool step / tool call, in every encoding the spec lists (3.5)."""
    d = draw(arg_dicts)
    kinds = [
        "dict", "dict", "dict", "json", "json", "json2", "json3", "json4", "json5",
        "malformed", "text", "quoted", "none", "empty", "null", "emptylist", "list",
        "liststr", "int", "intstr", "truestr", "nan", "nanstr", "inf", "zero", "false",
        "spaced",
    ]
    kind = draw(st.sampled_from([k for k in kinds if k not in EXCLUDED_KINDS]))
    return {
        "dict": d,
        "json": _enc(d, 1),
        "json2": _enc(d, 2),
        "json3": _enc(d, 3),
        "json4": _enc(d, 4),
        "json5": _enc(d, 5),
        "malformed": "{a: 1}",
        "text": "hello",
        "quoted": '"hello"',
        "none": None,
        "empty": "",
        "null": "null",
        "emptylist": [],
        "list": [1, 2],
        "liststr": "[1, 2]",
        "int": 5,
        "intstr": "123",
        "truestr": "true",
        "nan": {"x": NAN, "id": 7},
        "nanstr": '{"x": NaN}',
        "inf": {"x": INF},
        "zero": 0,
        "false": False,
        "spaced": '{ "a" : 1 }',
    }[kind]


tool_results = st.one_of(
    st.sampled_from(RESULT_OBJECTS),
    st.sampled_from(RESULT_STRINGS),
    st.just(LONG_RESULT),
    st.sampled_from([None, 5, 0, False, [1, "é"], ""]),
)

replies = st.one_of(st.sampled_from(PLAIN_REPLIES), st.sampled_from(THINK_REPLIES))


@st.composite
def privileged_blocks(draw):
    block = {}
    if draw(st.booleans()):
        block["reference"] = draw(st.sampled_from(REFERENCES + SHORT_PRIVILEGED))
    if draw(st.booleans()):
        block["principle"] = draw(st.sampled_from(PRINCIPLES + SHORT_PRIVILEGED))
    if draw(st.booleans()):
        block["hidden_state"] = draw(st.sampled_from(HIDDEN_STATES))
    if draw(st.integers(0, 3)) == 3:
        block["rubric"] = {"criteria": ["verifies the order", "does not over-refund"]}
    return block


def _needles(priv) -> list[str]:
    out: list[str] = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, str) and len(" ".join(v.split())) >= 12:
            out.append(v)

    if isinstance(priv, dict):
        for k in ("reference", "principle", "hidden_state"):
            if priv.get(k):
                walk(priv[k])
    return out


@st.composite
def quoting(draw, needle: str) -> str:
    """A reply that quotes ``needle``: verbatim, upper-cased, or with whitespace runs."""
    how = draw(st.sampled_from(["verbatim", "upper", "spaces"]))
    if how == "upper":
        q = needle.upper()
    elif how == "spaces":
        q = needle.replace(" ", "   ", 2)
    else:
        q = needle
    return draw(st.sampled_from(["As I was told: {}.", "{}", "Note -- {} -- sorry."])).format(q)


lineage_dicts = st.one_of(
    st.fixed_dictionaries(
        {
            "system_prompt_sha": st.sampled_from(["3f2a9c1d", "b0b0b0b0"]),
            "scoring_run_id": st.sampled_from(["score_0a1b2c3d4e5f", "score_ffffeeee0000"]),
            "source": st.sampled_from(["grade", "eval"]),
            "judge": st.sampled_from(["lambda_judge", "rubric_judge"]),
        },
        optional={
            "parent": st.sampled_from(SCENARIOS),
            "model": st.sampled_from(["m1", "m2"]),
            # blocked keys nested in carried metadata (DECISIONS 8 removes them, the reference keeps them)
            "privileged": st.builds(lambda r: {"reference": r}, st.sampled_from(REFERENCES)),
            "replayed": st.sampled_from(
                [{"from": "run_1", "reference": "run_1 row 4"}, {"from": "run_2", "items": [{"vector": [0.1, 0.2]}]}]
            ),
            "judge_meta": st.just({"rubric": {"a": 1}, "note": "kept", "deep": [{"principle": "x"}]}),
        },
    ),
)


# --------------------------------------------------------------------------------------------
# Steps rows
# --------------------------------------------------------------------------------------------


@st.composite
def steps_lists(draw, *, leak_needle=None):
    steps = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["tool", "tool", "text", "text", "user", "both"]))
        if kind == "user":
            steps.append({"user": draw(st.sampled_from(USER_TURNS))})
        elif kind == "both":  # E7: user wins, tool ignored
            steps.append({"user": draw(st.sampled_from(USER_TURNS)), "tool": "lookup", "arguments": {"id": 1}})
        elif kind == "tool":
            step = {"tool": draw(st.sampled_from(TOOLS_NAMES)), "arguments": draw(tool_arguments())}
            if draw(st.integers(0, 5)):
                step["result"] = draw(tool_results)
            if draw(st.booleans()):
                step["text"] = draw(st.sampled_from(["Checking.", "Let me look that up.", "<think>hm</think>Looking.", ""]))
            steps.append(step)
        else:
            step = {"text": draw(replies)}
            if draw(st.integers(0, 3)) == 3:
                step.update({"logprob": -1.25, "n_tokens": 12, "truncated": False})
            steps.append(step)
    if leak_needle is not None and steps and draw(st.booleans()):
        steps.append({"text": draw(quoting(leak_needle))})
    return steps


# --------------------------------------------------------------------------------------------
# Messages rows
# --------------------------------------------------------------------------------------------

NON_STRING_CONTENT = [{"ok": True, "note": "é"}, ["multi", "modal"], 0, 7, False, None, 1.5, {"n": None}]


@st.composite
def message_lists(draw):
    msgs = []
    if draw(st.integers(0, 4)) == 4:
        msgs.append({"role": "system", "content": "You are the shop assistant."})
    user_content = draw(st.one_of(st.sampled_from(PROMPTS), st.sampled_from(NON_STRING_CONTENT[:4])))
    msgs.append({"role": "user", "content": user_content})
    own_counter = 0
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["calls", "calls", "text", "user", "developer", "junk"]))
        if kind == "text":
            content = draw(st.one_of(replies, st.sampled_from(NON_STRING_CONTENT)))
            msgs.append({"role": "assistant", "content": content})
            if draw(st.integers(0, 5)) == 5:  # a row of an OpenAI fine-tuning file given back as a run
                msgs[-1]["weight"] = draw(st.sampled_from([0, 1]))
        elif kind == "user":
            msgs.append({"role": "user", "content": draw(st.sampled_from(USER_TURNS))})
        elif kind == "developer":
            msgs.append({"role": draw(st.sampled_from(["developer", "function"])), "content": "internal"})
        elif kind == "junk":
            msgs.append("not a message")
        else:
            calls = []
            ids = []
            for _ in range(draw(st.integers(1, 3))):
                shape = draw(st.sampled_from(["envelope", "envelope", "envelope", "loose", "nondict", "emptyid"]))
                name = draw(st.sampled_from(TOOLS_NAMES))
                args = draw(tool_arguments())
                if shape == "nondict":
                    calls.append("garbage")
                    ids.append(None)
                    continue
                fn = {"name": name, "arguments": args}
                if shape == "loose":
                    call = dict(fn)
                else:
                    call = {"type": "function", "function": fn}
                if shape == "emptyid":
                    call["id"] = ""
                    ids.append(None)
                elif draw(st.booleans()):
                    own_counter += 1
                    cid = draw(st.sampled_from([f"call_Ab{own_counter}x", f"call_Ab{own_counter}x",
                                                "call_%04d" % (own_counter - 1)]))
                    call["id"] = cid
                    ids.append(cid)
                else:
                    ids.append(None)
                calls.append(call)
            content = draw(st.one_of(st.just(None), st.just(""), replies))
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            # tool results: some with their own tool_call_id, some without, sometimes fewer/more
            for i in range(draw(st.integers(0, len(calls) + 1))):
                tmsg = {"role": "tool", "content": draw(st.one_of(tool_results, st.just(LONG_RESULT)))}
                if draw(st.booleans()):
                    tmsg["name"] = draw(st.sampled_from(TOOLS_NAMES))
                link = draw(st.sampled_from(["none", "none", "own", "own", "other", "zero"]))
                known = [x for x in ids if x]
                if link == "own" and i < len(ids) and ids[i]:
                    tmsg["tool_call_id"] = ids[i]
                elif link == "own" and known:
                    tmsg["tool_call_id"] = draw(st.sampled_from(known))
                elif link == "other":
                    tmsg["tool_call_id"] = "call_Unknown9"
                elif link == "zero":
                    tmsg["tool_call_id"] = 0  # E23: falsy, treated as missing
                msgs.append(tmsg)
    if draw(st.booleans()):
        msgs.append({"role": "assistant", "content": draw(replies)})
    return msgs


# --------------------------------------------------------------------------------------------
# Whole rows
# --------------------------------------------------------------------------------------------

REWARDS = [0, 1, 1.0, 0.0, 0.5, None, NAN, True, False, 0.25, 0.75, 1, 0, 1]


@st.composite
def trajectory_rows(draw, *, allow_messages=True, allow_inf=True, allow_string_lineage=True, rewards=None,
                    shapes=None):
    row: dict = {}
    if draw(st.integers(0, 12)):
        row["schema_version"] = "1"
    has_prompt = draw(st.integers(0, 10)) > 0
    if has_prompt:
        row["prompt"] = draw(st.sampled_from(PROMPTS))
    if draw(st.integers(0, 5)):
        row["scenario_id"] = draw(st.sampled_from(SCENARIOS))
    if draw(st.integers(0, 3)):
        row["rollout_index"] = draw(st.integers(0, 3))
    if draw(st.integers(0, 6)) == 6:
        row["task_id"] = "T-1"

    priv = draw(privileged_blocks()) if draw(st.integers(0, 2)) else None
    needles = _needles(priv)
    leak = bool(needles) and draw(st.integers(0, 2)) >= 1
    leak_needle = draw(st.sampled_from(needles)) if leak else None

    shape = draw(st.sampled_from(shapes or (["steps"] * 6 + (["messages"] * 2 if allow_messages else []) + ["trace", "bare"])))
    if shape == "messages":
        row["messages"] = draw(message_lists())
        if leak_needle is not None:
            row["messages"].append({"role": "assistant", "content": draw(quoting(leak_needle))})
        if draw(st.booleans()):
            row["steps"] = [{"text": "ignored because messages win"}]
    elif shape == "trace":
        row["tool_trace"] = [
            {"tool": draw(st.sampled_from(TOOLS_NAMES)), "input": draw(tool_arguments()), "output": draw(tool_results)}
            for _ in range(draw(st.integers(1, 2)))
        ] + (["not an object"] if draw(st.booleans()) else [])
    elif shape == "steps":
        row["steps"] = draw(steps_lists(leak_needle=leak_needle))

    if draw(st.integers(0, 5)) == 5:
        row["opener"] = "Hi, I'm the shop bot. How can I help?"
        if leak_needle is not None and draw(st.booleans()):
            row["opener"] = draw(quoting(leak_needle))  # E59: the opener counts
        if draw(st.booleans()):
            row["opening"] = "agent"

    # final_text
    fkind = draw(st.sampled_from(["reply", "reply", "reply", "missing", "none", "empty", "error", "same", "leak", "leak"]))
    if fkind == "reply":
        row["final_text"] = draw(replies)
    elif fkind == "none":
        row["final_text"] = None
    elif fkind == "empty":
        row["final_text"] = ""
    elif fkind == "error":
        row["final_text"] = "<agent error: RuntimeError: tool crashed>"
    elif fkind == "same":
        texts = [s.get("text") for s in row.get("steps") or [] if isinstance(s, dict) and s.get("text")]
        row["final_text"] = texts[0] if texts else "Done."
    elif fkind == "leak":
        row["final_text"] = draw(quoting(leak_needle)) if leak_needle else "Done."

    reward_pool = rewards if rewards is not None else REWARDS + ([INF] if allow_inf else [])
    if draw(st.integers(0, 6)):
        row["reward"] = draw(st.sampled_from(reward_pool))
        if draw(st.booleans()):
            row["reason"] = draw(st.sampled_from(["looked up the order", "refused", "over-refunded", ""]))
        if draw(st.integers(0, 4)) == 4:
            row["grader_reason"] = "grader says fine"
        if draw(st.integers(0, 3)) == 3:
            row["reason"] = {"summary": "structured reason", "rubric": {"score": 1}, "notes": [{"reference": "x"}]}
        if draw(st.booleans()):
            row["judge_status"] = draw(st.sampled_from(["ok", "ok", "ok", "error", "missing_reward"]))
            row["judge_name"] = "lambda_judge"
        if draw(st.integers(0, 3)) == 3:
            row["failure_class"] = draw(st.sampled_from(["refusal", "hallucination", "wrong_tool"]))
        if draw(st.integers(0, 4)) == 4:
            row["label_source"] = "judge"
    if draw(st.integers(0, 2)):
        row["finish_reason"] = draw(st.sampled_from(["stop", "stop", "length", "tool", "error"]))
    if draw(st.booleans()):
        row["model_version"] = draw(st.sampled_from(["m1", "m1", "m2"]))
    if draw(st.booleans()):
        if allow_string_lineage and draw(st.integers(0, 6)) == 6:
            row["lineage"] = "imported-from-platform"
        else:
            row["lineage"] = draw(lineage_dicts)
    if draw(st.integers(0, 3)) == 3:
        row["world_state"] = draw(st.sampled_from(["unspecified", "order delayed"]))
        row["faults"] = {"refund": {"kind": "error", "hidden_state": "blocked-name in faults"}, "seed": 3}
        row["fault_detected"] = draw(st.booleans())
    if draw(st.integers(0, 3)) == 3:
        row["tier"] = draw(st.sampled_from(["easy", "hard", None]))
        row["tone"] = "curt"
        row["history"] = draw(st.sampled_from(["none", {"prior_calls": 2, "principle": "be nice"}]))
        row["sampling"] = {"temperature": 0.7, "top_p": 0.95}
        row["usage"] = {"input_tokens": 120, "output_tokens": 30}
        row["policy_version"] = "p-3"
        row["logprob"] = -3.5
        row["n_tokens"] = 42
    if draw(st.integers(0, 5)) == 5:
        row["_private"] = "underscore keys are never carried"
        row["vector"] = [0.1, 0.2]
    if priv is not None:
        row["privileged"] = priv
    return row


def row_lists(min_size=1, max_size=6, **kw):
    return st.lists(trajectory_rows(**kw), min_size=min_size, max_size=max_size)


# --------------------------------------------------------------------------------------------
# Preference inputs
# --------------------------------------------------------------------------------------------

PREF_PROMPTS = ["Refund order A", "refund  order a", "Where is order 7?", "Cancel my subscription, please."]


PAIR_REWARDS = [1, 0, 1, 0, 1.0, 0.0, 0.5, 0.25, 0.75, True, NAN, None, 1.5]


@st.composite
def scored_rows_for_pairs(draw):
    """Scored rows that form groups with contrast: 1-3 prompts, 2-4 rollouts each, mostly 0/1 rewards
    (plus partial credit, bools, NaN, None and out-of-range values that must be excluded)."""
    rows = []
    prompts = draw(st.lists(st.sampled_from(PREF_PROMPTS), min_size=1, max_size=3))
    for prompt in prompts:
        for _ in range(draw(st.integers(2, 4))):
            r = draw(trajectory_rows(rewards=PAIR_REWARDS, allow_string_lineage=False))
            r["prompt"] = prompt
            r["reward"] = draw(st.sampled_from(PAIR_REWARDS))
            if draw(st.integers(0, 5)) < 5:
                r.pop("judge_status", None)
            rows.append(r)
    # interleave the groups the way a run writes them (by rollout, not by prompt)
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


@st.composite
def pair_knobs(draw):
    return {
        "max_pairs_per_prompt": draw(st.sampled_from([1, 1, 2, 5])),
        "min_margin": draw(st.sampled_from([1.0, 1.0, 0.5, 0.25])),
        "length_match": draw(st.booleans()),
    }


tie_values = st.sampled_from([None, None, True, False, "no", 1, 0])
