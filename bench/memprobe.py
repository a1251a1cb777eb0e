"""Peak memory of one pipeline step, in a fresh process (the memory audit's harness).

    python -m bench.memprobe STEP --rows N --work DIR [--workers W] [--src RUN.jsonl]

STEP is one of: score, score_reference_match, passing, group_prescan, pairs, judge, sft, dpo,
validate_sft_openai, validate_sft_trl, validate_dpo_openai, score_stats_pairs (the DPO asset's reward pictures), raw_facts (the raw asset's
RawStats pass), pipeline (the CLI, ``whileai-pipeline run``, in this process).

Inputs and outputs live in DIR (``scored.jsonl``, ``sft_source.jsonl``, ``pairs.jsonl``, ...), each
with the run's ``.meta.json`` sidecar beside it, as the stages have them; run the steps in the order
above once to make them. Prints one JSON line:

* ``self_peak_mb``: ``ru_maxrss`` of this process (exact; the process that holds per-row state);
* ``worker_peak_mb``: ``ru_maxrss`` of the largest waited-for child (a worker process);
* ``tree_peak_mb``: the largest sampled sum of RSS over this process and all its descendants
  (psutil, every 50 ms);
* ``base_mb``: this process's RSS after imports, before the step.
"""

import argparse
import json
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

RUN = str(Path(__file__).resolve().parent / "out" / "run-{n}-2kb-s0.jsonl")  # bench.generate's names


class TreeSampler:
    def __init__(self, interval=0.05):
        self.interval = interval
        self.peak_tree = self.peak_self = 0
        self.timeline = []  # (time, own RSS): the pipeline's per-step peaks
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                own = me.memory_info().rss
                total = own
                for child in me.children(recursive=True):
                    try:
                        total += child.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak_self = max(self.peak_self, own)
                self.timeline.append((time.time(), own, total))
                self.peak_tree = max(self.peak_tree, total)
            except psutil.Error:
                pass
            self._stop.wait(self.interval)


def _sidecar(run, dest):
    meta = Path(str(run)[: -len(".jsonl")] + ".meta.json")
    target = Path(str(dest)[: -len(".jsonl")] + ".meta.json")
    if meta.is_file() and not target.exists():
        shutil.copyfile(meta, target)


def _n_groups(stats):
    """``ScoreStats``' group count, also of the version before the memory audit (a dict of every group)."""
    return stats.n_groups if hasattr(stats, "n_groups") else len(stats.groups)


def length_judge(a, b):
    """A deterministic, stateless judge: the shorter final answer wins (ties on equal length)."""
    la, lb = len(str(a.get("final_text") or "")), len(str(b.get("final_text") or ""))
    return {"winner": "tie" if la == lb else ("A" if la < lb else "B"), "reason": "shorter"}


