"""Workers parse a chunk's lines out of a map of the file: the same rows, offsets and errors as reading it line by line."""

import hypothesis.strategies as st
import orjson
import pytest
from hypothesis import given, settings

from whileai_pipeline.core import parallel
from whileai_pipeline.core.errors import BadJsonlError
from whileai_pipeline.core.jsonl import _BLANK, parse_line

# lines that orjson takes as they stand, and lines only parse_line reads (or refuses)
LINES = [
    b'{"a": 1}', b'  {"b": [2, 3]}  ', b'{"c": "\\u00e9 caf\xc3\xa9"}\r', b"[1, 2]", b'"text"', b"7",
    b"", b"\r", b"   ", b"\x0c{\"d\": 4}", b'{"n": NaN, "i": -Infinity}',
]


def _by_lines(path):
    """What a one-process reader makes of the file: (line number, byte offset, value) of non-blank lines."""
    out, offset = [], 0
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        value = parse_line(path, lineno, line)
        if value is not _BLANK:
            out.append((lineno, offset, value))
        offset += len(line) + 1
    return out


def _by_chunks(path, chunk_bytes):
    return [row[:3] for chunk in parallel.line_chunks(path, chunk_bytes=chunk_bytes)
            for row in parallel.chunk_rows(path, chunk)]  # (line number, offset, value): the long-run flag aside


def _by_byte_chunks(path, chunk_bytes):
    """Rows of uncounted chunks, their line numbers carried on from chunk to chunk as an export does."""
    out, before = [], 0
    for chunk in parallel.byte_chunks(path, chunk_bytes=chunk_bytes):
        assert chunk.first_line is None
        out.extend((before + lineno, offset, value) for lineno, offset, value, _ in parallel.chunk_rows(path, chunk))
        before += chunk.lines
    return out


def _comparable(rows):
    return [(lineno, offset, orjson.dumps(value)) for lineno, offset, value in rows]


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.sampled_from(LINES), min_size=1, max_size=60), bom=st.booleans(),
       final_newline=st.booleans(), chunk_bytes=st.sampled_from([1, 17, 64, 300, 1 << 20]))
def test_chunk_rows_read_what_the_file_holds_line_by_line(tmp_path_factory, picks, bom, final_newline, chunk_bytes):
    path = tmp_path_factory.mktemp("chunks") / "run.jsonl"
    data = b"\n".join(picks) + (b"\n" if final_newline else b"")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    assert _comparable(_by_chunks(path, chunk_bytes)) == _comparable(_by_lines(path))
    assert _comparable(_by_byte_chunks(path, chunk_bytes)) == _comparable(_by_lines(path))


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(0, 300), max_size=40), final_newline=st.booleans(),
       chunk_bytes=st.integers(1, 700), window=st.sampled_from([1, 2, 7, 1 << 16]))
def test_byte_chunks_cut_the_file_into_whole_lines(tmp_path_factory, lengths, final_newline, chunk_bytes, window):
    path = tmp_path_factory.mktemp("cuts") / "run.jsonl"
    data = b"\n".join(b"x" * n for n in lengths) + (b"\n" if final_newline and lengths else b"")
    path.write_bytes(data)
    cut = parallel._line_end_from
    with pytest.MonkeyPatch.context() as patch:  # small windows: a cut that needs several reads
        patch.setattr(parallel, "_line_end_from", lambda fh, pos, size: cut(fh, pos, size, window))
        chunks = list(parallel.byte_chunks(path, chunk_bytes=chunk_bytes))
    assert [c.start for c in chunks] == ([0] + [c.end for c in chunks[:-1]] if data else [])  # no gap, no overlap
    assert (chunks[-1].end if chunks else 0) == len(data)
    for c in chunks:
        assert c.end > c.start
        assert c.end - c.start >= chunk_bytes or c.end == len(data)  # a chunk is cut only past its size
        assert data[c.end - 1:c.end] == b"\n" or c.end == len(data)  # ... and right after a newline
        assert data.find(b"\n", c.start + chunk_bytes - 1, c.end - 1) == -1  # the first newline past it


def test_lines_before_counts_the_lines_ending_before_an_offset(tmp_path):
    path = tmp_path / "run.jsonl"
    data = b"a\n\nbb\n" * 1000 + b"tail"
    path.write_bytes(data)
    for offset in (0, 1, 2, 3, 6, 7, 3000, len(data)):
        assert parallel.lines_before(path, offset) == data[:offset].count(b"\n")


@pytest.mark.parametrize("bad", [b'{"a": ', b"\xef\xbb\xbf{}", b"{'single': 'quotes'}"])
def test_a_bad_line_in_a_chunk_names_its_file_and_line(tmp_path, bad):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"ok": 1}\n' * 40 + bad + b"\n" + b'{"ok": 2}\n' * 5)
    with pytest.raises(BadJsonlError) as by_lines:
        _by_lines(path)
    for read in (_by_chunks, _by_byte_chunks):
        with pytest.raises(BadJsonlError) as by_chunks:
            read(path, 64)
        assert str(by_chunks.value) == str(by_lines.value)
        assert by_chunks.value.line == 41 and str(path) in str(by_chunks.value)


def test_a_bom_that_starts_a_later_chunk_is_still_refused(tmp_path):
    """Uncounted chunks number their lines from 1, yet only the file's own first line may carry a BOM."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"ok": 1}\n' * 4 + b'\xef\xbb\xbf{"ok": 2}\n')
    chunks = list(parallel.byte_chunks(path, chunk_bytes=40))
    assert chunks[1].start == 40  # the BOM line is the second chunk's line 1
    with pytest.raises(BadJsonlError) as caught:
        _by_byte_chunks(path, 40)
    assert caught.value.line == 5
    path.write_bytes(b'\xef\xbb\xbf{"ok": 2}\n' + b'{"ok": 1}\n' * 4)
    assert [value for _, _, value in _by_byte_chunks(path, 12)] == [{"ok": 2}] + [{"ok": 1}] * 4
