"""An output path that can name no file (a name longer than the filesystem takes, a path through a link
loop) is refused as a write: ``write_failed:`` naming the output and what to do, nothing left beside it.

Before, the check that the output is not the source stat'ed or resolved the path first and raised a bare
``OSError: [Errno 36] File name too long`` or ``RuntimeError: Symlink loop from ...``, although the
library's WriteFailedError has advice for exactly that ("Choose a shorter file name").
"""

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.pairs import build_pairs_file

ROW = {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "shipped"}],
       "final_text": "It shipped.", "scenario_id": "s7", "reward": 1}
LOSER = dict(ROW, final_text="No idea.", reward=0)
PAIR = {"prompt": ROW["prompt"], "chosen": ROW, "rejected": LOSER}

CALLS = ["export_dataset", "export_datasets", "export_preference", "export_preferences", "build_pairs_file"]


def _call(call, tmp_path, out):
    run = tmp_path / "run.jsonl"
    wai.write_jsonl(run, [PAIR] if "preference" in call else [ROW, LOSER])
    if call == "build_pairs_file":
        return build_pairs_file(run, out)
    fn = getattr(wai, call)
    return fn(run, {"openai": out} if call.endswith("s") else out)


@pytest.mark.parametrize("call", CALLS)
def test_a_name_too_long_for_a_file_is_write_failed_saying_so(tmp_path, monkeypatch, call):
    monkeypatch.chdir(tmp_path)  # a relative name: it is the source's folder that is resolved
    out = "x" * 300 + ".jsonl"
    with pytest.raises(wai.WriteFailedError, match=r"^write_failed: x+\.jsonl: File name too long; nothing was "
                                                   r"published.* Choose a shorter file name, then export again\.$"):
        _call(call, tmp_path, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


@pytest.mark.parametrize("call", CALLS)
def test_an_output_through_a_link_loop_is_write_failed(tmp_path, call):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    out = tmp_path / "loop" / "out.jsonl"
    with pytest.raises(wai.WriteFailedError, match=rf"^write_failed: {out}: .*nothing was published"):
        _call(call, tmp_path, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop", "run.jsonl"]


@pytest.mark.parametrize("call", CALLS)
def test_the_source_through_a_link_is_still_refused(tmp_path, call):
    """The change above keeps the guard: the source by another name is output_is_source."""
    (tmp_path / "same.jsonl").symlink_to(tmp_path / "run.jsonl")
    with pytest.raises(wai.OutputIsSourceError, match="^output_is_source: "):
        _call(call, tmp_path, tmp_path / "same.jsonl")


@pytest.mark.parametrize("call", CALLS)
def test_an_output_that_ends_with_a_slash_names_a_folder_and_is_refused(tmp_path, call):
    """``newdir/`` names a folder; pathlib drops the slash, and the export wrote a file called ``newdir``."""
    out = f"{tmp_path / 'newdir'}/"
    with pytest.raises(wai.WriteFailedError, match=rf"^write_failed: {out}: Is a directory; nothing was published.* "
                                                   r"Name a file, not a directory, as the output"):
        _call(call, tmp_path, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
