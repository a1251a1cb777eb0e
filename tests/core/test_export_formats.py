"""``export_datasets`` / ``export_preferences``: several formats from one read give each format's own
``export_dataset`` / ``export_preference`` output."""

import hashlib
import os
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import row_strategies
import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel
from whileai_pipeline.core.jsonl import dumps

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LEAK = "a long hidden reference text"


def _run(path, n=200, seed=5, leak=False, bad_arguments=True):
    """A run with what tells the formats apart: tool calls (arguments as objects, JSON strings and bad
    strings), think blocks, rows TRL drops (no assistant turn), ``messages`` rows, non-object lines,
    rewards of every kind, groups spread over the file."""
    rnd = random.Random(seed)
    with open(path, "wb") as fh:
        for i in range(n):
            task = i % 9
            if i % 23 == 4:
                row = {"prompt": f"p{task}", "scenario_id": f"s{task}", "reward": 1,
                       "messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "<think>x</think>hello",
                                     "tool_calls": [{"function": {"name": "lookup", "arguments": '{"id": 3}'}}]},
                                    {"role": "tool", "content": {"ok": True}},
                                    {"role": "assistant", "content": "done"}]}
            elif i % 31 == 6:
                row = {"prompt": f"p{task}", "scenario_id": f"s{task}", "steps": [], "final_text": ""}  # no reply
            else:
                steps = []
                for _ in range(rnd.randint(0, 5)):
                    if rnd.random() < 0.5:
                        steps.append({"tool": rnd.choice(["lookup", "refund"]),
                                      "arguments": rnd.choice([{"id": i}, '{"id": 1}',
                                                               "{bad" if bad_arguments else None, None]),
                                      "result": rnd.choice(["x" * rnd.randint(0, 300), {"ok": True, "n": i}])})
                    else:
                        steps.append({"text": rnd.choice(["<think>h</think>ok", "fine", "  ", "sure"])})
                row = {"prompt": f"p{task}", "steps": steps, "final_text": rnd.choice(["done", ""]),
                       "scenario_id": f"s{task}", "rollout_index": i, "finish_reason": rnd.choice(["stop", "length"]),
                       "reward": rnd.choice([0, 1, 0.5, None, "0.7", True]),
                       "privileged": {"reference": LEAK}}
                if leak and i == n // 2:
                    row["steps"] = [{"text": f"the answer: {LEAK}"}]
            fh.write(dumps(row) + b"\n")
            if i % 40 == 11:
                fh.write(b"[1, 2]\n")  # JSON, not an object: skipped, counted
    return path


def _alone(export, source, tmp_path, formats, **opts):
    """Each format exported on its own: {format: (bytes or None for no file, report)}."""
    out = {}
    for fmt in formats:
        path = tmp_path / f"alone.{fmt}.jsonl"
        report = export(source() if callable(source) else source, path, format=fmt, **opts)
        out[fmt] = (path.read_bytes() if path.exists() else None, report)
        path.unlink(missing_ok=True)
    return out


def _at_once(export_many, source, tmp_path, formats, **opts):
    """All formats from one call: the same shape as ``_alone``."""
    outputs = {fmt: tmp_path / f"together.{fmt}.jsonl" for fmt in formats}
    reports = export_many(source() if callable(source) else source, outputs, **opts)
    assert list(reports) == list(formats)  # in the order asked
    out = {fmt: (outputs[fmt].read_bytes() if outputs[fmt].exists() else None, reports[fmt]) for fmt in formats}
    for path in outputs.values():
        path.unlink(missing_ok=True)
    return out


def _same(together, separate):
    for fmt, (data, report) in separate.items():
        got, got_report = together[fmt]
        assert got == data, fmt
        strip = ("path", "elapsed_seconds")
        assert {k: v for k, v in got_report.items() if k not in strip} == \
               {k: v for k, v in report.items() if k not in strip}, fmt
        if data is not None:
            assert got_report["sha256"] == hashlib.sha256(got).hexdigest()


@pytest.mark.parametrize("formats", [("openai", "trl"), ("trl", "openai"), ("trl",), ("openai",)])
@pytest.mark.parametrize("kind", ["pooled", "one process", "list", "generator"])
@pytest.mark.parametrize("opts", [dict(), dict(unroll=True), dict(mask_mode="final", strip_think=False),
                                  dict(max_tool_output_chars=50, system_prompt="SYS", tools=[{"name": "lookup"}])],
                         ids=["default", "unroll", "final", "cap"])
