"""Numbers and text orjson cannot hold as they are: integers beyond 64 bits read and written with every
digit, strict JSON orjson refuses (``1e400``, lone surrogate escapes) read as Python's json reads it,
and lone surrogates written as U+FFFD. Every reader of a file agrees with ``json.loads``."""

import json
import re
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import exact_numbers, jsonl
from whileai_pipeline.core.exact_numbers import has_long_digit_run, long_digit_runs
from whileai_pipeline.core.jsonl import dumps, iter_jsonl, parse_line
from whileai_pipeline.core.parallel import byte_chunks, chunk_rows, line_chunks
from whileai_pipeline.core.text import unicode_text

BIG = 123456789012345678901234  # orjson alone reads it as 1.2345678901234568e+23
NEGATIVE = -(2 ** 63) - 1       # 19 digits, one below what a 64-bit integer holds


def _typed(value):
    """``value`` with every number tagged by its type: ``1 == 1.0`` and ``2**80 == float(2**80)``."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


# ---------------------------------------------------------------- finding digit runs

@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(st.integers(0, 40).map(lambda n: b"7" * n), st.binary(max_size=30),
                                 st.sampled_from([b"0123456789" * 2, b"9" * 19, b"1" * 18, b'": '])), max_size=40),
       cut=st.tuples(st.integers(0, 30), st.integers(0, 30)), scan=st.sampled_from([8, 16, 24, 64, 1 << 20]))
def test_long_digit_runs_finds_what_a_regex_finds(pieces, cut, scan):
    data = b"".join(pieces)
    start, end = min(cut[0], len(data)), max(len(data) - cut[1], 0)
    end = max(start, end)
    expected = [start + m.start() for m in re.finditer(rb"[0-9]{19,}", data[start:end])]
    with mock.patch.object(exact_numbers, "_SCAN_BYTES", scan):  # blocks as small as a word: runs cross them
        assert long_digit_runs(data, start, end) == expected
    assert has_long_digit_run(data) == bool(re.search(rb"[0-9]{19}", data))


@settings(max_examples=300, deadline=None)
@given(data=st.lists(st.sampled_from(list(b"0123456789:;<=>?/ \x00\xff\xb0\xb9")), max_size=200).map(bytes),
       pos=st.integers(0, 9))
def test_digit_words_are_the_words_of_eight_ascii_digits(data, pos):
    """The numpy test (high nibble 3, then each byte xor 0x30 at most 9) against the plain definition,
    with the bytes that share a digit's high nibble or low bits."""
    from whileai_pipeline.core.exact_numbers import _digit_words

    count = max(len(data) - pos, 0) // 8
    expected = [i for i in range(count) if all(48 <= b <= 57 for b in data[pos + 8 * i:pos + 8 * i + 8])]
    assert _digit_words(data, pos, count) == expected


def test_a_run_is_found_however_it_sits_against_the_8_byte_words():
    for pad in range(16):
        for length in (18, 19, 20, 27):
            data = b"x" * pad + b"5" * length + b"x" * 9
            assert long_digit_runs(data, 0, len(data)) == ([pad] if length >= 19 else []), (pad, length)
            big = data + b" " * (exact_numbers._SMALL_LINE + 8)  # the numpy path of has_long_digit_run
            assert has_long_digit_run(big) == (length >= 19)


# ---------------------------------------------------------------- reading

json_values = st.recursive(
    st.one_of(st.integers(), st.integers(-(2 ** 100), 2 ** 100), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=30), st.from_regex(r"\A[0-9]{15,25}\Z"), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.dictionaries(st.text(max_size=8), json_values, max_size=5),
                               st.sampled_from([0, 5000, 13000])), min_size=1, max_size=12))
def test_every_reader_agrees_with_python_json(tmp_path_factory, rows):
    """The one-process reader, pooled chunks (counted or not, cut small) and ``read_json`` give what
    ``json.loads`` gives, integers beyond 64 bits included."""
    lines = [json.dumps({**row, "pad": "p" * pad}).encode() for row, pad in rows]
    path = tmp_path_factory.mktemp("exact") / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    expected = [_typed(json.loads(line)) for line in lines]
    assert [_typed(v) for _, v in iter_jsonl(path)] == expected
    for chunks in (line_chunks(path, chunk_bytes=300), byte_chunks(path, chunk_bytes=300)):
        assert [_typed(v) for c in chunks for _, _, v, _ in chunk_rows(path, c)] == expected
    one = path.with_name("one.json")
    one.write_bytes(lines[0])
    assert _typed(jsonl.read_json(one)) == expected[0]


def test_big_integers_are_read_exactly_where_orjson_alone_would_not():
    line = json.dumps({"id": BIG, "low": NEGATIVE, "fits": 2 ** 64 - 1, "text": "9" * 30}).encode()
    assert orjson.loads(line)["id"] != BIG  # the loss this guards against
    assert _typed(parse_line("run.jsonl", 1, line)) == _typed(json.loads(line))


def test_strict_json_orjson_refuses_is_read_as_python_reads_it():
    assert parse_line("run.jsonl", 1, b'{"r": 1e400, "s": -1e400}') == {"r": float("inf"), "s": float("-inf")}
    assert parse_line("run.jsonl", 1, b'{"t": "cut \\ud83d", "\\udcff": "\\ud83d\\ude00"}') == \
        {"t": "cut \ufffd", "\ufffd": "\U0001f600"}
    for bad in (b'{"t": "\xed\xa0\x80"}', b'{"t": 1e400', b"{'t': 1}"):  # UTF-8 surrogate bytes, bad JSON
        with pytest.raises(wai.BadJsonlError, match=r"^bad_jsonl: run\.jsonl:3: "):
            parse_line("run.jsonl", 3, bad)


