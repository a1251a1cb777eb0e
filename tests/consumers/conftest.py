"""Realistic runs and their exports, for the tests that feed them to their real consumers.

The run generator writes what the simulation engine writes: a JSONL of trajectories (prompt +
steps, multi-turn, tool calls with dict arguments of different shapes, `<think>` blocks, a
privileged block that is never quoted) plus the reference's sidecar (`run.meta.json`) with the
system prompt and the tools' JSON schemas. Each situation has four rollouts with mixed rewards, so
groups form and preference pairs can be built.

Everything is built once per session in a temporary directory; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import orjson
import pytest

import whileai_pipeline.simulations as wai


def pytest_configure(config):
    # pyproject.toml registers these too once the lead adds them; registering twice is harmless.
    config.addinivalue_line(
        "markers", "consumers: exports fed to their real consumers (datasets, trl, transformers)")


CONSUMER_PACKAGES = ("torch", "transformers", "datasets", "trl", "tokenizers", "accelerate")
MISSING = [name for name in CONSUMER_PACKAGES if importlib.util.find_spec(name) is None]
SKIP_REASON = (
    f"consumer packages not importable: {', '.join(MISSING)} "
    "(install them with scripts/install_consumers.sh)"
)

SAMPLE = Path(__file__).resolve().parents[2] / "whileai_pipeline" / "sample" / "support_orders.jsonl"

SYSTEM_PROMPT = (
    "You are the support agent for Acme Parts. Look an order up before saying anything about it. "
    "Refund only delivered orders, and only what the customer asks for."
)

TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_order",
        "description": "Look an order up by its numeric id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}},
    {"type": "function", "function": {
        "name": "search_orders",
        "description": "Search orders by filters.",
        "parameters": {"type": "object", "properties": {
            "filters": {"type": "object", "properties": {
                "status": {"type": "array", "items": {"type": "string"}},
                "customer": {"type": "string"}}},
            "limit": {"type": "integer"}}, "required": ["filters"]}}},
    {"type": "function", "function": {
        "name": "refund",
        "description": "Refund part of a delivered order.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "integer"}, "amount": {"type": "number"}, "note": {"type": "string"}},
            "required": ["order_id", "amount"]}}},
]

# (order id, customer, status, eta) per situation.
ORDERS = [
    (7, "Zoë Adams", "shipped", "Friday"),
    (12, "Ravi Menon", "delivered", None),
    (31, "Ana Lúcia", "processing", "next week"),
    (44, "Tom Berg", "delivered", None),
    (58, "Mia Chen", "shipped", "Monday"),
    (63, "Olu Ade", "delivered", None),
]

# Assistant replies that the tests look for in tokenized training rows.
GOOD_FINAL = "All set: {fee} refunded to your card for order {oid}."
BAD_FINAL = "It probably arrived, I would not worry about order {oid}."


def _good_rollout(oid, customer, status, eta, k):
    fee = f"{4 + k}.99"
    info = f"Order {oid} is {status}" + (f"; it should arrive {eta}." if eta else ".")
    steps = [
        {"tool": "lookup_order", "arguments": {"id": oid},
         "result": {"id": oid, "status": status, "eta": eta, "customer": customer},
         "text": "<think>Check the record before saying anything.</think>Let me look that up."},
        {"text": info + " Anything else?"},
        {"user": "Yes, please refund the shipping fee."},
        {"tool": "refund", "arguments": {"order_id": oid, "amount": float(fee), "note": "shipping fée"},
         "result": "refund accepted", "text": ""},
        {"text": GOOD_FINAL.format(fee=fee, oid=oid)},
    ]
    return steps, GOOD_FINAL.format(fee=fee, oid=oid)


def _search_rollout(oid, customer, status, eta, k):
    steps = [
        {"tool": "search_orders",
         "arguments": {"filters": {"status": ["open", status], "customer": customer}, "limit": 5},
         "result": [{"id": oid, "status": status}], "text": "Searching your orders."},
        {"text": f"<think>Found it.</think>I found order {oid}; it is {status}."},
    ]
    return steps, f"I found order {oid}; it is {status}."


def _bad_rollout(oid, customer, status, eta, k):
    steps = [{"text": "<think>No need to look it up.</think>" + BAD_FINAL.format(oid=oid)}]
    return steps, BAD_FINAL.format(oid=oid)


def make_rows(n_situations=len(ORDERS)):
    """Raw trajectories: four rollouts per situation, rewards 1, 0, 0.5 and 1 (or 0)."""
    rows = []
    for s, (oid, customer, status, eta) in enumerate(ORDERS[:n_situations]):
        prompt = f"Where is my order {oid}? It was due yesterday."
        kinds = [(_good_rollout, 1), (_bad_rollout, 0), (_search_rollout, 0.5),
                 (_good_rollout if s % 2 else _bad_rollout, 1 if s % 2 else 0)]
        for k, (make, reward) in enumerate(kinds):
            steps, final = make(oid, customer, status, eta, k)
            rows.append({
                "schema_version": "1",
                "scenario_id": f"sit_{s:02d}",
                "rollout_index": k,
                "prompt": prompt,
                "steps": steps,
                "final_text": final,
                "reward": reward,
                "reason": "looked the order up first" if reward == 1 else "answered without the record",
                "judge_status": "ok",
                "model_version": "agent-v1",
                "finish_reason": "stop",
                "lineage": {"scoring_run_id": "score_test", "source": "grade", "parent": f"sit_{s:02d}"},
                "privileged": {
                    "principle": "verify the order record before promising anything",
                    "hidden_state": {"tool_condition": status},
                    "reference": f"the order {oid} is {status}; report exactly that and never guess",
                },
            })
    return rows


def write_run(directory: Path, rows=None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (rows if rows is not None else make_rows())))
    meta = {"schema_version": "1", "system_prompt": SYSTEM_PROMPT, "tools": TOOLS}
    (directory / "run.meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return path


def read_rows(path):
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


# Export name -> (kind, format, keyword arguments). "sft" exports the run, "dpo" the built pairs.
EXPORTS = {
    "sft_openai": ("sft", "openai", {}),
    "sft_openai_final": ("sft", "openai", {"mask_mode": "final"}),
    "sft_openai_unroll": ("sft", "openai", {"unroll": True}),
    "sft_trl_messages": ("sft", "trl", {"mask_mode": "assistant"}),
    "sft_trl_final": ("sft", "trl", {"mask_mode": "final"}),
    "sft_trl_unroll": ("sft", "trl", {"unroll": True}),
    "dpo_openai": ("dpo", "openai", {}),
    "dpo_trl": ("dpo", "trl", {}),
}


def export_all(run_path: Path, out_dir: Path, *, system_prompt, tools):
    """Every export of one run; returns {name: {"path", "report", "kind", "format"}}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = read_rows(run_path)
    pairs, pair_report = wai.build_preference_pairs(raw)
    assert pairs, pair_report
    exports = {}
    for name, (kind, fmt, kwargs) in EXPORTS.items():
        dest = out_dir / f"{name}.jsonl"
        if kind == "sft":
            report = wai.export_dataset(run_path, dest, format=fmt, **kwargs)
        else:
            report = wai.export_preference(pairs, dest, system_prompt=system_prompt, tools=tools,
                                           format=fmt, **kwargs)
        assert dest.exists(), report
        exports[name] = {"path": dest, "report": report, "kind": kind, "format": fmt}
    return exports


