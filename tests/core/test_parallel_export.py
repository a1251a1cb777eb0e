"""Exports spread over worker processes are byte-identical to the one-process path."""

import hashlib
import random

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.jsonl import dumps


def _run(path, n=240, seed=3):
    rnd = random.Random(seed)
    with open(path, "wb") as fh:
        for i in range(n):
            steps = []
            for _ in range(rnd.randint(1, 5)):
                if rnd.random() < 0.5:
                    steps.append({"tool": "lookup", "arguments": rnd.choice([{"id": i}, '{"id": 1}', "{bad"]),
                                  "result": "x" * rnd.randint(0, 300)})
                else:
                    steps.append({"text": rnd.choice(["<think>h</think>ok", "fine", "  "])})
            row = {"prompt": f"p{i // 5}", "steps": steps, "final_text": "done", "scenario_id": f"s{i // 5}",
                   "rollout_index": i % 5, "reward": rnd.choice([0, 1, 0.5, None]),
                   "privileged": {"reference": "a long hidden reference text"}}
            fh.write(dumps(row) + b"\n")
            if i % 50 == 7:
                fh.write(b"\n")  # blank lines must not shift row numbering
    return path


@pytest.mark.parametrize("fmt,unroll,mask_mode", [("openai", False, "assistant"), ("trl", False, "assistant"),
                                                  ("trl", False, "final"), ("openai", True, "assistant"),
                                                  ("trl", True, "assistant")])
def test_workers_give_identical_bytes(tmp_path, monkeypatch, fmt, unroll, mask_mode):
    src = _run(tmp_path / "run.jsonl")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # many chunks even for a small file
    opts = dict(format=fmt, unroll=unroll, mask_mode=mask_mode, validate=False, max_tool_output_chars=120)
    one = wai.export_dataset(src, tmp_path / "one.jsonl", workers=1, **opts)
    two = wai.export_dataset(src, tmp_path / "two.jsonl", workers=2, **opts)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    strip = ("path", "sha256", "elapsed_seconds")
    assert {k: v for k, v in one.items() if k not in strip} == {k: v for k, v in two.items() if k not in strip}
    assert two["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "run.jsonl", "two.jsonl"]


def test_bad_line_in_a_worker_names_file_and_line(tmp_path, monkeypatch):
    src = _run(tmp_path / "run.jsonl", n=100)
    lines = src.read_bytes().split(b"\n")
    lines[80] = b'{"prompt": "p", broken'
    src.write_bytes(b"\n".join(lines))
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    for kwargs in ({}, {"unroll": True}):
        with pytest.raises(wai.BadJsonlError, match=rf"^bad_jsonl: {src}:81: "):
            wai.export_dataset(src, tmp_path / "out.jsonl", workers=2, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
