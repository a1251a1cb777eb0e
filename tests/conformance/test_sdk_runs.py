"""Runs written by the reference SDK itself (whileai 0.105 ``simulate``), not by our strategies.

``simulate(agent=<callable>, simulator=False, grader=<callable>, seed=...)`` runs offline with no
model and no API key: the SDK writes the situations from its own templates, calls the agent once per
rollout and the grader once per row, and writes ``<run>.jsonl`` plus the sidecar ``<run>.meta.json``
(and ``<run>.jsonl.progress.json``). As observed for 0.105:

* the agent is called with one positional argument, the user's message (a ``str``), and returns
  either a string (the final reply, no tool calls) or ``{"steps": [...], "final_text": ...}`` where a
  step is ``{"tool": name, "arguments": {...}, "result": ...}``. An OpenAI-style assistant message
  (``tool_calls``) is refused as an agent error and the rollout is lost.
* the grader is called with the row (``reward`` still ``None``, ``privileged`` present) and returns
  a number or ``{"score": x, "reason": ...}``.
* the rows on disk hold ``messages`` whose tool calls are ``{"name", "arguments": {...}}`` with no
  ids, and id-less tool messages; they carry no ``privileged`` block (the SDK scrubs it when saving).
  The in-memory run (``SimulationData.trajectories``) keeps ``privileged`` (``reference``,
  ``hidden_state``).

The module writes one small run (4 situations x 4 rollouts) and checks our exporters against the
reference's on it through the shared differential checks (conformance_checks.py), the Dagster chain on
it, and a leaking variant of it; each reply shape the SDK accepts gets a tiny run of its own.
About 10-15 s on 2 cores.
"""

import dataclasses
import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from conformance_settings import REF_SKIP_REASON

ref = pytest.importorskip("whileai.simulations", reason=REF_SKIP_REASON)

import dagster as dg  # noqa: E402

import conformance_harness as H  # noqa: E402
from conformance_checks import (  # noqa: E402
    check_build_preference_pairs,
    check_export_dataset,
    check_export_preference,
)
from pipeline.conftest import Chain, check_results, materialization, read_rows  # noqa: E402

import whileai_pipeline.simulations as wai  # noqa: E402
from whileai_pipeline.core.scoring import verdict  # noqa: E402
from whileai_pipeline.defs.automation import inbox_sensor  # noqa: E402
from whileai_pipeline.defs.partitions import PARTITIONS_NAME  # noqa: E402
from whileai_pipeline.defs.resources import PipelineStorage, fingerprint  # noqa: E402

pytestmark = pytest.mark.conformance

SYSTEM_PROMPT = "You are the support agent of an online shop. Look orders up before answering; refund only when asked."
TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_order", "description": "Look up an order by its id, e.g. ORD-1234.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "refund_order", "description": "Refund an order, fully or in part.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"},
                                                        "notify": {"type": "boolean"}},
                       "required": ["order_id"]}}},
]
SEED = 11
SITUATIONS, ROLLOUTS = 4, 4


class ScriptedAgent:
    """A plain callable agent. The n-th rollout of a prompt takes one of four behaviours: look up then
    refund (two steps, a ``<think>`` block), look up only, no tool at all (``<think>`` + a question),
    look up with a structured result and a non-ASCII reply. ``known``: prompt -> a hidden reference the
    agent recites as its final reply, whatever it did before (the leak case)."""

    def __init__(self, known=None):
        self.known = known or {}
        self.calls = []
        self._seen = {}
        self._lock = threading.Lock()

    def __call__(self, prompt):
        with self._lock:
            self.calls.append(prompt)
            n = self._seen[prompt] = self._seen.get(prompt, 0) + 1
        reply = self._behaviour(prompt, n)
        if prompt not in self.known:
            return reply
        recital = f"Per my notes: {self.known[prompt]}."
        return dict(reply, final_text=recital) if isinstance(reply, dict) else recital

    @staticmethod
    def _behaviour(prompt, n):
        m = re.search(r"ORD-\d+", prompt)
        order = m.group(0) if m else "ORD-1001"
        lookup = {"tool": "lookup_order", "arguments": {"order_id": order}}
        kind = n % 4
        if kind == 1:
            return {"steps": [dict(lookup, result={"id": order, "status": "delivered", "total": 42.5}),
                              {"tool": "refund_order", "arguments": {"order_id": order, "amount": 42.5, "notify": True},
                               "result": "refund issued"}],
                    "final_text": f"<think>The customer did not ask for a refund.</think>I refunded {order} in full."}
        if kind == 2:
            return {"steps": [dict(lookup, result=f"{order}: shipped, arriving Friday")],
                    "final_text": f"{order} has shipped and should arrive on Friday."}
        if kind == 3:
            return "<think>No order id I can trust yet.</think>Could you tell me the order number?"
        return {"steps": [dict(lookup, result={"id": order, "status": "in_transit", "carrier": "La Poste"})],
                "final_text": f"Voilà: {order} is in transit with La Poste."}


