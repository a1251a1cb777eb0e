"""The two differential checks (SFT export and preference export) shared by the test modules.

Each check: feed the same input to the reference and to ours, apply the DECISIONS transforms to the
reference's output, and assert equality of the parsed rows and of the reports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import event as _hyp_event

import conformance_harness as H


def event(name: str) -> None:
    """hypothesis.event, also usable from the plain (non-hypothesis) tests that share these checks."""
    try:
        _hyp_event(name)
    except Exception:  # noqa: BLE001 -- InvalidArgument outside a hypothesis test
        pass


def _snap(x) -> str:
    return json.dumps(x, default=str, allow_nan=True)


def _noted(name: str, before: str, after) -> None:
    """Hypothesis statistics (pytest --hypothesis-show-statistics): how often each transform mattered."""
    if before != _snap(after):
        event(f"{name} changed the prediction")

LEAK_SUBSET = ("checked", "n_checked", "n_leaked", "leaked", "summary")

# Warnings DECISIONS adds on our side. DECISIONS gives no texts, so each is recognised by what it must
# say (the numbers it must carry are checked by the callers).
D6_NO_TOOLS = re.compile(r"^(\d+) of (\d+) rows make tool calls but were exported without tool schemas")
D6_NO_SYSTEM = re.compile(r"^(\d+) of (\d+) rows make tool calls but were exported without a system prompt")
D16_DROPPED = re.compile(r"^(\d+) rows have no assistant turn after the first message and were dropped")
D16_GOES_ON = re.compile(r"^(\d+) of (\d+) rows go on after their last assistant turn")
OPENAI_MASK = re.compile(r"^(\d+) of (\d+) rows leave assistant turns out of loss_mask")  # ours
NO_ROWS = re.compile(r"^the iterator given as the source gave no rows")  # ours: spec E47 writes it silently
SKIPPED = re.compile(r"^(\d+) of (\d+) rows are not objects and were skipped")  # ours
NO_REPLY = re.compile(r"^(\d+) of (\d+) rows have no assistant turn")  # ours: nothing to train on
EMPTY_REPLY = re.compile(r"^(\d+) of (\d+) rows train an assistant turn with no text and no tool call")  # ours
TWO_SYSTEMS = re.compile(r"^(\d+) of (\d+) rows open with their own system message and were given the system "
                         r"prompt too")
WEIGHTED = re.compile(r"^(\d+) of (\d+) rows carry a per-message weight")  # ours
CRASHED_ROWS = re.compile(r"^(\d+) of (\d+) rows are crashed rollouts")  # ours
D12_CHOSEN = re.compile(r"^(\d+) of (\d+) chosen replies quote their own privileged context")
TRL_USER_TURNS = re.compile(r"^(\d+) of (\d+) pairs have a user or system turn inside chosen or rejected")
D12_REJECTED = re.compile(r"^(\d+) rejected replies quote their own privileged context")
NO_REPLY_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side with no assistant turn")  # ours
SKIPPED_PAIRS = re.compile(r"^(\d+) of (\d+) entries are not objects and were skipped")  # ours
LENGTH_CUT_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a chosen side cut by the reply token cap")  # ours
TRL_OTHER_CONTEXT = re.compile(r"^(\d+) of (\d+) pairs start the rejected side from other messages")  # ours
TRL_TOOL_RESULTS = re.compile(r"^(\d+) of (\d+) pairs have a tool result inside chosen or rejected \(first at line "
                              r"(\d+) of the output\)")  # ours
SCENARIO_PAIRS_SAYS = ("pairs join rollouts of different scenarios (scenario_id) that share a prompt text: each "
                       "side's reward was earned on its own task, so the chosen reply need not be the better "
                       "answer to the same one. Give each scenario its own prompt text, or pair the rows of one "
                       "scenario at a time.")  # ours
# ours
OUT_OF_RANGE_SAYS = ("rows have a reward outside [0, 1] and were left out of pairing (pairs read rewards as scores "
                     "from 0 to 1): with a grader on another scale, the rows it rewarded most are the ones left out, "
                     "and a pair's chosen side may be a poor reply. Rescale the rewards to [0, 1] before pairing.")
CRASHED_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side that is a crashed rollout")  # ours
SAME_REPLY_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have the same reply as chosen and rejected")  # ours
EMPTY_CHOSEN_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have an empty chosen reply")  # ours
TWO_SYSTEMS_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side that opens with its own system message and was "
                               r"given the system prompt too")  # ours
# the first call's name, or (None) a call with no name
FIRST_UNDECLARED = (r"do not declare \(first (?:'([^']*)'|a call with no function name, which validate refuses: "
                    r"function_name_missing), line (\d+) of the output\)")
UNDECLARED = re.compile(r"^(\d+) of (\d+) rows call a tool that the tools written with them .* "
                        + FIRST_UNDECLARED)  # ours
THINK_LEFT = re.compile(r"^(\d+) of (\d+) rows train an assistant turn that still holds a <think> or </think> tag "
                        r"after strip_think \(first at line (\d+) of the output\)")  # ours
BAD_LINKS = re.compile(r"^(\d+) of (\d+) rows have tool results that do not pair up with their calls \(first at "
                       r"line (\d+) of the output")  # ours
BAD_LINKS_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side whose tool results do not pair up with its calls "
                             r"\(first at line (\d+) of the output")  # ours
MISSHAPEN = re.compile(r"^(\d+) of (\d+) rows hold tool calls that are not call objects \(first: row (\d+) of "
                       r"the source, counting from 0\): ")  # ours
MISSHAPEN_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side whose tool calls are not call objects \(first at "
                             r"line (\d+) of the output\)")  # ours
LEFT_OUT = re.compile(r"^(\d+) of (\d+) rows hold messages the chat-completions format has no place for, left out of "
                      r"what is written \(first: row (\d+) of the source, counting from 0: (.*?)\), as the spec reads "
                      r"them")  # ours
LEFT_OUT_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side holding messages the chat-completions format has no "
                            r"place for, left out of what is written \(first at line (\d+) of the output: (.*?)\), as "
                            r"the spec reads them")  # ours
TEXTLESS = re.compile(r"^(\d+) of (\d+) rows hold a turn whose content is not text, written as its JSON text \(first: "
                      r"row (\d+) of the source, counting from 0: (.*?)\): ")  # ours
TEXTLESS_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a side holding a turn whose content is not text, written as "
                            r"its JSON text \(first at line (\d+) of the output: (.*?)\): ")  # ours
JUDGED_REJECTED_PAIRS = re.compile(r"^(\d+) of (\d+) pairs were decided for the rejected side by the pairwise "
                                   r"judge")  # ours
UNDECLARED_PAIRS = re.compile(r"^(\d+) of (\d+) pairs have a chosen side that calls a tool the tools .* "
                              + FIRST_UNDECLARED)  # ours


def leak_subset(rep: dict) -> dict:
    return {k: rep[k] for k in LEAK_SUBSET}


def _rows_with_calls(rows) -> int:
    return sum(1 for r in rows if any(isinstance(m, dict) and m.get("tool_calls") for m in H.row_conversation(r)))


def _calls_without_system(rows) -> int:
    """DECISIONS 6: rows with tool calls written with no system message first (a row whose own messages
    open with one was exported with a system prompt, whatever the argument said)."""
    return sum(1 for r in rows if any(isinstance(m, dict) and m.get("tool_calls") for m in H.row_conversation(r))
               and not (H.row_conversation(r) and isinstance(H.row_conversation(r)[0], dict)
                        and H.row_conversation(r)[0].get("role") == "system"))


def _tool_names(tools):
    """The names a tool list declares (nested ``function.name`` or a flat ``name``), None when one has none."""
    names = set()
    for tool in tools or ():
        name = (tool.get("function") or {}).get("name") if isinstance(tool, dict) and isinstance(
            tool.get("function"), dict) else (tool.get("name") if isinstance(tool, dict) else None)
        if not isinstance(name, str) or not name:
            return None
        names.add(name)
    return names or None


def _left_out(row):
    """The first of the messages an export reads of ``row`` that the chat-completions format has no place for
    (spec 3.4, E28: a role other than system, user, assistant and tool, an item that is not an object), said as
    the warning says it, or None. A row without ``messages`` is rebuilt from its steps, which make none."""
    messages = row.get("messages") if isinstance(row, dict) else None
    if not messages:
        return None
    if not isinstance(messages, (list, tuple)):
        return f"'messages' given as a {type(messages).__name__}, not a list"
    for m in messages:
        if not isinstance(m, dict):
            return f"a {type(m).__name__} where a message object goes"
        role = str(m.get("role") or "")
        if role not in ("system", "user", "assistant", "tool"):
            return f"role {role!r}" if role else "a message without a role"
        if role == "assistant" and not m.get("tool_calls") and m.get("function_call"):
            return "an assistant turn's function_call (OpenAI's older form of tool_calls)"
    return None


def _textless(row):
    """The first system, user or assistant turn of the messages an export reads of ``row`` whose content is not
    text (written as its JSON text, DECISIONS 10), said as the warning says it, or None."""
    messages = row.get("messages") if isinstance(row, dict) else None
    for m in messages if isinstance(messages, (list, tuple)) else ():
        role = str(m.get("role") or "") if isinstance(m, dict) else ""
        content = m.get("content") if role in ("system", "user", "assistant") else None
        if content is not None and not isinstance(content, str):
            name = type(content).__name__
            return f"the {role} turn's content is {'an' if name[0] in 'aeiou' else 'a'} {name}"
    return None


def _misshapen_calls(row) -> bool:
    """Whether the messages an export reads of ``row`` (its ``messages``, when it has any) hold tool calls that
    are not call objects: a ``tool_calls`` that is not a list, a call that is not an object, a ``function``
    that is not one."""
    messages = row.get("messages") if isinstance(row, dict) else None
    for m in messages if isinstance(messages, (list, tuple)) else ():
        calls = m.get("tool_calls") if isinstance(m, dict) and str(m.get("role") or "") == "assistant" else None
        if calls and (not isinstance(calls, (list, tuple)) or any(
                not isinstance(c, dict) or c.get("function") is not None and not isinstance(c["function"], dict)
                for c in calls)):
            return True
    return False


def _second_is_system(messages):
    """Whether written messages open with two system turns (the export's system prompt, then the row's own)."""
    return isinstance(messages, list) and len(messages) > 1 and isinstance(messages[1], dict) and \
        messages[1].get("role") == "system"


def _undeclared_rows(rows):
    """(count, (1-based index, name) of the first) of the (conversation, tools written with it) that call a
    tool those tools do not declare: ours warns of them (a model trained on such a call learns to call a tool
    it is not given)."""
    count, first = 0, None
    for i, (messages, tools) in enumerate(rows, 1):
        declared = _tool_names(tools)
        names = [((c or {}).get("function") or {}).get("name") for m in messages or () if isinstance(m, dict)
                 for c in (m.get("tool_calls") or ()) if isinstance(c, dict)]
        off = [n for n in names if isinstance(n, str) and declared is not None and n not in declared]
        if off:
            count += 1
            first = first or (i, off[0])
    return count, first


def _links_broken(messages) -> bool:
    """Whether a written conversation's tool results stop pairing up with its calls: a result with no id, or
    one whose id is no call made and not yet answered, a call id used twice, or a turn that comes while a
    call still waits for its result (a call the conversation ends on is fine)."""
    made, waiting = [], []
    for m in messages or ():
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in waiting or not m.get("tool_call_id"):
                return True
            waiting.remove(m["tool_call_id"])
            continue
        if waiting:
            return True
        for c in m.get("tool_calls") or ():
            cid = c.get("id") if isinstance(c, dict) else None
            if cid in made:
                return True
            made.append(cid)
            waiting.append(cid)
    return False


def _split_extra_warnings(warnings: list, patterns: dict) -> tuple[list, dict]:
    """Separate our DECISIONS-added warnings (by pattern) from the rest."""
    rest, found = [], {}
    for w in warnings:
        for name, pat in patterns.items():
            m = pat.match(w)
            if m:
                assert name not in found, f"duplicate {name} warning: {warnings}"
                found[name] = m
                break
        else:
            rest.append(w)
    return rest, found


# =============================================================================================
# SFT export
# =============================================================================================


def _assert_refused(o, expected_error, rt, rep, ctx, carries_report=True):
    """Ours refused with the predicted error (DECISIONS 14), wrote nothing, and a gate error carries
    the predicted round-trip and leak reports."""
    assert o.error is not None, f"ours exported where DECISIONS predicts {expected_error}\n{ctx}"
    assert isinstance(o.error, ValueError), "DECISIONS 14"
    assert H.leading_token(o.error) == expected_error, f"DECISIONS 14: got {o.error}\n{ctx}"
    if carries_report:
        er = getattr(o.error, "report", None)
        assert isinstance(er, dict), "DECISIONS 14: gate errors carry the report"
        H.assert_same(rt, er["tool_call_roundtrip"], "error.report tool_call_roundtrip", ctx)
        H.assert_same(rep["privileged_leaks"], er["privileged_leaks"], "error.report privileged_leaks", ctx)
    assert o.rows is None, "nothing may be written when a gate refuses"


def check_export_dataset(ref, ours, rows, tmp: Path, *, fmt, mask_mode, unroll, strip_think, system_prompt,
                         tools, cap, validate, our_source=None, ref_source=None, ref_kwargs=None,
                         path_source: Path | None = None, sp_source=None, tools_source=None,
                         ref_out: Path | None = None, our_out: Path | None = None, pass_output=True,
                         effective_context=None):
    """Differential check of ``export_dataset``. ``rows`` are the raw trajectories (a list). By default
    both sides get a copy of ``rows``; ``our_source`` / ``ref_source`` / ``ref_kwargs`` let source tests
    (generators, path + sidecar) hand each side the source DECISIONS says is equivalent.
    ``pass_output=False``: no ``output`` argument; ``ref_out`` / ``our_out`` are the derived names.
    ``effective_context``: (system prompt, tools) both sides end up using when it is not the arguments
    (a run object's profile)."""
    kw = dict(strip_think=strip_think, mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=cap, format=fmt)
    ref_in = H.d10_json_content(H.deep(rows))  # DECISIONS 10
    if unroll:
        ref_in = H.d11_wrap_nondict_lineage(ref_in)  # DECISIONS 11
    rkw = dict(system_prompt=system_prompt, tools=tools)
    rkw.update(ref_kwargs or {})
    ref_out = ref_out or tmp / "ref" / "out.jsonl"
    our_out = our_out or tmp / "ours" / "out.jsonl"
    for p in (ref_out, our_out):
        p.parent.mkdir(parents=True, exist_ok=True)
    rsrc = ref_source(H.deep(ref_in)) if ref_source is not None else H.deep(ref_in)
    r = H.run(ref.export_dataset, rsrc, output=ref_out, pass_output=pass_output, validate=False, **rkw, **kw)
    src = our_source() if our_source is not None else H.deep(rows)
    o = H.run(ours.export_dataset, src, output=our_out, pass_output=pass_output, validate=validate,
              system_prompt=system_prompt, tools=tools, **kw)
    ctx = f"inputs: {H.short(rows, 4000)}\nours error: {o.error!r}\nref error: {r.error!r}"

    if r.error is not None:
        # Only schema errors are raised regardless of validate= (spec 2.8); they must match exactly.
        assert o.error is not None, f"reference raised {r.error!r}, ours did not\n{ctx}"
        assert isinstance(o.error, ValueError), f"DECISIONS 14: ValueError subclass expected, got {type(o.error)}"
        # DECISIONS 14: the spec's leading tokens are kept ("schema_invalid in <where>: <i>:<code>...");
        # ours may append guidance after the reference's full text.
        assert str(o.error).startswith(str(r.error)), f"error text differs\nref:  {r.error}\nours: {o.error}\n{ctx}"
        assert o.rows is None, "nothing may be written when the export raises"
        event("outcome: schema error on both sides")
        return "error"

    # ------------------------------------------------------------------ predicted rows
    sources = [x for x in H.deep(rows) if isinstance(x, dict)]  # both skip rows that are not objects
    if effective_context is not None:
        system, eff_tools = effective_context
    else:
        sp = (ref_kwargs or {}).get("system_prompt", system_prompt)
        system = "" if sp is None else str(sp)
        eff_tools = (ref_kwargs or {}).get("tools", tools)
    pred = H.deep(r.rows)
    # harness self-check: our reading of the spec's round-trip rule reproduces the reference's report
    ref_rt_plain = H.roundtrip_report([H.row_conversation(x) for x in r.rows], fmt, strict=False)
    assert H.nan_safe(ref_rt_plain) == H.nan_safe(r.report["tool_call_roundtrip"]), "harness self-check (roundtrip)"

    if _snap(ref_in) != _snap(rows):
        event("d10/d11 input transforms changed the reference's input")
    b = _snap(pred)
    H.d9_relink_tool_call_ids(pred, sources, unroll, system)  # DECISIONS 9
    _noted("d9", b, pred)
    b = _snap(pred)
    H.d11_per_sample_truncation(pred, unroll)  # DECISIONS 11 (self-checked when not unrolled)
    if unroll:
        H.d11_unwrap_lineage_of_plain_samples(pred)  # DECISIONS 11
    _noted("d11", b, pred)
    dropped = []
    trained = masked = None
    if fmt == "trl":
        trained, masked = _d16_trained_masked(pred, mask_mode, unroll)
        pred, dropped = H.d16_trl_sft_shape(pred, mask_mode, unroll)  # DECISIONS 16
        if dropped:
            event("d16 dropped rows")
    b = _snap(pred)
    pred = H.d8_scrub_blocked_keys(pred)  # DECISIONS 8
    _noted("d8", b, pred)
    rt = H.roundtrip_report([H.row_conversation(x) for x in pred], fmt, strict=True)  # DECISIONS 3
    if rt != r.report["tool_call_roundtrip"]:
        event("d3 changed the round-trip report")
    b = _snap(pred)
    if fmt == "openai":
        H.d2_compact_arguments(pred)  # DECISIONS 2
    _noted("d2", b, pred)
    b = _snap(pred)
    pred = H.d1_nonfinite_to_null(pred)  # DECISIONS 1
    _noted("d1", b, pred)

    # ------------------------------------------------------------------ predicted report
    rep = dict(r.report)
    rep["tool_call_roundtrip"] = rt  # DECISIONS 3
    leaks_expected = leak_subset(ref.leak_report(H.deep(rows)))
    assert H.nan_safe(rep["privileged_leaks"]) == H.nan_safe(leaks_expected), "harness self-check (leaks)"
    rep["privileged_leaks"] = leaks_expected
    if unroll:  # DECISIONS 11: totals of the per-sample counts
        rep["tool_output_truncated"] = sum(x.get("tool_output_truncated", 0) for x in pred)
        rep["tool_output_chars_cut"] = sum(x.get("tool_output_chars_cut", 0) for x in pred)
    warnings = list(rep.pop("warnings", []))
    if fmt == "trl":
        _d16_report(rep, pred, dropped, trained, masked, recounted=unroll)
        warnings = _d16_failing_warning(warnings, rep)
    n_out = len(pred)

    # ------------------------------------------------------------------ gates (validate=True)
    expected_error = None
    if validate:
        if rt["invalid"]:
            expected_error = "tool_call_roundtrip_invalid"
        elif rep["privileged_leaks"]["n_leaked"]:
            expected_error = "privileged_leak"
        # sanity: the reference itself refuses on its own (non-strict) report
        rsrc = ref_source(H.deep(ref_in)) if ref_source is not None else H.deep(ref_in)
        rv = H.run(ref.export_dataset, rsrc, output=tmp / "ref" / "validated.jsonl", validate=True, **rkw, **kw)
        if r.report["tool_call_roundtrip"]["invalid"]:
            assert H.leading_token(rv.error) == "tool_call_roundtrip_invalid"
        elif r.report["privileged_leaks"]["n_leaked"]:
            assert H.leading_token(rv.error) == "privileged_leak"
        else:
            assert rv.error is None, rv.error
    if expected_error is not None:
        _assert_refused(o, expected_error, rt, rep, ctx)
        event(f"outcome: refused ({expected_error})")
        return "refused"

    assert o.error is None, f"ours raised {o.error!r}; DECISIONS predicts success\n{ctx}"
    event("outcome: exported")
    if rep["privileged_leaks"]["n_leaked"]:
        event("privileged leak exported (validate=False)")

    # ------------------------------------------------------------------ rows
    our_rows = H.assert_d1_file_encoding(o.raw)  # DECISIONS 1
    H.assert_same(pred, our_rows, "exported rows", ctx)
    skip = {"prompt", "completion", "messages"} if fmt == "trl" else set()
    if unroll:
        skip |= {"lineage", "tool_output_truncated", "tool_output_chars_cut"}
    H.assert_key_order(pred, our_rows, frozenset(skip))

    # ------------------------------------------------------------------ report
    ours_rep = H.pop_d15_d6(
        o.report, rows_read=len(rows), rows_skipped=sum(not isinstance(r, dict) for r in rows),
        written=o.raw, path_source=path_source,
        sp_source=sp_source or ("argument" if system_prompt is not None else "none"),
        tools_source=tools_source or ("argument" if tools is not None else "none"),
    )
    our_warnings = list(ours_rep.pop("warnings", []))
    rest, extra = _split_extra_warnings(our_warnings, {"d6_tools": D6_NO_TOOLS, "d6_system": D6_NO_SYSTEM,
                                                       "d16_dropped": D16_DROPPED, "d16_goes_on": D16_GOES_ON,
                                                       "openai_mask": OPENAI_MASK, "no_rows": NO_ROWS,
                                                       "skipped": SKIPPED, "no_reply": NO_REPLY,
                                                       "empty_reply": EMPTY_REPLY, "two_systems": TWO_SYSTEMS,
                                                       "weighted": WEIGHTED, "crashed": CRASHED_ROWS,
                                                       "undeclared": UNDECLARED, "bad_links": BAD_LINKS,
                                                       "think_left": THINK_LEFT, "misshapen": MISSHAPEN,
                                                       "left_out": LEFT_OUT, "textless": TEXTLESS})
    # DECISIONS 6: warn when a row with tool calls is exported with no tools or no system prompt
    with_calls = _rows_with_calls(pred)
    calls_without_system = _calls_without_system(pred)
    exp_extra = set()
    if with_calls and not eff_tools:
        exp_extra.add("d6_tools")
    if calls_without_system:
        exp_extra.add("d6_system")
    if dropped:
        exp_extra.add("d16_dropped")  # DECISIONS 16 ("dropped and counted"); 0.131 also warns
    # ours: a DECISIONS 16 completion that goes on after its assistant turn trains those messages too
    going_on = sum(1 for x in pred if len(x.get("completion") or ()) > 1) if fmt == "trl" else 0
    if going_on:
        exp_extra.add("d16_goes_on")
    # ours: OpenAI trains an assistant turn loss_mask leaves out (it reads only ``weight``)
    masked_replies = sum(1 for x in pred if any(
        isinstance(m, dict) and m.get("role") == "assistant" and not bit
        for m, bit in zip(x.get("messages") or (), x.get("loss_mask") or ()))) if fmt == "openai" else 0
    if masked_replies:
        exp_extra.add("openai_mask")
    skipped = sum(not isinstance(r, dict) for r in rows)
    if skipped:
        exp_extra.add("skipped")  # ours: rows that are not objects are skipped (the spec), and said to be
    # ours: a row with no assistant turn has nothing to train on (OpenAI refuses it; TRL trains its every token)
    no_reply = sum(1 for x in pred if "completion" not in x and not any(
        isinstance(m, dict) and m.get("role") == "assistant" for m in x.get("messages") or ()))
    if no_reply:
        exp_extra.add("no_reply")
    # ours: a trained assistant turn with no text and no call (every assistant turn of an openai or a TRL messages
    # row, a completion's): the model learns to end its turn without a word
    empty_reply = sum(1 for x in pred if any(
        isinstance(m, dict) and m.get("role") == "assistant" and not m.get("tool_calls")
        and not (m.get("content") or "").strip()
        for m in (x["completion"] if "completion" in x else x.get("messages") or ())))
    if empty_reply:
        exp_extra.add("empty_reply")
    # ours: a row's own system message right under the system prompt the export put first
    two_systems = sum(1 for x in pred if system and _second_is_system(H.row_conversation(x)))
    if two_systems:
        exp_extra.add("two_systems")
    # ours: rows whose own messages carry OpenAI's weight (the export drops it and writes its own loss_mask)
    weighted = sum(1 for r in rows if isinstance(r, dict) and isinstance(r.get("messages"), (list, tuple)) and any(
        isinstance(m, dict) and "weight" in m for m in r["messages"]))
    if weighted:
        exp_extra.add("weighted")
    # ours: rows the agent crashed in (final_text starts "<agent error", spec 1.1) are SFT targets all the same
    crashed = sum(1 for r in rows if isinstance(r, dict) and str(r.get("final_text") or "").startswith("<agent error"))
    if crashed:
        exp_extra.add("crashed")
    # ours: rows that call a tool the tools written with them do not declare (a TRL prompt/completion row: in
    # its completion, the part TRL trains)
    undeclared, first_undeclared = _undeclared_rows([(x["completion"] if "completion" in x else H.row_conversation(x),
                                                      x.get("tools")) for x in pred])
    if undeclared:
        exp_extra.add("undeclared")
        event("a row calls an undeclared tool")
    # ours: with strip_think, a trained reply that still holds a think tag (spec 3.6 strips whole blocks only)
    think_left = [i for i, x in enumerate(pred, 1) if strip_think and any(
        isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), str)
        and re.search(r"</?think>", m["content"], re.IGNORECASE)
        for m in (x["completion"] if "completion" in x else x.get("messages") or ()))]
    if think_left:
        exp_extra.add("think_left")
        event("a trained reply keeps a think tag")
    # ours: rows whose tool results do not pair up with their calls (spec E21's leftover id, ids a row reuses...)
    bad_links = [i for i, x in enumerate(pred, 1) if _links_broken(H.row_conversation(x))]
    if bad_links:
        exp_extra.add("bad_links")
        event("a row's tool results do not pair up with its calls")
    # ours: source rows whose messages hold tool calls that are not call objects (read as the spec says)
    misshapen = [i for i, x in enumerate(rows) if _misshapen_calls(x)]
    if misshapen:
        exp_extra.add("misshapen")
        event("a row's tool calls are not call objects")
    # ours: source rows whose messages the format has no place for, left out as the spec says
    left_out = [(i, said) for i, x in enumerate(rows) if (said := _left_out(x)) is not None]
    if left_out:
        exp_extra.add("left_out")
        event("a row holds a message the format leaves out")
    # ours: source rows with a turn whose content is not text (OpenAI's content parts), written as JSON text
    textless = [(i, said) for i, x in enumerate(rows) if (said := _textless(x)) is not None]
    if textless:
        exp_extra.add("textless")
        event("a row holds a turn whose content is not text")
    if not rows and iter(src) is src:
        exp_extra.add("no_rows")  # ours: an iterator that gave nothing (one read twice, say) is said to be empty
    assert set(extra) == exp_extra, f"DECISIONS 6/16 warnings: expected {sorted(exp_extra)}, got {our_warnings}\n{ctx}"
    for name, count in (("d6_tools", with_calls), ("d6_system", calls_without_system)):
        if name in extra:
            assert extra[name].groups() == (str(count), str(n_out)), f"{name} counts: {extra[name].group(0)}"
    if "d16_dropped" in extra:
        assert extra["d16_dropped"].group(1) == str(len(dropped))
    if "openai_mask" in extra:
        assert extra["openai_mask"].groups() == (str(masked_replies), str(n_out)), extra["openai_mask"].group(0)
    if "d16_goes_on" in extra:
        assert extra["d16_goes_on"].groups() == (str(going_on), str(n_out)), extra["d16_goes_on"].group(0)
    if "skipped" in extra:
        assert extra["skipped"].groups() == (str(skipped), str(len(rows))), extra["skipped"].group(0)
    if "no_reply" in extra:
        assert extra["no_reply"].groups() == (str(no_reply), str(n_out)), extra["no_reply"].group(0)
    for name, count in (("empty_reply", empty_reply), ("two_systems", two_systems)):
        if name in extra:
            assert extra[name].groups() == (str(count), str(n_out)), extra[name].group(0)
    if "weighted" in extra:
        assert extra["weighted"].groups() == (str(weighted), str(len(rows))), extra["weighted"].group(0)
    if "crashed" in extra:
        assert extra["crashed"].groups() == (str(crashed), str(len(rows))), extra["crashed"].group(0)
    if "undeclared" in extra:
        expected = (str(undeclared), str(n_out), first_undeclared[1] or None, str(first_undeclared[0]))
        assert extra["undeclared"].groups() == expected, extra["undeclared"].group(0)
    if "think_left" in extra:
        expected = (str(len(think_left)), str(n_out), str(think_left[0]))
        assert extra["think_left"].groups() == expected, extra["think_left"].group(0)
    if "bad_links" in extra:
        expected = (str(len(bad_links)), str(n_out), str(bad_links[0]))
        assert extra["bad_links"].groups() == expected, extra["bad_links"].group(0)
    if "misshapen" in extra:
        expected = (str(len(misshapen)), str(len(rows)), str(misshapen[0]))
        assert extra["misshapen"].groups() == expected, extra["misshapen"].group(0)
    if "left_out" in extra:
        expected = (str(len(left_out)), str(len(rows)), str(left_out[0][0]), left_out[0][1])
        assert extra["left_out"].groups() == expected, extra["left_out"].group(0)
    if "textless" in extra:
        expected = (str(len(textless)), str(len(rows)), str(textless[0][0]), textless[0][1])
        assert extra["textless"].groups() == expected, extra["textless"].group(0)
    assert rest == warnings, f"warnings differ\nexpected: {warnings}\nours:     {rest}\n{ctx}"
    if fmt == "trl":  # DECISIONS 16
        trl_loss = ours_rep.pop("trl_loss")
        assert isinstance(trl_loss, str) and trl_loss, "DECISIONS 16: trl_loss sentence"
        want = "completion" if (mask_mode == "final" or unroll) else "messages"
        assert want in trl_loss, f"DECISIONS 16: trl_loss should describe {want} rows: {trl_loss}"
        if dropped:
            assert ours_rep.pop("no_completion_dropped") == len(dropped), "DECISIONS 16: no_completion_dropped"
        else:
            assert "no_completion_dropped" not in ours_rep
    rep["path"] = str(our_out)
    rep["n_written"] = n_out
    # keys no DECISIONS point explains are reported last, so that other differences show first
    unexplained = {k: ours_rep.pop(k) for k in list(ours_rep) if k not in rep}
    H.assert_same(H.nan_safe(rep), H.nan_safe(ours_rep), "report", ctx)
    assert not unexplained, f"export_dataset report keys no DECISIONS point explains: {unexplained}"
    return "ok"


