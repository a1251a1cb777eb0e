"""Property: ``validate_file`` gives the same report over worker processes as in one process, for any
mix of lines, any chunk size and any read block, in both formats; and in ``trl`` it warns about an
integer no int64 holds once per path, at the first line that has one there.

The one-process path reads the file in blocks and finds the 19-digit runs per block; the pooled path
cuts the file into chunks of lines and finds them per chunk. Lines that straddle a block or a chunk,
big integers at the edges, blank and CRLF lines, a missing last newline, repeated warnings (counted
once per file) and rows of the other format must all come out the same.
"""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whileai_pipeline.core import exact_numbers, parallel
from whileai_pipeline.core.openai_format import validate_file

INT64 = (-2**63, 2**63 - 1)
NUMBERS = st.one_of(st.integers(-1000, 1000),
                    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -2**63, -2**63 - 1, 10**30, 10**400]))


def _calls(number, as_text):
    args = {"id": number, "q": "x"}
    return [{"id": "c1", "type": "function",
             "function": {"name": "lookup", "arguments": json.dumps(args) if as_text else args}}]


def _conversation(number, as_text):
    return [{"role": "user", "content": "where is it?"},
            {"role": "assistant", "content": "", "tool_calls": _calls(number, as_text)},
            {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
            {"role": "assistant", "content": "It shipped."}]


def _line(kind, number):
    """One line of the given kind (bytes, no newline); Python's json writes every digit of ``number``."""
    if kind == "openai":
        return json.dumps({"messages": _conversation(number, True)}).encode()
    if kind == "openai_masked":  # loss_mask: a warning with the same words on every line
        return json.dumps({"messages": _conversation(number, True), "loss_mask": [0, 0, 0, 1]}).encode()
    if kind == "trl_messages":
        return json.dumps({"messages": _conversation(number, False)}).encode()
    if kind == "trl_completion":
        conv = _conversation(number, False)
        return json.dumps({"prompt": conv[:1], "completion": conv[1:]}).encode()
    if kind == "big_id":  # a big integer outside the conversation columns: not the loader's business
        return json.dumps({"messages": _conversation(7, False), "scenario_id": number}).encode()
    return {"blank": b"", "crlf": json.dumps({"messages": _conversation(number, False)}).encode() + b"\r",
            "bad_json": b"{not json", "not_utf8": b'{"messages": "\xff"}', "array": b"[1]"}[kind]


KINDS = ["openai", "openai_masked", "trl_messages", "trl_completion", "big_id", "blank", "crlf", "bad_json",
         "not_utf8", "array"]
LINES = st.lists(st.tuples(st.sampled_from(KINDS), NUMBERS), min_size=1, max_size=30)


def _big_int_paths(lines):
    """{path: first line} of the integers beyond int64 in the conversational columns, found by walking
    each row here, independently of the validator's own walk."""
    first = {}

    def walk(value, path, line_no):
        if type(value) is int and not INT64[0] <= value <= INT64[1]:
            first.setdefault(path, line_no)
        elif isinstance(value, dict):
            for key, sub in value.items():
                walk(sub, (*path, key), line_no)
        elif isinstance(value, list):
            for item in value:
                walk(item, (*path, "[]"), line_no)

    for line_no, raw in enumerate(lines, 1):
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if isinstance(row, dict):
            for column in ("messages", "prompt", "completion", "chosen", "rejected", "tools"):
                if column in row:
                    walk(row[column], (column,), line_no)
    return first


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=LINES, fmt=st.sampled_from(["openai", "trl"]), chunk=st.integers(64, 4096),
       block=st.integers(7, 4096), bom=st.booleans(), last_newline=st.booleans())
def test_workers_and_blocks_give_the_one_process_report(tmp_path_factory, monkeypatch, lines, fmt, chunk, block,
                                                        bom, last_newline):
    monkeypatch.setattr(parallel, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(exact_numbers, "READ_BLOCK", block)
    raw = [_line(kind, number) for kind, number in lines]
    path = tmp_path_factory.mktemp("validate") / "mixed.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(raw) + (b"\n" if last_newline else b""))

    one = validate_file(path, fmt, max_problems=500, workers=1)
    assert validate_file(path, fmt, max_problems=500, workers=2) == one
    assert one["rows"] == sum(1 for kind, _ in lines if kind != "blank")  # a line of only a BOM is blank too

    big = [p for p in one["problems"] if p["code"] == "datasets_big_int"]
    if fmt == "openai":
        assert not big  # arguments are text there: every digit stays
        return
    expected = _big_int_paths([r.lstrip(b"\xef\xbb\xbf") if i == 0 else r for i, r in enumerate(raw)])
    assert len(big) == len(expected), (big, expected)
    assert sorted(p["line"] for p in big) == sorted(expected.values())
    assert "bad_json" not in {p["code"] for p in one["problems"] if p["line"] in set(expected.values())}
