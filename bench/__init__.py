"""Benchmarks for the exporter: a deterministic run generator and a side-by-side runner.

``python -m bench.generate N OUT.jsonl --seed S [--row-kb 20|2]`` writes a synthetic simulation run;
``python -m bench.run`` measures our export, the reference (whileai 0.105) and the orjson floor on it.
See ``bench/RESULTS.md``.
"""
