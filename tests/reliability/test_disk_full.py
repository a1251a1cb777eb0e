"""The disk fills up (here: a file size limit, RLIMIT_FSIZE, which worker processes inherit) while an
export writes: in this process, in a worker's part file, or while the parts are put together.

Every way ends in WriteFailedError naming the output, the previous file stays, and nothing is left
beside it. Before, a worker's part gave a bare "OSError: [Errno 28] No space left on device", and in
one process the spool's close flushed its buffer into the full disk again, which replaced the
WriteFailedError with a bare OSError and left the spool file behind.
"""

import contextlib
import resource

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel

from .test_source_rewritten import KINDS, PREVIOUS, _export, _source

LIMIT = 200_000  # bytes: every output and the worker parts of one big chunk exceed it; the parts of small chunks do not


@contextlib.contextmanager
def file_size_limit(nbytes):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.parametrize("where", ["one process", "worker parts", "parent joining parts"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_disk_is_write_failed_and_publishes_nothing(tmp_path, monkeypatch, kind, where):
    src = _source(tmp_path, kind)
    if where == "parent joining parts":
        monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # small parts: the output fills up, not a part
        from whileai_pipeline.core import pairs
        monkeypatch.setattr(pairs, "PAIRS_PER_TASK", 5)
    out = tmp_path / "out.jsonl"
    out.write_bytes(PREVIOUS)
    with file_size_limit(LIMIT), pytest.raises(wai.WriteFailedError, match=rf"^write_failed: {out}: File too large; "
                                                                          r"nothing was published"):
        _export(kind, src, out, 1 if where == "one process" else 2, None)
    assert out.read_bytes() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.jsonl", src.name])


def test_the_limit_is_what_fails_the_exports(tmp_path):
    """Without the limit the same exports succeed, and their files are bigger than it."""
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        src = _source(tmp_path / kind, kind)
        _export(kind, src, tmp_path / kind / "out.jsonl", 2, None)
        assert (tmp_path / kind / "out.jsonl").stat().st_size > LIMIT
