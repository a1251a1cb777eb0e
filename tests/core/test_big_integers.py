"""An integer beyond 64 bits in a tool call's arguments (a 24-digit id, a factorial a tool computed):
the export writes every digit in both formats, the round-trip gate accepts it (RFC 8259 sets no limit
on a number), and the validator reads the file as the reader does, so it is never ``bad_json``. In a
trl file the validator warns at the path where ``datasets.load_dataset`` loads it as a float (or
``inf``), and fails the file where the loader refuses it. tests/consumers/test_datasets_load.py checks
those claims against the real loader."""

import json

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import exact_numbers
from whileai_pipeline.core.datasets_types import ColumnKinds
from whileai_pipeline.core.openai_format import validate_file
from whileai_pipeline.core.wire import arguments_are_structured, strict_loads

HUGE = 10 ** 400   # beyond a double: Arrow loads it as inf
BIG = 2 ** 70      # beyond 64 bits: orjson alone reads it as a float


def _run(tmp_path, arguments):
    run = {"prompt": "Compute it.", "reward": 1, "steps": [
        {"tool": "calc", "arguments": arguments, "result": {"ok": True}, "text": "Computing."},
        {"text": "Done."}]}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(run) + "\n", encoding="utf-8")  # Python's json writes every digit
    return path


def _call_arguments(row):
    messages = row.get("messages") or row["prompt"] + row["completion"]
    return next(m for m in messages if m.get("tool_calls"))["tool_calls"][0]["function"]["arguments"]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_both_formats_export_every_digit_and_their_file_validates(tmp_path, fmt):
    out = tmp_path / f"{fmt}.jsonl"
    report = wai.export_dataset(str(_run(tmp_path, {"n": HUGE, "m": BIG})), str(out), format=fmt)
    assert report["tool_call_roundtrip"]["invalid"] == 0
    arguments = _call_arguments(json.loads(out.read_text(encoding="utf-8")))
    if fmt == "openai":
        arguments = json.loads(arguments)
    assert arguments == {"n": HUGE, "m": BIG} and type(arguments["m"]) is int
    checked = validate_file(out, fmt, workers=1)
    assert checked["ok"], checked["problems"]
    assert "bad_json" not in checked["counts"] and "arguments_not_json" not in checked["counts"]


def test_trl_warns_at_each_path_datasets_loads_as_a_float(tmp_path):
    out = tmp_path / "trl.jsonl"
    wai.export_dataset(str(_run(tmp_path, {"n": HUGE, "m": BIG, "k": 7})), str(out), format="trl")
    checked = validate_file(out, "trl", workers=1)
    big = {p["where"]: p for p in checked["problems"] if p["code"] == "datasets_big_int"}
    assert set(big) == {"messages[].tool_calls[].function.arguments.n",
                        "messages[].tool_calls[].function.arguments.m"}
    assert all(p["line"] == 1 and p["severity"] == "warning" for p in big.values())
    assert "loads it as inf" in big["messages[].tool_calls[].function.arguments.n"]["message"]
    assert "1.1805916207174113e+21" in big["messages[].tool_calls[].function.arguments.m"]["message"]
    assert "as strings in the run" in big["messages[].tool_calls[].function.arguments.m"]["message"]


def _trl_file(tmp_path, values):
    rows = [{"prompt": [{"role": "user", "content": "Look it up."}], "completion": [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"id": v}}}]}]}
        for v in values]
    path = tmp_path / "trl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("values,severity", [
    ((2 ** 63 - 1, 7), None),             # int64 holds it: nothing to say
    ((2 ** 63,), "warning"),             # uint64: float64 where Arrow types the path
    ((-(2 ** 63) - 1,), "warning"),
    ((7, BIG), "warning"),
    ((BIG, "BIG"), "error"),              # the loader refuses the file: "Value is too big!"
    ((BIG, True), "error"),
])
def test_the_severity_follows_what_the_loader_does(tmp_path, values, severity):
    checked = validate_file(_trl_file(tmp_path, values), "trl", workers=1)
    found = [p for p in checked["problems"] if p["code"] == "datasets_big_int"]
    if severity is None:
        assert not found
        return
    assert [(p["severity"], p["where"]) for p in found] == [(severity, "completion[].tool_calls[].function.arguments.id")]
    assert checked["ok"] == (severity == "warning")