class Grader:
    """Mixed rewards: one look-up and no refund passes; a needless refund fails; asking back is partial
    credit. Returns a dict (score + reason) or a bare number, both forms the SDK accepts."""

    def __init__(self):
        self.calls = []

    def __call__(self, row):
        self.calls.append(row)
        tools = [s.get("tool") for s in row.get("steps") or []]
        if "refund_order" in tools:
            return {"score": 0.0, "reason": "refunded an order nobody asked to refund"}
        if tools:
            return {"score": 1.0, "reason": "looked the order up and reported it"}
        return 0.5


def _simulate(path: Path, agent, grader):
    return ref.simulate(agent=agent, simulator=False, tools=TOOLS, system_prompt=SYSTEM_PROMPT, output=str(path),
                        grader=grader, seed=SEED, budget=SITUATIONS * ROLLOUTS, situations=SITUATIONS,
                        rollouts_per_request=ROLLOUTS, concurrency=1)


@dataclasses.dataclass
class SdkRun:
    path: Path  # the run file the SDK wrote
    sidecar: dict  # the SDK's <run>.meta.json
    rows: list  # the run file's rows
    sim: object  # the SimulationData simulate returned (trajectories keep privileged)
    agent: ScriptedAgent
    grader: Grader


@pytest.fixture(scope="module")
def sdk_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("sdk")
    agent, grader = ScriptedAgent(), Grader()
    sim = _simulate(d / "support_run.jsonl", agent, grader)
    path = d / "support_run.jsonl"
    sidecar = json.loads((d / "support_run.meta.json").read_text(encoding="utf-8"))
    return SdkRun(path, sidecar, H.parse_jsonl_lenient(path.read_bytes()), sim, agent, grader)


@pytest.fixture(scope="module")
def leaky_run(sdk_run, tmp_path_factory):
    """The same seed again, with an agent that was shown the first run's hidden references and recites
    them (the SDK draws the same situations for the same seed)."""
    known = {r["prompt"]: r["privileged"]["reference"] for r in sdk_run.sim.trajectories
             if isinstance(r.get("privileged"), dict) and r["privileged"].get("reference")}
    agent = ScriptedAgent(known)
    sim = _simulate(tmp_path_factory.mktemp("sdk_leak") / "leaky_run.jsonl", agent, Grader())
    recited = [r for r in sim.trajectories if r["prompt"] in known]
    assert recited, "the second run drew none of the first run's situations"
    return sim


def _has_calls(row):
    return any(m.get("tool_calls") for m in row.get("messages") or [])


def _tool_calls(messages):
    return [c for m in messages if isinstance(m, dict) for c in m.get("tool_calls") or []]


def _run_like(sim, rows):
    """The SDK's own run object with these trajectories (its profile kept)."""
    return dataclasses.replace(sim, trajectories=rows)


# ------------------------------------------------------------------------------- the run itself


