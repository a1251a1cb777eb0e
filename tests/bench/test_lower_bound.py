"""The pairs + DPO floor's bookkeeping (no timings here): it reads every row of the run and every built pair."""

from bench import lower_bound
from bench.generate import generate
from whileai_pipeline.core import parallel
from whileai_pipeline.core.pairs import build_pairs_file


def test_the_floor_reads_every_row_and_every_pair(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run.jsonl"
    generate(40, run, seed=5, row_kb=2)
    expected = build_pairs_file(run, tmp_path / "pairs.jsonl")["n_written"]
    assert expected > 0

    measured = lower_bound.cpu_seconds
    spent = {lower_bound.parse_run: 1.25, lower_bound.pair_roundtrip: 0.5}  # CPU seconds, set for the sums below

    def cpu_seconds(fn, path, repeat):  # what each read returns, with a time of this test's choosing
        return spent[fn], measured(fn, path, repeat)[1]

    monkeypatch.setattr(lower_bound, "cpu_seconds", cpu_seconds)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 3)
    lower_bound.main(["--data", str(run), "--repeat", "1"])

    out = capsys.readouterr().out.splitlines()
    # one parse of the run and two of the pairs, over the cores this process may use
    assert out == ["parse_run: 40 rows, 1.25 CPU s",
                   f"pair_roundtrip: {expected} pairs ({expected} built), 0.50 CPU s",
                   "floor of pairs + DPO: 2.25 CPU s; on 3 cores at best 0.75 s wall"], out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl", "run.jsonl", "run.meta.json"]  # no temp left


def test_pair_roundtrip_counts_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":[2,3]}\n')
    spent, n = lower_bound.cpu_seconds(lower_bound.pair_roundtrip, path, 2)
    assert n == 2 and spent >= 0
