"""Worker part files are created, never opened through what already has their name.

Their names are predictable (``.<output>.<pid>.<kind>.<writer>.<k>.part.tmp``) and they sit beside the output,
which may be a folder other accounts can write to. A link planted there must not make a worker
truncate and fill another file (with rows that still carry their privileged blocks).
"""

import io
import itertools
import os

import orjson

from whileai_pipeline.core import parallel
from whileai_pipeline.core.pairs import write_pairs_part
from whileai_pipeline.core.parallel import PartFiles, byte_chunks, write_chunk
from whileai_pipeline.core.scoring import ScoreStats, _passing_line, resolve_scorer, score_file

VICTIM = b"someone else's file\n"


def _rows(path, n=40):
    path.write_bytes(b"".join(orjson.dumps({
        "prompt": f"p{i}", "final_text": "the parcel was lost in the Leeds depot fire", "reward": 1,
        "scenario_id": f"s{i % 4}", "privileged": {"reference": "the parcel was lost in the Leeds depot fire"},
    }) + b"\n" for i in range(n)))
    return path


def _plant(link, tmp_path):
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_bytes(VICTIM)
    os.symlink(victim, link)
    return victim


def test_score_file_workers_do_not_write_through_a_planted_link(tmp_path, monkeypatch):
    src = _rows(tmp_path / "raw.jsonl")
    dest = tmp_path / "scored.jsonl"
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(parallel, "_PART_WRITERS", itertools.count(7))
    victim = _plant(PartFiles(dest, "scored").name(0), tmp_path)
    monkeypatch.setattr(parallel, "_PART_WRITERS", itertools.count(7))  # score_file's parts get that name
    out = io.BytesIO()
    score_file(src, out, resolve_scorer("reference_match"), ScoreStats(), dest=dest, workers=2)
    assert victim.read_bytes() == VICTIM
    assert len(out.getvalue().splitlines()) == 40


def test_write_chunk_does_not_write_through_a_link(tmp_path):
    src = _rows(tmp_path / "scored.jsonl")
    part = tmp_path / ".out.jsonl.1.passing0.part.tmp"
    victim = _plant(part, tmp_path)
    chunk = next(iter(byte_chunks(src)))
    write_chunk(src, chunk, _passing_line, None, (str(part),))
    assert victim.read_bytes() == VICTIM
    assert not part.is_symlink() and len(part.read_bytes().splitlines()) == 40


def test_write_pairs_part_does_not_write_through_a_link(tmp_path):
    src = _rows(tmp_path / "scored.jsonl")
    part = tmp_path / ".pairs.jsonl.1.pairs0.part.tmp"
    victim = _plant(part, tmp_path)
    write_pairs_part(src, [], str(part))
    assert victim.read_bytes() == VICTIM
    assert not part.is_symlink()