@pytest.fixture(scope="session")
def generated_exports(tmp_path_factory):
    base = tmp_path_factory.mktemp("consumers_generated")
    run = write_run(base / "run")
    return export_all(run, base / "out", system_prompt=SYSTEM_PROMPT, tools=TOOLS)


@pytest.fixture(scope="session")
def sample_exports(tmp_path_factory):
    """The bundled sample run (whileai_pipeline/sample/), exported the same ways."""
    if not SAMPLE.exists():
        pytest.skip(f"no bundled sample at {SAMPLE}")
    meta = json.loads(SAMPLE.with_name("support_orders.meta.json").read_text(encoding="utf-8"))
    base = tmp_path_factory.mktemp("consumers_sample")
    return export_all(SAMPLE, base / "out", system_prompt=meta.get("system_prompt"), tools=meta.get("tools"))


@pytest.fixture(scope="session", params=["generated", "sample"])
def exports(request):
    return request.getfixturevalue(f"{request.param}_exports")


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory):
    """A private datasets cache: nothing lands in ~/.cache and nothing is fetched."""
    return tmp_path_factory.mktemp("hf_datasets_cache")


@pytest.fixture(scope="session")
def base_tokenizer(exports):
    """A byte-level BPE trained in-process on this source's exports and the templates' own text."""
    from . import hf

    texts = [Path(e["path"]).read_text(encoding="utf-8") for e in exports.values()]
    texts += [hf.template_text(name) for name, ok in hf.found_templates().items() if ok]
    return hf.train_tokenizer(texts, vocab_size=1000)
