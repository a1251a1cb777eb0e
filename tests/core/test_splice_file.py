"""``splice_file`` (group fields spliced into spooled lines, a reused buffer, ``writev``) writes
exactly what splicing each line on its own gives, whatever the block size and line lengths."""

import functools
import os

import orjson
from hypothesis import given, settings, strategies as st

from whileai_pipeline.core.jsonl import splice
from whileai_pipeline.core.spool import spool_line, splice_file, writev_all

BODY = st.dictionaries(st.text(max_size=6), st.text(max_size=40), max_size=4).map(orjson.dumps)
SUFFIX = st.one_of(st.just(b""), st.integers(0, 10 ** 6).map(lambda k: b',"k":%d' % k))
TAIL = st.one_of(st.just(b""), st.text(max_size=30).map(lambda t: b'"prompt_text":' + orjson.dumps(t)))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.tuples(BODY, SUFFIX, TAIL), max_size=30), block=st.integers(1, 64),
       no_suffixes=st.booleans())
def test_splice_file_equals_splicing_each_line(tmp_path_factory, lines, block, no_suffixes):
    folder = tmp_path_factory.mktemp("splice")
    spooled, out = folder / "spool", folder / "out"
    spooled.write_bytes(b"".join(spool_line(body, tail) for body, _, tail in lines))
    suffixes = None if no_suffixes else iter([suffix for _, suffix, _ in lines])
    has_tail = any(tail for _, _, tail in lines)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:  # blocks of 1 to 64 bytes: most lines are longer than the buffer, which must grow
        splice_file(spooled, functools.partial(writev_all, fd), suffixes, has_tail, block_bytes=block)
    finally:
        os.close(fd)
    expected = b"".join(splice(body, b"" if no_suffixes else suffix, tail) + b"\n" for body, suffix, tail in lines)
    assert out.read_bytes() == expected


def test_writev_all_writes_more_pieces_than_one_call_takes(tmp_path):
    pieces = [b"%d," % i for i in range(5000)]  # IOV_MAX is 1024 on Linux
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        writev_all(fd, pieces)
    finally:
        os.close(fd)
    assert (tmp_path / "out").read_bytes() == b"".join(pieces)


def test_trailing_hash_equals_the_hash_of_the_whole_file(tmp_path):
    import hashlib

    from whileai_pipeline.core.spool import TrailingHash

    path = tmp_path / "growing"
    path.write_bytes(b"")
    trailing = TrailingHash(path, block_bytes=7)
    written = b""
    with open(path, "ab") as fh:
        for i in range(50):
            piece = b"%d:" % i * (i % 5)
            fh.write(piece)
            fh.flush()
            written += piece
            trailing.advance(len(written))
        fh.write(b"not reported")  # bytes written after the last advance are not part of the hash
    assert trailing.finish().hexdigest() == hashlib.sha256(written).hexdigest()


def test_trailing_hash_stops_and_reports_a_short_file(tmp_path):
    import pytest

    from whileai_pipeline.core.spool import TrailingHash

    import threading

    path = tmp_path / "growing"
    path.write_bytes(b"abc")
    before = set(threading.enumerate())
    stopped = TrailingHash(path)
    started = set(threading.enumerate()) - before
    assert started  # the hashing thread
    stopped.advance(2)
    stopped.stop()  # returns once the thread ended, having given up (no hash)
    assert not [t for t in started if t.is_alive()]
    assert stopped._digest.done() and stopped._digest.result(timeout=0) is None
    short = TrailingHash(path)
    short.advance(10)
    with pytest.raises(OSError, match="shorter than the 10 bytes"):
        short.finish()
