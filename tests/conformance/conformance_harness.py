"""Differential harness: run the reference (whileai 0.105) and whileai_pipeline on the same input and
turn the reference's output into what DECISIONS.md predicts for ours.

Rules this module follows (see the suite README in test_export_conformance.py):

* The reference is a black box: only its public functions are called.
* Both outputs are written to files and parsed line by line with ``json.loads`` (which accepts the
  reference's bare ``NaN`` tokens). Our file is additionally parsed strictly (DECISIONS 1).
* Every difference DECISIONS explains is handled by one named transform below, named after the
  decision (``dN_...``). Nothing else is normalised: any other difference fails the comparison.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Callable

import orjson

BLOCKED_KEYS = frozenset({"privileged", "principle", "hidden_state", "reference", "rubric", "vector"})
CONVERSATION_ROLES = ("assistant", "tool", "user", "system")
TRUNC_MARKER = re.compile(r"\n\[\.\.\. (\d+) chars of tool output truncated\]\Z")

# Report keys DECISIONS adds on our side.
D15_KEYS = ("rows_read", "source_path", "source_sha256", "sha256", "elapsed_seconds")  # DECISIONS 15
D6_KEYS = ("system_prompt_source", "tools_source")  # DECISIONS 6
D16_KEYS = ("no_completion_dropped", "trl_loss")  # DECISIONS 16 (TRL SFT only)


# =============================================================================================
# Running both sides
# =============================================================================================


@dataclasses.dataclass
class Outcome:
    report: dict | None = None
    rows: list | None = None  # parsed output file, None when no file was written
    error: BaseException | None = None
    path: Path | None = None
    raw: bytes | None = None


def run(fn: Callable, *args, output: Path | None = None, pass_output: bool = True, **kwargs) -> Outcome:
    """Call an exporter; capture its report or its exception, and parse the file it wrote.
    ``pass_output=False``: the exporter picks its default destination, expected to be ``output``."""
    out = Outcome(path=output)
    try:
        rep = fn(*args, output, **kwargs) if (output is not None and pass_output) else fn(*args, **kwargs)
        out.report = dict(rep)
    except Exception as exc:  # noqa: BLE001 -- we compare errors across implementations
        out.error = exc
    if output is not None and Path(output).exists():
        out.raw = Path(output).read_bytes()
        out.rows = parse_jsonl_lenient(out.raw)
    return out


def parse_jsonl_lenient(raw: bytes) -> list:
    """Parse a JSONL file the way any Python consumer would (bare NaN/Infinity accepted). Lines end at
    ``\n`` only: ``str.splitlines`` would also cut at U+2028, U+2029 and U+0085, which UTF-8 JSON
    holds raw inside strings."""
    text = raw.decode("utf-8")
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def _no_constants(tok):
    raise ValueError(f"non-standard JSON constant {tok!r}")


def strict_loads(s: str):
    """RFC 8259 JSON: NaN / Infinity / -Infinity are rejected."""
    return json.loads(s, parse_constant=_no_constants)


def assert_d1_file_encoding(raw: bytes) -> list:
    """DECISIONS 1: UTF-8, one object per line, '\\n' after every line, strict JSON (no bare NaN),
    non-ASCII written as UTF-8 rather than \\uXXXX escapes. Returns the strictly parsed rows."""
    text = raw.decode("utf-8")  # raises on invalid UTF-8
    if text:
        assert text.endswith("\n"), "DECISIONS 1: every line (the last one too) ends with \\n"
    lines = text.split("\n")[:-1] if text else []
    rows = []
    for i, line in enumerate(lines, 1):
        assert line.strip(), f"DECISIONS 1: blank line {i} in our output"
        try:
            rows.append(strict_loads(line))
        except ValueError as exc:  # pragma: no cover - failure path
            raise AssertionError(f"DECISIONS 1: line {i} is not strict JSON: {exc}: {line[:200]}") from None
        # \uXXXX escapes are allowed only for ASCII control characters (orjson escapes those).
        for m in re.finditer(r"\\(\\|u([0-9a-fA-F]{4}))", line):
            if m.group(2) is not None:
                cp = int(m.group(2), 16)
                assert cp < 0x20, f"DECISIONS 1: non-ASCII U+{cp:04X} written as an escape on line {i}"
    return rows


def leading_token(exc: BaseException) -> str:
    """The stable leading token of an error message (DECISIONS 14): text before the first ':'."""
    return str(exc).split(":", 1)[0].strip()


# =============================================================================================
# Generic helpers
# =============================================================================================


def assert_error_starts_like_reference(reference_call: Callable, our_call: Callable) -> None:
    """Both calls raise ValueError, and our message starts with the reference's text (ours may then
    say what to pass)."""
    import pytest

    with pytest.raises(ValueError) as r:
        reference_call()
    with pytest.raises(ValueError) as o:
        our_call()
    assert str(o.value).startswith(str(r.value)), f"ours: {o.value}\nreference: {r.value}"


def deep(x):
    return copy.deepcopy(x)


def nan_safe(x):
    """Make values comparable with ==: NaN -> a marker string (only used for in-memory reports/pairs)."""
    if isinstance(x, float) and math.isnan(x):
        return "<NaN>"
    if isinstance(x, dict):
        return {k: nan_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [nan_safe(v) for v in x]
    return x


def py_json(value) -> str:
    """PYJSON of the spec (section 0): json.dumps defaults, str() fallback."""
    return json.dumps(value, default=str)


def row_conversation(row: dict) -> list:
    """The message list of an exported row: ``messages``, or ``prompt`` + ``completion`` (TRL)."""
    if isinstance(row.get("messages"), list):
        return row["messages"]
    out = []
    for key in ("prompt", "completion"):
        if isinstance(row.get(key), list):
            out.extend(row[key])
    return out


def first_diff(a, b, path="$"):
    """Human-readable location of the first difference between two JSON values."""
    # strict on types: 1 and 1.0 (or True and 1) are different JSON values for a consumer
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} {short(a)} != {type(b).__name__} {short(b)}"
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a:
                return f"{path}.{k}: missing in expected, ours has {short(b[k])}"
            if k not in b:
                return f"{path}.{k}: expected {short(a[k])}, missing in ours"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        return None
    if nan_safe(a) != nan_safe(b):
        return f"{path}: expected {short(a)}, ours {short(b)}"
    return None


def short(x, n=300):
    s = json.dumps(x, ensure_ascii=False, default=str)
    return s if len(s) <= n else s[:n] + "..."


def assert_same(expected, ours, what: str, context: str = ""):
    d = first_diff(expected, ours)
    if d is not None:
        raise AssertionError(f"{what} differs at {d}\n{context}")


def assert_key_order(expected_rows, our_rows, skip: frozenset = frozenset()):
    """DECISIONS 1 keeps the spec's key order in the JSONL file: keys present on both sides must appear
    in the same relative order (top-level row keys and every message's keys)."""

    def rel(a: dict, b: dict, where):
        common_a = [k for k in a if k in b and k not in skip]
        common_b = [k for k in b if k in a and k not in skip]
        assert common_a == common_b, f"key order at {where}: expected {common_a}, ours {common_b}"

    for i, (e, o) in enumerate(zip(expected_rows, our_rows)):
        rel(e, o, f"row {i}")
        for key in ("messages", "prompt", "completion", "chosen", "rejected"):
            if isinstance(e.get(key), list) and isinstance(o.get(key), list):
                for j, (em, om) in enumerate(zip(e[key], o[key])):
                    if isinstance(em, dict) and isinstance(om, dict):
                        rel(em, om, f"row {i}.{key}[{j}]")


def walk_values(x, fn):
    """Rebuild a JSON value bottom-up, applying ``fn`` to every scalar."""
    if isinstance(x, dict):
        return {k: walk_values(v, fn) for k, v in x.items()}
    if isinstance(x, list):
        return [walk_values(v, fn) for v in x]
    return fn(x)


# =============================================================================================
# Input-side transforms (applied to what the REFERENCE is given)
# =============================================================================================


def d10_json_content(rows: list) -> list:
    """DECISIONS 10: in rows that already hold ``messages``, ``None`` content is "" and any other
    non-string content is PYJSON text (the spec's tool-result encoding), not ``str()``. Feeding the
    reference that text instead of the raw value makes it apply think-stripping, truncation and
    truncation counts to the same text we use, so the rest of its output is the prediction."""
    out = []
    for row in rows:
        if isinstance(row, dict) and row.get("messages") and isinstance(row["messages"], list):
            row = dict(row)
            msgs = []
            for m in row["messages"]:
                if isinstance(m, dict) and "content" in m and not isinstance(m["content"], str):
                    m = dict(m)
                    m["content"] = "" if m["content"] is None else py_json(m["content"])
                msgs.append(m)
            row["messages"] = msgs
        out.append(row)
    return out


def d10_json_content_pairs(pairs: list) -> list:
    """DECISIONS 10 for preference sides (each side is a row)."""
    out = []
    for p in pairs:
        if isinstance(p, dict):
            p = dict(p)
            for side in ("chosen", "rejected"):
                if isinstance(p.get(side), dict):
                    p[side] = d10_json_content([p[side]])[0]
        out.append(p)
    return out


SOURCE_LINEAGE_ONLY = "source_lineage"


def d11_wrap_nondict_lineage(rows: list) -> list:
    """DECISIONS 11 (input half): with ``unroll``, a truthy non-dict ``lineage`` does not crash; the
    sample's lineage becomes ``{"source_lineage": <original>, "unrolled_from": {...}}``. Handing the
    reference ``{"source_lineage": <original>}`` makes it add ``unrolled_from`` itself.
    (The generators never produce a dict lineage whose only key is ``source_lineage``.)"""
    out = []
    for row in rows:
        if isinstance(row, dict) and row.get("lineage") and not isinstance(row["lineage"], dict):
            row = dict(row)
            row["lineage"] = {SOURCE_LINEAGE_ONLY: row["lineage"]}
        out.append(row)
    return out


def d11_unwrap_lineage_of_plain_samples(samples: list) -> None:
    """DECISIONS 11 (output half): a row without assistant turns is emitted as one sample unchanged
    (no ``unroll``), so its non-dict lineage stays as it was; undo the input wrapper there."""
    for s in samples:
        lin = s.get("lineage")
        if "unroll" not in s and isinstance(lin, dict) and list(lin) == [SOURCE_LINEAGE_ONLY]:
            s["lineage"] = lin[SOURCE_LINEAGE_ONLY]


# =============================================================================================
# Output-side transforms (applied to the REFERENCE's parsed output)
# =============================================================================================


def sample_sources(samples: list, n_sources: int, unroll: bool) -> list[int]:
    """Index of the source row each output row came from (all generated sources are dicts).
    Unrolled samples of one source are consecutive with ``unroll.turn`` 1..turns; a source with no
    assistant turn gives exactly one sample without ``unroll``."""
    if not unroll:
        assert len(samples) == n_sources
        return list(range(n_sources))
    idx, src = [], -1
    for s in samples:
        u = s.get("unroll")
        if not isinstance(u, dict) or u.get("turn") == 1:
            src += 1
        idx.append(src)
    assert src == n_sources - 1, (src, n_sources)
    return idx


def _kept_messages(msgs: list) -> list:
    """The input messages the spec's wire conversion keeps (3.4): objects with a known role."""
    return [m for m in msgs if isinstance(m, dict) and str(m.get("role") or "") in CONVERSATION_ROLES]


def d9_id_plan(input_messages: list) -> list:
    """DECISIONS 9: ids for every kept input message. Generated ids count only the calls that needed
    one and skip the ids the row's own calls bring; a tool message's own ``tool_call_id`` consumes that id
    from the pending calls; an id-less tool message takes the oldest pending id."""
    counter = 0
    pending: list[str] = []
    plan: list = []
    brought = {str(c["id"]) for m in _kept_messages(input_messages) if str(m.get("role") or "") == "assistant"
           for c in (m.get("tool_calls") or []) if isinstance(c, dict) and c.get("id")}
    for m in _kept_messages(input_messages):
        role = str(m.get("role") or "")
        if role == "assistant" and m.get("tool_calls"):
            ids = []
            for call in m["tool_calls"]:
                call = call if isinstance(call, dict) else {}
                if call.get("id"):
                    cid = str(call["id"])
                else:  # skipping ids the row's own calls use
                    cid = "call_%04d" % counter
                    counter += 1
                    while cid in brought:
                        cid = "call_%04d" % counter
                        counter += 1
                pending.append(cid)
                ids.append(cid)
            plan.append(("calls", ids))
        elif role == "tool":
            own = m.get("tool_call_id")
            if own:
                tid = str(own)
                if tid in pending:
                    pending.remove(tid)
            elif pending:
                tid = pending.pop(0)
            else:
                tid = None
            plan.append(("tool", tid))
        else:
            plan.append(None)
    return plan


def _apply_id_plan(out_msgs: list, plan: list, start: int) -> None:
    """Rewrite ids in ``out_msgs``, whose element j is kept input message ``start + j``."""
    for j, m in enumerate(out_msgs):
        k = start + j
        if k < 0:
            continue  # the prepended system message
        step = plan[k]
        if step is None:
            continue
        kind, val = step
        if kind == "calls":
            assert m.get("role") == "assistant" and len(m.get("tool_calls") or []) == len(val), (m, val)
            for call, cid in zip(m["tool_calls"], val):
                call["id"] = cid
        else:
            assert m.get("role") == "tool", m
            if val is None:
                m.pop("tool_call_id", None)
            else:
                m["tool_call_id"] = val


def d9_relink_tool_call_ids(samples: list, sources: list, unroll: bool, system: str, trl_reshaped=False) -> None:
    """DECISIONS 9 for SFT rows. Only rows that already hold ``messages`` can differ (a conversation
    rebuilt from steps has one id-less call per tool step and id-less tool messages, where both id
    schemes agree), so only those are rewritten. Runs before the TRL reshape (d16)."""
    assert not trl_reshaped
    idx = sample_sources(samples, len(sources), unroll)
    off = 1 if system else 0
    for s, i in zip(samples, idx):
        src = sources[i]
        msgs = src.get("messages")
        if not (msgs and isinstance(msgs, list)):
            continue
        plan = d9_id_plan(msgs)
        _apply_id_plan(s["messages"], plan, -off)


def d9_relink_pair_ids(rows: list, kept_pairs: list, system: str, fmt: str) -> None:
    """DECISIONS 9 for preference rows (both sides; for TRL the chosen side is prompt + chosen, the
    rejected side is the tail of the full rejected conversation)."""
    off = 1 if system else 0
    for row, pair in zip(rows, kept_pairs):
        for side in ("chosen", "rejected"):
            src = pair[side]
            msgs = src.get("messages")
            if not (msgs and isinstance(msgs, list)):
                continue
            plan = d9_id_plan(msgs)
            full_len = off + len(_kept_messages(msgs))
            if fmt == "trl" and side == "chosen":
                seq = row["prompt"] + row["chosen"]
                _apply_id_plan(seq, plan, -off)  # elements are shared dicts: edits land in the row
            elif fmt == "trl":
                _apply_id_plan(row["rejected"], plan, full_len - len(row["rejected"]) - off)
            else:
                _apply_id_plan(row[side], plan, -off)


def d11_per_sample_truncation(samples: list, unroll: bool) -> None:
    """DECISIONS 11: each unrolled sample's ``tool_output_truncated`` / ``tool_output_chars_cut`` count
    only the tool messages inside that sample (the reference copies the row totals onto every
    sample). Counts are read off the truncation markers; for non-unrolled rows this must reproduce
    the reference's own numbers (checked, so the marker reading is trustworthy)."""
    for s in samples:
        n, cut = 0, 0
        for m in s.get("messages") or []:
            if m.get("role") == "tool":
                mm = TRUNC_MARKER.search(m.get("content") or "")
                if mm:
                    n += 1
                    cut += int(mm.group(1))
        if not unroll:
            assert (s.get("tool_output_truncated", 0), s.get("tool_output_chars_cut", 0)) == (n, cut), (
                "harness self-check: truncation markers disagree with the reference's row counts"
            )
            continue
        s.pop("tool_output_truncated", None)
        s.pop("tool_output_chars_cut", None)
        if n:
            s["tool_output_truncated"] = n
            s["tool_output_chars_cut"] = cut


def d16_trl_sft_shape(rows: list, mask_mode: str, unroll: bool) -> tuple[list, list]:
    """DECISIONS 16: TRL SFT rows carry no ``loss_mask``. With ``mask_mode="final"`` or ``unroll`` they
    are prompt/completion rows: prompt = messages before the last assistant turn, completion = that
    turn and what follows; rows with no assistant turn after index 0 are dropped (and counted).
    Returns (kept rows, dropped rows)."""
    kept, dropped = [], []
    for r in rows:
        r = dict(r)
        r.pop("loss_mask", None)
        if mask_mode == "final" or unroll:
            msgs = r.pop("messages")
            last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
            if last < 1:
                dropped.append(r)
                continue
            r["prompt"] = msgs[:last]
            r["completion"] = msgs[last:]
        kept.append(r)
    return kept, dropped


CONVERSATION_KEYS = frozenset({"messages", "prompt", "completion", "chosen", "rejected", "tools"})


def scrub(x):
    if isinstance(x, dict):
        return {k: scrub(v) for k, v in x.items() if k not in BLOCKED_KEYS}
    if isinstance(x, list):
        return [scrub(v) for v in x]
    return x


def d8_scrub_blocked_keys(rows: list) -> list:
    """DECISIONS 8: every exported row is free of the blocked keys at any depth of its carried
    metadata (lineage, reason, faults, history, pair fields, ...). The conversation (messages /
    prompt / completion / chosen / rejected) is never edited; ``tools`` is the tool schema the
    caller passed, not row metadata, and is left alone too (see the open question in the report)."""
    # ``prompt`` is the conversation only in TRL rows (a message list); in openai rows it is the carried
    # raw prompt (SFT) or the pair's prompt field (preference), metadata like any other.
    return [{k: (v if k in CONVERSATION_KEYS and (k != "prompt" or isinstance(v, list)) else scrub(v))
             for k, v in r.items()} for r in rows]


def compact_json(x) -> str:
    """Compact JSON as API_CONTRACT says ``function.arguments`` is written: orjson's text (its float spelling:
    ``1e-7``, not Python's ``1e-07``), an integer beyond 64 bits written with all its digits among it; Python's
    json for what orjson would write as null (NaN, Infinity: kept as tokens for the strict gate to refuse,
    DECISIONS 3)."""
    if not _has_nonfinite(x):
        try:
            return orjson.dumps(x).decode("utf-8")
        except orjson.JSONEncodeError:
            pass
        try:  # an integer beyond 64 bits: its digits as they are, the rest still orjson's text
            return orjson.dumps(_big_ints_as_digits(x)).decode("utf-8")
        except orjson.JSONEncodeError:
            pass
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def _big_ints_as_digits(x):
    if isinstance(x, int) and not isinstance(x, bool) and not -(2 ** 63) <= x < 2 ** 64:
        return orjson.Fragment(str(x))
    if isinstance(x, dict):
        return {k: _big_ints_as_digits(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_big_ints_as_digits(v) for v in x]
    return x


def _has_nonfinite(x) -> bool:
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, dict):
        return any(_has_nonfinite(v) for v in x.values())
    if isinstance(x, list):
        return any(_has_nonfinite(v) for v in x)
    return False


def d2_compact_arguments(rows: list, sides=("messages",)) -> None:
    """DECISIONS 2: openai ``function.arguments`` is compact JSON with non-ASCII as UTF-8. The
    reference's ARGJSON string is parsed and re-encoded compactly; a string that does not parse
    (kept verbatim by the spec's decode rule) stays as it is."""
    for r in rows:
        for key in sides:
            for m in r.get(key) or []:
                for call in m.get("tool_calls") or []:
                    fn = call.get("function")
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        try:
                            fn["arguments"] = compact_json(json.loads(fn["arguments"]))
                        except ValueError:
                            pass


def d1_nonfinite_to_null(rows: list) -> list:
    """DECISIONS 1: non-finite floats are written as null (the reference writes bare NaN/Infinity)."""
    return [
        walk_values(r, lambda v: None if isinstance(v, float) and not math.isfinite(v) else v) for r in rows
    ]


# =============================================================================================
# Report-side transforms
# =============================================================================================

RT_CHECKED_FOR = {
    "json_string": "arguments parse back to a dict from their JSON string (OpenAI wire). A chat-template trainer needs dicts: export format='trl' for that.",
    "dict": "arguments are dicts, as HF chat templates render them (| tojson).",
}

# How to read DECISIONS 3 for format="trl" (arguments are dicts there, nothing is parsed):
# "NaN/Infinity inside arguments is invalid" is read literally, for both encodings.
D3_TRL_NONFINITE_INVALID = True


def _finite(x) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite(v) for v in x)
    return True


