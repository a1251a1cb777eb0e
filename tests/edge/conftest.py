"""Shared helpers for the spec section 9 edge-case tests (E1..E76).

Every expected value in this directory is a hand-written literal taken from
the shared spec EXPORT_SPEC.md (section 9 and the sections it points to) or,
where it differs, DECISIONS.md (which wins).
"""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest


def _write_jsonl(path: Path, rows) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def _read_jsonl(path: Path) -> list:
    """Parse an output file strictly: orjson rejects NaN/Infinity tokens (DECISIONS 1)."""
    data = Path(path).read_bytes()
    assert data == b"" or data.endswith(b"\n"), "every line ends with \\n (DECISIONS 1)"
    out = []
    for line in data.split(b"\n"):
        if line == b"":
            continue
        out.append(orjson.loads(line))
    return out


@pytest.fixture
def write_jsonl():
    return _write_jsonl


@pytest.fixture
def read_jsonl_out():
    return _read_jsonl
