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
    assert str(failed.value).startswith(f"write_failed: {out}: No such file or directory; nothing was published")
    assert "Choose an output directory that exists or can be created" in str(failed.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == [src.name]