def test_the_sdk_run_is_what_the_other_tests_assume(sdk_run):
    """Guards the fixture: if the SDK stops writing tool calls, groups or mixed rewards, the
    differential tests below would pass on a run that exercises nothing."""
    rows = sdk_run.rows
    assert len(rows) == len(sdk_run.sim.trajectories) == SITUATIONS * ROLLOUTS
    assert len(sdk_run.agent.calls) == len(rows) and len(sdk_run.grader.calls) == len(rows)
    assert all(isinstance(p, str) for p in sdk_run.agent.calls)
    assert sdk_run.sidecar["system_prompt"] == SYSTEM_PROMPT and sdk_run.sidecar["tools"] == TOOLS
    # several rollouts of each situation, with rewards that differ inside a situation
    by_scenario = {}
    for r in rows:
        by_scenario.setdefault(r["scenario_id"], set()).add(r["reward"])
    assert len(by_scenario) == SITUATIONS and all(len(v) > 1 for v in by_scenario.values())
    # tool calls with dict arguments, some rows with two, id-less on disk; <think> blocks; no privileged
    calls = [_tool_calls(r["messages"]) for r in rows]
    assert any(len(c) >= 2 for c in calls) and any(not c for c in calls)
    assert all(isinstance(c["arguments"], dict) for cs in calls for c in cs)
    assert any("<think>" in (r.get("final_text") or "") for r in rows)
    assert not any("privileged" in r for r in rows)
    assert all(isinstance(r.get("privileged"), dict) for r in sdk_run.sim.trajectories)


# ------------------------------------------------------------------------------- (a) the exporters


def _check_sdk_file(path: Path, sidecar: dict, tmp: Path, **kw) -> str:
    """check_export_dataset on a run file the SDK wrote, read as a path source: ours reads the SDK's
    sidecar, the reference gets its prompt and tools as arguments (DECISIONS 6)."""
    rows = H.parse_jsonl_lenient(path.read_bytes())

    def ref_source(ref_rows):
        if ref_rows == rows:  # no input transform applied: the reference reads the SDK's own bytes
            return str(path)
        out = tmp / "ref_src" / path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in ref_rows), encoding="utf-8")
        return str(out)

    return check_export_dataset(
        ref, wai, rows, tmp, system_prompt=None, tools=None, validate=True,
        ref_source=ref_source, our_source=lambda: str(path),
        ref_kwargs={"system_prompt": sidecar["system_prompt"], "tools": sidecar["tools"]},
        path_source=path, sp_source="sidecar", tools_source="sidecar", **kw,
    )


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("mask_mode,unroll", [("assistant", False), ("final", False), ("assistant", True)])
@pytest.mark.parametrize("strip_think", [True, False], ids=["strip", "keep_think"])
def test_export_dataset_of_the_sdk_file_matches_reference(sdk_run, tmp_path, fmt, mask_mode, unroll, strip_think):
    """The SDK's file as a path source with the SDK's own sidecar, validate=True on ours."""
    outcome = _check_sdk_file(sdk_run.path, sdk_run.sidecar, tmp_path, fmt=fmt, mask_mode=mask_mode, unroll=unroll,
                              strip_think=strip_think, cap=None)
    assert outcome == "ok"


# Other reply shapes the SDK accepts from an agent callable, as it writes them (observed): a step with no
# result or a None result (tool content "null"), an "error" step (the error is not written; content
# "null"), string-encoded arguments (kept as a string), empty arguments, a None final_text (written as
# the text "None"), nested arguments with non-ASCII and a float, a tool the schemas do not declare, a
# text step (an assistant message before the call), a reply that is only a <think> block, and a long
# tool result (with a cap). An empty reply is left out: the SDK retries it for about a minute.
_LOOKUP = {"tool": "lookup_order", "arguments": {"order_id": "ORD-1001"}}
REPLY_SHAPES = {
    "no_result": {"steps": [dict(_LOOKUP)], "final_text": "Found it."},
    "none_result": {"steps": [dict(_LOOKUP, result=None)], "final_text": "Found it."},
    "error_step": {"steps": [dict(_LOOKUP, error="timeout")], "final_text": "The lookup timed out."},
    "string_arguments": {"steps": [{"tool": "lookup_order", "arguments": '{"order_id": "ORD-1001"}', "result": "ok"}],
                         "final_text": "Found it."},
    "empty_arguments": {"steps": [{"tool": "lookup_order", "arguments": {}, "result": "ok"}], "final_text": "Hm."},
    "none_final_text": {"steps": [dict(_LOOKUP, result="ok")], "final_text": None},
    "nested_arguments": {"steps": [{"tool": "refund_order", "result": [1, 2, {"k": None}],
                                    "arguments": {"order_id": "ORD-1001", "amount": 3.0,
                                                  "meta": {"since": "2024-01-01", "tags": ["a", "é"]}}}],
                         "final_text": "Remboursé."},
    "undeclared_tool": {"steps": [{"tool": "cancel_everything", "arguments": {"x": 1}, "result": "done"}],
                        "final_text": "Cancelled."},
    "text_step": {"steps": [{"text": "Let me check."}, dict(_LOOKUP, result="ok")], "final_text": "Found it."},
    "only_think": "<think>nothing to say</think>",
    "long_result": {"steps": [dict(_LOOKUP, result="x" * 3000)], "final_text": "Found it."},
}


