"""Regenerate the sample run bundled with the package (whileai_pipeline/sample/).

    python3 scripts/make_sample.py            # writes support_orders.jsonl + support_orders.meta.json
    python3 scripts/make_sample.py --check    # regenerates in memory and fails if the files differ

Uses the reference SDK (``pip install -e '.[conformance]'`` brings whileai 0.105) fully offline:
``simulate(..., simulator=False)`` writes the situations from templates around our seed asks, a plain
Python agent answers them against a small fixed order database, and a plain Python grader scores
each rollout. The raw trajectories are written (not ``data.rows``), so every row keeps its
``privileged`` block and the pipeline's leak gate has something real to read. The agent never quotes
that block, so the sample passes every gate.

Output is deterministic: one seed, concurrency 1, and the two per-invocation values (the scoring
run id and timing fields) are pinned or dropped.
"""

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import orjson

OUT_DIR = Path(__file__).resolve().parent.parent / "whileai_pipeline" / "sample"
NAME = "support_orders"
SEED = 7

SYSTEM_PROMPT = (
    "You are the order-support agent for Northwind Outfitters. Always look an order up with "
    "lookup_order before telling the customer anything about it. Cancel only orders that have not "
    "shipped, and only when the customer asks. Send a confirmation email only when the customer gives "
    "an address. If the customer gives no order number, ask for it instead of guessing."
)

TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_order",
        "description": "Look up an order by its id (ORD-1001 to ORD-1012).",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "cancel_order",
        "description": "Cancel an order that has not shipped yet.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "send_email",
        "description": "Send a confirmation email to the customer.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string"}, "subject": {"type": "string"}}, "required": ["to", "subject"]}}},
]

ORDERS = {
    "ORD-1001": {"status": "shipped", "carrier": "UPS", "eta": "Thursday", "items": ["trail runner shoes"]},
    "ORD-1002": {"status": "processing", "carrier": None, "eta": "next week", "items": ["rain shell, size M"]},
    "ORD-1003": {"status": "delivered", "carrier": "USPS", "eta": None, "items": ["wool socks x3"]},
    "ORD-1004": {"status": "processing", "carrier": None, "eta": "Monday", "items": ["camp stove"]},
    "ORD-1006": {"status": "shipped", "carrier": "FedEx", "eta": "Friday morning", "items": ["daypack"]},
    "ORD-1007": {"status": "shipped", "carrier": "DHL", "eta": "Wednesday", "items": ["headlamp"]},
    "ORD-1008": {"status": "delivered", "carrier": "UPS", "eta": None, "items": ["water filter", "mug"]},
}

SEEDS = [
    "Where is my order ORD-1001? It was supposed to arrive yesterday.",
    "Please cancel order ORD-1002, I ordered the wrong size.",
    "The tracking page says ORD-1003 was delivered but nothing is at my door. Can you check?",
    "Cancel ORD-1004 and send the confirmation to dana.k@example.com please.",
    "My order never showed up. What is going on?",
    "Has ORD-1006 shipped yet? I need it before Saturday.",
    "I need to cancel ORD-1007 right now.",
    "What was in order ORD-1008? I forgot what I bought.",
]

# Teacher-only context added to each situation's privileged block (never said by the agent).
PRINCIPLE = "verify the order record before promising, cancelling or confirming anything"
REFERENCES = {
    "status": "lookup first, then state the carrier and arrival estimate from the record",
    "cancel_ok": "lookup first; the order has not shipped, so cancelling it is allowed",
    "cancel_shipped": "lookup first; a shipped order cannot be cancelled, offer a return instead",
    "missing": "no order number was given: ask for it and do not call any tool",
}

_ORDER_ID = re.compile(r"ORD-\d{4}")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def _h(*parts) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def intent(prompt: str) -> str:
    text = prompt.lower()
    if not _ORDER_ID.search(prompt):
        return "missing"
    if "cancel" in text:
        order = ORDERS.get(_ORDER_ID.search(prompt).group(0))
        return "cancel_shipped" if order and order["status"] != "processing" else "cancel_ok"
    return "status"


def lookup(order_id):
    order = ORDERS.get(order_id)
    if order is None:
        return {"order_id": order_id, "found": False}
    return {"order_id": order_id, "found": True, **order}


def describe(order_id, record) -> str:
    if not record.get("found"):
        return f"I could not find an order with the number {order_id}. Could you double-check it?"
    status, carrier, eta = record["status"], record["carrier"], record["eta"]
    if status == "shipped":
        return f"Order {order_id} is on its way with {carrier}; it should reach you {eta}."
    if status == "delivered":
        return (f"{carrier} marked order {order_id} as delivered ({', '.join(record['items'])}). "
                "If it is not there, I can open a missing-parcel claim for you.")
    return f"Order {order_id} is still being prepared in the warehouse and should ship {eta}."