def test_every_format_gets_the_bytes_and_report_of_its_own_export(tmp_path, monkeypatch, formats, kind, opts):
    src = _run(tmp_path / "run.jsonl")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # many chunks, hence many part files per format
    rows = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    source = {"pooled": src, "one process": src, "list": rows, "generator": lambda: (r for r in rows)}[kind]
    opts = dict(opts, validate=False, workers={"pooled": 2, "one process": 1}.get(kind))
    separate = _alone(wai.export_dataset, source, tmp_path, formats, **opts)
    assert separate[formats[0]][1]["n"] > 100
    together = _at_once(wai.export_datasets, source, tmp_path, formats, **opts)
    _same(together, separate)
    if kind in ("pooled", "one process"):
        for fmt in formats:
            assert together[fmt][1]["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert sorted(os.listdir(tmp_path)) == ["run.jsonl"]  # no spool, part or temp file left


rows = st.lists(st.one_of(row_strategies.row, st.just([1])), max_size=10)  # [1]: JSON, not an object


@SETTINGS
@given(source=rows, mask_mode=st.sampled_from(["assistant", "final"]), unroll=st.booleans(),
       order=st.sampled_from([("openai", "trl"), ("trl", "openai")]))
def test_property_together_equals_alone(tmp_path, source, mask_mode, unroll, order):
    """Any rows: the same files and reports, or the same schema error, as one export per format."""
    src = tmp_path / "src.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in source))
    opts = dict(mask_mode=mask_mode, unroll=unroll, validate=False, system_prompt="SYS", workers=1)
    try:
        separate = _alone(wai.export_dataset, src, tmp_path, order, **opts)
    except wai.SchemaInvalidError as exc:
        with pytest.raises(wai.SchemaInvalidError) as together:
            _at_once(wai.export_datasets, src, tmp_path, order, **opts)
        assert str(together.value) == str(exc)
        assert sorted(os.listdir(tmp_path)) == ["src.jsonl"]
        return
    _same(_at_once(wai.export_datasets, src, tmp_path, order, **opts), separate)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("gate", ["roundtrip", "leak"])
def test_a_failed_gate_writes_no_format(tmp_path, monkeypatch, workers, gate):
    """The first format asked for whose gate fails raises what its own export raises; nothing is written."""
    if gate == "roundtrip":
        src, error = _run(tmp_path / "run.jsonl"), wai.RoundtripInvalidError
    else:
        src, error = _run(tmp_path / "run.jsonl", leak=True, bad_arguments=False), wai.PrivilegedLeakError
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    refused = _refused_alike(wai.export_datasets, wai.export_dataset, src, tmp_path / "sft", error, workers)
    assert refused.report["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def _refused_alike(export_many, export_one, source, prefix, error, workers, same_report=True):
    """Both formats at once (TRL first) raise what TRL's own export raises, and write nothing: the
    openai file already there is left as it was. Returns the error."""
    outputs = {"trl": prefix.with_name(f"{prefix.name}.trl.jsonl"),
               "openai": prefix.with_name(f"{prefix.name}.openai.jsonl")}
    outputs["openai"].write_bytes(b"previous\n")
    before = sorted(os.listdir(prefix.parent))
    with pytest.raises(error) as together:
        export_many(source, outputs, workers=workers)
    with pytest.raises(error) as alone:
        export_one(source, prefix.with_name("alone.jsonl"), format="trl", workers=workers)
    assert str(together.value) == str(alone.value)
    if same_report:
        strip = ("elapsed_seconds",)
        assert {k: v for k, v in together.value.report.items() if k not in strip} == \
               {k: v for k, v in alone.value.report.items() if k not in strip}  # the first format's report
    assert sorted(os.listdir(prefix.parent)) == before
    assert outputs["openai"].read_bytes() == b"previous\n"
    return together.value


def test_outputs_must_name_known_formats_and_distinct_paths(tmp_path):
    src = _run(tmp_path / "run.jsonl", n=20)
    cases = [
        ("sft.jsonl", r"^export_datasets takes outputs as \{format: path\}, .*; got str$"),
        ({}, r"^export_datasets needs at least one \{format: path\} in outputs$"),
        ({"openai": tmp_path / "a.jsonl", "sharegpt": tmp_path / "b.jsonl"}, r"format must be one of"),
        ({"openai": tmp_path / "a.jsonl", "trl": None}, r"^export_datasets: no output path for format 'trl'; "),
        ({"openai": tmp_path / "a.jsonl", "trl": str(tmp_path / "." / "a.jsonl")},
         r"^export_datasets: formats 'openai' and 'trl' would both write .*a\.jsonl; give every format its own path$"),
    ]
    for outputs, message in cases:
        with pytest.raises(wai.ExportError, match=message):
            wai.export_datasets(src, outputs)
    with pytest.raises(wai.OutputIsSourceError, match="^output_is_source: "):
        wai.export_datasets(src, {"openai": tmp_path / "a.jsonl", "trl": src})
    assert sorted(os.listdir(tmp_path)) == ["run.jsonl"]


# ---------------------------------------------------------------- export_preferences

def _pairs(tmp_path, leak=False, bad_arguments=False):
    """A pairs file with what tells the formats apart: ties, a pair TRL drops (no assistant turn),
    a line that is not an object."""
    from whileai_pipeline.core.pairs import build_pairs_file

    run = _run(tmp_path / "pairs-run.jsonl", n=300, bad_arguments=bad_arguments)
    path = tmp_path / "pairs.jsonl"
    build_pairs_file(run, path, min_margin=0.5, max_pairs_per_prompt=20, workers=1)
    run.unlink()
    pairs = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(pairs) > 20
    pairs[3]["tie"] = True
    pairs[5]["chosen"] = {"prompt": "p", "steps": [], "final_text": ""}
    if leak:  # a chosen reply that recites the grader's reference
        pairs[2]["chosen"].update(steps=[{"text": f"the answer: {LEAK}"}], privileged={"reference": LEAK})
    with open(path, "wb") as fh:
        for i, pair in enumerate(pairs):
            fh.write(dumps(pair) + b"\n")
            if i == 7:
                fh.write(b"[1]\n")
    return path


@pytest.mark.parametrize("formats", [("openai", "trl"), ("trl", "openai"), ("trl",)])
@pytest.mark.parametrize("kind", ["pooled", "one process", "list", "generator"])
@pytest.mark.parametrize("drop_ties", [True, False])
def test_every_format_gets_the_pairs_and_report_of_its_own_export(tmp_path, monkeypatch, formats, kind, drop_ties):
    path = _pairs(tmp_path)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    items = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    source = {"pooled": path, "one process": path, "list": items, "generator": lambda: (p for p in items)}[kind]
    opts = dict(validate=False, drop_ties=drop_ties, system_prompt="SYS",
                workers={"pooled": 2, "one process": 1}.get(kind))
    separate = _alone(wai.export_preference, source, tmp_path, formats, **opts)
    if "trl" in formats:
        assert separate["trl"][1]["no_completion_dropped"] >= 1
    together = _at_once(wai.export_preferences, source, tmp_path, formats, **opts)
    _same(together, separate)
    if kind in ("pooled", "one process"):
        assert together[formats[0]][1]["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(os.listdir(tmp_path)) == ["pairs.jsonl"]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("gate", ["roundtrip", "leak", "no pairs"])
def test_a_refused_preference_export_writes_no_format(tmp_path, monkeypatch, workers, gate):
    """The first format asked for whose export would raise raises that error; nothing is written."""
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    if gate == "no pairs":  # TRL drops the only pair; OpenAI would have written it
        pair = {"prompt": "p", "chosen": {"prompt": "p", "steps": [], "final_text": ""},
                "rejected": {"prompt": "p", "final_text": "no"}}
        path, error = tmp_path / "pairs.jsonl", wai.NoPreferencePairsError
        path.write_bytes(dumps(pair) + b"\n")
    else:
        path = _pairs(tmp_path, leak=gate == "leak", bad_arguments=gate == "roundtrip")
        error = {"roundtrip": wai.RoundtripInvalidError, "leak": wai.PrivilegedLeakError}[gate]
    _refused_alike(wai.export_preferences, wai.export_preference, path, tmp_path / "dpo", error, workers,
                   same_report=gate != "no pairs")


def test_preference_outputs_are_checked_like_sft_outputs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"")
    with pytest.raises(wai.ExportError, match=r"^export_preferences takes outputs as \{format: path\}"):
        wai.export_preferences(path, "dpo.jsonl")
    with pytest.raises(wai.ExportError, match=r"^export_preferences: formats 'openai' and 'trl' would both write "):
        wai.export_preferences(path, {"openai": tmp_path / "a.jsonl", "trl": tmp_path / "a.jsonl"})
    with pytest.raises(wai.OutputIsSourceError, match="^output_is_source: "):
        wai.export_preferences(path, {"openai": tmp_path / "a.jsonl", "trl": path})