@pytest.mark.parametrize("shape", list(REPLY_SHAPES))
def test_reply_shapes_the_sdk_accepts_export_like_the_reference(shape, tmp_path):
    reply = REPLY_SHAPES[shape]
    path = tmp_path / "shape_run.jsonl"
    ref.simulate(agent=lambda prompt: json.loads(json.dumps(reply)), simulator=False, tools=TOOLS,
                 system_prompt=SYSTEM_PROMPT, output=str(path), grader=lambda row: row["rollout_index"] % 2,
                 seed=SEED, budget=4, situations=2, rollouts_per_request=2, concurrency=1)
    sidecar = json.loads(path.with_name("shape_run.meta.json").read_text(encoding="utf-8"))
    assert len(H.parse_jsonl_lenient(path.read_bytes())) == 4
    for fmt in ("openai", "trl"):
        for mask_mode, unroll, cap in (("assistant", False, None), ("final", False, 100), ("assistant", True, 100)):
            outcome = _check_sdk_file(path, sidecar, tmp_path / f"{fmt}-{mask_mode}-{unroll}", fmt=fmt,
                                      mask_mode=mask_mode, unroll=unroll, strip_think=True, cap=cap)
            assert outcome == "ok", (fmt, mask_mode, unroll)


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_export_dataset_of_the_sdk_run_object_matches_reference(sdk_run, tmp_path, fmt):
    """The in-memory run (SimulationData: trajectories with privileged, profile with prompt and tools):
    the leak gate has something to read and must pass."""
    rows = sdk_run.sim.trajectories
    profile = sdk_run.sim.profile
    outcome = check_export_dataset(
        ref, wai, rows, tmp_path, fmt=fmt, mask_mode="assistant", unroll=False, strip_think=True,
        system_prompt=None, tools=None, cap=None, validate=True,
        ref_source=lambda ref_rows: _run_like(sdk_run.sim, ref_rows),
        our_source=lambda: _run_like(sdk_run.sim, H.deep(rows)),
        ref_kwargs={"system_prompt": None, "tools": None}, sp_source="profile", tools_source="profile",
        effective_context=(profile.policy, profile.tools),
    )
    assert outcome == "ok"
    rep = wai.export_dataset(_run_like(sdk_run.sim, H.deep(rows)), str(tmp_path / "again.jsonl"), format=fmt)
    assert rep["privileged_leaks"]["checked"] is True and rep["privileged_leaks"]["n_checked"] == len(rows)


@pytest.mark.parametrize("source", ["file", "trajectories"])
@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("strip_think", [True, False], ids=["strip", "keep_think"])
def test_preference_pairs_of_the_sdk_run_match_reference(sdk_run, tmp_path, source, fmt, strip_think):
    """build_preference_pairs on both sides (compared), then export_preference, validate=True."""
    rows = sdk_run.rows if source == "file" else sdk_run.sim.trajectories
    ref_pairs, our_pairs = check_build_preference_pairs(ref, wai, H.deep(rows), {})
    assert ref_pairs, "the SDK run gave no preference pairs"
    outcome = check_export_preference(
        ref, wai, ref_pairs, tmp_path, fmt=fmt, drop_ties=True, system_prompt=sdk_run.sidecar["system_prompt"],
        tools=sdk_run.sidecar["tools"], strip_think=strip_think, validate=True, our_source=lambda: H.deep(our_pairs),
    )
    assert outcome == "ok"


