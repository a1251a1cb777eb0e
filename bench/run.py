"""Side-by-side throughput and memory: our exporter, the reference (whileai 0.105) and the orjson floor.

    python -m bench.run [--rows 100000] [--row-kb 20] [--seed 0] [--skip-reference]
                        [--scaling 10000,100000,1000000] [--cases a,b,...] [--no-validate]
    python -m bench.run --profile ours_sft_openai [--rows 100000]   # cProfile, one process

Every case runs in a fresh ``python -m bench.run --child CASE`` subprocess on the same input file, so
peak RSS is per case. The child times only the work (imports excluded) and reports its own
``ru_maxrss`` and that of the processes it waited for (a worker pool); the parent also samples the
summed RSS of the child's whole process tree every 50 ms (``tree MB``, an approximation that
catches pool workers living at the same time). The ``rss_children_mb`` in the JSON is an upper bound
only: a process started by fork+exec inherits its parent's peak RSS in ``ru_maxrss``.

Cases: ``floor`` (orjson-parse every line, orjson-dump it back, nothing else); ``ours_sft_openai``,
``ours_sft_trl``, ``ours_sft_unroll`` (``wai.export_dataset(path, out)``); ``ours_sft_openai_serial``
(the same with ``WHILEAI_PIPELINE_WORKERS=1``; its output must be byte-identical to the pooled one);
``ours_pref_openai``, ``ours_pref_trl`` (pairs built from the run, then ``wai.export_preference``);
``ours_sft_both``, ``ours_pref_both`` (openai and trl from one read: ``export_datasets`` and
``export_preferences``, as the pipeline's stages call them; not in the default set); ``pipeline``
and ``pipeline_sample`` (the whole Dagster chain in process, on the run and on the bundled sample
run); ``ref_sft_openai`` and ``ref_pref_openai`` / ``ref_pref_trl`` (the reference,
with the sidecar's system prompt and tools passed explicitly, since it does not read sidecars).
Before each case the page cache is emptied (where permitted) and the input read back in
(``settle_page_cache``; ``--keep-page-cache`` to skip). Results: a markdown table on stdout and
``bench/out/results-<timestamp>.json``.
"""

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"
SAMPLE_RUN = REPO / "whileai_pipeline" / "sample" / "support_orders.jsonl"
MB = 1024 * 1024

OURS_SFT = {"ours_sft_openai": dict(format="openai"), "ours_sft_trl": dict(format="trl"),
            "ours_sft_unroll": dict(format="openai", unroll=True),
            "ours_sft_openai_serial": dict(format="openai")}
OURS_PREF = {"ours_pref_openai": "openai", "ours_pref_trl": "trl"}
REF_SFT = {"ref_sft_openai": dict(format="openai"), "ref_sft_trl": dict(format="trl"),
           "ref_sft_unroll": dict(format="openai", unroll=True)}
REF_PREF = {"ref_pref_openai": "openai", "ref_pref_trl": "trl"}
DEFAULT_CASES = ("floor", "ours_sft_openai", "ours_sft_openai_serial", "ours_sft_trl", "ours_sft_unroll",
                 "ours_pref_openai", "ours_pref_trl", "pipeline", "pipeline_sample",
                 "ref_sft_openai", "ref_pref_openai", "ref_pref_trl")
# Both formats from one read (export_datasets / export_preferences), as the pipeline's stages export them.
OURS_BOTH = ("ours_sft_both", "ours_pref_both")
ALL_CASES = ("floor", *OURS_SFT, *OURS_PREF, *OURS_BOTH, "pipeline", "pipeline_sample", *REF_SFT, *REF_PREF)
# Which reference case an "ours" case is compared with (the first one that was run).
REF_OF = {"ours_sft_openai": ("ref_sft_openai",), "ours_sft_openai_serial": ("ref_sft_openai",),
          "ours_sft_trl": ("ref_sft_trl", "ref_sft_openai"), "ours_sft_unroll": ("ref_sft_unroll", "ref_sft_openai"),
          "ours_pref_openai": ("ref_pref_openai",), "ours_pref_trl": ("ref_pref_trl", "ref_pref_openai"),
          "pipeline": ("ref_sft_openai",)}


# =============================================================================== child side