# ---------------------------------------------------------------- writing

@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_dumps_writes_what_python_json_reads_back_unchanged(value):
    assert _typed(json.loads(dumps(value))) == _typed(json.loads(json.dumps(value)))


def test_dumps_keeps_every_digit_and_writes_lone_surrogates_as_replacement_characters():
    assert dumps({"id": BIG, "low": NEGATIVE}) == b'{"id":123456789012345678901234,"low":-9223372036854775809}'
    assert dumps({"t": "cut \ud83d", "\udcff": 1, "pair": "\ud83d\ude00"}) == \
        '{"t":"cut \ufffd","\ufffd":1,"pair":"\U0001f600"}'.encode()


@given(st.text())
def test_unicode_text_leaves_unicode_alone(value):
    assert unicode_text(value) == value


def test_unicode_text_replaces_each_lone_half():
    assert unicode_text("a\ud83d") == "a\ufffd"
    assert unicode_text("\ude00\ud83d") == "\ufffd\ufffd"  # the wrong order is two lone halves
    assert unicode_text("\ud83d\ude00") == "\U0001f600"


# ---------------------------------------------------------------- through an export

def _run_row(final_text="Shipped \ud83d"):
    return {"prompt": "Where is order 7?", "scenario_id": "s1", "reward": 1, "final_text": final_text,
            "lineage": {"seed": BIG},
            "steps": [{"tool": "lookup", "arguments": {"id": BIG, "low": NEGATIVE},
                       "result": {"order": BIG, "status": "shipped"}}]}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_an_export_keeps_big_integers_and_repairs_lone_surrogates(tmp_path, fmt, workers):
    """Row 0 has a lone surrogate escape (orjson refuses the line: the lenient path); rows 1 and 2 do not
    (orjson reads them, then the digit runs send them to json)."""
    run = tmp_path / "run.jsonl"
    # json.dumps escapes the lone surrogate as \ud83d, as the reference SDK writes it
    rows = [_run_row(), _run_row("Shipped."), _run_row("Shipped!")]
    run.write_text("\n".join(json.dumps({**row, "rollout_index": i}) for i, row in enumerate(rows)) + "\n")
    out = tmp_path / f"{fmt}.jsonl"
    report = wai.export_dataset(run, out, format=fmt, workers=workers)
    assert report["n_written"] == 3 and report["tool_call_roundtrip"]["invalid"] == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) == 3
    for line, final in zip(lines, ["Shipped \ufffd", "Shipped.", "Shipped!"]):
        row = json.loads(line)
        call = row["messages"][1]["tool_calls"][0]["function"]
        arguments = json.loads(call["arguments"]) if fmt == "openai" else call["arguments"]
        assert _typed(arguments) == _typed({"id": BIG, "low": NEGATIVE})
        assert row["messages"][2]["content"] == json.dumps({"order": BIG, "status": "shipped"})
        assert row["messages"][-1]["content"] == final
        if fmt == "openai":
            assert _typed(row["lineage"]) == _typed({"seed": BIG})
    assert b"e+23" not in out.read_bytes() and b"e23" not in out.read_bytes()


def test_rows_in_memory_with_a_lone_surrogate_export_instead_of_crashing(tmp_path):
    out = tmp_path / "sft.jsonl"
    report = wai.export_dataset([_run_row()], out)
    assert report["n_written"] == 1
    assert json.loads(out.read_bytes())["messages"][-1]["content"] == "Shipped \ufffd"


@pytest.mark.parametrize("workers", [1, 2])
def test_pairs_and_the_dpo_export_keep_big_integers(tmp_path, workers):
    """Pass 2 of ``build_pairs_file`` reads rows back with ``os.pread``; the DPO export reads the pairs."""
    from whileai_pipeline.core.pairs import build_pairs_file

    run = tmp_path / "run.jsonl"
    rows = [{**_run_row(f"Answer {i}."), "rollout_index": i, "reward": i % 2} for i in range(4)]
    run.write_text("".join(json.dumps(row) + "\n" for row in rows))
    pairs = tmp_path / "pairs.jsonl"
    assert build_pairs_file(run, pairs, workers=workers)["n_written"] == 1
    pair = json.loads(pairs.read_bytes())
    for side in ("chosen", "rejected"):
        assert _typed(pair[side]["steps"][0]["arguments"]) == _typed({"id": BIG, "low": NEGATIVE})
    out = tmp_path / "dpo.jsonl"
    assert wai.export_preference(pairs, out, workers=workers)["n_written"] == 1
    dpo = json.loads(out.read_bytes())
    for side in ("chosen", "rejected"):
        call = dpo[side][1]["tool_calls"][0]["function"]
        assert _typed(json.loads(call["arguments"])) == _typed({"id": BIG, "low": NEGATIVE})
        assert dpo[side][2]["content"] == json.dumps({"order": BIG, "status": "shipped"})


def test_a_group_whose_reward_spread_overflows_has_an_infinite_std_written_as_null(tmp_path):
    rows = [{"prompt": "p", "scenario_id": "s", "final_text": f"answer {r}", "reward": r} for r in (1e200, 1, 0)]
    assert {row["reward_std"] for row in wai.training_rows(rows)} == {float("inf")}
    out = tmp_path / "sft.jsonl"
    wai.export_dataset(rows, out)
    assert {json.loads(line)["reward_std"] for line in out.read_bytes().splitlines()} == {None}