# ------------------------------------------------------------------------------- (b) the pipeline


def test_pipeline_publishes_the_sdk_run(sdk_run, tmp_path):
    """The SDK's run and sidecar dropped into the inbox; the whole chain materialized."""
    storage = PipelineStorage(root=str(tmp_path / "home"))
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    src = incoming / "sdk_support.jsonl"
    shutil.copyfile(sdk_run.path, src)
    shutil.copyfile(sdk_run.path.with_name("support_run.meta.json"), incoming / "sdk_support.meta.json")
    with dg.DagsterInstance.ephemeral() as instance:
        chain = Chain(storage, instance, tmp_path)
        key = storage.register(src)
        instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
        result = chain.materialize(key)

    started = {e.step_key for e in result.all_events if e.event_type_value == "STEP_START"}
    succeeded = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
    assert result.success and started and started == succeeded, (started - succeeded)
    checks = check_results(result)
    assert set(checks) == {(a, g) for a in ("sft_export", "dpo_export")
                           for g in ("tool_call_roundtrip", "privileged_leak", "consumer_format")}
    for ev in checks.values():
        assert ev.passed, ev.description
    for asset in ("sft_export", "dpo_export"):  # DECISIONS 13: the SDK's file carries no privileged block
        ev = checks[(asset, "privileged_leak")]
        assert ev.severity == dg.AssetCheckSeverity.WARN and ev.description.startswith("NOTHING TO READ")

    raw = materialization(result, "raw_simulation_data")
    assert raw["rows"].value == len(sdk_run.rows)
    assert storage.stage_path(key, "raw").read_bytes() == sdk_run.path.read_bytes()

    # the counts in the metadata are the library's for the same stage files
    scored = read_rows(storage.stage_path(key, "scored"))
    assert [r["reward"] for r in scored] == [r["reward"] for r in sdk_run.rows]  # scorer "existing"
    lib_pairs, _ = wai.build_preference_pairs(scored)
    assert materialization(result, "preference_pairs")["pairs"].value == len(lib_pairs) > 0
    sft_source = storage.stage_path(key, "sft_source")
    assert read_rows(sft_source) == [r for r in scored if verdict(r["reward"]) == "pass"]
    sft, dpo = materialization(result, "sft_export"), materialization(result, "dpo_export")
    for fmt in ("openai", "trl"):
        lib = wai.export_dataset(str(sft_source), str(tmp_path / f"lib.sft.{fmt}.jsonl"), format=fmt)
        assert sft[f"{fmt}/rows_written"].value == lib["n_written"] > 0
        assert sft[f"{fmt}/tool_calls_checked"].value == lib["tool_call_roundtrip"]["checked"] > 0
        lib = wai.export_preference(str(storage.stage_path(key, "pairs")), str(tmp_path / f"lib.dpo.{fmt}.jsonl"),
                                    format=fmt)
        assert dpo[f"{fmt}/pairs"].value == lib["pairs"] > 0
        assert sft[f"{fmt}/report"].value["system_prompt_source"] == "sidecar"

    published = storage.published_dir(key)
    for name, rows_key in (("sft.openai.jsonl", "openai/rows_written"), ("dpo.openai.jsonl", "openai/pairs")):
        path = published / name
        lines = path.read_bytes().split(b"\n")
        assert lines[-1] == b"", f"{name}: no newline after the last line"
        parsed = [H.strict_loads(line.decode("utf-8")) for line in lines[:-1]]
        md = sft if name.startswith("sft") else dpo
        assert len(parsed) == md[rows_key].value
        # the SDK's sidecar travelled through the chain: its system prompt and tools are in every row
        assert all(row["tools"] == TOOLS for row in parsed)
        sides = ("messages",) if name.startswith("sft") else ("chosen", "rejected")
        firsts = [row[side][0] for row in parsed for side in sides]
        assert all(m == {"role": "system", "content": SYSTEM_PROMPT} for m in firsts), firsts[0]
        messages = [m for row in parsed for side in ("messages", "chosen", "rejected") for m in row.get(side) or []]
        calls = _tool_calls(messages)
        assert calls, f"{name} has no tool call"
        for call in calls:
            args = call["function"]["arguments"]
            assert isinstance(args, str) and isinstance(json.loads(args), dict), call