def _d16_trained_masked(rows, mask_mode, unroll):
    """DECISIONS 16 + open question Q1: for prompt/completion rows trained/masked count completion /
    prompt messages (what TRL trains); messages rows keep the loss-mask counts."""
    trained = masked = 0
    for r in rows:
        msgs = r["messages"]
        if mask_mode == "final" or unroll:
            last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
            if last < 1:
                continue
            trained += len(msgs) - last
            masked += last
        else:
            ones = sum(r["loss_mask"])
            trained += ones
            masked += len(r["loss_mask"]) - ones
    return trained, masked


def _d16_report(rep, pred, dropped, trained, masked, recounted=False):
    """DECISIONS 16: report numbers over the rows that are actually written (dropped rows removed).
    ``recounted``: the truncation totals were already summed over the written rows (DECISIONS 11, unroll)."""
    rep["n"] = len(pred)
    rep["with_system"] = sum(1 for x in pred if (H.row_conversation(x) or [{}])[0].get("role") == "system")
    rep["with_tools"] = sum(1 for x in pred if x.get("tools"))
    rep["groups"] = len({x["group_id"] for x in pred if "group_id" in x})
    rep["trained_messages"] = trained
    rep["masked_messages"] = masked
    for d in dropped:
        rep["rewards"][H.reward_class(d.get("reward"))] -= 1
        if not recounted:
            rep["tool_output_truncated"] -= d.get("tool_output_truncated", 0)
            rep["tool_output_chars_cut"] -= d.get("tool_output_chars_cut", 0)


