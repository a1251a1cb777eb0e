"""Arguments of the wrong shape are refused before anything is written, where the reference turns them
into silent nonsense; ``~`` in a path means the home directory, as in pandas, not a folder named ``~``; and
tool-call arguments of odd shapes do not stop pair building."""

import collections
import dataclasses
import enum
import errno
import json
import os
import re

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.pairs import build_pairs_file

ROW = {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "shipped"}],
       "final_text": "It shipped.", "reward": 1}
PAIR = {"prompt": "Where is order 7?", "chosen": ROW, "rejected": dict(ROW, final_text="No idea.", reward=0)}
SCHEMA = {"type": "function", "function": {"name": "lookup"}}


@pytest.mark.parametrize("tools, hint", [
    ('[{"type": "function"}]', r"got str \(parse a JSON string first: json\.loads\)"),
    (SCHEMA, r"got dict \(wrap one schema in a list\)"),
    (b"[]", "got bytes"),
    (3, "got int"),
    ([SCHEMA, 1, "two", None], r"\(JSON objects\), but item 1 is int 1"),
    ([None], r"\(JSON objects\), but item 0 is NoneType None"),
])
@pytest.mark.parametrize("call", ["export_dataset", "export_preference", "training_rows"])
def test_tools_that_are_not_a_list_of_schemas_are_refused(tmp_path, tools, hint, call):
    # the reference copies them with list(): a string's characters, a dict's keys, on every row
    out = tmp_path / "out.jsonl"
    with pytest.raises(wai.ExportError, match=rf"^tools must be a list of tool schemas,? {hint}: pass tools=\["):
        if call == "export_dataset":
            wai.export_dataset([ROW], out, tools=tools)
        elif call == "export_preference":
            wai.export_preference([PAIR], out, tools=tools)
        else:
            wai.training_rows([ROW], tools=tools)
    assert not out.exists()


def test_tools_from_any_iterable_of_schemas_are_taken(tmp_path):
    for tools in ([SCHEMA], (SCHEMA,), (t for t in [SCHEMA])):
        (row,) = wai.training_rows([ROW], tools=tools)
        assert row["tools"] == [SCHEMA]
    assert "tools" not in wai.training_rows([ROW], tools=[])[0]


def test_a_profile_whose_tools_are_a_string_is_refused():
    class Profile:
        policy, tools = "You help.", '[{"type": "function"}]'

    class Rows(list):
        profile = Profile()

    with pytest.raises(wai.ExportError, match=r"^the profile's tools must be a list of tool schemas, got str"):
        wai.export_dataset(Rows([ROW]), None)


@pytest.mark.parametrize("source, hint", [(ROW, r"got dict \(one row\?\): wrap it in a list"),
                                          (dumps(ROW), "got bytes: pass the file's path"),
                                          (7, "got int: pass the file's path")])
@pytest.mark.parametrize("call", ["export_dataset", "training_rows"])
def test_a_source_that_is_one_row_bytes_or_no_rows_at_all_is_refused(tmp_path, source, hint, call):
    # the reference iterates it: a dict's keys or a byte string's integers, all skipped, and an empty
    # file; a number it cannot iterate fails deep inside with "'int' object is not iterable"
    with pytest.raises(wai.ExportError, match=rf"^source must be rows, a run or a JSONL path, {hint}"):
        if call == "export_dataset":
            wai.export_dataset(source, tmp_path / "out.jsonl")
        else:
            wai.training_rows(source)
    assert list(tmp_path.iterdir()) == []


def _run_file(tmp_path):
    run = tmp_path / "run.jsonl"
    wai.write_jsonl(run, [ROW, dict(ROW, final_text="No idea.", reward=0)])
    return run


@pytest.mark.parametrize("as_given", [str, lambda path: path, lambda path: os.fsencode(path),
                                      lambda path: ROW])
def test_build_preference_pairs_refuses_a_path_or_one_row_instead_of_pairing_nothing(tmp_path, as_given):
    """A path's characters (or a row's keys) are no rows: the reference pairs nothing and blames the data."""
    run = _run_file(tmp_path)
    pairs, _ = wai.build_preference_pairs(wai.read_jsonl(run))
    assert len(pairs) == 1  # the rows themselves do pair
    with pytest.raises(wai.ExportError, match=r"^build_preference_pairs takes rows, got \w+.*: (for a JSONL run "
                                              r"pass read_jsonl\(path\)|pass a list of rows)"):
        wai.build_preference_pairs(as_given(run))


