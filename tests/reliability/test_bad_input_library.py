"""Issue 6.1 through the library: every bad input gives its exact outcome, no debris, source untouched."""

import errno
import os

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import output as output_mod

from .cases import CASES, GOOD_LINE


def _subset(actual, expected):
    for key, value in expected.items():
        if isinstance(value, dict):
            _subset(actual[key], value)
        else:
            assert actual[key] == value, key


def _write_run(tmp_path, case):
    run = tmp_path / "run.jsonl"
    run.write_bytes(case.run)
    if case.sidecar is not None:
        (tmp_path / "run.meta.json").write_bytes(case.sidecar)
    return run


def _listing(directory):
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_through_the_library(tmp_path, case):
    run = _write_run(tmp_path, case)
    before = run.read_bytes()
    listing = _listing(tmp_path)
    out = tmp_path / "out" / "sft.jsonl"
    if case.error is not None:
        with pytest.raises(case.error) as info:
            wai.export_dataset(run, out)
        message = str(info.value)
        assert isinstance(info.value, ValueError)
        assert message.startswith(case.token), message
        if case.line is not None:
            assert f"{run}:{case.line}" in message, message
        assert not out.exists()
        assert not (out.parent.exists() and os.listdir(out.parent)), "debris left beside the output"
    else:
        report = wai.export_dataset(run, out)
        assert report["n"] == report["n_written"] == case.n
        assert len(out.read_bytes().splitlines()) == case.n
        _subset(report, case.report)
        assert _listing(out.parent) == ["sft.jsonl"]
    assert run.read_bytes() == before
    assert _listing(tmp_path) == sorted(listing + (["out"] if out.parent.exists() else []))


def test_at_least_forty_cases():
    assert len(CASES) >= 40


def test_output_dir_that_cannot_be_created(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    with pytest.raises(wai.WriteFailedError, match=r"^write_failed: .*not-a-dir/out.jsonl: "):
        wai.export_dataset(run, blocker / "out.jsonl")
    assert _listing(tmp_path) == ["not-a-dir", "run.jsonl"]


def test_output_dir_not_writable(tmp_path, monkeypatch):
    # Tests run as root, which ignores permission bits, so the refusal is injected where the OS gives it.
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(output_mod, "temp_beside", refuse)
    with pytest.raises(wai.WriteFailedError, match="^write_failed: .*Permission denied"):
        wai.export_dataset(run, tmp_path / "out.jsonl")
    assert _listing(tmp_path) == ["run.jsonl"]


def test_disk_full_mid_write_keeps_previous_export(tmp_path, monkeypatch):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE * 50)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"previous export\n")
    real_write = output_mod.Spool._write
    calls = {"n": 0}

    def full(self, *args):
        calls["n"] += 1
        if calls["n"] == 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, *args)

    monkeypatch.setattr(output_mod.Spool, "_write", full)
    with pytest.raises(wai.WriteFailedError, match="^write_failed: .*No space left on device"):
        wai.export_dataset(run, out)
    assert out.read_bytes() == b"previous export\n"
    assert _listing(tmp_path) == ["out.jsonl", "run.jsonl"]


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "same_path_spelled_differently"])
def test_output_that_is_the_source(tmp_path, kind):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    if kind == "symlink":
        target = tmp_path / "link.jsonl"
        target.symlink_to(run)
    elif kind == "hardlink":
        target = tmp_path / "hard.jsonl"
        os.link(run, target)
    else:
        target = tmp_path / "sub" / ".." / "run.jsonl"
        (tmp_path / "sub").mkdir()
    with pytest.raises(wai.OutputIsSourceError, match="^output_is_source: "):
        wai.export_dataset(run, target)
    assert run.read_bytes() == GOOD_LINE


def test_output_is_a_directory(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    (tmp_path / "out.jsonl").mkdir()
    with pytest.raises(wai.WriteFailedError, match="^write_failed: "):
        wai.export_dataset(run, tmp_path / "out.jsonl")
    assert _listing(tmp_path) == ["out.jsonl", "run.jsonl"]
    assert os.listdir(tmp_path / "out.jsonl") == []


@pytest.mark.parametrize("call", [
    lambda src, out: wai.export_dataset(src, out),
    lambda src, out: wai.export_preference(src, out),
    lambda src, out: wai.load_run(src),
], ids=["export_dataset", "export_preference", "load_run"])
def test_missing_source_and_directory_source_are_told_apart(tmp_path, call):
    out = tmp_path / "out.jsonl"
    with pytest.raises(FileNotFoundError, match=r"^no such (source|run) file: .*nope\.jsonl \(pass ") as info:
        call(tmp_path / "nope.jsonl", out)
    assert not isinstance(info.value, IsADirectoryError)
    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match=r"runs is a directory, not a (source|run) file: pass a \.jsonl "
                                                r"file in it, e\.g\. .*runs/<name>\.jsonl$"):
        call(folder, out)
    assert _listing(tmp_path) == ["runs"]