def _d16_failing_warning(warnings, rep):
    """DECISIONS 16: the failing-rows warning counts the rows written."""
    out = []
    for w in warnings:
        m = H.FAILING_WARNING.match(w)
        if m:
            if not rep["rewards"]["n_fail"]:
                continue
            w = f"{rep['rewards']['n_fail']} of {rep['n']}" + w[m.end(2):]
        out.append(w)
    return out


# =============================================================================================
# Preference export
# =============================================================================================


def _first_assistant(msgs):
    return next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), -1)


def _reply(side: list) -> list | None:
    """A side's reply as DPO scores it, tool-call ids left out; None when it has no assistant turn."""
    start = _first_assistant(side)
    if start < 0:
        return None
    return [(m.get("role"), m.get("content"), m.get("name"),
             [json.dumps(c.get("function"), ensure_ascii=False) for c in m.get("tool_calls") or []])
            for m in side[start:]]


def _same_reply(row: dict) -> bool:
    """An exported pair whose chosen and rejected replies are the same. A TRL row's sides are its replies
    already (each starts with its first assistant turn); an openai row's sides are whole conversations."""
    chosen = _reply(row["chosen"])
    return chosen is not None and chosen == _reply(row["rejected"])


def d8_pair_reason_text_of_scrubbed_reason(pairs):
    """DECISIONS 8 (pair fields): ``chosen_reason`` / ``rejected_reason`` are text(reason); when the row's
    ``reason`` is a structured value, ours scrubs the blocked keys out of it before taking its text,
    so the exported pair field cannot carry them (the reference's text keeps them). Only structured
    reasons are touched. See open question Q4."""
    for p in pairs:
        for side, field in (("chosen", "chosen_reason"), ("rejected", "rejected_reason")):
            reason = p[side].get("reason")
            if isinstance(reason, (dict, list)) and reason:
                p[field] = str(H.scrub(reason))
    return pairs


