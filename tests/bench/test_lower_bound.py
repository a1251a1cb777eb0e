"""The pairs + DPO floor's bookkeeping (no timings here): it reads every row of the run and every built pair."""

import re

from bench import lower_bound
from bench.generate import generate
from whileai_pipeline.core.pairs import build_pairs_file


def test_the_floor_reads_every_row_and_every_pair(tmp_path, capsys):
    run = tmp_path / "run.jsonl"
    generate(40, run, seed=5, row_kb=2)
    expected = build_pairs_file(run, tmp_path / "pairs.jsonl")["n_written"]
    assert expected > 0

    lower_bound.main(["--data", str(run), "--repeat", "1"])

    out = capsys.readouterr().out
    assert re.search(r"^parse_run: 40 rows, [0-9.]+ CPU s$", out, re.M), out
    assert re.search(rf"^pair_roundtrip: {expected} pairs \({expected} built\), [0-9.]+ CPU s$", out, re.M), out
    run_s = float(re.search(r"parse_run: .*, ([0-9.]+) CPU s", out).group(1))
    pair_s = float(re.search(r"pair_roundtrip: .*, ([0-9.]+) CPU s", out).group(1))
    total = float(re.search(r"floor of pairs \+ DPO: ([0-9.]+) CPU s", out).group(1))
    # one parse of the run and two of the pairs (each printed to 0.01)
    assert abs(total - (run_s + 2 * pair_s)) <= 0.021
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl", "run.jsonl", "run.meta.json"]  # no temp left


def test_pair_roundtrip_counts_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":[2,3]}\n')
    spent, n = lower_bound.cpu_seconds(lower_bound.pair_roundtrip, path, 2)
    assert n == 2 and spent >= 0
