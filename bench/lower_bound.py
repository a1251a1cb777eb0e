"""The JSON work that pairs + DPO cannot skip on a run, in CPU seconds: a floor under ``ours_pref_*``.

``python -m bench.lower_bound [--data RUN.jsonl] [--repeat 2]``

Building pairs from a file parses every row of the run once (to rank it), then reads back and writes
each pair's two rows; the DPO export then parses each pair and writes one row for it. Whatever else a
design does, it does at least this much orjson work: ``parse_run`` (``orjson.loads`` of every line) plus
twice ``pair_roundtrip`` (``orjson.loads`` and ``orjson.dumps`` of every line of the pairs file). Divided
by the cores, it is the least wall time any export of these pairs can take on this machine, with no gate,
no conversion and no hashing at all: compare it with a tenth of ``ref_pref_openai``'s time.
"""

import argparse
import os
import tempfile
import time

import orjson


def cpu_seconds(fn, path, repeat):
    """The least CPU time (this process) of ``repeat`` calls of ``fn(path)``; and what it returned."""
    best, result = None, None
    for _ in range(max(1, repeat)):
        t0 = time.process_time()
        result = fn(path)
        spent = time.process_time() - t0
        best = spent if best is None else min(best, spent)
    return best, result


def parse_run(path):
    """``orjson.loads`` of every line; the number of lines."""
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
            n += 1
    return n


def pair_roundtrip(path):
    """``orjson.dumps(orjson.loads(line))`` of every line; the number of lines."""
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            orjson.dumps(orjson.loads(line))
            n += 1
    return n


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="bench/out/run-100000-20kb-s0.jsonl", help="the run (JSONL)")
    parser.add_argument("--repeat", type=int, default=2, help="keep the least CPU time of this many reads")
    args = parser.parse_args(argv)
    from whileai_pipeline.core.pairs import build_pairs_file
    from whileai_pipeline.core.parallel import usable_cores

    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(args.data))) as tmp:
        pairs = os.path.join(tmp, "pairs.jsonl")
        built = build_pairs_file(args.data, pairs)
        run_s, rows = cpu_seconds(parse_run, args.data, args.repeat)
        pair_s, n_pairs = cpu_seconds(pair_roundtrip, pairs, args.repeat)
    cores = usable_cores()  # a CPU quota counts, as for the exports' workers
    total = run_s + 2 * pair_s
    print(f"parse_run: {rows} rows, {run_s:.2f} CPU s")
    print(f"pair_roundtrip: {n_pairs} pairs ({built['n_written']} built), {pair_s:.2f} CPU s")
    print(f"floor of pairs + DPO: {total:.2f} CPU s; on {cores} cores at best {total / cores:.2f} s wall")


if __name__ == "__main__":
    main()