def _reward_out_of_range(row) -> bool:
    """A row spec 8.2 would pair but for its reward, a number (no bool, no NaN) outside [0, 1]."""
    if not isinstance(row, dict) or row.get("judge_status", "ok") != "ok":
        return False
    reward = row.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or reward != reward:
        return False
    return not 0 <= reward <= 1 and bool(" ".join(str(row.get("prompt") or "").split()))


def check_build_preference_pairs(ref, ours, rows, knobs):
    """Pairs from both sides' build_preference_pairs over the same rows; lists and reports compared.
    Returns (reference pairs as ours should have built them, our pairs)."""
    ref_pairs, ref_rep = ref.build_preference_pairs(H.deep(rows), **knobs)
    our_pairs, our_rep = ours.build_preference_pairs(H.deep(rows), **knobs)
    ctx = f"rows: {H.short(rows, 5000)}\nknobs: {knobs}"
    ref_rep = dict(ref_rep)
    crossed = sum(bool(a := p["chosen"].get("scenario_id")) and bool(b := p["rejected"].get("scenario_id"))
                  and str(a) != str(b) for p in ref_pairs)
    if crossed:  # ours: pairs whose sides are of different scenarios sharing a prompt text are warned of, last
        ref_rep["warnings"] = [*ref_rep["warnings"], f"{crossed}/{len(ref_pairs)} {SCENARIO_PAIRS_SAYS}"]
    left_out = sum(_reward_out_of_range(r) for r in rows)
    if left_out:  # ours: rows left out of pairing only for a reward outside [0, 1] are warned of, after that
        ref_rep["warnings"] = [*ref_rep["warnings"], f"{left_out} {OUT_OF_RANGE_SAYS}"]
    expected = d8_pair_reason_text_of_scrubbed_reason(H.deep(list(ref_pairs)))
    H.assert_same(H.nan_safe(expected), H.nan_safe(H.deep(list(our_pairs))), "pairs", ctx)
    H.assert_same(H.nan_safe(dict(ref_rep)), H.nan_safe(dict(our_rep)), "build_preference_pairs report", ctx)
    return [dict(p) for p in expected], [dict(p) for p in our_pairs]