def step(name, work, run, workers):
    work = Path(work)
    if name == "score":
        from whileai_pipeline.core.atomic import atomic_file
        from whileai_pipeline.core.scoring import ScoreStats, resolve_scorer, score_file

        stats, dest = ScoreStats(), work / "scored.jsonl"
        with atomic_file(dest) as out:
            score_file(run, out, resolve_scorer("existing"), stats, dest=dest, workers=workers)
        _sidecar(run, dest)
        return {"n": stats.n, "groups": _n_groups(stats)}
    if name == "score_reference_match":  # the other built-in scorer; writes beside, not over, scored.jsonl
        from whileai_pipeline.core.atomic import atomic_file
        from whileai_pipeline.core.scoring import ScoreStats, resolve_scorer, score_file

        stats, dest = ScoreStats(), work / "scored_reference_match.jsonl"
        with atomic_file(dest) as out:
            score_file(run, out, resolve_scorer("reference_match"), stats, dest=dest, workers=workers)
        return {"n": stats.n, "groups": _n_groups(stats), "pass": stats.counts["pass"]}
    if name == "group_prescan":  # the one-process export's group statistics (GroupStats over every row)
        import hashlib

        from whileai_pipeline.core.sft import _Prescan

        scan = _Prescan.of_file(work / "sft_source.jsonl", hashlib.sha256())
        return {"groups": scan.groups.n_groups}
    if name == "passing":
        from whileai_pipeline.core.atomic import atomic_file
        from whileai_pipeline.core.scoring import ScoreStats, passing_rows_file

        stats, dest = ScoreStats(), work / "sft_source.jsonl"
        with atomic_file(dest) as out:
            passing_rows_file(work / "scored.jsonl", out, stats, dest=dest, workers=workers)
        _sidecar(run, dest)
        return {"n": stats.n, "groups": _n_groups(stats)}
    if name == "pairs":
        from whileai_pipeline.core.pairs import build_pairs_file

        report = build_pairs_file(work / "scored.jsonl", work / "pairs.jsonl", workers=workers)
        _sidecar(run, work / "pairs.jsonl")
        return {"pairs": report["pairs"], "prompts_seen": report["prompts_seen"]}
    if name == "judge":
        from whileai_pipeline.core.judge import judge_pairs_file

        report = judge_pairs_file(work / "pairs.jsonl", work / "judged.jsonl", length_judge)
        return {"n": report["n"], "ties": report["ties"]}
    if name == "sft":
        from whileai_pipeline.core.export import export_datasets

        reports = export_datasets(str(work / "sft_source.jsonl"),
                                  {f: str(work / f"sft.{f}.jsonl") for f in ("openai", "trl")},
                                  validate=False, workers=workers)
        return {f: r["n_written"] for f, r in reports.items()}
    if name == "dpo":
        from whileai_pipeline.core.export import export_preferences

        reports = export_preferences(str(work / "pairs.jsonl"),
                                     {f: str(work / f"dpo.{f}.jsonl") for f in ("openai", "trl")},
                                     validate=False, workers=workers)
        return {f: r["pairs"] for f, r in reports.items()}
    if name.startswith("validate_"):
        from whileai_pipeline.core.openai_format import validate_file

        _, kind, fmt = name.split("_")
        report = validate_file(work / f"{kind}.{fmt}.jsonl", fmt, workers=workers)
        return {"rows": report["rows"], "ok": report["ok"], "problems": len(report["problems"])}
    if name == "score_stats_pairs":
        from whileai_pipeline.core.scoring import score_stats_of_file

        stats = score_stats_of_file(work / "pairs.jsonl", workers=workers, sides=True)
        return {"n": stats.n, "groups": _n_groups(stats)}
    if name == "raw_facts":
        import hashlib

        from whileai_pipeline.defs.summaries import RawStats, raw_facts

        stats = RawStats()
        for _, facts in raw_facts(run, hashlib.sha256(), workers=workers):
            stats.add_facts(facts)
        return {"rows": stats.rows, "prompts": stats.prompts, "groups": stats.groups}
    if name == "pipeline":
        from whileai_pipeline.cli import main

        home = work / "home"
        code = main(["run", str(run), "--home", str(home)])
        return {"exit": code}
    raise SystemExit(f"unknown step {name}")


def step_peaks(home, timeline):
    """{step: (own peak MB, tree peak MB, seconds)} of the latest run in the CLI's Dagster instance, from
    the sampled timeline and the instance's step start and end events."""
    import dagster as dg

    peaks = {}
    with dg.DagsterInstance.local_temp(tempdir=str(Path(home) / "dagster_home")) as instance:
        run = instance.get_runs(limit=1)[0]
        starts = {}
        for record in instance.all_logs(run.run_id):
            event = record.dagster_event
            if event is None or not record.step_key:
                continue
            if event.event_type_value == "STEP_START":
                starts[record.step_key] = record.timestamp
            elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and record.step_key in starts:
                begin, end = starts[record.step_key], record.timestamp
                inside = [(own, tree) for t, own, tree in timeline if begin <= t <= end]
                peaks[record.step_key] = (round(max((o for o, _ in inside), default=0) / (1 << 20), 1),
                                          round(max((t for _, t in inside), default=0) / (1 << 20), 1),
                                          round(end - begin, 1))
    return peaks


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("step")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--src", default=None)
    args = parser.parse_args(argv)
    run = args.src or RUN.format(n=args.rows)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    import whileai_pipeline.core.export  # noqa: F401  (the imports every step pays, before the baseline)
    import whileai_pipeline.core.pairs  # noqa: F401
    if args.step == "pipeline":
        import whileai_pipeline.cli  # noqa: F401
        import whileai_pipeline.definitions  # noqa: F401

    base = psutil.Process().memory_info().rss
    started = time.perf_counter()
    with TreeSampler() as sampler:
        result = step(args.step, args.work, run, args.workers)
    elapsed = time.perf_counter() - started
    mb = 1 << 20
    out = {
        "step": args.step,
        "rows": args.rows,
        "workers": args.workers,
        "seconds": round(elapsed, 2),
        "base_mb": round(base / mb, 1),
        "self_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "worker_peak_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        "tree_peak_mb": round(sampler.peak_tree / mb, 1),
        "result": result,
    }
    if args.step == "pipeline":
        out["steps"] = step_peaks(Path(args.work) / "home", sampler.timeline)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
