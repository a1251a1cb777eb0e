"""Issue 6.3: same input and options -> the same bytes and report, whatever the process or hash seed."""

import json
import os
import subprocess
import sys

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.jsonl import dumps

SCRIPT = r"""
import json, sys, whileai_pipeline.simulations as wai
src, out, fmt, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sft = wai.export_dataset(src, out + ".sft", format=fmt, workers=workers, validate=False)
pairs, pair_report = wai.build_preference_pairs(wai.read_jsonl(src), max_pairs_per_prompt=2)
dpo = wai.export_preference(pairs, out + ".dpo", format=fmt, validate=False)
for r in (sft, dpo):
    for k in ("elapsed_seconds", "path"):
        r.pop(k, None)
print(json.dumps({"sft": sft, "dpo": dpo, "pairs": pair_report}, sort_keys=True))
"""

TIMINGS = ("elapsed_seconds",)


def _run(path):
    rows = []
    for i in range(120):
        rows.append({"prompt": f"Task {i % 9}", "scenario_id": f"s{i % 9}", "rollout_index": i,
                     "reward": [0, 1, 0.5, 1][i % 4], "model_version": ["m1", "m2"][i % 2],
                     "steps": [{"tool": "t", "arguments": {"k": {"b": i, "a": [i, {"z": 1, "y": 2}]}},
                                "result": {"set_like": [3, 1, 2]}}],
                     "lineage": {"tags": ["x", "y"], "privileged": {"reference": "hidden"}},
                     "final_text": "done " * (i % 5)})
    path.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))


def test_byte_identical_across_processes_and_hash_seeds(tmp_path):
    src = tmp_path / "run.jsonl"
    _run(src)
    results = []
    for seed, fmt, workers in [("0", "openai", 1), ("1", "openai", 2), ("12345", "openai", 1),
                               ("random", "trl", 1), ("7", "trl", 2)]:
        out = tmp_path / f"out-{seed}-{fmt}-{workers}"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(src), str(out), fmt, str(workers)],
                              env=env, capture_output=True, text=True, check=True)
        report = json.loads(proc.stdout)
        results.append((fmt, report, (out.with_name(out.name + ".sft")).read_bytes(),
                        (out.with_name(out.name + ".dpo")).read_bytes()))
    by_format = {}
    for fmt, report, sft, dpo in results:
        by_format.setdefault(fmt, []).append((report, sft, dpo))
    for fmt, runs in by_format.items():
        first = runs[0]
        for other in runs[1:]:
            assert other[1] == first[1], f"{fmt} SFT bytes differ"
            assert other[2] == first[2], f"{fmt} DPO bytes differ"
            assert other[0] == first[0], f"{fmt} reports differ"


def test_reexport_replaces_published_file_atomically(tmp_path):
    src = tmp_path / "run.jsonl"
    _run(src)
    out = tmp_path / "sft.jsonl"
    first = wai.export_dataset(src, out, validate=False)
    inode = out.stat().st_ino
    second = wai.export_dataset(src, out, validate=False)
    assert first["sha256"] == second["sha256"]
    assert out.stat().st_ino != inode        # a new file renamed into place, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl", "sft.jsonl"]