def test_openai_validation_reads_big_integers_in_arguments_and_in_other_fields(tmp_path):
    row = {"messages": [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "lookup", "arguments": json.dumps({"id": HUGE}, separators=(",", ":"))}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": "Found it."}], "seed": BIG}
    path = tmp_path / "openai.jsonl"
    path.write_text((json.dumps(row) + "\n") * 10, encoding="utf-8")
    checked = validate_file(path, "openai", workers=1)
    assert checked["ok"], checked["problems"]
    assert checked["counts"] == {} and list(checked["extra_keys"]) == ["seed"]


def test_chunks_merge_their_big_integers():
    first, second = ColumnKinds(), ColumnKinds()
    first.add_big_ints(3, {"messages": [{"content": BIG}]})
    second.add_big_ints(1, {"messages": [{"content": HUGE}]})
    second.add_big_ints(2, {"messages": [{"content": BIG}]})
    first.merge(second)
    assert first.big_ints == {("messages", "[]", "content"): [1, HUGE, 3]}


@pytest.mark.parametrize("text", [
    '{"a":NaN,"b":12345678901234567890123}',
    '{"a":1' + "0" * 400 + '.5}',                   # a float beyond a double, written with a long digit run
    '{"a":"\\ud800","b":12345678901234567890123}',  # a lone surrogate escape
])
def test_the_gate_stays_strict_where_a_long_digit_run_sends_text_to_pythons_json(text):
    with pytest.raises(ValueError):
        strict_loads(text)
    assert not arguments_are_structured(text, "json_string")


def test_the_gate_reads_an_integer_of_any_size_exactly():
    assert strict_loads('{"n":' + str(HUGE) + ',"m":' + str(BIG) + "}") == {"n": HUGE, "m": BIG}
    assert arguments_are_structured('{"n":' + str(HUGE) + "}", "json_string")


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_lines_and_their_digit_runs_are_found_across_blocks(tmp_path, monkeypatch, block):
    monkeypatch.setattr(exact_numbers, "READ_BLOCK", block)
    lines = [b'{"a":1}\n', b'{"id":' + str(BIG).encode() + b"}\n", b"\n", b'{"t":"' + b"9" * 18 + b'"}\n',
             b'{"n":' + str(HUGE).encode() + b"}"]  # no newline at the end
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"".join(lines))
    with open(path, "rb") as fh:
        assert list(exact_numbers.lines_with_runs(fh)) == list(zip(lines, [False, True, False, False, True]))


def _calc_run(n, arguments_of, prompt="Compute it."):
    return {"prompt": prompt, "reward": 1, "scenario_id": f"s{n}", "steps": [
        {"tool": "calc", "arguments": arguments_of, "result": {"ok": True}, "text": "Computing."},
        {"text": "Done."}]}


@pytest.mark.parametrize("source", ["file", "file_in_workers", "rows", "run"])
def test_the_trl_export_report_warns_of_integers_datasets_cannot_hold(tmp_path, monkeypatch, source):
    """The validator's datasets_big_int, said by the export's own report: how many rows, the first one's
    line and path. A 22-digit text (a string, not a number) and an int64 that fits are not counted."""
    from whileai_pipeline.core import parallel

    runs = [_calc_run(0, {"k": 7}),
            _calc_run(1, {"k": 7}, prompt="Ticket 1234567890123456789012, compute it."),
            _calc_run(2, {"m": BIG}),
            _calc_run(3, {"k": 2 ** 63 - 1}),
            _calc_run(4, {"u": 2 ** 63}),
            _calc_run(5, {"k": 8})]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 512)  # one or two rows a chunk
    src = {"file": str(path), "file_in_workers": str(path), "rows": runs, "run": None}[source]
    if source == "run":
        src = wai.load_run(str(path))
    workers = 2 if source == "file_in_workers" else 1
    report = wai.export_dataset(src, str(tmp_path / "out.jsonl"), format="trl", workers=workers)
    big = [w for w in report.get("warnings", []) if "int64" in w]
    assert len(big) == 1, report.get("warnings")
    assert big[0].startswith("2 of 6 rows hold an integer no int64 holds"), big[0]
    assert "first at line 3" in big[0] and "messages[].tool_calls[].function.arguments.m" in big[0]
    assert "1180591620717411303424" in big[0] and "validate --format trl" in big[0]
    assert "as strings in the run" in big[0]
    openai = wai.export_dataset(src if source != "run" else wai.load_run(str(path)),
                                str(tmp_path / "out.openai.jsonl"), format="openai", workers=workers)
    assert not [w for w in openai.get("warnings", []) if "int64" in w]  # the digits stay in the arguments text


