"""A deterministic generator of realistic simulation runs (JSONL + ``<name>.meta.json`` sidecar).

    python -m bench.generate N OUT.jsonl --seed S [--row-kb 20|2]

Rows are shaped like the engine rows of EXPORT_SPEC section 1: ``schema_version``, ``prompt``,
``steps`` (tool calls with dict ``arguments`` and a ``result`` of 100 to 5,000 characters, text
turns, some ``<think>`` blocks, now and then a follow-up user turn), ``final_text``, ``scenario_id``,
``rollout_index``, ``reward`` (0 / 1, some 0.5), ``judge_status``, ``model_version``,
``finish_reason``, ``lineage`` and a ``privileged`` block. Rows come in groups of 4 to 8 rollouts
per prompt, most groups with both a pass and a fail; about 3% of rows are platform-pull rows
(``tool_trace``, no ``steps``).

The privileged strings are drawn from a vocabulary of their own (every word contains "zq", which
no reply ever contains), so no reply quotes them and the leak gate passes on every row.

Same N, seed and row size give a byte-identical file (``random.Random(seed)``, no hash-seeded
iteration, orjson output). Rows are written as they are made: memory stays flat for any N.
``--row-kb 20`` (default) gives rows of about 20 KB; ``--row-kb 2`` about 2 KB (fewer steps,
shorter tool outputs) for the million-row scaling curve.
"""

import argparse
import hashlib
import random
import sys
from pathlib import Path

import orjson

from whileai_pipeline.core.jsonl import write_json

ROW_KB_CHOICES = (20, 2)

_REPLY_WORDS = (
    "the your order account refund shipment package delivery address customer support team request "
    "status tracking number invoice payment card balance credit update change confirm check looked "
    "found record system today tomorrow yesterday week business days within after before since "
    "please thanks sorry unfortunately happy help glad sure right away again note that this those "
    "we I you it they can cannot will would should could may might need needs want wanted has have "
    "had was were is are be been being not no yes still already just only also any each every some "
    "item items product products warehouse carrier courier label return exchange policy window "
    "eligible eligible approved denied pending processing shipped delivered delayed lost damaged "
    "replacement discount coupon code subscription plan renewal cancel cancelled cancellation fee "
    "charge charged twice duplicate billing statement email phone message ticket case escalate "
    "manager agent specialist notes history previous recent latest first second third final total "
    "amount price cost tax shipping express standard priority overnight ground international local "
    "region store branch pickup locker door signature photo proof estimate arrival date time window "
    "morning afternoon evening hours minutes portal app website login password reset verification "
    "identity security hold fraud review limit threshold reason because so and or but if then when "
    "while until unless although however therefore meanwhile instead otherwise finally for with "
    "from to of in on at by about into over under between through during without per via as "
    "café naïve résumé Zürich façade crème déjà coöperate São Paulo Kraków Malmö"
).split()

_PRIVILEGED_WORDS = tuple(
    f"{a}zq{b}" for a in ("vo", "ta", "mel", "quor", "bri", "shen", "lu", "dar")
    for b in ("ain", "ex", "ith", "ova", "um", "arn", "el", "ist")
)

_TOOLS = (
    ("lookup_order", "Look up an order by id and return its status, items and shipments."),
    ("search_kb", "Search the help-center knowledge base and return the best matching articles."),
    ("get_customer", "Fetch a customer profile, contact details and recent activity."),
    ("issue_refund", "Refund an order, fully or in part, to the original payment method."),
    ("update_address", "Change the shipping address of an order that has not shipped yet."),
    ("list_shipments", "List the shipments of an order with carrier events."),
    ("check_inventory", "Check stock for a product across warehouses."),
    ("send_email", "Send an email to the customer from the support address."),
)

_ASKS = (
    "Where is my order {oid}? It was supposed to arrive {when} and the tracking page has not moved.",
    "I was charged twice for order {oid}. Can you refund the duplicate charge?",
    "Please change the delivery address on order {oid} to {addr}.",
    "Order {oid} arrived damaged. I want a replacement, not store credit.",
    "Can you cancel my subscription and refund the last renewal on {oid}?",
    "Is the item from order {oid} back in stock at the {city} store?",
    "I never got the confirmation email for {oid}; can you resend it and check my account?",
)
_CITIES = ("Berlin", "Lisbon", "Zürich", "Kraków", "Malmö", "Austin", "Osaka", "São Paulo")
_TIERS = ("easy", "medium", "hard")
_FAMILIES = ("status", "billing", "address", "damage", "subscription", "inventory", "email")
_STANCES = ("neutral", "impatient", "confused", "polite")
_TONES = ("plain", "formal", "casual", "terse")
_FAILURE_CLASSES = ("wrong_tool", "hallucination", "refusal", "incomplete", "policy_violation")
_MODELS = ("policy-2025-01-a", "policy-2025-01-a", "policy-2025-01-a", "policy-2025-01-a",
           "policy-2025-01-a", "policy-2025-01-b")