def _meta(path):
    meta = Path(str(path)[: -len(".jsonl")] + ".meta.json") if str(path).endswith(".jsonl") else Path(str(path) + ".meta.json")
    if meta.is_file():
        data = orjson.loads(meta.read_bytes())
        return data.get("system_prompt"), data.get("tools")
    return None, None


def _count_lines(path):
    n = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            n += block.count(b"\n")
    return n


def _case_floor(inp, out, _opts):
    loads, dumps = orjson.loads, orjson.dumps
    n = 0
    t0 = time.perf_counter()
    with open(inp, "rb") as fh, open(out, "wb", buffering=1 << 20) as dst:
        for line in fh:
            dst.write(dumps(loads(line)))
            dst.write(b"\n")
            n += 1
    return {"seconds": time.perf_counter() - t0, "rows": n, "out_rows": n}


def _case_ours_sft(name, inp, out, opts):
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.parallel import workers_for
    kwargs = dict(OURS_SFT[name])
    workers = workers_for(inp)  # what export_dataset picks here (size, cores, $WHILEAI_PIPELINE_WORKERS)
    if not opts.get("validate", True):
        kwargs["validate"] = False
    t0 = time.perf_counter()
    report = wai.export_dataset(inp, out, **kwargs)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rows": report.get("rows_read"), "out_rows": report.get("n"),
            "sha256": report["sha256"], "report_elapsed": report.get("elapsed_seconds"),
            "warnings": len(report.get("warnings", [])), "workers": workers}


def _case_ours_pref(name, inp, out, opts):
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.pairs import build_pairs_file

    fmt = OURS_PREF[name]
    system, tools = _meta(inp)
    validate = opts.get("validate", True)
    t0 = time.perf_counter()
    pairs_path = str(out) + ".pairs.jsonl"
    build_pairs_file(inp, pairs_path)
    t1 = time.perf_counter()
    report = wai.export_preference(pairs_path, out, system_prompt=system, tools=tools, format=fmt,
                                   validate=validate)
    t2 = time.perf_counter()
    return {"seconds": t2 - t0, "build_seconds": t1 - t0, "export_seconds": t2 - t1,
            "pair_builder": "build_pairs_file(path, pairs_path)", "rows": _count_lines(inp),
            "out_rows": report.get("pairs"), "pairs": report.get("pairs"), "sha256": report["sha256"]}


def _case_ours_both(name, inp, out, opts):
    """openai into ``out``, trl beside it, from one read: the sft or the preference export."""
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.pairs import build_pairs_file

    outputs = {"openai": str(out), "trl": str(out) + ".trl.jsonl"}
    validate = opts.get("validate", True)
    t0 = time.perf_counter()
    if name == "ours_sft_both":
        reports = wai.export_datasets(inp, outputs, validate=validate)
    else:
        system, tools = _meta(inp)
        pairs_path = str(out) + ".pairs.jsonl"
        build_pairs_file(inp, pairs_path)
        reports = wai.export_preferences(pairs_path, outputs, system_prompt=system, tools=tools, validate=validate)
    seconds = time.perf_counter() - t0
    first = reports["openai"]
    return {"seconds": seconds, "rows": first.get("rows_read") if name == "ours_sft_both" else _count_lines(inp),
            "out_rows": first.get("n_written"), "sha256": first.get("sha256"),
            "sha256_trl": reports["trl"].get("sha256")}


def _case_ref_sft(name, inp, out, opts):
    import whileai.simulations as ref
    system, tools = _meta(inp)
    kwargs = dict(REF_SFT[name])
    if not opts.get("validate", True):
        kwargs["validate"] = False
    t0 = time.perf_counter()
    report = ref.export_dataset(str(inp), str(out), system_prompt=system, tools=tools, **kwargs)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rows": _count_lines(inp), "out_rows": report.get("n"),
            "warnings": len(report.get("warnings", []))}


def _case_ref_pref(name, inp, out, opts):
    import whileai.simulations as ref
    fmt = REF_PREF[name]
    system, tools = _meta(inp)
    validate = opts.get("validate", True)
    t0 = time.perf_counter()
    # The reference's own path reader does exactly this (spec 5.8): text mode, json.loads per line.
    with open(inp, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    t1 = time.perf_counter()
    pairs, _pair_report = ref.build_preference_pairs(rows)
    t2 = time.perf_counter()
    report = ref.export_preference(pairs, str(out), system_prompt=system, tools=tools, format=fmt, validate=validate)
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "load_seconds": t1 - t0, "build_seconds": t2 - t1, "export_seconds": t3 - t2,
            "rows": len(rows), "out_rows": report.get("pairs"), "pairs": report.get("pairs")}


