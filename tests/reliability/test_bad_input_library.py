"""Issue 6.1 through the library: every bad input gives its exact outcome, no debris, source untouched."""

import errno
import os

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import spool as spool_mod

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
        assert case.says in message, message
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

    monkeypatch.setattr(spool_mod, "temp_beside", refuse)
    with pytest.raises(wai.WriteFailedError, match="^write_failed: .*Permission denied"):
        wai.export_dataset(run, tmp_path / "out.jsonl")
    assert _listing(tmp_path) == ["run.jsonl"]


def test_disk_full_mid_write_keeps_previous_export(tmp_path, monkeypatch):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE * 50)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"previous export\n")
    real_write = spool_mod.Spool._write
    calls = {"n": 0}

    def full(self, *args):
        calls["n"] += 1
        if calls["n"] == 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, *args)

    monkeypatch.setattr(spool_mod.Spool, "_write", full)
    with pytest.raises(wai.WriteFailedError, match="^write_failed: .*No space left on device"):
        wai.export_dataset(run, out)
    assert out.read_bytes() == b"previous export\n"
    assert _listing(tmp_path) == ["out.jsonl", "run.jsonl"]


def _build_pairs(run, target):
    from whileai_pipeline.core.pairs import build_pairs_file

    return build_pairs_file(run, target)


@pytest.mark.parametrize("write", [wai.export_dataset, _build_pairs], ids=["export_dataset", "build_pairs_file"])
@pytest.mark.parametrize("kind", ["the_path_itself", "symlink", "hardlink", "same_path_spelled_differently"])
def test_output_that_is_the_source(tmp_path, kind, write):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    target = run
    if kind == "symlink":
        target = tmp_path / "link.jsonl"
        target.symlink_to(run)
    elif kind == "hardlink":
        target = tmp_path / "hard.jsonl"
        os.link(run, target)
    elif kind == "same_path_spelled_differently":
        target = tmp_path / "sub" / ".." / "run.jsonl"
        (tmp_path / "sub").mkdir()
    with pytest.raises(wai.OutputIsSourceError, match="^output_is_source: "):
        write(run, target)
    assert run.read_bytes() == GOOD_LINE


def test_output_that_is_the_sources_sidecar(tmp_path):
    """The sidecar holds the system prompt and tools the export reads: writing there would lose them."""
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    sidecar = tmp_path / "run.meta.json"
    sidecar.write_bytes(b'{"system_prompt": "S", "tools": []}')
    for write in (wai.export_dataset, lambda src, out: wai.export_datasets(src, {"openai": tmp_path / "o.jsonl",
                                                                                  "trl": out})):
        with pytest.raises(wai.OutputIsSourceError, match=f"^output_is_source: {sidecar} is the sidecar of the "
                                                          f"source file {run} "):
            write(run, sidecar)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b'{"chosen": {"final_text": "a"}, "rejected": {"final_text": "b"}, "prompt": "p"}\n')
    (tmp_path / "pairs.meta.json").write_bytes(b'{"system_prompt": "S"}')
    with pytest.raises(wai.OutputIsSourceError, match="is the sidecar of the source file"):
        wai.export_preference(pairs, tmp_path / "pairs.meta.json")
    assert sidecar.read_bytes() == b'{"system_prompt": "S", "tools": []}'
    assert not (tmp_path / "o.jsonl").exists()


def test_output_at_the_name_of_a_sidecar_the_source_does_not_have_yet(tmp_path):
    """No sidecar yet: a JSONL written under its name would be read as the run's sidecar by every later export of
    the run, which would then fail with bad_sidecar until someone finds and deletes it."""
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    sidecar = tmp_path / "run.meta.json"
    with pytest.raises(wai.OutputIsSourceError, match=f"^output_is_source: {sidecar} is the name of the sidecar of "
                                                      f"the source file {run} "):
        wai.export_dataset(run, sidecar)
    assert not sidecar.exists()
    report = wai.export_dataset(run, tmp_path / "out.jsonl")  # the run still exports
    assert report["n_written"] == 1


def test_an_error_reading_the_source_is_not_a_failure_to_write_the_output(tmp_path):
    """atomic_file turned every OSError in its block into write_failed for the output."""
    from whileai_pipeline.core.judge import judge_pairs_file

    missing = tmp_path / "missing.jsonl"
    out = tmp_path / "out.jsonl"
    with pytest.raises(FileNotFoundError, match=f"^no such run file: {missing}") as info:
        judge_pairs_file(missing, out, lambda a, b: {"winner": "A"})
    assert not isinstance(info.value, wai.WriteFailedError)
    with pytest.raises(FileNotFoundError, match=f"^no such run file: {missing}"):
        wai.write_jsonl(out, wai.read_jsonl(missing))
    assert _listing(tmp_path) == []


def test_an_output_below_a_file_says_so(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    with pytest.raises(wai.WriteFailedError, match="A part of the output's path is a file, not a directory: "
                                                   "choose another output path, then export again"):
        wai.export_dataset(run, run / "out.jsonl")
    assert run.read_bytes() == GOOD_LINE


@pytest.mark.parametrize("export", ["sft", "dpo"])
def test_a_second_output_that_fails_says_the_first_was_published(tmp_path, export):
    """An export in several formats puts its files in place one after the other."""
    run = tmp_path / "run.jsonl"
    run.write_bytes(GOOD_LINE)
    first, blocked = tmp_path / "a.jsonl", tmp_path / "blocked"
    blocked.mkdir()
    if export == "sft":
        call = lambda: wai.export_datasets(run, {"openai": first, "trl": blocked})  # noqa: E731
    else:
        rows = [{"prompt": "Where is order 7?", "final_text": text, "reward": reward}
                for text, reward in (("It shipped on Monday.", 1), ("I do not know.", 0))]
        pairs, _ = wai.build_preference_pairs(rows)
        call = lambda: wai.export_preferences(pairs, {"openai": first, "trl": blocked})  # noqa: E731
    with pytest.raises(wai.WriteFailedError, match=f"^write_failed: {blocked}: Is a directory; this file was not "
                                                   f"published and any previous one there is unchanged, but {first} "
                                                   "was already published by the same call"):
        call()
    assert first.is_file()


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