def _line_with_digits(n_digits):
    run = _calc_run(0, {"n": 1})
    return json.dumps(run).replace('"n": 1', '"n": ' + "7" * n_digits) + "\n"


@pytest.mark.parametrize("workers", [1, 2])
def test_an_integer_longer_than_python_reads_is_named_with_what_to_do(tmp_path, monkeypatch, workers):
    """Python's int() reads 4,300 digits by default; the line was reported as orjson's 'number is
    infinity when parsed as double', which says neither what is wrong nor what to do."""
    from whileai_pipeline.core import parallel
    from whileai_pipeline.core.errors import BadJsonlError
    from whileai_pipeline.core.openai_format import run_validate

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 2048)
    path = tmp_path / "run.jsonl"
    path.write_text(_line_with_digits(5) * 3 + _line_with_digits(5000), encoding="utf-8")
    with pytest.raises(BadJsonlError) as refused:
        wai.export_dataset(str(path), str(tmp_path / "out.jsonl"), format="trl", workers=workers)
    message = str(refused.value)
    assert message.startswith(f"bad_jsonl: {path}:4: an integer of 5000 digits"), message
    assert "4300" in message and "as a string" in message and "PYTHONINTMAXSTRDIGITS=0" in message
    assert "infinity" not in message

    trl = tmp_path / "f.trl.jsonl"
    row = {"messages": [{"role": "user", "content": "Compute it."}, {"role": "assistant", "content": "",
           "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"n": "@"}}}]}]}
    trl.write_text(json.dumps(row).replace('"@"', "7" * 4301) + "\n", encoding="utf-8")
    report = validate_file(trl, "trl", workers=workers)
    [problem] = report["problems"]
    assert problem["code"] == "bad_json" and "an integer of 4301 digits" in problem["message"], problem
    assert "PYTHONINTMAXSTRDIGITS=0" in problem["message"] and "infinity" not in problem["message"]

    import io
    out, err = io.StringIO(), io.StringIO()
    assert run_validate(str(trl), "trl", out=out, err=err) == 1
    assert "an integer of 4301 digits" in out.getvalue() and "infinity" not in out.getvalue()


def test_a_line_broken_elsewhere_is_not_blamed_on_its_long_integer(tmp_path):
    """``too_many_digits`` names the digit limit only when it is what refuses the line: a line with a
    5,000-digit integer and a syntax error after it was told to lift the limit, which would only have
    brought out the syntax error."""
    from whileai_pipeline.core.errors import BadJsonlError
    from whileai_pipeline.core.jsonl import read_jsonl

    assert exact_numbers.too_many_digits(b'{"a": ' + b"7" * 5000 + b"}") is not None
    assert exact_numbers.too_many_digits(b'{"a": ' + b"7" * 5000 + b', "b": }') is None
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"a": ' + b"7" * 5000 + b', "b": }\n')
    with pytest.raises(BadJsonlError) as refused:
        list(read_jsonl(path))
    assert "digits" not in str(refused.value) and "PYTHONINTMAXSTRDIGITS" not in str(refused.value)


def test_a_line_bad_for_another_reason_keeps_its_own_reason(tmp_path):
    """A 5,000-digit text inside a string is no number: a line broken elsewhere keeps orjson's reason."""
    from whileai_pipeline.core.errors import BadJsonlError

    path = tmp_path / "run.jsonl"
    path.write_text('{"prompt": "' + "7" * 5000 + '", "reward": 1,}\n', encoding="utf-8")
    with pytest.raises(BadJsonlError) as refused:
        wai.export_dataset(str(path), str(tmp_path / "out.jsonl"), format="trl", workers=1)
    assert "digits" not in str(refused.value).split("(line is")[0], str(refused.value)
