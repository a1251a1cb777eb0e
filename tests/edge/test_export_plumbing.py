"""Spec section 9, 'Export plumbing': E45..E54 (spec 5.2, 5.3, 5.7, 5.8, 6.4;
DECISIONS 1, 4, 5, 6, 7, 14, 15)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import whileai_pipeline.simulations as wai

TOOL = {"type": "function", "function": {"name": "lookup"}}
NEEDLE = "the parcel was lost by the carrier"


def _row(**extra):
    row = {"prompt": "p", "steps": [{"text": "a"}], "final_text": "a", "reward": 1, "scenario_id": "s1"}
    row.update(extra)
    return row


def _leaking_row():
    return {
        "prompt": "Where is my order?",
        "steps": [{"text": "Sorry, the parcel was lost by the carrier."}],
        "final_text": "Sorry, the parcel was lost by the carrier.",
        "scenario_id": "s1",
        "rollout_index": 0,
        "reward": 1,
        "privileged": {"reference": NEEDLE},
    }


# ---------------------------------------------------------------- E45
def test_e45_output_equal_to_source_is_refused_d4(tmp_path, write_jsonl):
    src = write_jsonl(tmp_path / "run.jsonl", [_row()])
    before = src.read_bytes()
    for output in (src, str(src), f"{tmp_path}/./run.jsonl", f"{tmp_path}/../{tmp_path.name}/run.jsonl"):
        with pytest.raises(ValueError) as ei:
            wai.export_dataset(src, output)
        assert str(ei.value).startswith("output_is_source:")
        assert isinstance(ei.value, wai.OutputIsSourceError)
        assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_e45_output_symlink_to_source_is_refused_d4(tmp_path, write_jsonl):
    src = write_jsonl(tmp_path / "run.jsonl", [_row()])
    before = src.read_bytes()
    link = tmp_path / "link.jsonl"
    os.symlink(src, link)
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(str(src), link)
    assert str(ei.value).startswith("output_is_source:")
    with pytest.raises(ValueError) as ei2:
        wai.export_dataset(link, src)
    assert str(ei2.value).startswith("output_is_source:")
    assert src.read_bytes() == before
    assert link.is_symlink()


def test_e45_output_hardlink_to_source_is_refused_d4(tmp_path, write_jsonl):
    src = write_jsonl(tmp_path / "run.jsonl", [_row()])
    before = src.read_bytes()
    hard = tmp_path / "hard.jsonl"
    os.link(src, hard)
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(src, hard)
    assert str(ei.value).startswith("output_is_source:")
    assert src.read_bytes() == before


# ---------------------------------------------------------------- E46
@pytest.mark.parametrize(
    "name, derived",
    [
        ("run.jsonl", "run.train.jsonl"),
        ("data.json", "data.train.json"),
        ("data", "data.train.jsonl"),
        ("data.tar.gz", "data.tar.train.gz"),
        ("x.train.jsonl", "x.train.train.jsonl"),
        (".hidden", ".hidden.train.jsonl"),
    ],
)
def test_e46_derived_output_names(tmp_path, write_jsonl, read_jsonl_out, name, derived):
    src = write_jsonl(tmp_path / name, [_row()])
    before = src.read_bytes()
    rep = wai.export_dataset(str(src))
    assert rep["path"] == str(tmp_path / derived)
    assert rep["n_written"] == 1
    assert (tmp_path / derived).is_file()
    assert src.read_bytes() == before
    assert len(read_jsonl_out(tmp_path / derived)) == 1


# ---------------------------------------------------------------- E47
def test_e47_empty_list_writes_zero_byte_file(tmp_path):
    out = tmp_path / "empty.jsonl"
    rep = wai.export_dataset([], out)
    assert out.read_bytes() == b""
    assert rep["n"] == 0
    assert rep["n_written"] == 0
    assert rep["path"] == str(out)


# ---------------------------------------------------------------- E48
def test_e48_empty_output_string_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rep = wai.export_dataset([_row()], "")
    assert "path" not in rep
    assert "n_written" not in rep
    assert "sha256" not in rep  # DECISIONS 15: only when a file was written
    assert rep["n"] == 1
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- E49
def test_e49_generator_source_leak_is_checked_d5(tmp_path):
    # Spec: the gate re-reads an exhausted generator and passes a leaking row.
    # DECISIONS 5: the generator is read once, the leak gate sees the rows.
    out = tmp_path / "out.jsonl"
    gen = (r for r in [_leaking_row()])
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(gen, out)
    assert str(ei.value).startswith("privileged_leak:")
    assert isinstance(ei.value, wai.PrivilegedLeakError)
    assert isinstance(ei.value, wai.GateError)
    leaks = ei.value.report["privileged_leaks"]  # DECISIONS 14
    assert leaks["checked"] is True
    assert (leaks["n_checked"], leaks["n_leaked"]) == (1, 1)
    assert not out.exists()


def test_e49_generator_read_once_same_rows_exported_and_checked_d5(tmp_path, read_jsonl_out):
    reads = []

    def gen():
        for r in [_leaking_row(), _row(scenario_id="s2")]:
            reads.append(r["scenario_id"])
            yield r

    out = tmp_path / "out.jsonl"
    rep = wai.export_dataset(gen(), out, validate=False)
    assert reads == ["s1", "s2"]
    assert rep["n"] == 2
    assert rep["n_written"] == 2
    leaks = rep["privileged_leaks"]
    assert leaks["checked"] is True
    assert (leaks["n_checked"], leaks["n_leaked"]) == (1, 1)
    assert leaks["leaked"] == [{"scenario_id": "s1", "rollout_index": 0, "field": "reference", "needle": NEEDLE}]
    lines = read_jsonl_out(out)
    assert [line["scenario_id"] for line in lines] == ["s1", "s2"]
    assert all("privileged" not in line for line in lines)


# ---------------------------------------------------------------- E50
class _Profile:
    def __init__(self, policy, tools):
        self.policy = policy
        self.tools = tools


class _ScoredList(list):
    """A ScoredData-like list subclass with a profile (spec E50)."""

    profile = None


def test_e50_list_with_profile_carries_system_and_tools_d6():
    # Spec: profile ignored (with_system 0, with_tools 0). DECISIONS 6: we read it.
    row = _row(privileged={"reference": "the refund was never approved"})
    src = _ScoredList([row])
    src.profile = _Profile("SYS", [TOOL])
    rep = wai.export_dataset(src)
    assert rep["with_system"] == 1
    assert rep["with_tools"] == 1
    assert rep["system_prompt_source"] == "profile"
    assert rep["tools_source"] == "profile"
    # the leak check still runs over the raw rows
    assert rep["privileged_leaks"]["checked"] is True
    assert (rep["privileged_leaks"]["n_checked"], rep["privileged_leaks"]["n_leaked"]) == (1, 0)
    rows = wai.training_rows(src)
    assert rows[0]["messages"][0] == {"role": "system", "content": "SYS"}
    assert rows[0]["tools"] == [TOOL]


def test_e50_explicit_arguments_win_over_profile_d6():
    src = _ScoredList([_row()])
    src.profile = _Profile("SYS", [TOOL])
    rep = wai.export_dataset(src, system_prompt="", tools=[])
    assert rep["with_system"] == 0
    assert rep["with_tools"] == 0
    assert rep["system_prompt_source"] == "argument"
    assert rep["tools_source"] == "argument"


def test_e50_sidecar_of_path_source_is_read_d6(tmp_path, write_jsonl):
    src = write_jsonl(tmp_path / "run.jsonl", [_row()])
    (tmp_path / "run.meta.json").write_text(json.dumps({"schema_version": "1", "system_prompt": "SYS", "tools": [TOOL]}))
    rep = wai.export_dataset(src)
    assert rep["with_system"] == 1
    assert rep["with_tools"] == 1
    assert rep["system_prompt_source"] == "sidecar"
    assert rep["tools_source"] == "sidecar"


def test_e50_saved_raw_file_keeps_privileged_and_blocks_export(tmp_path, write_jsonl):
    src = write_jsonl(tmp_path / "scored.jsonl", [_leaking_row()])
    before = src.read_bytes()
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(src)
    assert str(ei.value).startswith("privileged_leak:")
    assert ei.value.report["privileged_leaks"]["n_leaked"] == 1
    assert not (tmp_path / "scored.train.jsonl").exists()
    assert src.read_bytes() == before


# ---------------------------------------------------------------- E51
def test_e51_malformed_line_names_file_and_line_d7(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(b'{"prompt": "p", "steps": [{"text": "a"}]}\n\n[1, 2]\n{bad\n')
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(str(src))
    assert str(ei.value).startswith(f"bad_jsonl: {src}:4:")
    assert isinstance(ei.value, wai.BadJsonlError)
    assert not (tmp_path / "bad.train.jsonl").exists()
    with pytest.raises(ValueError) as ei2:
        list(wai.read_jsonl(str(src)))
    assert str(ei2.value).startswith(f"bad_jsonl: {src}:4:")


def test_e51_invalid_utf8_names_file_and_line_d7(tmp_path):
    src = tmp_path / "latin.jsonl"
    src.write_bytes(b'{"prompt": "p", "steps": [{"text": "a"}]}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ValueError) as ei:
        wai.export_dataset(str(src))
    assert str(ei.value).startswith(f"bad_jsonl: {src}:2:")


def test_e51_array_and_blank_lines_skipped(tmp_path, read_jsonl_out):
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(
        b'\n{"prompt": "p", "steps": [{"text": "a"}], "scenario_id": "s1"}\n'
        b"   \n[1, 2]\n\n"
        b'{"prompt": "q", "steps": [{"text": "b"}], "scenario_id": "s2"}\n\n'
    )
    out = tmp_path / "out.jsonl"
    rep = wai.export_dataset(src, out)
    assert rep["n"] == 2
    assert rep["n_written"] == 2
    assert [line["scenario_id"] for line in read_jsonl_out(out)] == ["s1", "s2"]


# ---------------------------------------------------------------- E52
def test_e52_nan_reward_written_as_null_d1(tmp_path, read_jsonl_out):
    out = tmp_path / "out.jsonl"
    rep = wai.export_dataset([_row(reward=float("nan"))], out)
    assert rep["rewards"] == {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}
    raw = out.read_bytes()
    assert b"NaN" not in raw
    (line,) = read_jsonl_out(out)  # orjson rejects bare NaN
    assert "reward" in line
    assert line["reward"] is None


# ---------------------------------------------------------------- E53
def test_e53_reexport_duplicates_system_and_drops_row_tools(tmp_path, read_jsonl_out):
    exported = {
        "messages": [
            {"role": "system", "content": "SYS"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
        ],
        "loss_mask": [0, 0, 1],
        "tools": [TOOL],
        "prompt": "u",
        "schema_version": "1",
    }
    rows = wai.training_rows([exported], system_prompt="SYS")
    assert rows[0]["messages"] == [
        {"role": "system", "content": "SYS"},
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    assert rows[0]["loss_mask"] == [0, 0, 0, 1]
    assert "tools" not in rows[0]
    out = tmp_path / "re.jsonl"
    rep = wai.export_dataset([exported], out, system_prompt="SYS")
    assert rep["with_system"] == 1
    assert rep["with_tools"] == 0
    (line,) = read_jsonl_out(out)
    assert [m["role"] for m in line["messages"]] == ["system", "system", "user", "assistant"]
    assert "tools" not in line


# ---------------------------------------------------------------- E54
def test_e54_relative_output_path_normalised(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rep = wai.export_dataset([_row()], "./rel.jsonl")
    assert rep["path"] == "rel.jsonl"
    assert (tmp_path / "rel.jsonl").is_file()
    assert Path(rep["path"]).name == "rel.jsonl"


def test_e51_unicode_whitespace_lines_are_blank_and_surrounding_unicode_whitespace_is_stripped(tmp_path):
    """Spec 5.8: the reference reads the file in text mode, strips each line (``str.strip``: Unicode
    whitespace too) and skips the lines left empty (E51: blank lines skipped; DECISIONS 7 keeps that).
    whileai 0.105 reads all of these; ours raised ``bad_jsonl`` on the first one."""
    row = b'{"prompt": "p", "steps": [{"text": "a"}], "scenario_id": "s%d"}'
    src = tmp_path / "ws.jsonl"
    src.write_bytes(
        (row % 1) + "\u00a0".encode() + b"\n"  # trailing NO-BREAK SPACE
        + "\u3000".encode() + b"\n"  # a line of IDEOGRAPHIC SPACE only
        + "\u2028".encode() + (row % 2) + b"\n"  # leading LINE SEPARATOR
        + "\x85".encode() + b"\n"  # a line of NEXT LINE only
        + b"\x1c" + (row % 3) + b"\x1f\n"  # ASCII file/unit separators (str.isspace() is true for them)
    )
    assert [r["scenario_id"] for r in wai.read_jsonl(src)] == ["s1", "s2", "s3"]
    assert len(wai.training_rows(str(src))) == 3


def test_e51_carriage_return_line_endings_are_refused_saying_so(tmp_path):
    """Spec 5.8: the reference reads in text mode (universal newlines), so a file whose lines end in a
    bare CR (old Mac line endings) is three rows there. JSON Lines ends a line with LF (CRLF is read
    too); a raw CR is JSON whitespace, legal inside a row. Ours refuses such a file, and says why and how
    to convert it, instead of a bare "trailing characters" (a deliberate divergence: API_CONTRACT.md)."""
    row = b'{"prompt": "p", "steps": [{"text": "a"}], "scenario_id": "s%d"}'
    src = tmp_path / "cr.jsonl"
    src.write_bytes((row % 1) + b"\r" + (row % 2) + b"\r" + (row % 3) + b"\r")
    with pytest.raises(wai.BadJsonlError) as info:
        wai.read_jsonl(src).__next__()
    assert str(info.value).startswith(f"bad_jsonl: {src}:1: ")
    assert "bare CR" in str(info.value) and "tr '\\r' '\\n'" in str(info.value)