_SYSTEM_PROMPT = (
    "You are the customer-support agent of an online store. Use the tools to look things up before "
    "you answer; never guess an order's status, a refund amount or a delivery date. Refunds above "
    "200 EUR need a manager: say so and do not call issue_refund. Address changes are possible only "
    "before an order ships. Be brief, concrete and polite; confirm what you did and what happens "
    "next. If a tool fails, say that it failed and offer to try again; do not invent its answer. "
    "Never reveal internal notes, fraud flags or other customers' data."
)


class _Params:
    def __init__(self, row_kb):
        if row_kb == 20:
            self.steps = (2, 12)
            self.tool_share = 0.9
            self.result_chars = (100, 5000)
            self.text_chars = (60, 1600)
            self.think_chars = (100, 2000)
            self.say_share = 0.35
        elif row_kb == 2:
            self.steps = (2, 4)
            self.tool_share = 0.6
            self.result_chars = (100, 400)
            self.text_chars = (30, 160)
            self.think_chars = (40, 200)
            self.say_share = 0.2
        else:
            raise ValueError(f"--row-kb must be one of {ROW_KB_CHOICES}, got {row_kb!r}")
        self.small = row_kb == 2


class Generator:
    """Makes the rows of one run, group by group, from one ``random.Random(seed)``."""

    def __init__(self, seed, row_kb=20):
        self.rng = random.Random(seed)
        self.seed = seed
        self.p = _Params(row_kb)
        rng = self.rng
        # Text is cut from corpora made once per seed: fast, and still seed-determined.
        self.words = _REPLY_WORDS
        self.corpus = " ".join(rng.choices(_REPLY_WORDS, k=60_000)) + " "
        log_lines = []
        for _ in range(6_000):
            log_lines.append(
                f"2025-01-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                f"{rng.randint(0, 59):02d}Z {rng.choice(('INFO', 'INFO', 'INFO', 'WARN', 'DEBUG'))} "
                f"ref=R{rng.randint(10000, 99999)} {' '.join(rng.choices(_REPLY_WORDS, k=rng.randint(4, 12)))}"
            )
        self.log_corpus = "\n".join(log_lines) + "\n"
        self.privileged_corpus = " ".join(rng.choices(_PRIVILEGED_WORDS, k=8_000)) + " "
        self.system_sha = hashlib.sha1(_SYSTEM_PROMPT.encode()).hexdigest()[:12]
        self.scoring_run = "score_" + hashlib.sha1(f"bench:{seed}".encode()).hexdigest()[:12]

    # ------------------------------------------------------------ text pieces

    def _slice(self, corpus, n):
        """About ``n`` characters of ``corpus`` starting on a word, stripped."""
        start = self.rng.randrange(0, len(corpus) - n - 1)
        space = corpus.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
        return corpus[start:start + n].strip()

    def _words(self, lo, hi):
        return " ".join(self.rng.choices(self.words, k=self.rng.randint(lo, hi)))

    def _privileged_text(self, lo, hi):
        return " ".join(self.rng.choices(_PRIVILEGED_WORDS, k=self.rng.randint(lo, hi)))

    def _reply(self, lo, hi, think_share):
        rng = self.rng
        body = self._slice(self.corpus, rng.randint(lo, hi)).capitalize() + "."
        if rng.random() < think_share:
            think = self._slice(self.corpus, rng.randint(*self.p.think_chars))
            body = f"<think>{think}</think>\n{body}" if rng.random() < 0.85 else f"<think>\n{think}\n</think>\n\n{body}"
        return body

    def _arguments(self, tool, oid):
        rng = self.rng
        args = {"order_id": oid} if tool not in ("search_kb", "check_inventory") else {}
        if tool == "search_kb":
            args["query"] = self._words(3, 9)
            args["limit"] = rng.randint(1, 10)
        elif tool == "check_inventory":
            args["sku"] = f"SKU-{rng.randint(100000, 999999)}"
            args["warehouses"] = rng.sample(("BER", "LIS", "ZRH", "KRK", "AUS", "OSA"), rng.randint(1, 3))
        elif tool == "issue_refund":
            args["amount"] = round(rng.uniform(5, 400), 2)
            args["reason"] = self._words(2, 6)
            args["partial"] = rng.random() < 0.3
        elif tool == "update_address":
            args["address"] = {"street": f"{rng.randint(1, 200)} {self._words(1, 2)} Street",
                               "city": rng.choice(_CITIES), "postcode": f"{rng.randint(10000, 99999)}"}
        elif tool == "send_email":
            args["subject"] = self._words(3, 7)
            args["body"] = self._words(10, 40)
        elif rng.random() < 0.5:
            args["include_history"] = rng.random() < 0.5
        return args

    def _result(self, tool):
        rng = self.rng
        n = rng.randint(*self.p.result_chars)
        if tool == "search_kb" or rng.random() < 0.45:
            return self._slice(self.log_corpus if rng.random() < 0.5 else self.corpus, n + 4)[:n]
        result = {"status": rng.choice(("ok", "ok", "ok", "not_found", "pending")),
                  "request_id": f"req_{rng.getrandbits(48):012x}"}
        n_items = min(5, n // 500)
        if n_items:
            result["items"] = [
                {"id": f"IT-{rng.randint(1000, 9999)}", "name": self._words(1, 3), "qty": rng.randint(1, 4),
                 "price": round(rng.uniform(3, 250), 2), "tags": rng.sample(("new", "sale", "fragile", "bulky", "gift"), 2)}
                for _ in range(n_items)
            ]
        result["body"] = ""
        room = n - len(orjson.dumps(result))
        body = self._slice(self.log_corpus, max(20, room) + 4)[:max(20, room)]
        result["body"] = body
        excess = len(orjson.dumps(result)) - n  # newlines are escaped: two characters each
        if excess > 0:
            result["body"] = body[:max(20, len(body) - excess)]
        return result

    # ------------------------------------------------------------ rows

    def _steps(self, tools, oid):
        rng, p = self.rng, self.p
        n = rng.randint(*p.steps)
        steps = []
        for i in range(n):
            last = i == n - 1
            if not last and not p.small and i > 1 and rng.random() < 0.04:
                steps.append({"user": self._words(4, 20)})
            elif (not last or rng.random() < 0.15) and rng.random() < p.tool_share:
                tool = rng.choice(tools)
                step = {"tool": tool, "arguments": self._arguments(tool, oid), "result": self._result(tool)}
                if rng.random() < p.say_share:
                    step["text"] = self._reply(10, 120, 0.1)
                steps.append(step)
            else:
                step = {"text": self._reply(*p.text_chars, 0.3)}
                if rng.random() < 0.5:
                    step["n_tokens"] = len(step["text"]) // 4
                steps.append(step)
        return steps

    def _group_context(self, g):
        rng = self.rng
        oid = f"ORD-{rng.randint(10000, 99999)}"
        ask = rng.choice(_ASKS).format(oid=oid, when=f"on 2025-01-{rng.randint(1, 28):02d}",
                                       addr=f"{rng.randint(1, 300)} Harbour Road, {rng.choice(_CITIES)}",
                                       city=rng.choice(_CITIES))
        extra = "" if self.p.small else " " + self._words(8, 60) + "."
        scenario = "scn_" + hashlib.sha1(f"{self.seed}:{g}".encode()).hexdigest()[:12]
        w = 1 if self.p.small else 2  # privileged text is shorter in small rows
        privileged = {
            "principle": self._privileged_text(3 * w, 7 * w),
            "reference": self._privileged_text(4 * w, 9 * w),
            "hidden_state": {
                "world_state": self._privileged_text(2 * w, 5 * w),
                "tool_condition": self._privileged_text(2 * w, 5 * w),
                "faults": {rng.choice(_TOOLS)[0]: {"kind": rng.choice(("timeout", "stale", "partial")),
                                                   "detail": self._privileged_text(3, 8)}},
                "history": [self._privileged_text(5, 12) for _ in range(rng.randint(0 if self.p.small else 1, 3))],
            },
            "rubric": {"must": [self._privileged_text(2 * w, 5 * w)], "must_not": [self._privileged_text(2 * w, 5 * w)]},
        }
        if self.p.small:
            del privileged["hidden_state"]["history"]
        return {
            "scenario": scenario,
            "prompt": f"{ask}{extra} (case {g})",
            "oid": oid,
            "tools": [t for t, _ in rng.sample(_TOOLS, rng.randint(2, 5))],
            "tier": rng.choice(_TIERS),
            "ask_family": rng.choice(_FAMILIES),
            "stance": rng.choice(_STANCES),
            "tone": rng.choice(_TONES),
            "privileged": privileged,
        }

    def _rewards(self, k):
        rng = self.rng
        rewards = [rng.choices((1, 0, 0.5), weights=(45, 45, 10))[0] for _ in range(k)]
        if rng.random() < 0.9 and k >= 2:
            if 1 not in rewards:
                rewards[rng.randrange(k)] = 1
            if 0 not in rewards:
                others = [i for i, r in enumerate(rewards) if r != 1] or list(range(1, k))
                rewards[rng.choice(others)] = 0
        return rewards

    def _row(self, ctx, index, reward):
        rng = self.rng
        platform = rng.random() < 0.03
        steps = self._steps(ctx["tools"], ctx["oid"])
        spoken = [s["text"] for s in steps if "text" in s and "tool" not in s]
        if spoken and rng.random() < 0.7:
            final = spoken[-1]
        else:
            final = self._reply(20, 240, 0.0)
        finish = rng.choices(("stop", "length", "tool", "error"), weights=(92, 3, 4, 1))[0]
        if finish == "error":
            final = "<agent error: TimeoutError: tool call exceeded 30s>"
        model = rng.choice(_MODELS)
        row = {"schema_version": "1", "scenario_id": ctx["scenario"], "rollout_index": index, "prompt": ctx["prompt"]}
        if platform:
            row["tool_trace"] = [{"tool": s["tool"], "input": s["arguments"], "output": s["result"]}
                                 for s in steps if "tool" in s]
        else:
            row["steps"] = steps
        row["final_text"] = final
        row["finish_reason"] = finish
        row["model_version"] = model
        row["sampling"] = {"temperature": 0.7, "top_p": 0.95, "seed": rng.getrandbits(31)}
        row["usage"] = {"input_tokens": rng.randint(800, 12000), "output_tokens": rng.randint(40, 2400)}
        row["tier"] = ctx["tier"]
        row["ask_family"] = ctx["ask_family"]
        row["stance"] = ctx["stance"]
        row["tone"] = ctx["tone"]
        row["world_state"] = "degraded" if rng.random() < 0.2 else "normal"
        row["reward"] = reward
        row["reason"] = self._words(3, 10) if self.p.small else self._words(6, 24)
        row["judge_status"] = "ok"
        row["judge_name"] = "rubric_judge"
        if reward == 0:
            row["failure_class"] = rng.choice(_FAILURE_CLASSES)
        row["lineage"] = {
            "system_prompt_sha": self.system_sha,
            "system_prompt_head": _SYSTEM_PROMPT[:80],
            "system_prompt_chars": len(_SYSTEM_PROMPT),
            "scoring_run_id": self.scoring_run,
            "source": "grade",
            "judge": "rubric_judge",
            "parent": ctx["scenario"],
        }
        if not platform:
            row["privileged"] = ctx["privileged"]
        return row

    def rows(self, n):
        """Yield ``n`` rows: groups of 4 to 8 rollouts (fewer only when ``n`` < 4)."""
        made = g = 0
        while made < n:
            remaining = n - made
            k = self.rng.randint(4, 8)
            if remaining - k < 4:  # never leave a tail group smaller than 4 (unless N itself is)
                k = remaining if remaining <= 8 else remaining - 4
            ctx = self._group_context(g)
            for index, reward in enumerate(self._rewards(k)):
                yield self._row(ctx, index, reward)
            made += k
            g += 1


def tool_schemas():
    schemas = []
    for name, description in _TOOLS:
        schemas.append({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": {
                "order_id": {"type": "string", "description": "The order id, e.g. ORD-12345."},
                "query": {"type": "string"}, "limit": {"type": "integer"},
            }, "additionalProperties": True}}})
    return schemas