def _case_pipeline(name, inp, out, opts):
    import importlib
    import io

    from whileai_pipeline.cli import run_chain

    importlib.import_module("whileai_pipeline.definitions")  # before the clock starts: run_chain imports it
    source = SAMPLE_RUN if name == "pipeline_sample" else Path(inp)
    home = Path(str(out) + ".home")
    shutil.rmtree(home, ignore_errors=True)
    log = io.StringIO()
    t0 = time.perf_counter()
    code = run_chain(source, home=home, out=log)
    seconds = time.perf_counter() - t0
    rows = _count_lines(source)
    shutil.rmtree(home, ignore_errors=True)
    return {"seconds": seconds, "rows": rows, "out_rows": None, "exit_code": code, "input": str(source),
            "input_bytes": source.stat().st_size, "log": log.getvalue()[-2000:]}


def pooled_equals_serial(results):
    """True or False when the pooled export's output was compared with the one-process one; None when there
    is nothing to compare: a case missing, or ``ours_sft_openai`` itself ran in one process (an input below
    the library's pool threshold, one usable CPU, ``$WHILEAI_PIPELINE_WORKERS=1``), its bytes then being
    the one-process path's twice."""
    by_case = {r["case"]: r for r in results}
    pooled, serial = by_case.get("ours_sft_openai"), by_case.get("ours_sft_openai_serial")
    if not (pooled and serial and pooled.get("sha256") and serial.get("sha256")):
        return None
    if pooled.get("workers") == 1:
        return None
    return pooled["sha256"] == serial["sha256"]


