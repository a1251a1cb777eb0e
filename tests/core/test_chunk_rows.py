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
    return [row for chunk in parallel.line_chunks(path, chunk_bytes=chunk_bytes)
            for row in parallel.chunk_rows(path, chunk)]


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


@pytest.mark.parametrize("bad", [b'{"a": ', b"\xef\xbb\xbf{}", b"{'single': 'quotes'}"])
def test_a_bad_line_in_a_chunk_names_its_file_and_line(tmp_path, bad):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"ok": 1}\n' * 40 + bad + b"\n" + b'{"ok": 2}\n' * 5)
    with pytest.raises(BadJsonlError) as by_lines:
        _by_lines(path)
    with pytest.raises(BadJsonlError) as by_chunks:
        _by_chunks(path, 64)
    assert str(by_chunks.value) == str(by_lines.value)
    assert by_chunks.value.line == 41 and str(path) in str(by_chunks.value)
