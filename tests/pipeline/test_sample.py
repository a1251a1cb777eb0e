"""The bundled sample run: realistic, gate-clean, reproducible from scripts/make_sample.py."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

import whileai_pipeline.simulations as wai

from .conftest import SAMPLE, SAMPLE_META, sample_rows

pytestmark = pytest.mark.pipeline
ROOT = Path(__file__).resolve().parents[2]


def test_sample_shape():
    rows = sample_rows()
    assert 40 <= len(rows) <= 80
    per_prompt = Counter(r["prompt"] for r in rows)
    assert len(per_prompt) >= 5 and all(4 <= n <= 8 for n in per_prompt.values())
    rewards = Counter(r["reward"] for r in rows)
    assert rewards[0] > 0 and rewards[1] > 0
    assert all(r["privileged"].get("reference") and r["privileged"].get("principle") for r in rows)
    assert sum(1 for r in rows if any(s.get("tool") for s in r["steps"])) > len(rows) // 2
    assert any(isinstance(s.get("arguments"), str) for r in rows for s in r["steps"] if s.get("tool"))
    meta = orjson.loads(SAMPLE_META.read_bytes())
    assert meta["system_prompt"] and [t["function"]["name"] for t in meta["tools"]] == [
        "lookup_order", "cancel_order", "send_email"]


def test_sample_passes_the_gates_with_a_real_leak_check(tmp_path):
    leaks = wai.leak_report(sample_rows())
    assert leaks["checked"] and leaks["n_checked"] == len(sample_rows()) and leaks["n_leaked"] == 0
    # raises if a gate refuses (an explicit output: a path source alone would write next to the sample)
    report = wai.export_dataset(str(SAMPLE), str(tmp_path / "sft.jsonl"), validate=True)
    assert report["tool_call_roundtrip"]["invalid"] == 0 and report["system_prompt_source"] == "sidecar"


def test_sample_is_reproducible():
    pytest.importorskip("whileai")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_sample.py"), "--check"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_sample_folder_holds_the_run_and_its_sidecar_only():
    """The folder ships in the package and ``demo`` reads its run: an export written beside the run (a path
    source with no output does that) was committed there once, and went into every install."""
    names = sorted(p.name for p in SAMPLE.parent.iterdir() if p.name != "__pycache__")
    assert names == [SAMPLE.name, SAMPLE_META.name], names