def child_main(case, inp, out, result_path, opts):
    started = time.perf_counter()
    if case == "floor":
        result = _case_floor(inp, out, opts)
    elif case in OURS_SFT:
        result = _case_ours_sft(case, inp, out, opts)
    elif case in OURS_PREF:
        result = _case_ours_pref(case, inp, out, opts)
    elif case in OURS_BOTH:
        result = _case_ours_both(case, inp, out, opts)
    elif case in REF_SFT:
        result = _case_ref_sft(case, inp, out, opts)
    elif case in REF_PREF:
        result = _case_ref_pref(case, inp, out, opts)
    elif case in ("pipeline", "pipeline_sample"):
        result = _case_pipeline(case, inp, out, opts)
    else:
        raise SystemExit(f"unknown case {case!r}")
    result["child_total_seconds"] = time.perf_counter() - started
    result["rss_self_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["rss_children_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if Path(out).is_file():
        result["out_bytes"] = Path(out).stat().st_size
    from whileai_pipeline.core.jsonl import write_json  # after the RSS above: not part of the case

    write_json(result_path, result, indent=False)


# =============================================================================== parent side

def _tree_rss(pid):
    """Summed RSS (bytes) of ``pid`` and all its descendants, from /proc; 0 when it is gone."""
    total, stack, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * page
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_case(case, inp, work, opts, env_extra=None, timeout=3600):
    """Run one case in a fresh interpreter; returns its result dict (plus wall time and sampled tree RSS)."""
    out = work / f"{case}.out.jsonl"
    result_path = work / f"{case}.result.json"
    for stale in (out, result_path):
        if stale.exists():
            stale.unlink()
    cmd = [sys.executable, "-m", "bench.run", "--child", case, "--input", str(inp), "--output", str(out),
           "--result", str(result_path)]
    if not opts.get("validate", True):
        cmd.append("--no-validate")
    env = dict(os.environ)
    env.update(env_extra or {})
    page_cache = settle_page_cache(inp) if opts.get("settle_page_cache", True) else "as found"
    load_before = os.getloadavg()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    log_path = work / f"{case}.log"
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        peak_tree = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak_tree = max(peak_tree, _tree_rss(proc.pid))
            if time.perf_counter() - t0 > timeout:
                proc.kill()
            time.sleep(0.05)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    result = {"case": case, "wall_seconds": wall, "exit_code": proc.returncode,
              "rss_wait4_mb": usage.ru_maxrss / 1024, "rss_tree_sampled_mb": peak_tree / MB,
              # the case's processes together (wait4 counts the workers it reaped): how many cores it kept busy
              "cpu_user_seconds": usage.ru_utime, "cpu_sys_seconds": usage.ru_stime,
              "loadavg_before": load_before[0], "loadavg_after": os.getloadavg()[0],
              "env": env_extra or {}, "git_head": head, "page_cache": page_cache}
    if proc.returncode == 0 and result_path.is_file():
        result.update(orjson.loads(result_path.read_bytes()))
    else:
        tail = log_path.read_bytes()[-3000:].decode("utf-8", "replace")
        result["error"] = tail.strip().splitlines()[-1] if tail.strip() else f"exit {proc.returncode}"
        result["log_tail"] = tail
    result.setdefault("input_bytes", Path(inp).stat().st_size)
    if not opts.get("keep_outputs"):
        for path in (out, Path(str(out) + ".pairs.jsonl"), Path(str(out) + ".trl.jsonl")):
            if path.exists():
                path.unlink()
    return result


def settle_page_cache(inp):
    """Give every case the same start: dirty pages written back, the page cache emptied (where this user
    may: root on Linux) and the input read back into it.

    Measured here: with the page cache full of earlier cases' files, every new page a case writes is
    first taken back from the cache, in the writer's own system time. One pooled export in two formats
    took 9.4 s (5.3 s of worker system time) with a full cache and 7.2 s (0.7 s) with an empty one.
    Without this, a case's time depended on what ran before it. Returns what was done, for the results.
    """
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("1\n")
        state = "emptied, input re-read"
    except OSError:
        state = "as found (this user cannot empty it), input re-read"
    buffer = bytearray(1 << 20)  # small and reused: a case's ru_maxrss starts from this process's peak
    with open(inp, "rb", buffering=0) as fh:
        while fh.readinto(buffer):
            pass
    return state


def run_best(case, inp, work, opts, env_extra=None, repeat=1):
    """``run_case`` ``repeat`` times (not the reference or the pipeline: those run once); keeps the fastest."""
    if case.startswith(("ref_", "pipeline")):
        repeat = 1
    runs = [run_case(case, inp, work, opts, env_extra=env_extra) for _ in range(max(1, repeat))]
    ok = [r for r in runs if r.get("seconds") and not r.get("error")]
    best = min(ok, key=lambda r: r["seconds"]) if ok else runs[-1]
    if len(runs) > 1:
        best["all_seconds"] = [r.get("seconds") for r in runs]
        best["all_peak_rss_mb"] = [max(r.get("rss_self_mb") or 0, r.get("rss_wait4_mb") or 0) for r in runs]
        best["peak_rss_mb_max_of_runs"] = max(best["all_peak_rss_mb"])
    return best


def _derive(result):
    seconds, rows = result.get("seconds"), result.get("rows")
    if seconds and rows:
        result["rows_per_s"] = rows / seconds
        result["mb_per_s"] = result["input_bytes"] / MB / seconds
    result["peak_rss_mb"] = max(result.get("rss_self_mb") or 0, result.get("rss_wait4_mb") or 0)
    return result


def data_file(rows, row_kb, seed):
    path = OUT_DIR / f"run-{rows}-{row_kb}kb-s{seed}.jsonl"
    meta = path.with_name(path.name[: -len(".jsonl")] + ".meta.json")
    if not (path.is_file() and meta.is_file()):
        print(f"generating {path.name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bench.generate", str(rows), str(path), "--seed", str(seed),
                        "--row-kb", str(row_kb)], cwd=REPO, check=True)
        print(f"  generated in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return path


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def _ratios(results):
    by_case = {r["case"]: r for r in results}
    floor = by_case.get("floor")
    for r in results:
        if not r.get("seconds"):
            continue
        if r["case"].startswith("ours") or r["case"] == "pipeline":
            if floor and floor.get("seconds"):
                r["time_vs_floor"] = r["seconds"] / floor["seconds"]
            for ref_case in REF_OF.get(r["case"], ()):
                ref = by_case.get(ref_case)
                if ref and ref.get("rows_per_s"):
                    r["speedup_vs_ref"] = r["rows_per_s"] / ref["rows_per_s"]
                    r["ref_case"] = ref_case
                    if r.get("export_seconds") and ref.get("export_seconds"):
                        r["export_speedup_vs_ref"] = ref["export_seconds"] / r["export_seconds"]
                    break
    return results


def table(results):
    lines = ["| case | rows | seconds | rows/s | MB/s | out MB | peak RSS MB (process) | tree RSS MB (sampled) | "
             "x ref (rows/s) | time / floor | notes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        if r.get("skipped") or r.get("error"):
            lines.append(f"| {r['case']} | | | | | | | | | | {r.get('skipped') or 'ERROR: ' + r['error']} |")
            continue
        notes = []
        if "build_seconds" in r:
            parts = [f"load {r['load_seconds']:.1f} s" if "load_seconds" in r else None,
                     f"build {r['build_seconds']:.1f} s", f"export {r['export_seconds']:.1f} s",
                     f"{r.get('pairs')} pairs"]
            notes.append(", ".join(p for p in parts if p))
            if r.get("export_speedup_vs_ref"):
                notes.append(f"export alone x{r['export_speedup_vs_ref']:.1f} ref")
        if r.get("ref_case") and r["ref_case"] != REF_OF.get(r["case"], (None,))[0]:
            notes.append(f"vs {r['ref_case']}")
        if r.get("env"):
            notes.append(" ".join(f"{k}={v}" for k, v in r["env"].items()))
        if "input" in r:
            status = "ok" if r.get("exit_code") == 0 else f"FAILED (exit {r.get('exit_code')})"
            notes.append(f"input {Path(r['input']).name}, chain {status}")
        if r.get("pair_builder"):
            notes.append(f"pairs via {r['pair_builder']}")
        if len(r.get("all_seconds", ())) > 1:
            notes.append("best of " + ", ".join("-" if x is None else f"{x:.1f}" for x in r["all_seconds"]) + " s")
        notes.append(f"wall {r['wall_seconds']:.1f} s")
        if r.get("cpu_user_seconds") is not None:
            cpu = r["cpu_user_seconds"] + r["cpu_sys_seconds"]
            notes.append(f"CPU {cpu:.1f} s ({r['cpu_sys_seconds']:.1f} system), {cpu / r['wall_seconds']:.1f} cores")
        lines.append(
            f"| {r['case']} | {r.get('rows')} | {r['seconds']:.2f} | {_fmt(r.get('rows_per_s'), ',.0f')} | "
            f"{_fmt(r.get('mb_per_s'), '.1f')} | {_fmt(r['out_bytes'] / MB if r.get('out_bytes') else None, ',.0f')} | "
            f"{r['peak_rss_mb']:.0f} | {r['rss_tree_sampled_mb']:.0f} | "
            f"{_fmt(r.get('speedup_vs_ref'), '.1f')} | {_fmt(r.get('time_vs_floor'), '.2f')} | {'; '.join(notes)} |")
    return "\n".join(lines)


def fit_line(xs, ys):
    """Least squares y = a + b x; returns (a, b, r2)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx if sxx else 0.0
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    r2 = 1 - ss_res / ss_tot if ss_tot else 1.0
    return a, b, r2


def scaling(sizes, seed, work, opts):
    rows_out = []
    for n in sizes:
        path = data_file(n, 2, seed)
        for case in ("floor", "ours_sft_openai"):
            print(f"[scaling {n}] {case} ...", file=sys.stderr, flush=True)
            r = _derive(run_best(case, path, work, opts, repeat=opts.get("repeat", 1)))
            r["size"] = n
            rows_out.append(r)
            _progress(r)
    fits = {}
    for case in ("floor", "ours_sft_openai"):
        pts = [(r["rows"], r["seconds"]) for r in rows_out if r["case"] == case and r.get("seconds")]
        if len(pts) >= 2:
            a, b, r2 = fit_line([p[0] for p in pts], [p[1] for p in pts])
            fits[case] = {"a_seconds": a, "b_us_per_row": b * 1e6, "r2": r2}
    rss = {r["size"]: r["peak_rss_mb"] for r in rows_out if r["case"] == "ours_sft_openai" and not r.get("error")}
    tree = {r["size"]: r["rss_tree_sampled_mb"] for r in rows_out if r["case"] == "ours_sft_openai" and not r.get("error")}
    ratios = {}
    if 100_000 in rss and 1_000_000 in rss:
        ratios["rss_1m_over_100k"] = rss[1_000_000] / rss[100_000]
        ratios["tree_rss_1m_over_100k"] = tree[1_000_000] / tree[100_000] if tree[100_000] else None
    elif len(rss) >= 2:
        lo, hi = min(rss), max(rss)
        ratios[f"rss_{hi}_over_{lo}"] = rss[hi] / rss[lo]
        ratios[f"tree_rss_{hi}_over_{lo}"] = tree[hi] / tree[lo] if tree[lo] else None
    return {"runs": rows_out, "fits": fits, "peak_rss_mb": rss, "tree_rss_mb": tree, "ratios": ratios}


def scaling_table(sc):
    lines = ["| rows (2 KB) | case | seconds | rows/s | MB/s | peak RSS MB (process) | tree RSS MB (sampled) |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in sc["runs"]:
        if r.get("error"):
            lines.append(f"| {r['size']} | {r['case']} | ERROR: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['size']:,} | {r['case']} | {r['seconds']:.2f} | {_fmt(r.get('rows_per_s'), ',.0f')} | "
                     f"{_fmt(r.get('mb_per_s'), '.1f')} | {r['peak_rss_mb']:.0f} | {r['rss_tree_sampled_mb']:.0f} |")
    lines.append("")
    for case, fit in sc["fits"].items():
        lines.append(f"- fit `{case}`: time = {fit['a_seconds']:.3f} s + {fit['b_us_per_row']:.2f} us/row x rows "
                     f"(R^2 = {fit['r2']:.5f})")
    for k, v in sc["ratios"].items():
        lines.append(f"- {k}: {_fmt(v, '.2f')}")
    return "\n".join(lines)


def _progress(r):
    if r.get("skipped"):
        print(f"  {r['case']}: {r['skipped']}", file=sys.stderr, flush=True)
    elif r.get("error"):
        print(f"  {r['case']}: ERROR {r['error']}", file=sys.stderr, flush=True)
    else:
        print(f"  {r['case']}: {r['seconds']:.2f} s, {r.get('rows_per_s', 0):,.0f} rows/s, "
              f"RSS {r['peak_rss_mb']:.0f} MB (tree {r['rss_tree_sampled_mb']:.0f} MB), wall {r['wall_seconds']:.1f} s",
              file=sys.stderr, flush=True)


def machine_info():
    info = {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0))}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    versions = {}
    for dist in ("whileai", "orjson", "dagster"):
        try:
            from importlib.metadata import version
            versions[dist] = version(dist)
        except Exception:  # noqa: BLE001
            versions[dist] = None
    info["versions"] = versions
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "whileai_pipeline"], cwd=REPO, capture_output=True,
                               text=True)
        info["git"] = head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        pass
    return info


def profile_case(case, inp, top):
    """cProfile one of our cases in this process (one worker), printing the top functions by cumulative time."""
    import cProfile
    import io
    import pstats
    os.environ["WHILEAI_PIPELINE_WORKERS"] = "1"
    work = OUT_DIR / "profile"
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{case}.out.jsonl"
    prof = cProfile.Profile()
    prof.enable()
    if case in OURS_SFT:
        result = _case_ours_sft(case, inp, out, {})
    elif case in OURS_PREF:
        result = _case_ours_pref(case, inp, out, {})
    else:
        raise SystemExit("--profile takes an ours_* case")
    prof.disable()
    stream = io.StringIO()
    stats = pstats.Stats(prof, stream=stream)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    print(f"{case}: {result['seconds']:.2f} s under cProfile (one worker)")
    print(stream.getvalue())
    stats.dump_stats(str(work / f"{case}.prof"))
    out.unlink(missing_ok=True)
    Path(str(out) + ".pairs.jsonl").unlink(missing_ok=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--row-kb", type=int, default=20, choices=(20, 2))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", help="use this run file instead of a generated one")
    parser.add_argument("--skip-reference", action="store_true", help="do not run the ref_* cases")
    parser.add_argument("--cases", help=f"comma-separated subset of {','.join(ALL_CASES)}")
    parser.add_argument("--scaling", help="comma-separated row counts for the 2 KB scaling curve")
    parser.add_argument("--scaling-only", action="store_true", help="skip the side-by-side table")
    parser.add_argument("--no-validate", action="store_true", help="pass validate=False on both sides")
    parser.add_argument("--keep-outputs", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each floor/ours case this many times and keep the fastest (noisy machine)")
    parser.add_argument("--keep-page-cache", action="store_true",
                        help="do not empty the page cache before each case (see settle_page_cache)")
    parser.add_argument("--profile", metavar="CASE", help="cProfile one ours_* case in process and exit")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--report", metavar="RESULTS_JSON", help="re-print the tables of a results file and exit")
    # child mode
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    opts = {"validate": not args.no_validate, "keep_outputs": args.keep_outputs, "repeat": args.repeat,
            "settle_page_cache": not args.keep_page_cache}

    if args.child:
        child_main(args.child, args.input, args.output, args.result, opts)
        return
    from whileai_pipeline.core.jsonl import write_json  # the parent side only: a case imports what it needs

    if args.report:
        doc = orjson.loads(Path(args.report).read_bytes())
        if doc.get("results"):
            print(f"## {Path(doc['input']).name}: {doc['results'][0].get('rows')} rows, "
                  f"{doc['input_bytes'] / MB:,.0f} MB\n")
            print(table(doc["results"]))
            if "pooled_equals_serial" in doc:
                print(f"\npooled output byte-identical to WHILEAI_PIPELINE_WORKERS=1 output: {doc['pooled_equals_serial']}")
        if doc.get("scaling"):
            print("\n## scaling (export_dataset openai vs floor, 2 KB rows)\n")
            print(scaling_table(doc["scaling"]))
        return

    inp = Path(args.data) if args.data else None
    if args.profile:
        inp = inp or data_file(args.rows, args.row_kb, args.seed)
        profile_case(args.profile, inp, args.top)
        return

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = OUT_DIR / f"work-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    doc = {"started": stamp, "argv": sys.argv[1:], "machine": machine_info(), "validate": opts["validate"]}

    if not args.scaling_only:
        inp = inp or data_file(args.rows, args.row_kb, args.seed)
        cases = args.cases.split(",") if args.cases else list(DEFAULT_CASES)
        unknown = [c for c in cases if c not in ALL_CASES]
        if unknown:
            parser.error(f"unknown cases {unknown}; choose from {ALL_CASES}")
        if args.skip_reference:
            cases = [c for c in cases if not c.startswith("ref_")]
        results = []
        print(f"input {inp} ({inp.stat().st_size / MB:,.0f} MB)", file=sys.stderr, flush=True)
        for case in cases:
            print(f"{case} ...", file=sys.stderr, flush=True)
            env = {"WHILEAI_PIPELINE_WORKERS": "1"} if case == "ours_sft_openai_serial" else None
            r = _derive(run_best(case, inp, work, opts, env_extra=env, repeat=args.repeat))
            if r.get("skipped"):
                print(r["skipped"])
            results.append(r)
            _progress(r)
        _ratios(results)
        compared = pooled_equals_serial(results)
        if compared is not None:
            doc["pooled_equals_serial"] = compared
        doc.update({"input": str(inp), "input_bytes": inp.stat().st_size, "results": results})
        print(f"\n## {inp.name}: {results[0].get('rows') if results else '?'} rows, "
              f"{inp.stat().st_size / MB:,.0f} MB\n")
        print(table(results))
        if "pooled_equals_serial" in doc:
            print(f"\npooled output byte-identical to WHILEAI_PIPELINE_WORKERS=1 output: {doc['pooled_equals_serial']}")
        elif any(r["case"] == "ours_sft_openai" and r.get("workers") == 1 for r in results):
            print("\npooled output not compared with WHILEAI_PIPELINE_WORKERS=1 output: ours_sft_openai ran in one "
                  "process too")

    if args.scaling:
        sizes = [int(s) for s in args.scaling.split(",") if s.strip()]
        sc = scaling(sizes, args.seed, work, opts)
        doc["scaling"] = sc
        print("\n## scaling (export_dataset openai vs floor, 2 KB rows)\n")
        print(scaling_table(sc))

    doc["wall_seconds"] = time.perf_counter() - started
    doc["machine"]["loadavg_end"] = os.getloadavg()
    path = OUT_DIR / f"results-{stamp}.json"
    write_json(path, doc)
    if not args.keep_outputs:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nwall time {doc['wall_seconds']:.0f} s; results in {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