def roundtrip_report(conversations: list, fmt: str, *, strict: bool) -> dict:
    """Spec 4.2 over a list of message lists. ``strict=False`` is the reference's rule (used to
    self-check this helper against the reference's own report); ``strict=True`` is DECISIONS 3."""
    checked = invalid = 0
    bad = []
    for i, msgs in enumerate(conversations):
        row_bad = False
        for m in msgs or []:
            for call in m.get("tool_calls") or []:
                checked += 1
                fn = call.get("function") if isinstance(call, dict) else None
                fn = fn if isinstance(fn, dict) else {}
                a = fn.get("arguments")
                ok = True
                if fmt == "openai" and isinstance(a, str):
                    try:
                        a = strict_loads(a) if strict else json.loads(a)
                    except ValueError:
                        ok = False
                ok = ok and isinstance(a, dict)
                if ok and strict and fmt == "trl" and D3_TRL_NONFINITE_INVALID:
                    ok = _finite(a)
                if not ok:
                    invalid += 1
                    row_bad = True
        if row_bad:
            bad.append(i)
    enc = "json_string" if fmt == "openai" else "dict"
    return {"checked": checked, "invalid": invalid, "rows": bad[:20], "encoding": enc, "checked_for": RT_CHECKED_FOR[enc]}


def numeric_reward(v):
    """Spec 3.11 numeric-reward rule: None/bools excluded, float() must work, NaN excluded."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def reward_class(v) -> str:
    f = numeric_reward(v)
    if f is None:
        return "n_ungraded"
    return "n_pass" if f >= 0.5 else "n_fail"


FAILING_WARNING = re.compile(r"^(\d+) of (\d+) rows have reward below 0\.5 and are exported as SFT targets")


def pop_d15_d6(report: dict, *, rows_read: int, written: bytes | None, path_source: Path | None,
               sp_source: str | None, tools_source: str | None, rows_skipped: int = 0) -> dict:
    """DECISIONS 15 + 6: check our extra report keys, then drop them for the comparison."""
    rep = dict(report)
    # DECISIONS 15 ("says what it read"): rows read, and how many of them were not objects
    assert rep.pop("rows_read") == rows_read, "DECISIONS 15: rows_read"
    assert rep.pop("rows_skipped") == rows_skipped, "DECISIONS 15: rows_skipped (non-object rows)"
    el = rep.pop("elapsed_seconds")
    assert isinstance(el, (int, float)) and not isinstance(el, bool) and el >= 0, "DECISIONS 15: elapsed_seconds"
    if written is not None:
        assert rep.pop("sha256") == hashlib.sha256(written).hexdigest(), "DECISIONS 15: sha256 of the written file"
    else:
        assert "sha256" not in rep, "DECISIONS 15: sha256 only when a file was written"
    if path_source is not None:
        assert rep.pop("source_path") == str(path_source), "DECISIONS 15: source_path"
        assert rep.pop("source_sha256") == hashlib.sha256(Path(path_source).read_bytes()).hexdigest(), (
            "DECISIONS 15: source_sha256"
        )
    else:
        assert "source_path" not in rep and "source_sha256" not in rep, "DECISIONS 15: path sources only"
    # DECISIONS 6
    if sp_source is not None:
        assert rep.pop("system_prompt_source") == sp_source, "DECISIONS 6: system_prompt_source"
        assert rep.pop("tools_source") == tools_source, "DECISIONS 6: tools_source"
    return rep


def d6_missing_context_warning_expected(rows_out: list, system: str, tools) -> bool:
    """DECISIONS 6: warn when a row with tool calls is exported with no tools or no system prompt."""
    has_calls = any(
        m.get("tool_calls") for r in rows_out for m in row_conversation(r) + (r.get("chosen") or []) + (r.get("rejected") or [])
        if isinstance(m, dict)
    )
    return has_calls and (not tools or not system)