@pytest.mark.parametrize("cap", ["x", [100], {}, float("inf"), float("-inf")])  # int(inf): a bare OverflowError
@pytest.mark.parametrize("with_tools", [True, False])
def test_a_max_tool_output_chars_that_is_no_number_is_refused_before_any_row(tmp_path, cap, with_tools):
    # it used to fail as a bare "invalid literal for int()" at the first tool message, or pass unseen
    run = tmp_path / "run.jsonl"
    row = ROW if with_tools else {"prompt": "Hi", "final_text": "Hello.", "reward": 1}
    wai.write_jsonl(run, [row])
    out = tmp_path / "out.jsonl"
    hint = r"^max_tool_output_chars must be a whole number of characters, got .*: pass e\.g\. max_tool_output_chars="
    with pytest.raises(wai.ExportError, match=hint):
        wai.export_dataset(run, out, max_tool_output_chars=cap)
    with pytest.raises(wai.ExportError, match=hint):
        wai.training_rows(run, max_tool_output_chars=cap)
    assert not out.exists()
    assert wai.export_dataset(run, out, max_tool_output_chars="5")["n_written"] == 1  # what int() reads still goes


def test_an_output_that_is_the_working_directory_is_said_to_be_a_directory(tmp_path, monkeypatch):
    """Renaming onto "." fails as EBUSY ("Device or resource busy"), which says nothing of the mistake."""
    run = _run_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(wai.WriteFailedError, match=r"^write_failed: \.: Is a directory; nothing was published .*"
                                                   r"Name a file, not a directory, as the output"):
        wai.export_dataset(run, ".")
    assert sorted(os.listdir(tmp_path)) == ["run.jsonl"]


def test_judge_pairs_says_what_to_do_with_entries_that_are_not_pairs():
    def judge(a, b):
        return {"winner": "A"}

    with pytest.raises(ValueError, match=r"^1 entries are not pairs \(need chosen/rejected rows\); first at 1 "
                                         r"\(index of the pairs given\): build pairs with build_preference_pairs"):
        wai.judge_pairs([PAIR, ROW], judge)