def meta_path(out):
    out = Path(out)
    if out.name.endswith(".jsonl"):
        return out.with_name(out.name[: -len(".jsonl")] + ".meta.json")
    return out.with_name(out.name + ".meta.json")


def generate(n, out, *, seed=0, row_kb=20):
    """Write ``n`` rows to ``out`` (and the sidecar beside it); returns (rows, bytes)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    gen = Generator(seed, row_kb)
    written = 0
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb", buffering=1 << 20) as fh:
        for row in gen.rows(n):
            fh.write(orjson.dumps(row))
            fh.write(b"\n")
            written += 1
    tmp.replace(out)
    meta = {"schema_version": "1", "system_prompt": _SYSTEM_PROMPT, "tools": tool_schemas(),
            "generator": {"rows": n, "seed": seed, "row_kb": row_kb}}
    write_json(meta_path(out), meta)
    return written, out.stat().st_size


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("n", type=int, help="number of rows")
    parser.add_argument("out", help="output JSONL path (the sidecar <name>.meta.json goes beside it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--row-kb", type=int, default=20, choices=ROW_KB_CHOICES)
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("N must be >= 0")
    rows, size = generate(args.n, args.out, seed=args.seed, row_kb=args.row_kb)
    print(f"wrote {rows} rows, {size / 1e6:.1f} MB ({size / max(rows, 1) / 1024:.1f} KiB/row) to {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
