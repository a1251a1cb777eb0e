"""The output's folder is removed while a pooled export runs (a cleanup job, a user tidying up).

The workers' part files go there, so a worker's write failed with a bare ``FileNotFoundError`` naming a
hidden ``.out.jsonl.<pid>.….part.tmp`` file the user never asked for, and nothing saying what to do.
It is now the output's own ``write_failed`` error, as in one process.
"""

import shutil

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import parallel, progress

from .test_source_rewritten import KINDS, _export, _once_at, _source


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "pairs"])  # pairs writes nothing before its 2nd pass
def test_an_output_folder_removed_mid_export_is_write_failed(tmp_path, monkeypatch, kind):
    src = _source(tmp_path, kind)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)  # many chunks: parts still to write when it goes
    monkeypatch.setattr(progress, "EVERY_ROWS", 50)
    out = tmp_path / "out" / "out.jsonl"
    out.parent.mkdir()

    def remove_folder():
        while out.parent.exists():  # the workers may add a part file while it goes
            shutil.rmtree(out.parent, ignore_errors=True)

    with pytest.raises(wai.WriteFailedError) as failed:
        _export(kind, src, out, 2, _once_at(100, remove_folder))
    # both formats: the error names the output whose part file a worker could not write, either of the two
    named = [out, out.with_name("out.trl.jsonl")] if "both" in kind else [out]
    assert any(str(failed.value).startswith(f"write_failed: {o}: No such file or directory; nothing was published")
               for o in named), failed.value
    assert "Choose an output directory that exists or can be created" in str(failed.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == [src.name]


@pytest.mark.parametrize("kind", ["grouped, both formats", "preference, both formats"])
def test_the_folder_of_the_second_format_removed_mid_export_is_that_output_s_write_failed(tmp_path, monkeypatch,
                                                                                         kind):
    """Each format's parts go beside its own output. Only the first output's parts were recognised, so a
    worker that could not write the trl part (its folder removed) failed the export with a bare
    ``FileNotFoundError`` naming a hidden part file; seen in CI when the shared folder went between the
    worker's two opens."""
    src = _source(tmp_path, "preference" if kind.startswith("preference") else "grouped")
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(progress, "EVERY_ROWS", 50)
    outputs = {"openai": tmp_path / "a" / "sft.openai.jsonl", "trl": tmp_path / "b" / "sft.trl.jsonl"}
    for path in outputs.values():
        path.parent.mkdir()

    def remove_folder():
        while outputs["trl"].parent.exists():
            shutil.rmtree(outputs["trl"].parent, ignore_errors=True)

    export = wai.export_preferences if kind.startswith("preference") else wai.export_datasets
    with pytest.raises(wai.WriteFailedError) as failed:
        export(src, outputs, validate=False, workers=2, progress=_once_at(100, remove_folder))
    assert str(failed.value).startswith(f"write_failed: {outputs['trl']}: No such file or directory; nothing was "
                                        "published")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", src.name]