def agent(message: str) -> dict:
    """A small deterministic support agent; about a third of its rollouts cut a corner."""
    from whileai.simulations.generate.agents import current_rollout

    index = getattr(current_rollout, "rollout_index", 0) or 0
    kind = intent(message)
    match = _ORDER_ID.search(message)
    order_id = match.group(0) if match else None
    sloppy = (_h(message) + index) % 3 == 0
    steps = []

    if kind == "missing":
        if sloppy:  # guesses instead of asking
            final = ("I'm so sorry about that, I know how frustrating it is to wait for a parcel. Orders "
                     "usually arrive within 5 business days, and carriers are a little behind this week, "
                     "so yours should be there very soon. Thank you for your patience!")
        else:
            final = "I'm sorry it hasn't arrived. Could you give me the order number (it starts with ORD-)?"
        steps.append({"text": final})
        return {"steps": steps, "final_text": final}

    if sloppy and kind == "status":  # answers without looking anything up
        final = f"Order {order_id} is on its way and should arrive in 2-3 business days."
        if _h(order_id) % 3:  # most corner-cutting replies are long-winded
            final = ("Thanks for reaching out, and I'm sorry for the trouble! " + final + " Deliveries "
                     "can take a little longer at this time of year, so if it hasn't arrived by then, "
                     "just write back and we'll sort it out together.")
        steps.append({"text": final})
        return {"steps": steps, "final_text": final}

    if sloppy and kind.startswith("cancel"):  # cancels without checking the order first
        steps.append({"tool": "cancel_order", "arguments": {"order_id": order_id, "reason": "customer request"},
                      "result": {"order_id": order_id, "cancelled": kind == "cancel_ok"},
                      "text": "Cancelling that for you now."})
        final = f"Done: order {order_id} is cancelled."
        if _h(order_id) % 3:
            final = (f"No problem at all, I've taken care of it. Order {order_id} is cancelled and you "
                     "won't see any further updates about it. Is there anything else I can help with today?")
        steps.append({"text": final})
        return {"steps": steps, "final_text": final}

    # The careful path: look the order up first (some rollouts send JSON-string arguments, as many
    # model APIs do; they decode back to the same object).
    arguments = {"order_id": order_id}
    if index % 2 == 1:
        arguments = json.dumps(arguments)
    record = lookup(order_id)
    thought = "<think>Check the record before saying anything about this order.</think>"
    steps.append({"tool": "lookup_order", "arguments": arguments, "result": record,
                  "text": f"{thought}Let me pull up {order_id}."})
    if kind == "status" or not record.get("found"):
        final = describe(order_id, record)
    elif kind == "cancel_shipped":
        final = (f"Order {order_id} has already shipped with {record['carrier']}, so I can't cancel it. "
                 "Once it arrives you can return it for a full refund.")
    else:
        steps.append({"tool": "cancel_order", "arguments": {"order_id": order_id, "reason": "customer request"},
                      "result": {"order_id": order_id, "cancelled": True}})
        email = _EMAIL.search(message)
        if email:
            steps.append({"tool": "send_email",
                          "arguments": {"to": email.group(0), "subject": f"Order {order_id} cancelled"},
                          "result": {"sent": True}})
            final = f"Order {order_id} is cancelled and a confirmation is on its way to {email.group(0)}."
        else:
            final = f"Order {order_id} is cancelled; you won't be charged."
    steps.append({"text": final})
    return {"steps": steps, "final_text": final}


def grader(row) -> dict:
    """1.0 when the agent followed the policy for this kind of ask, else 0.0, with the reason."""
    kind = intent(row.get("prompt") or "")
    calls = [s.get("tool") for s in row.get("steps") or [] if isinstance(s, dict) and s.get("tool")]
    if kind == "missing":
        ok = not calls and "order number" in (row.get("final_text") or "")
        return {"reward": 1.0 if ok else 0.0,
                "reason": "asked for the order number" if ok else "guessed instead of asking for the order number"}
    if not calls or calls[0] != "lookup_order":
        return {"reward": 0.0, "reason": "acted or answered without looking the order up"}
    if kind == "cancel_shipped" and "cancel_order" in calls:
        return {"reward": 0.0, "reason": "cancelled an order that had already shipped"}
    return {"reward": 1.0, "reason": "looked the order up and followed the policy"}


def build_rows():
    import whileai.simulations as wai

    data = wai.simulate(
        agent, tools=TOOLS, system_prompt=SYSTEM_PROMPT, simulator=False, seeds=SEEDS,
        situations=len(SEEDS), phrasings=1, repeats=6, mode="rl", repeat_policy="fixed",
        seed=SEED, concurrency=1, grader=grader,
    )
    rows = []
    for row in data.trajectories:
        row = dict(row)
        lineage = dict(row.get("lineage") or {})
        if "scoring_run_id" in lineage:  # a fresh id per call; pin it so the file is reproducible
            lineage["scoring_run_id"] = f"score_sample{SEED:06d}"
        row["lineage"] = lineage
        privileged = dict(row.get("privileged") or {})
        privileged["principle"] = PRINCIPLE
        privileged["reference"] = REFERENCES[intent(row.get("prompt") or "")]
        row["privileged"] = privileged
        rows.append(row)
    rows.sort(key=lambda r: (SEEDS.index(r["prompt"]) if r.get("prompt") in SEEDS else len(SEEDS),
                             str(r.get("prompt")), r.get("rollout_index") or 0))
    return rows


def render(rows):
    body = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    meta = {"schema_version": "1", "system_prompt": SYSTEM_PROMPT, "tools": TOOLS}
    return body, orjson.dumps(meta, option=orjson.OPT_INDENT_2) + b"\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed files differ")
    args = parser.parse_args(argv)
    rows = build_rows()
    body, meta = render(rows)
    run_path, meta_path = OUT_DIR / f"{NAME}.jsonl", OUT_DIR / f"{NAME}.meta.json"
    if args.check:
        same = run_path.read_bytes() == body and meta_path.read_bytes() == meta
        print("sample is up to date" if same else "sample differs: run scripts/make_sample.py")
        return 0 if same else 1
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    run_path.write_bytes(body)
    meta_path.write_bytes(meta)
    n_pass = sum(1 for r in rows if r.get("reward") == 1)
    prompts = len({r.get("prompt") for r in rows})
    print(f"wrote {run_path} ({len(rows)} rows, {prompts} prompts, {n_pass} passing) and {meta_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