# ------------------------------------------------------------------------------- (c) the leak


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_recited_reference_is_refused_like_the_reference(leaky_run, tmp_path, fmt):
    """An agent reciting its hidden reference: the reference refuses the run under validate=True, and
    so do we (checked by check_export_dataset), with PrivilegedLeakError and nothing written."""
    rows = leaky_run.trajectories
    profile = leaky_run.profile
    outcome = check_export_dataset(
        ref, wai, rows, tmp_path, fmt=fmt, mask_mode="assistant", unroll=False, strip_think=True,
        system_prompt=None, tools=None, cap=None, validate=True,
        ref_source=lambda ref_rows: _run_like(leaky_run, ref_rows),
        our_source=lambda: _run_like(leaky_run, H.deep(rows)),
        ref_kwargs={"system_prompt": None, "tools": None}, sp_source="profile", tools_source="profile",
        effective_context=(profile.policy, profile.tools),
    )
    assert outcome == "refused"
    out = tmp_path / "direct.jsonl"
    with pytest.raises(wai.PrivilegedLeakError, match=r"^privileged_leak:") as err:
        wai.export_dataset(_run_like(leaky_run, H.deep(rows)), str(out), format=fmt, validate=True)
    assert err.value.report["privileged_leaks"]["n_leaked"] > 0
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_recited_reference_in_chosen_replies_is_refused(leaky_run, tmp_path, fmt):
    """DECISIONS 12: the pairs of the leaking run (chosen sides recite) are refused by ours."""
    ref_pairs, our_pairs = check_build_preference_pairs(ref, wai, H.deep(leaky_run.trajectories), {})
    assert ref_pairs
    outcome = check_export_preference(
        ref, wai, ref_pairs, tmp_path, fmt=fmt, drop_ties=True, system_prompt=leaky_run.profile.policy,
        tools=leaky_run.profile.tools, strip_think=True, validate=True, our_source=lambda: H.deep(our_pairs),
    )
    assert outcome == "refused"


# ------------------------------------------------------------------------------- (d) the inbox sensor


def test_the_inbox_sensor_waits_for_simulate_to_finish_writing_into_the_inbox(tmp_path, monkeypatch):
    """simulate writing straight into the inbox with an agent slower than the settle time (0 here): a tick
    while it runs takes nothing, although rows are already there and the file has stopped changing; the
    tick after simulate returns takes the whole run with the sidecar it writes last."""
    monkeypatch.setenv("WHILEAI_PIPELINE_SETTLE_SECONDS", "0")
    storage = PipelineStorage(root=str(tmp_path / "home"))
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "live.jsonl"
    ticks = []
    with dg.DagsterInstance.ephemeral() as instance:
        def tick():
            with dg.build_sensor_context(instance=instance, resources={"storage": storage}) as context:
                return inbox_sensor(context)

        def agent(prompt):
            if run.exists():  # the rows simulate has written so far, and what a tick makes of them
                ticks.append((run.stat().st_size, tick().run_requests))
            return "Let me look that up for you."

        ref.simulate(agent=agent, simulator=False, tools=TOOLS, system_prompt=SYSTEM_PROMPT, output=str(run),
                     grader=lambda row: row["rollout_index"] % 2, seed=SEED, budget=8, situations=4,
                     rollouts_per_request=2, concurrency=1)
        done = tick()
    assert any(size > 0 for size, _ in ticks), "no tick saw rows while simulate ran"
    assert [requests for _, requests in ticks] == [[] for _ in ticks]
    (request,) = done.run_requests
    assert run.with_name("live.meta.json").is_file()
    assert request.run_key == f"live:{fingerprint(run)[:16]}"  # the finished run, folded with its sidecar