def check_export_preference(ref, ours, pairs, tmp: Path, *, fmt, drop_ties, system_prompt, tools, strip_think,
                            validate, our_source=None):
    kw = dict(system_prompt=system_prompt, tools=tools, strip_think=strip_think, drop_ties=drop_ties)
    ref_in = H.d10_json_content_pairs(H.deep(pairs))  # DECISIONS 10
    (tmp / "ref").mkdir(parents=True, exist_ok=True)
    (tmp / "ours").mkdir(parents=True, exist_ok=True)
    r = H.run(ref.export_preference, H.deep(ref_in), output=tmp / "ref" / "pairs.jsonl", validate=False, format=fmt, **kw)
    our_out = tmp / "ours" / "pairs.jsonl"
    src = our_source() if our_source is not None else H.deep(pairs)
    o = H.run(ours.export_preference, src, output=our_out, validate=validate, format=fmt, **kw)
    ctx = f"pairs: {H.short(pairs, 5000)}\nours error: {o.error!r}\nref error: {r.error!r}"

    if r.error is not None:
        assert o.error is not None, f"reference raised {r.error!r}, ours did not\n{ctx}"
        assert isinstance(o.error, ValueError), "DECISIONS 14"
        # DECISIONS 14: same leading text; ours may append guidance
        assert str(o.error).startswith(str(r.error)), f"error text differs\nref:  {r.error}\nours: {o.error}\n{ctx}"
        assert o.rows is None
        return "error"

    system = str(system_prompt or "")  # spec 7.3 step 3: a falsy system_prompt (0, False) is no system prompt
    kept = [p for p in pairs if isinstance(p, dict) and not (drop_ties and p.get("tie"))]
    if fmt == "trl":
        # which pairs the TRL reshape keeps: both sides need a first assistant turn at index >= 1
        full = H.run(ref.export_preference, H.deep(ref_in), output=tmp / "ref" / "full.jsonl", validate=False,
                     format="openai", **kw)
        assert full.error is None and len(full.rows or []) == len(kept)
        kept = [p for p, row in zip(kept, full.rows or [])
                if _first_assistant(row["chosen"]) >= 1 and _first_assistant(row["rejected"]) >= 1]
    ref_rows = r.rows or []
    assert len(ref_rows) == len(kept), "harness self-check (kept pairs)"
    sides = [s for row in ref_rows for s in (H.row_conversation({"messages": row["chosen"]}),
                                             H.row_conversation({"messages": row["rejected"]}))]
    assert H.nan_safe(H.roundtrip_report(sides, fmt, strict=False)) == H.nan_safe(r.report["tool_call_roundtrip"]), (
        "harness self-check (roundtrip)"
    )

    pred = H.deep(ref_rows)
    b = _snap(pred)
    H.d9_relink_pair_ids(pred, kept, system, fmt)  # DECISIONS 9
    _noted("d9 (pairs)", b, pred)
    b = _snap(pred)
    pred = H.d8_scrub_blocked_keys(pred)  # DECISIONS 8
    _noted("d8 (pairs)", b, pred)
    sides = [s for row in pred for s in (row["chosen"], row["rejected"])]
    rt = H.roundtrip_report(sides, fmt, strict=True)  # DECISIONS 3
    if fmt == "openai":
        H.d2_compact_arguments(pred, sides=("chosen", "rejected"))  # DECISIONS 2
    # ours: pairs whose chosen and rejected replies (what DPO scores) are the same, counted on the rows as
    # written before DECISIONS 1 (ours compares the arguments it writes before it nulls NaN)
    same_reply = sum(1 for row in pred if _same_reply(row))
    pred = H.d1_nonfinite_to_null(pred)  # DECISIONS 1

    rep = dict(r.report)
    rep["tool_call_roundtrip"] = rt
    # ours (docs/API_CONTRACT.md): TRL pairs whose sides hold a later user or system turn are counted
    user_turns = sum(1 for row in pred if fmt == "trl" and any(
        m.get("role") in ("user", "system") for side in ("chosen", "rejected") for m in row[side][1:]))
    if user_turns:
        rep["user_turns_in_sides"] = user_turns
    # DECISIONS 12: the leak check over the exported pairs: chosen sides gate, rejected sides are counted
    chosen_leaks = leak_subset(ref.leak_report([H.deep(p["chosen"]) for p in kept]))
    rejected_quoting = sum(ref.leak_report([H.deep(p["rejected"])])["n_leaked"] for p in kept)
    rep["privileged_leaks"] = dict(chosen_leaks, rejected_quoting=rejected_quoting)
    warnings = list(rep.pop("warnings", []))

    expected_error = None
    if validate:
        if rt["invalid"]:
            expected_error = "tool_call_roundtrip_invalid"
        elif chosen_leaks["n_leaked"]:
            expected_error = "privileged_leak"  # DECISIONS 12
        elif not pred:
            expected_error = "no_preference_pairs"
    if expected_error is not None:
        _assert_refused(o, expected_error, rt, rep, ctx, carries_report=expected_error != "no_preference_pairs")
        event(f"outcome: refused ({expected_error})")
        return "refused"
    assert o.error is None, f"ours raised {o.error!r}\n{ctx}"
    event(f"outcome: exported {min(len(pred), 3)}{'+' if len(pred) >= 3 else ''} pairs")
    if rejected_quoting:
        event("rejected side quotes its privileged context")
    if rep.get("ties_dropped"):
        event("ties dropped")

    if pred:
        our_rows = H.assert_d1_file_encoding(o.raw)
        H.assert_same(pred, our_rows, "exported pairs", ctx)
        H.assert_key_order(pred, our_rows)
    else:
        assert o.rows is None, "no pairs left: nothing is written (spec 7.3 step 9)"

    skipped = sum(not isinstance(p, dict) for p in pairs)
    ours_rep = H.pop_d15_d6(o.report, rows_read=len(pairs), written=o.raw,  # every entry, as for rows
                            rows_skipped=skipped, path_source=None, sp_source="argument" if system_prompt is not None else "none",
                            tools_source="argument" if tools is not None else "none")
    if pred:
        # DECISIONS 15 ("rows written"): export_preference has no n_written in the spec; ours adds it.
        assert ours_rep.pop("n_written") == len(pred), "DECISIONS 15: n_written"
        rep["path"] = str(our_out)
    our_warnings = list(ours_rep.pop("warnings", []))
    rest, extra = _split_extra_warnings(our_warnings, {"d12_chosen": D12_CHOSEN, "d12_rejected": D12_REJECTED,
                                                       "d6_tools": D6_NO_TOOLS, "d6_system": D6_NO_SYSTEM,
                                                       "user_turns": TRL_USER_TURNS, "no_reply": NO_REPLY_PAIRS,
                                                       "skipped": SKIPPED_PAIRS, "length_cut": LENGTH_CUT_PAIRS,
                                                       "other_context": TRL_OTHER_CONTEXT,
                                                       "crashed": CRASHED_PAIRS, "same_reply": SAME_REPLY_PAIRS,
                                                       "empty_chosen": EMPTY_CHOSEN_PAIRS,
                                                       "undeclared": UNDECLARED_PAIRS,
                                                       "two_systems": TWO_SYSTEMS_PAIRS,
                                                       "bad_links": BAD_LINKS_PAIRS,
                                                       "misshapen": MISSHAPEN_PAIRS,
                                                       "left_out": LEFT_OUT_PAIRS,
                                                       "textless": TEXTLESS_PAIRS,
                                                       "judged_rejected": JUDGED_REJECTED_PAIRS,
                                                       "tool_results": TRL_TOOL_RESULTS})
    exp_extra = {"user_turns"} if user_turns else set()
    # ours: pairs whose chosen row was cut by the reply token cap (export_dataset warns of such rows, spec 5.6)
    length_cut = sum(1 for p in kept if p["chosen"].get("finish_reason") == "length")
    if length_cut:
        exp_extra.add("length_cut")
    # ours: TRL pairs whose rejected side began from other messages than the chosen side (spec 4.1 takes the
    # chosen side's as the prompt); read off the openai rows, whose sides keep their own messages
    other_context = 0
    if fmt == "trl":
        other_context = sum(1 for row in full.rows or [] if _first_assistant(row["chosen"]) >= 1
                            and _first_assistant(row["rejected"]) >= 1
                            and row["chosen"][:_first_assistant(row["chosen"])]
                            != row["rejected"][:_first_assistant(row["rejected"])])
    if other_context:
        exp_extra.add("other_context")
    # ours: pairs with a side that is a crashed rollout (final_text starts "<agent error", spec 1.1)
    crashed = sum(1 for p in kept if any(str(p[side].get("final_text") or "").startswith("<agent error")
                                         for side in ("chosen", "rejected")))
    if crashed:
        exp_extra.add("crashed")
        event("a pair has a crashed side")
    if same_reply:
        exp_extra.add("same_reply")
        event("a pair gives the same reply on both sides")
    # ours: pairs whose chosen reply has no words (after strip_think, as written) and makes no tool call
    empty_chosen = sum(1 for row in pred if _first_assistant(row["chosen"]) >= 0 and not any(
        m.get("role") == "assistant" and (m.get("tool_calls") or str(m.get("content") or "").strip())
        for m in row["chosen"][_first_assistant(row["chosen"]):]))
    if empty_chosen:
        exp_extra.add("empty_chosen")
        event("a pair has an empty chosen reply")
    # ours: an openai pair with a side that has no assistant turn (TRL drops such a pair)
    no_reply = sum(1 for row in pred if fmt == "openai" and not all(
        any(isinstance(m, dict) and m.get("role") == "assistant" for m in row[side])
        for side in ("chosen", "rejected")))
    if no_reply:
        exp_extra.add("no_reply")
    if skipped:
        exp_extra.add("skipped")  # ours: entries that are not objects are skipped (the spec), and said to be
    # ours: pairs whose chosen side calls a tool the tools written with them do not declare (DPO pushes it up)
    undeclared, first_undeclared = _undeclared_rows([(row["chosen"], row.get("tools")) for row in pred])
    if undeclared:
        exp_extra.add("undeclared")
        event("a chosen side calls an undeclared tool")
    # ours: a side's own system message right under the system prompt the export put first (TRL: its prompt's)
    two_systems = sum(1 for row in pred if system and (
        _second_is_system(row["prompt"]) if fmt == "trl" else
        _second_is_system(row["chosen"]) or _second_is_system(row["rejected"])))
    if two_systems:
        exp_extra.add("two_systems")
        event("a pair side opens with two system turns")
    # ours: pairs with a side whose tool results do not pair up with its calls (a TRL side after its prompt)
    head = (lambda row: row["prompt"]) if fmt == "trl" else (lambda row: [])  # noqa: E731
    bad_links = [i for i, row in enumerate(pred, 1)
                 if any(_links_broken(head(row) + row[side]) for side in ("chosen", "rejected"))]
    if bad_links:
        exp_extra.add("bad_links")
        event("a pair side's tool results do not pair up with its calls")
    # ours: pairs with a side whose messages hold tool calls that are not call objects
    misshapen = [i for i, pair in enumerate(kept, 1) if _misshapen_calls(pair["chosen"]) or
                 _misshapen_calls(pair["rejected"])]
    if misshapen:
        exp_extra.add("misshapen")
        event("a pair side's tool calls are not call objects")
    # ours: pairs with a side holding messages the format has no place for, left out as the spec says
    left_out = [(i, said) for i, pair in enumerate(kept, 1)
                if (said := _left_out(pair["chosen"]) or _left_out(pair["rejected"]))]
    if left_out:
        exp_extra.add("left_out")
        event("a pair side holds a message the format leaves out")
    # ours: pairs with a side holding a turn whose content is not text, written as JSON text
    textless = [(i, said) for i, pair in enumerate(kept, 1)
                if (said := _textless(pair["chosen"]) or _textless(pair["rejected"]))]
    if textless:
        exp_extra.add("textless")
        event("a pair side holds a turn whose content is not text")
    # ours: pairs the pairwise judge decided for the rejected side, exported as the rewards ordered them (spec 7.6)
    judged_rejected = sum(1 for p in kept if isinstance(p.get("pairwise"), dict)
                          and p["pairwise"].get("winner") == "rejected")
    if judged_rejected:
        exp_extra.add("judged_rejected")
        event("a pair the judge decided for the rejected side")
    # ours: TRL pairs with a tool turn inside a side (DPOTrainer scores the tool's output as the model's)
    tool_results = [i for i, row in enumerate(pred, 1) if fmt == "trl" and any(
        isinstance(m, dict) and m.get("role") == "tool" for side in ("chosen", "rejected") for m in row[side])]
    if tool_results:
        exp_extra.add("tool_results")
    if chosen_leaks["n_leaked"]:
        exp_extra.add("d12_chosen")
    if rejected_quoting:
        exp_extra.add("d12_rejected")
    with_calls = sum(1 for row in pred if any(m.get("tool_calls") for m in row["chosen"] + row["rejected"]))
    # DECISIONS 6 warnings are checked by test_d6_preference_warns_without_tools_or_system; here they
    # are only required to be right when present.
    for name, cond in (("d6_tools", with_calls and not tools), ("d6_system", with_calls and not system)):
        if name in extra:
            assert cond, f"unexpected {name} warning"
            exp_extra.add(name)
    assert set(extra) == exp_extra, f"DECISIONS 12 warnings: expected {sorted(exp_extra)}, got {our_warnings}\n{ctx}"
    if "d12_chosen" in extra:
        assert extra["d12_chosen"].groups() == (str(chosen_leaks["n_leaked"]), str(chosen_leaks["n_checked"]))
    if "d12_rejected" in extra:
        assert extra["d12_rejected"].group(1) == str(rejected_quoting)
    if "user_turns" in extra:
        assert extra["user_turns"].groups() == (str(user_turns), str(len(pred)))
    if "no_reply" in extra:
        assert extra["no_reply"].groups() == (str(no_reply), str(len(pred)))
    if "length_cut" in extra:
        assert extra["length_cut"].groups() == (str(length_cut), str(len(pred)))
    if "other_context" in extra:
        assert extra["other_context"].groups() == (str(other_context), str(len(pred)))
    if "crashed" in extra:
        assert extra["crashed"].groups() == (str(crashed), str(len(pred)))
    if "same_reply" in extra:
        assert extra["same_reply"].groups() == (str(same_reply), str(len(pred)))
    if "empty_chosen" in extra:
        assert extra["empty_chosen"].groups() == (str(empty_chosen), str(len(pred)))
    if "skipped" in extra:
        assert extra["skipped"].groups() == (str(skipped), str(len(pairs))), extra["skipped"].group(0)
    if "two_systems" in extra:
        assert extra["two_systems"].groups() == (str(two_systems), str(len(pred))), extra["two_systems"].group(0)
    if "undeclared" in extra:
        expected = (str(undeclared), str(len(pred)), first_undeclared[1] or None, str(first_undeclared[0]))
        assert extra["undeclared"].groups() == expected, extra["undeclared"].group(0)
    if "bad_links" in extra:
        expected = (str(len(bad_links)), str(len(pred)), str(bad_links[0]))
        assert extra["bad_links"].groups() == expected, extra["bad_links"].group(0)
    if "judged_rejected" in extra:
        assert extra["judged_rejected"].groups() == (str(judged_rejected), str(len(pred)))
    if "tool_results" in extra:
        expected = (str(len(tool_results)), str(len(pred)), str(tool_results[0]))
        assert extra["tool_results"].groups() == expected, extra["tool_results"].group(0)
    if "misshapen" in extra:
        expected = (str(len(misshapen)), str(len(pred)), str(misshapen[0]))
        assert extra["misshapen"].groups() == expected, extra["misshapen"].group(0)
    if "left_out" in extra:
        expected = (str(len(left_out)), str(len(pred)), str(left_out[0][0]), left_out[0][1])
        assert extra["left_out"].groups() == expected, extra["left_out"].group(0)
    if "textless" in extra:
        expected = (str(len(textless)), str(len(pred)), str(textless[0][0]), textless[0][1])
        assert extra["textless"].groups() == expected, extra["textless"].group(0)
    assert rest == warnings, f"warnings differ\nexpected: {warnings}\nours:     {rest}\n{ctx}"
    unexplained = {k: ours_rep.pop(k) for k in list(ours_rep) if k not in rep}
    H.assert_same(H.nan_safe(rep), H.nan_safe(ours_rep), "preference report", ctx)
    assert not unexplained, f"export_preference report keys no DECISIONS point explains: {unexplained}"
    return "ok"
