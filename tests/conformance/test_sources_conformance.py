"""Differential conformance of source handling against whileai 0.105: path sources with the run's
sidecar (DECISIONS 6, 15), generators (DECISIONS 5), output == source (DECISIONS 4) and malformed
JSONL (DECISIONS 7)."""

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance_settings import CONFORMANCE, REF_SKIP_REASON

ref = pytest.importorskip("whileai.simulations", reason=REF_SKIP_REASON)

import conformance_harness as H  # noqa: E402
import conformance_strategies as S  # noqa: E402
from conformance_checks import check_export_dataset  # noqa: E402

import whileai_pipeline.simulations as ours  # noqa: E402

pytestmark = pytest.mark.conformance

SIDECAR = {
    "schema_version": "1",
    "system_prompt": "You are the shop assistant. Never refund twice.",
    "system_prompts": {},
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
    "stopped_because": "budget",
}


def finite_only(rows):
    """Path sources are files: keep them strict JSON (how a NaN line reads is open question Q6)."""
    return H.d1_nonfinite_to_null(rows)


def write_jsonl(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@pytest.mark.parametrize("with_sidecar", [True, False], ids=["sidecar", "no_sidecar"])
@CONFORMANCE
@given(rows=S.row_lists(max_size=5), unroll=st.booleans(), mask_mode=st.sampled_from(["assistant", "final"]))
def test_path_source_with_sidecar_matches_reference(fmt, with_sidecar, rows, unroll, mask_mode):
    """A saved run (run.jsonl + run.meta.json), exported with no output and no system_prompt/tools.
    DECISIONS 6 (transform ``d6_sidecar_as_arguments``): ours reads the sidecar, the reference never
    does, so the reference gets the sidecar's system prompt and tools as explicit arguments.
    Spec 5.3: both derive ``run.train.jsonl`` beside the source. DECISIONS 15: source_path/sha256."""
    rows = finite_only(rows)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        our_src = write_jsonl(tmp / "ours" / "run.jsonl", rows)
        if with_sidecar:
            (tmp / "ours" / "run.meta.json").write_text(json.dumps(SIDECAR, indent=2))
            (tmp / "ref").mkdir()
            (tmp / "ref" / "run.meta.json").write_text(json.dumps(SIDECAR, indent=2))
        d6_sidecar_as_arguments = (
            {"system_prompt": SIDECAR["system_prompt"], "tools": SIDECAR["tools"]} if with_sidecar else {}
        )
        check_export_dataset(
            ref, ours, rows, tmp, fmt=fmt, mask_mode=mask_mode, unroll=unroll, strip_think=True,
            system_prompt=None, tools=None, cap=None, validate=False,
            ref_source=lambda ref_rows: write_jsonl(tmp / "ref" / "run.jsonl", ref_rows),
            our_source=lambda: our_src, ref_kwargs=d6_sidecar_as_arguments, path_source=our_src,
            sp_source="sidecar" if with_sidecar else "none", tools_source="sidecar" if with_sidecar else "none",
            ref_out=tmp / "ref" / "run.train.jsonl", our_out=tmp / "ours" / "run.train.jsonl", pass_output=False,
        )


class _Profile:
    def __init__(self, policy, tools):
        self.policy, self.tools = policy, tools


class _RunLike:
    """Duck-typed run (spec 2.3): anything with ``trajectories``; both read ``profile.policy``/``tools``."""

    def __init__(self, rows, profile):
        self.trajectories, self.profile = rows, profile


class _RowsWithContext(list):
    """A list-like source carrying ``system_prompt`` / ``tools`` (DECISIONS 6; the reference's 0.107)."""


@pytest.mark.parametrize("fmt", ["openai", "trl"])
@CONFORMANCE
@given(rows=S.row_lists(max_size=4), policy=st.sampled_from(["Be brief.", ""]),
       tools=st.sampled_from([[], SIDECAR["tools"]]))
def test_run_object_profile_matches_reference(fmt, rows, policy, tools):
    """Both implementations read a run object's profile: no transform beyond the common ones; the
    report says ``profile`` (DECISIONS 6) when the profile supplied a value."""
    with tempfile.TemporaryDirectory() as d:
        check_export_dataset(
            ref, ours, rows, Path(d), fmt=fmt, mask_mode="assistant", unroll=False, strip_think=True,
            system_prompt=None, tools=None, cap=None, validate=False,
            ref_source=lambda ref_rows: _RunLike(ref_rows, _Profile(policy, tools)),
            our_source=lambda: _RunLike(H.deep(rows), _Profile(policy, tools)),
            ref_kwargs={"system_prompt": None, "tools": None},
            sp_source="profile" if policy else "none", tools_source="profile" if tools else "none",
            effective_context=(policy, tools),
        )


@CONFORMANCE
@given(rows=S.row_lists(max_size=4))
def test_list_with_system_prompt_and_tools_attributes(rows):
    """DECISIONS 6: a list-like source's ``system_prompt``/``tools`` attributes travel with it; the
    reference (0.105) ignores them, so it gets them as explicit arguments (``d6_list_attributes``)."""
    d6_list_attributes = {"system_prompt": "Be brief.", "tools": SIDECAR["tools"]}

    def ours_source():
        src = _RowsWithContext(H.deep(rows))
        src.system_prompt, src.tools = d6_list_attributes["system_prompt"], d6_list_attributes["tools"]
        return src

    with tempfile.TemporaryDirectory() as d:
        check_export_dataset(
            ref, ours, rows, Path(d), fmt="openai", mask_mode="assistant", unroll=False, strip_think=True,
            system_prompt=None, tools=None, cap=None, validate=False, our_source=ours_source,
            ref_kwargs=d6_list_attributes, sp_source="profile", tools_source="profile",
        )


def test_explicit_arguments_win_over_sidecar(tmp_path):
    """DECISIONS 6: explicit arguments always win; the report says so."""
    rows = [{"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "ok"}],
             "final_text": "It shipped.", "reward": 1}]
    src = write_jsonl(tmp_path / "ours" / "run.jsonl", rows)
    (tmp_path / "ours" / "run.meta.json").write_text(json.dumps(SIDECAR))
    check_export_dataset(
        ref, ours, rows, tmp_path, fmt="openai", mask_mode="assistant", unroll=False, strip_think=True,
        system_prompt="Explicit.", tools=[], cap=None, validate=True,
        ref_source=lambda ref_rows: write_jsonl(tmp_path / "ref" / "run.jsonl", ref_rows),
        our_source=lambda: src, path_source=src, sp_source="argument", tools_source="argument",
    )


@pytest.mark.parametrize("validate", [True, False])
@CONFORMANCE
@given(rows=S.row_lists(max_size=5))
def test_generator_source_read_once(validate, rows):
    """DECISIONS 5: a generator is read once, so ours on a generator equals the reference on a list
    (the reference re-reads the exhausted generator and its leak check sees nothing, E49)."""
    with tempfile.TemporaryDirectory() as d:
        check_export_dataset(
            ref, ours, rows, Path(d), fmt="openai", mask_mode="assistant", unroll=False, strip_think=True,
            system_prompt="S", tools=None, cap=None, validate=validate,
            our_source=lambda: (r for r in H.deep(rows)),
        )


def test_output_is_source_refused(tmp_path):
    """DECISIONS 4: the reference overwrites the source (E45); ours refuses and writes nothing."""
    rows = [{"prompt": "p", "final_text": "x", "reward": 1}]
    r_src = write_jsonl(tmp_path / "r" / "run.jsonl", rows)
    ref.export_dataset(str(r_src), str(r_src), system_prompt="S")
    assert "messages" in json.loads(r_src.read_text().splitlines()[0])  # overwritten by the reference
    o_src = write_jsonl(tmp_path / "o" / "run.jsonl", rows)
    before = o_src.read_bytes()
    (tmp_path / "o" / "link.jsonl").symlink_to(o_src)
    for out in (o_src, str(o_src), tmp_path / "o" / "link.jsonl", tmp_path / "o" / "." / "run.jsonl"):
        with pytest.raises(ValueError) as e:
            ours.export_dataset(str(o_src), out, system_prompt="S")
        assert H.leading_token(e.value) == "output_is_source"
        assert o_src.read_bytes() == before


def test_malformed_line_names_file_and_line(tmp_path):
    """DECISIONS 7: the reference raises a bare JSONDecodeError; ours a ValueError ``bad_jsonl:
    <path>:<line>: <reason>`` (1-based, blank lines counted as lines, never skipped past)."""
    src = tmp_path / "run.jsonl"
    src.write_text('{"prompt": "a", "final_text": "b"}\n\n{"prompt": "c", \n', encoding="utf-8")
    with pytest.raises(ValueError) as r:
        ref.export_dataset(str(src), tmp_path / "r.jsonl", system_prompt="S")
    assert isinstance(r.value, json.JSONDecodeError)
    with pytest.raises(ValueError) as o:
        ours.export_dataset(str(src), tmp_path / "o.jsonl", system_prompt="S")
    assert str(o.value).startswith(f"bad_jsonl: {src}:3: "), str(o.value)
    assert not (tmp_path / "o.jsonl").exists()


def test_invalid_utf8_is_bad_jsonl(tmp_path):
    """DECISIONS 7: invalid UTF-8 is the same kind of error."""
    src = tmp_path / "run.jsonl"
    src.write_bytes(b'{"prompt": "a", "final_text": "b"}\n{"prompt": "\xff\xfe"}\n')
    with pytest.raises(ValueError) as o:
        ours.export_dataset(str(src), tmp_path / "o.jsonl", system_prompt="S")
    assert str(o.value).startswith(f"bad_jsonl: {src}:2: "), str(o.value)


def test_empty_list_source_matches_reference(tmp_path):
    """E47: an empty source writes a 0-byte file with n 0 on both sides."""
    check_export_dataset(ref, ours, [], tmp_path, fmt="openai", mask_mode="assistant", unroll=False,
                         strip_think=True, system_prompt=None, tools=None, cap=None, validate=True)
    assert (tmp_path / "ours" / "out.jsonl").read_bytes() == b""


@pytest.mark.parametrize("bad", [{"format": "fireworks"}, {"mask_mode": "all"}])
def test_bad_options_match_reference(tmp_path, bad):
    kw = {"format": "openai", "mask_mode": "assistant"}
    kw.update(bad)
    H.assert_error_starts_like_reference(lambda: ref.export_dataset([], tmp_path / "r.jsonl", **kw),
                                         lambda: ours.export_dataset([], tmp_path / "o.jsonl", **kw))
    if "format" in bad:
        H.assert_error_starts_like_reference(
            lambda: ref.export_preference([], tmp_path / "r.jsonl", format="fireworks"),
            lambda: ours.export_preference([], tmp_path / "o.jsonl", format="fireworks"))


def test_nan_reward_written_as_null(tmp_path):
    """DECISIONS 1 on the smallest case: the reference writes a bare NaN token, ours null."""
    rows = [{"prompt": "p", "final_text": "x", "reward": math.nan, "scenario_id": "s"},
            {"prompt": "p", "final_text": "y", "reward": math.inf, "scenario_id": "s"}]
    check_export_dataset(ref, ours, rows, tmp_path, fmt="openai", mask_mode="assistant", unroll=False,
                         strip_think=True, system_prompt=None, tools=None, cap=None, validate=True)
    assert b"NaN" in (tmp_path / "ref" / "out.jsonl").read_bytes()


@pytest.mark.parametrize("from_file", [False, True], ids=["list", "file"])
def test_rows_that_are_not_objects_are_skipped_and_said(tmp_path, from_file):
    """DECISIONS 15 counts rows that are not objects (``rows_skipped``); the spec skips them without a word,
    so a whole JSON array of rows written on one line exported to an empty file. Ours also warns."""
    row = {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "ok"}],
           "final_text": "It shipped.", "reward": 1}
    rows = [[dict(row), dict(row, reward=0)], row, None, 5]
    kw = {}
    if from_file:
        src = write_jsonl(tmp_path / "ours" / "run.jsonl", rows)
        kw = dict(ref_source=lambda ref_rows: write_jsonl(tmp_path / "ref" / "run.jsonl", ref_rows),
                  our_source=lambda: src, path_source=src, sp_source="argument", tools_source="argument")
    check_export_dataset(ref, ours, rows, tmp_path, fmt="openai", mask_mode="assistant", unroll=False,
                         strip_think=True, system_prompt="S", tools=[], cap=None, validate=True, **kw)