@pytest.mark.parametrize("sidecar", [b"{system_prompt: oops", b"[]", b'{"tools": "lookup"}'])
def test_a_bad_sidecar_is_an_export_error_like_every_other_refusal(tmp_path, sidecar):
    """It was a plain ValueError, which ``except wai.ExportError`` (the base of the library's errors) missed."""
    run = _run_file(tmp_path)
    (tmp_path / "run.meta.json").write_bytes(sidecar)
    with pytest.raises(wai.ExportError, match=rf"^bad_sidecar: {tmp_path / 'run.meta.json'}: .*; fix or delete the "
                                              "sidecar"):
        wai.export_dataset(run, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_judge_pairs_refuses_a_keyword_it_does_not_know():
    """Unknown keywords were swallowed: a misspelt ``concurency=1`` asked a judge that keeps state from 8
    threads at once without a word. The reference's own ``spec`` and ``api_key`` are still taken."""
    calls = []

    def judge(a, b):
        calls.append((a["final_text"], b["final_text"]))
        return {"winner": "A"}

    with pytest.raises(TypeError, match="unexpected keyword argument 'concurency'"):
        wai.judge_pairs([dict(PAIR)], judge, concurency=1)
    assert calls == []
    pairs, report = wai.judge_pairs([dict(PAIR)], judge, spec="judge-model", api_key="unused", concurrency=1)
    assert len(pairs) == 1 and len(calls) == 2  # asked in both orders


def test_a_tilde_in_a_path_is_the_home_directory(tmp_path, monkeypatch):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    wai.write_jsonl("~/run.jsonl", [ROW, dict(ROW, final_text="No idea.", reward=0)])
    assert len(list(wai.read_jsonl("~/run.jsonl"))) == len(list(wai.load_run("~/run.jsonl").trajectories)) == 2
    assert wai.export_dataset("~/run.jsonl", "~/out/sft.jsonl")["path"] == str(home / "out" / "sft.jsonl")
    assert build_pairs_file("~/run.jsonl", "~/out/pairs.jsonl")["path"] == str(home / "out" / "pairs.jsonl")
    assert wai.export_preference("~/out/pairs.jsonl", "~/out/dpo.jsonl")["path"] == str(home / "out" / "dpo.jsonl")
    assert sorted(os.listdir(home / "out")) == ["dpo.jsonl", "pairs.jsonl", "sft.jsonl"]
    assert list(work.iterdir()) == []  # no folder named "~"


def test_tool_arguments_whose_keys_cannot_be_sorted_do_not_stop_pair_building():
    """The spec's first_turn is JSON with sorted keys; in-memory rows may hold keys of several types."""
    def row(i, reward, arguments):
        return {"prompt": "p", "rollout_index": i, "reward": reward, "final_text": f"answer {i}",
                "steps": [{"tool": "lookup", "arguments": arguments, "result": "ok"}]}

    mixed = {1: "a", "id": 7}
    pairs, report = wai.build_preference_pairs([row(0, 1, {"id": 7}), row(1, 0, {"id": 8}), row(2, 0.5, mixed)])
    assert report["pairs"] == len(pairs) == 1
    pairs, _ = wai.build_preference_pairs([row(0, 1, mixed), row(1, 0, {"id": 7})])
    assert [p["first_turn_differs"] for p in pairs] == [True]
    pairs, _ = wai.build_preference_pairs([row(0, 1, mixed), row(1, 0, dict(mixed))])
    assert [p["first_turn_differs"] for p in pairs] == [False]


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_arguments_with_nan_get_the_same_conversions_as_without(tmp_path, fmt):
    """Sets, bytes and dates in arguments are written one way (DECISIONS 1), also beside a NaN, which
    keeps its token for the gate to refuse (here with validate=False, so the row is written)."""
    import datetime

    args = {"s": {2, 1}, "b": b"hi", "t": datetime.datetime(2024, 1, 2, 3, 4, 5)}
    written = {}
    for name, extra in (("finite", {}), ("with_nan", {"f": float("nan")})):
        row = {"prompt": "p", "reward": 1, "final_text": "ok",
               "steps": [{"tool": "t", "arguments": {**args, **extra}, "result": "r"}]}
        out = tmp_path / f"{name}.jsonl"
        report = wai.export_dataset([row], out, format=fmt, validate=False)
        assert report["tool_call_roundtrip"]["invalid"] == (name == "with_nan")
        message = json.loads(out.read_bytes())["messages"][1]
        arguments = message["tool_calls"][0]["function"]["arguments"]
        written[name] = json.loads(arguments) if fmt == "openai" else arguments
    expected = {"s": [1, 2], "b": "hi", "t": "2024-01-02T03:04:05"}
    assert written["finite"] == expected
    assert {k: v for k, v in written["with_nan"].items() if k != "f"} == expected


class _Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class _Point:
    x: int


def test_values_orjson_writes_itself_are_written_the_same_beside_a_nan():
    """With a NaN in the arguments Python's json writes them (to keep the NaN token): enums, dataclasses
    and numpy values must come out as orjson writes them without it, not as ``str()``."""
    import numpy as np

    from whileai_pipeline.core.jsonl import dumps
    from whileai_pipeline.core.wire import wire_arguments

    for value, written in (({"e": _Color.RED}, '"e":"red"'), ({"p": _Point(1)}, '"p":{"x":1}'),
                           ({"n": np.int64(3)}, '"n":3'), ({"a": np.array([1, 2])}, '"a":[1,2]'),
                           ({"f": np.float32(0.5)}, '"f":0.5')):
        assert wire_arguments(value) == "{" + written + "}"
        assert wire_arguments({**value, "x": float("nan")}) == "{" + written + ',"x":NaN}'
    assert dumps({"s": np.array(["a", "b"])}) == b'{"s":["a","b"]}'  # a dtype orjson leaves to the default


_Pair = collections.namedtuple("_Pair", "x y")


class _Score(float):
    pass


@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_a_namedtuple_and_a_float_subclass_are_written_as_python_json_writes_them(tmp_path, fmt):
    """orjson writes neither: they reached ``str()`` and were written as the text "_Pair(x=1, y=2)" and "0.5"
    (and as [1, 2] where another value of the row needed the fallback). A namedtuple holding a blocked key
    in carried metadata failed the scrub: its class takes its items one by one."""
    row = {"prompt": "p", "reward": _Score(1.0), "final_text": "ok",
           "steps": [{"tool": "t", "arguments": {"v": _Pair(1, 2), "f": _Score(0.5), "n": _Score("nan")},
                      "result": "r"}],
           "lineage": {"h": _Pair({"privileged": "x", "a": 1}, 2), "big": _Pair(2**70, _Score(1.5))}}
    out = tmp_path / "rows.jsonl"
    wai.export_dataset([row], out, format=fmt, validate=False)
    written = json.loads(out.read_bytes())
    arguments = written["messages"][1]["tool_calls"][0]["function"]["arguments"]
    if fmt == "openai":  # the NaN token kept for the round-trip gate (validate=False lets it through)
        assert arguments == '{"v":[1,2],"f":0.5,"n":NaN}'
    else:
        assert arguments == {"v": [1, 2], "f": 0.5, "n": None}
    assert written["lineage"] == {"h": [{"a": 1}, 2], "big": [1180591620717411303424, 1.5]}
    assert written["reward"] == 1.0 and isinstance(written["reward"], float)
    pairs, _ = wai.build_preference_pairs(
        [{**row, "reward": 1.0}, {"prompt": "p", "reward": 0.0, "final_text": "no", "reason": _Pair({"rubric": 1}, 2)}])
    assert pairs[0]["rejected_reason"] == "_Pair(x={}, y=2)"  # the spec's text of a reason, scrubbed first


class _Items(tuple):
    """A tuple subclass whose constructor takes its items one by one, as a namedtuple's does, without ``_make``."""

    def __new__(cls, *items):
        return super().__new__(cls, items)


def test_a_tuple_subclass_without_make_is_scrubbed_into_a_plain_tuple():
    from whileai_pipeline.core.gates import scrub

    scrubbed = scrub({"h": _Items({"rubric": 1, "a": 1}, 2)})
    assert scrubbed == {"h": ({"a": 1}, 2)} and type(scrubbed["h"]) is tuple  # not _Items([{...}, 2]): nested

    class Odd(tuple):
        @classmethod
        def _make(cls, first, second):  # a _make that is not a namedtuple's
            return cls((first, second))

    assert scrub(Odd(({"rubric": 1},))) == ({},)


def test_a_sidecar_that_is_not_utf8_names_the_byte(tmp_path):
    """orjson's own words were "str is not valid UTF-8: surrogates not allowed: line 1 column 1 (char 0)",
    which points at the wrong place and blames surrogates for a Latin-1 byte."""
    run = _run_file(tmp_path)
    (tmp_path / "run.meta.json").write_bytes(b'{"system_prompt": "caf\xe9"}')
    with pytest.raises(wai.ExportError, match=r"^bad_sidecar: .*run\.meta\.json: not valid JSON \(invalid UTF-8 at "
                                              r"byte 22\); fix or delete the sidecar$"):
        wai.export_dataset(run, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_judge_concurrency_takes_a_whole_float_as_workers_does():
    def judge(a, b):
        return {"winner": "A"}

    assert len(wai.judge_pairs([dict(PAIR)], judge, concurrency=2.0)[0]) == 1


FOUR = [ROW, dict(ROW, final_text="No idea.", reward=0), dict(ROW, final_text="It left today.", reward=1),
        dict(ROW, final_text="Ask later.", reward=0)]  # one prompt, two pairs to make


@pytest.mark.parametrize("bad, error", [("2", TypeError), (None, TypeError), (True, TypeError), ([2], TypeError),
                                        (2.5, ValueError), (0, ValueError), (-1, ValueError),
                                        (float("inf"), ValueError), (float("nan"), ValueError)])
def test_max_pairs_per_prompt_must_be_a_whole_number_of_at_least_one(tmp_path, bad, error):
    """The reference compares it with a count: a string or None fails as "'>=' not supported between
    instances of 'int' and 'str'", 0 or -1 pair nothing without a word, 2.5 allows 3 and True 1. The
    pipeline's config refuses less than 1 too."""
    start = rf"^max_pairs_per_prompt must be a whole number of at least 1, got {type(bad).__name__} "
    with pytest.raises(error, match=start + r".*: how many pairs one prompt's rollouts may give at most, e\.g\. "
                                            r"max_pairs_per_prompt=1 \(the default\)"):
        wai.build_preference_pairs(FOUR, max_pairs_per_prompt=bad)
    wai.write_jsonl(tmp_path / "run.jsonl", FOUR)
    with pytest.raises(error, match=start):
        build_pairs_file(tmp_path / "run.jsonl", tmp_path / "pairs.jsonl", max_pairs_per_prompt=bad)
    assert sorted(os.listdir(tmp_path)) == ["run.jsonl"]


def test_max_pairs_per_prompt_none_says_there_is_no_unlimited_value():
    with pytest.raises(TypeError, match=r"got NoneType None: .*; there is no value for no limit: pass the rollouts "
                                        r"per prompt$"):
        wai.build_preference_pairs(FOUR, max_pairs_per_prompt=None)


def test_max_pairs_per_prompt_takes_any_whole_number():
    np = pytest.importorskip("numpy")
    for good in (2, 2.0, np.int64(2), 10**30):
        pairs, report = wai.build_preference_pairs(FOUR, max_pairs_per_prompt=good)
        assert len(pairs) == report["pairs"] == 2
    assert len(wai.build_preference_pairs(FOUR, max_pairs_per_prompt=1)[0]) == 1


@pytest.mark.parametrize("rows, said", [
    (None, "got NoneType None: pass a list of row dicts, or read_jsonl(path) for a JSONL run"),
    (5, "got int 5: pass a list of row dicts, or read_jsonl(path) for a JSONL run"),
    (ROW, "got dict (one row?): pass a list of rows"),
    ("run.jsonl", "got str 'run.jsonl': pass the rows themselves, e.g. read_jsonl(path) for a JSONL file"),
    ('[{"prompt": "hi"}]', """got str '[{"prompt": "hi"}]': pass the rows themselves"""),
    (b"[]", "got bytes b'[]': pass the rows themselves"),
])
@pytest.mark.parametrize("call", ["to_trl", "to_trl_preference", "tool_call_roundtrip"])
def test_to_trl_and_tool_call_roundtrip_take_a_list_of_rows(rows, said, call):
    """The reference fails on None or a number with "'NoneType' object is not iterable", and loops over a
    dict's keys or a string's characters, skipping them all: to_trl returns [], tool_call_roundtrip
    fails with "'str' object has no attribute 'get'" (ours reported 0 calls checked)."""
    with pytest.raises(TypeError, match="^" + re.escape(f"rows must be a list of row dicts, {said}")):
        if call == "to_trl":
            wai.to_trl(rows)
        elif call == "to_trl_preference":
            wai.to_trl(rows, "preference")
        else:
            wai.tool_call_roundtrip(rows)


def test_to_trl_and_tool_call_roundtrip_take_any_iterable_of_rows():
    rows = wai.training_rows([ROW])
    for given in (rows, tuple(rows), iter(rows)):
        assert wai.to_trl(given) == wai.to_trl(rows)
    assert wai.tool_call_roundtrip(iter(rows))["checked"] == wai.tool_call_roundtrip(rows)["checked"] == 1


NOT_PATHS = [5, 2.5, True, False, 0, b"out.jsonl", ["out.jsonl"]]


@pytest.mark.parametrize("output", NOT_PATHS)
def test_an_output_that_is_not_a_path_is_refused(tmp_path, monkeypatch, output):
    """pathlib's own words were "expected str, bytes or os.PathLike object, not int"; the reference takes a
    falsy one (0, False) as no output and writes nothing."""
    monkeypatch.chdir(tmp_path)
    start = (f"output must be a path (str or os.PathLike) or None, got {type(output).__name__} {output!r}: pass the "
             "file to write, e.g. 'train.jsonl', or None (the default) to write ")
    with pytest.raises(TypeError, match="^" + re.escape(start + "<name>.train<suffix> beside a JSONL source and no "
                                                        "file for rows in memory")):
        wai.export_dataset([ROW], output)
    run = _run_file(tmp_path)
    with pytest.raises(TypeError, match="^" + re.escape(start)):
        wai.export_training(run, output)
    with pytest.raises(TypeError, match="^" + re.escape(start + "no file and get the report only")):
        wai.export_preference([PAIR], output)
    assert os.listdir(tmp_path) == ["run.jsonl"]


@pytest.mark.parametrize("output", NOT_PATHS)
@pytest.mark.parametrize("call", ["export_datasets", "export_preferences"])
def test_an_output_per_format_that_is_not_a_path_is_refused(tmp_path, monkeypatch, output, call):
    monkeypatch.chdir(tmp_path)
    outputs = {"openai": "sft.jsonl", "trl": output}
    said = (f"outputs['trl'] must be a path (str or os.PathLike), got {type(output).__name__} {output!r}: give "
            "every format its own file, e.g. {'openai': 'out.openai.jsonl', 'trl': 'out.trl.jsonl'}")
    with pytest.raises(TypeError, match="^" + re.escape(said)):
        if call == "export_datasets":
            wai.export_datasets([ROW], outputs)
        else:
            wai.export_preferences([PAIR], outputs)
    assert os.listdir(tmp_path) == []


def test_an_output_given_as_a_path_or_none_still_goes(tmp_path):
    assert "path" not in wai.export_dataset([ROW], None)
    assert "path" not in wai.export_dataset([ROW], "")  # the spec's "no output"
    assert wai.export_dataset([ROW], tmp_path / "a.jsonl")["n_written"] == 1
    assert wai.export_dataset([ROW], str(tmp_path / "b.jsonl"))["n_written"] == 1


@pytest.mark.parametrize("text", ['{"prompt": "hi"}', '[{"prompt": "hi"}]', '\n  [{"prompt": "hi"}]',
                                  '[{"prompt": "' + "x" * 300 + '"}]'])  # too long for a file name
@pytest.mark.parametrize("call", ["export_dataset", "training_rows", "export_preference"])
def test_a_source_that_is_json_text_is_said_to_be_no_path(tmp_path, monkeypatch, text, call):
    """Taken as a path it failed with "no such source file" or, when long, "[Errno 36] File name too long"
    (the reference: FileNotFoundError or OSError, which this still is)."""
    monkeypatch.chdir(tmp_path)
    said = (f"no such source file: got str {text!r:.60}, which looks like JSON text, not a path: pass the rows "
            "themselves, a list of dicts (json.loads the text, or each line of JSONL text), or the path of a "
            ".jsonl file")
    with pytest.raises(FileNotFoundError, match="^" + re.escape(said) + "$"):
        getattr(wai, call)(text)
    assert os.listdir(tmp_path) == []


def test_a_file_whose_name_starts_like_json_is_read_as_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wai.write_jsonl("[run].jsonl", [ROW])
    assert len(wai.training_rows("[run].jsonl")) == 1
    assert wai.export_dataset("[run].jsonl")["path"] == "[run].train.jsonl"
    with pytest.raises(FileNotFoundError, match=r"^no such source file: other\.jsonl \(pass a JSONL run"):
        wai.training_rows("other.jsonl")  # a missing path that is no JSON text: as before


@pytest.mark.parametrize("call", [
    lambda name: wai.export_dataset(name),
    lambda name: wai.training_rows(name),
    lambda name: list(wai.read_jsonl(name)),
    lambda name: build_pairs_file(name, "pairs.jsonl"),
], ids=["export_dataset", "training_rows", "read_jsonl", "build_pairs_file"])
def test_a_source_name_too_long_for_a_file_says_so_and_stays_an_oserror(tmp_path, monkeypatch, call):
    """``stat`` of a 300-character name fails with "[Errno 36] File name too long" and nothing else: the
    error names what was expected and how long the name was (the class stays the reference's OSError)."""
    monkeypatch.chdir(tmp_path)
    name = "rows " + "x" * 300
    with pytest.raises(OSError) as raised:
        call(name)
    assert raised.value.errno == errno.ENAMETOOLONG
    assert re.fullmatch(r"\[Errno 36\] no such (source|run) file: got a name of 305 characters 'rows x{54}, "
                        r"longer than a file name can be \((pass|check) .+\)", str(raised.value)), str(raised.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("text", ['[{"prompt": "hi"}]', '[{"prompt": "' + "x" * 300 + '"}]'])
def test_pair_building_given_json_text_says_it_is_no_path(tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError, match=r"^(\[Errno 36\] )?no such source file: got .+ looks like JSON text, not a "
                                      r"path \(pass the scored JSONL run to pair\)$") as raised:
        build_pairs_file(text, "pairs.jsonl")
    assert raised.value.errno == (errno.ENAMETOOLONG if len(text) > 255 else None)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["[2026-01] night.jsonl", "{draft}.jsonl"])
def test_a_missing_file_whose_name_starts_with_a_bracket_is_just_missing(tmp_path, monkeypatch, name):
    """No double quote, so no row's text: the error names the file, without the JSON-text guess."""
    monkeypatch.chdir(tmp_path)
    for call in (wai.export_dataset, lambda n: build_pairs_file(n, "pairs.jsonl")):
        with pytest.raises(FileNotFoundError) as raised:
            call(name)
        assert str(raised.value).startswith(f"no such source file: {name} ("), str(raised.value)
