"""The streaming exporter writes exactly what the list API computes, and never touches its source."""

import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai_pipeline.simulations as wai
from row_strategies import rows
from whileai_pipeline.core.jsonl import dumps

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

def _expected_lines(source_rows, fmt, mask_mode, unroll):
    rows = wai.training_rows(source_rows, mask_mode=mask_mode, unroll=unroll, system_prompt="SYS")
    if fmt == "trl":
        rows = wai.to_trl(rows, "completion" if (unroll or mask_mode == "final") else "training")
    return [dumps(r) for r in rows]


@SETTINGS
@given(source=rows, fmt=st.sampled_from(["openai", "trl"]), mask_mode=st.sampled_from(["assistant", "final"]),
       unroll=st.booleans())
def test_file_export_equals_list_api(tmp_path, source, fmt, mask_mode, unroll):
    src = tmp_path / "src.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in source))
    out = tmp_path / "out.jsonl"
    try:
        expected = _expected_lines(list(wai.read_jsonl(src)), fmt, mask_mode, unroll)
    except wai.SchemaInvalidError as exc:
        with pytest.raises(wai.SchemaInvalidError, match=str(exc).split(":")[0]):
            wai.export_dataset(src, out, format=fmt, mask_mode=mask_mode, unroll=unroll, validate=False,
                               system_prompt="SYS")
        assert not out.exists()
        return
    before = src.read_bytes()
    report = wai.export_dataset(src, out, format=fmt, mask_mode=mask_mode, unroll=unroll, validate=False,
                                system_prompt="SYS")
    assert out.read_bytes().splitlines() == expected
    assert report["n"] == report["n_written"] == len(expected)
    assert src.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "src.jsonl"]


def test_generator_source_is_read_once_and_leak_gate_sees_it(tmp_path):
    row = {"prompt": "p", "final_text": "the refund was already issued", "scenario_id": "a",
           "privileged": {"reference": "The refund was already issued"}}
    with pytest.raises(wai.PrivilegedLeakError) as info:
        wai.export_dataset((r for r in [row]), tmp_path / "o.jsonl")
    assert info.value.report["privileged_leaks"]["n_leaked"] == 1
    assert not (tmp_path / "o.jsonl").exists()


def test_a_generator_exported_a_second_time_gives_an_empty_file_that_says_why(tmp_path):
    """The generator trap: an export per format from one generator writes the second file empty. The
    spec writes it without a word (E47); the report says the iterator gave no rows and why that happens."""
    rows = ({"prompt": f"p{i}", "final_text": "a", "reward": 1} for i in range(3))
    first = wai.export_dataset(rows, tmp_path / "openai.jsonl")
    second = wai.export_dataset(rows, tmp_path / "trl.jsonl", format="trl")
    assert first["n_written"] == 3 and "warnings" not in first
    assert second["n_written"] == 0 and (tmp_path / "trl.jsonl").read_bytes() == b""
    assert second["warnings"] == [
        "the iterator given as the source gave no rows, so the file has none; an iterator or generator is read "
        "once (DECISIONS 5), so one an earlier export read is used up: export every format from one read with "
        "export_datasets, or pass a list of rows."]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n")
    for source in ([], empty):  # read again at every export: nothing used up, an empty file as spec E47
        assert "warnings" not in wai.export_dataset(source, tmp_path / "out.jsonl")


def test_output_equal_to_source_is_refused_even_through_a_symlink(tmp_path):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b'{"prompt": "p", "final_text": "a"}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    for output in (src, link, str(src)):
        with pytest.raises(wai.OutputIsSourceError, match="^output_is_source: "):
            wai.export_dataset(src, output)
    assert src.read_bytes() == b'{"prompt": "p", "final_text": "a"}\n'


def test_sidecar_supplies_system_prompt_and_tools(tmp_path):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b'{"prompt": "p", "steps": [{"tool": "t", "arguments": {}, "result": "ok"}], "final_text": "a"}\n')
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    (tmp_path / "run.meta.json").write_bytes(orjson.dumps({"system_prompt": "SYS", "tools": tools}))
    report = wai.export_dataset(src)
    row = orjson.loads((tmp_path / "run.train.jsonl").read_bytes())
    assert row["messages"][0] == {"role": "system", "content": "SYS"}
    assert row["tools"] == tools
    assert (report["system_prompt_source"], report["tools_source"]) == ("sidecar", "sidecar")
    assert report["with_system"] == report["with_tools"] == 1
    assert "warnings" not in report
    explicit = wai.export_dataset(src, tmp_path / "o.jsonl", system_prompt="", tools=[])
    assert (explicit["with_system"], explicit["system_prompt_source"]) == (0, "argument")
    assert any("without tool schemas" in w for w in explicit["warnings"])


def test_report_hashes_source_and_output(tmp_path):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b'{"prompt": "p", "final_text": "a", "reward": 1}\n')
    report = wai.export_dataset(src, tmp_path / "o.jsonl")
    import hashlib
    assert report["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert report["sha256"] == hashlib.sha256((tmp_path / "o.jsonl").read_bytes()).hexdigest()
    assert report["rows_read"] == 1 and report["n_written"] == 1


def test_gate_failure_keeps_previous_file_and_carries_report(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_bytes(b"previous\n")
    bad = {"prompt": "p", "messages": [{"role": "user", "content": "p"},
                                       {"role": "assistant", "content": "", "tool_calls": [
                                           {"function": {"name": "t", "arguments": "{a: 1}"}}]}]}
    with pytest.raises(wai.RoundtripInvalidError) as info:
        wai.export_dataset([bad], out)
    assert str(info.value).startswith("tool_call_roundtrip_invalid: 1 of 1 tool calls")
    assert info.value.report["tool_call_roundtrip"]["rows"] == [0]
    assert out.read_bytes() == b"previous\n"
    assert os.listdir(tmp_path) == ["o.jsonl"]
