"""JSONL plumbing: file:line errors, BOM/CRLF/blank lines, atomic writes that never leave debris."""

import os

import pytest

from whileai_pipeline.core.errors import BadJsonlError
from whileai_pipeline.core.atomic import atomic_file
from whileai_pipeline.core.jsonl import read_jsonl, sha256_file, write_jsonl


def test_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"b": 2}\n{oops}\n')
    with pytest.raises(BadJsonlError) as info:
        list(read_jsonl(path))
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"bad_jsonl: {path}:4: ")
    assert info.value.line == 4


def test_invalid_utf8_is_a_bad_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(BadJsonlError, match=r":2: invalid UTF-8"):
        list(read_jsonl(path))


def test_bom_crlf_and_blank_lines_are_read(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n   \r\n{"b": "\xc3\xa9"}\r\n')
    assert list(read_jsonl(path)) == [{"a": 1}, {"b": "é"}]


def test_write_is_utf8_compact_and_nan_free(tmp_path):
    path = tmp_path / "out.jsonl"
    assert write_jsonl(path, [{"q": "é", "x": float("nan"), "y": float("inf"), "s": {2, 1}}]) == 1
    assert path.read_bytes() == '{"q":"é","x":null,"y":null,"s":[1,2]}\n'.encode()


def test_atomic_file_leaves_old_file_on_error(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b"old\n")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as fh:
            fh.write(b"new partial")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_sha256_file(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"abc")
    assert sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_written_file_gets_the_umask_mode_or_keeps_the_mode_of_the_file_it_replaces(tmp_path, monkeypatch):
    """Not mkstemp's 0600: a trainer running as another user must be able to read a published export."""
    from whileai_pipeline.core import atomic

    monkeypatch.setattr(atomic, "_UMASK", 0o027)
    out = tmp_path / "rows.jsonl"
    write_jsonl(out, [{"a": 1}])
    assert os.stat(out).st_mode & 0o777 == 0o640
    os.chmod(out, 0o604)
    write_jsonl(out, [{"a": 2}])
    assert os.stat(out).st_mode & 0o777 == 0o604
    assert list(read_jsonl(out)) == [{"a": 2}]


def test_the_umask_is_read_as_os_umask_sets_it():
    from whileai_pipeline.core.atomic import _process_umask

    current = os.umask(0o022)
    os.umask(current)
    assert _process_umask() == current
    os.umask(0o077)
    try:
        assert _process_umask() == 0o077
    finally:
        os.umask(current)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_output_with_a_long_name_is_written_and_its_leftovers_found(tmp_path, workers):
    """A name of 240 bytes is a valid file name; the temp file beside it (and a worker's part) used to
    be longer than the 255 bytes a name may have."""
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.atomic import clean_stale_temps, temp_beside

    rows = [{"prompt": "p", "final_text": "a", "scenario_id": f"s{i}"} for i in range(3)]
    run = tmp_path / "run.jsonl"
    write_jsonl(run, rows)
    out = tmp_path / ("é" * 100 + "x" * 35 + ".jsonl")
    assert len(out.name.encode()) == 241
    assert wai.export_dataset(run, out, workers=workers)["n_written"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.jsonl", out.name])
    # pairs over workers: more than two tasks of part files, each named beside the long output
    from whileai_pipeline.core.pairs import PAIRS_PER_TASK, build_pairs_file

    groups = 2 * PAIRS_PER_TASK + 10
    write_jsonl(run, [{"prompt": f"task {g}", "final_text": f"answer {k}", "reward": k}
                      for g in range(groups) for k in (0, 1)])
    assert build_pairs_file(run, out, workers=workers)["n_written"] == groups
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.jsonl", out.name])
    fd, leftover = temp_beside(out)
    os.close(fd)
    dead = leftover.replace(f".{os.getpid()}.", ".999999999.")  # as a killed writer would leave it
    os.rename(leftover, dead)
    assert clean_stale_temps(out) == [os.path.basename(dead)]


def test_a_name_too_long_for_the_filesystem_says_so():
    import errno

    from whileai_pipeline.core.errors import WriteFailedError

    message = str(WriteFailedError("x" * 300, OSError(errno.ENAMETOOLONG, "File name too long")))
    assert message.endswith("File name too long; nothing was published and any previous file there is unchanged. "
                            "Choose a shorter file name, then export again.")


def test_the_stale_temp_cleaner_takes_only_its_own_files(tmp_path):
    """Writing x.jsonl used to delete the live temp file of a write to x.jsonl.424242 (read as pid 424242)."""
    from whileai_pipeline.core.atomic import atomic_file, clean_stale_temps, temp_beside

    other = tmp_path / "x.jsonl.424242"
    with atomic_file(other) as fh:
        fh.write(b"shard\n")
        write_jsonl(tmp_path / "x.jsonl", [{"a": 1}])  # cleans stale temps beside x.jsonl
    assert other.read_bytes() == b"shard\n"
    fd, live = temp_beside(tmp_path / "x.jsonl")
    os.close(fd)
    crashed = [live.replace(f".{os.getpid()}.", ".999999999."),  # a killed writer's temp, and its parts
               live.replace(f".{os.getpid()}.", ".999999999.") + ".3.part.tmp",
               str(tmp_path / ".x.jsonl.999999999.pairs500.part.tmp"),  # as an older version named parts
               str(tmp_path / ".x.jsonl.999999999.pairs.2.500.part.tmp")]
    os.rename(live, crashed[0])
    for name in crashed[1:]:
        open(name, "w").close()
    assert sorted(clean_stale_temps(tmp_path / "x.jsonl")) == sorted(os.path.basename(c) for c in crashed)


def test_rows_nested_deeper_than_orjson_writes_are_written_and_deeper_than_json_reads_are_refused(tmp_path):
    import json

    import whileai_pipeline.simulations as wai

    deep = {"prompt": "p", "final_text": "a", "lineage": {"x": json.loads("[" * 300 + "1" + "]" * 300)}}
    run = tmp_path / "deep.jsonl"
    write_jsonl(run, [deep])  # orjson writes 255 levels at most: Python's json writes this one
    assert list(read_jsonl(run)) == [deep]
    out = tmp_path / "sft.jsonl"
    assert wai.export_dataset(run, out)["n_written"] == 1
    assert json.loads(out.read_bytes())["lineage"] == deep["lineage"]
    nested = []
    for _ in range(5000):
        nested = [nested]
    too_deep = {"x": nested}
    with pytest.raises(wai.ExportError, match="^unwritable_value: a value is nested deeper than JSON can be written"):
        write_jsonl(tmp_path / "too_deep.jsonl", [too_deep])
    # 1000 levels with a 20-digit integer: orjson reads it, Python's json (reading it again, exactly) cannot
    line = b'{"a": ' + b"[" * 1000 + b"12345678901234567890" + b"]" * 1000 + b"}\n"
    (tmp_path / "deep_int.jsonl").write_bytes(b'{"a": 1}\n' + line)
    with pytest.raises(wai.BadJsonlError, match=r"^bad_jsonl: .*deep_int\.jsonl:2: nested too deep for Python's json"):
        list(read_jsonl(tmp_path / "deep_int.jsonl"))


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_big_integer_in_a_row_too_deep_for_orjson_is_written_as_its_digits(tmp_path, fmt):
    """Past 255 levels ``dumps`` falls back to Python's json, which cannot write the Fragment orjson's
    fallback uses for an integer beyond 64 bits: it once wrote the Fragment's repr (a memory address)."""
    import json

    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.jsonl import dumps

    deep = []
    for _ in range(300):
        deep = [deep]
    assert dumps({"n": 2 ** 64, "deep": deep}).startswith(b'{"n":18446744073709551616,"deep":[[[')
    rows = [{"prompt": "p", "final_text": "done", "reward": 1, "world_state": deep,
             "steps": [{"tool": "t", "arguments": {"order": 2 ** 64}, "result": "r"}, {"text": "a"}]}]
    wai.export_dataset(rows, tmp_path / "out.jsonl", format=fmt)
    written = tmp_path.joinpath("out.jsonl").read_bytes()
    assert json.loads(written)["world_state"] == deep
    expected = b'{"order":18446744073709551616}' if fmt == "trl" else b'"{\\"order\\":18446744073709551616}"'
    assert b'"arguments":' + expected in written


@pytest.mark.parametrize("opening", ["[", "{"])
def test_a_pretty_printed_json_document_is_said_to_be_one(tmp_path, opening):
    """Rows saved with json.dump(rows, f, indent=2) failed at line 1 with "unexpected end of data" and the
    advice to fix or remove that line, which says nothing of what is wrong with the file."""
    import json

    rows = [{"prompt": "p", "final_text": "a"}] * 3
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(rows if opening == "[" else rows[0], indent=2))
    with pytest.raises(BadJsonlError) as caught:
        list(read_jsonl(path))
    assert caught.value.line == 1
    assert (f"; a line of only {opening!r} opens a JSON document written over several lines (json.dump with "
            "indent?): JSONL holds each row on one line (write_jsonl(path, rows) writes it)") in str(caught.value)
    path.write_text('{"prompt": "p"}\n{\n')  # a cut line after a good one: not a whole document
    with pytest.raises(BadJsonlError) as caught:
        list(read_jsonl(path))
    assert caught.value.line == 2 and "opens a JSON document" in str(caught.value)


def test_a_compressed_run_read_as_jsonl_says_it_is_compressed(tmp_path):
    """A gzip run in the inbox (or passed to the library) fails on its first line; "invalid UTF-8 ... fix or
    remove that line" would send the user into a binary stream: the reason says it is compressed."""
    import gzip

    import whileai_pipeline.simulations as wai

    src = tmp_path / "night.jsonl"
    src.write_bytes(gzip.compress(b'{"prompt": "a", "final_text": "b", "reward": 1}\n' * 50))
    with pytest.raises(ValueError) as err:
        wai.export_dataset(src, tmp_path / "out.jsonl")
    assert str(err.value).startswith(f"bad_jsonl: {src}:1: "), str(err.value)
    assert "gzip-compressed" in str(err.value) and "gunzip" in str(err.value), str(err.value)
