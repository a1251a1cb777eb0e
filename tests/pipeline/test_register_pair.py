"""``PipelineStorage.register`` puts a run and its sidecar into the inbox together, or neither.

Found by a review: the run was copied into the inbox first and its sidecar after it. When the sidecar's
copy failed (it was still being written, or the disk was full), the inbox held the new rows with the
previous run's system prompt and tools; the command said nothing ran, but the inbox sensor (or the next
materialization) then exported that mixed pair.
"""

import shutil

import pytest

from whileai_pipeline.core.errors import SourceChangedError

pytestmark = pytest.mark.pipeline


def _run(folder, rows, prompt):
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "night.jsonl"
    src.write_bytes(rows)
    src.with_name("night.meta.json").write_text(f'{{"system_prompt": "{prompt}"}}')
    return src


def test_a_sidecar_that_changes_while_it_is_copied_leaves_the_inbox_pair_as_it_was(storage, tmp_path, monkeypatch):
    key = storage.register(_run(tmp_path / "v1", b'{"prompt": "one"}\n', "old prompt"))
    run, meta = storage.run_path(key), storage.run_meta_path(key)
    before = (run.read_bytes(), meta.read_bytes())
    src = _run(tmp_path / "v2", b'{"prompt": "two"}\n', "new prompt")
    new_meta = src.with_name("night.meta.json")
    copy = shutil.copyfileobj

    def still_written(fin, fout, *args):  # a writer appends to the sidecar while it is copied
        copy(fin, fout, *args)
        if fin.name == str(new_meta):
            with open(new_meta, "a") as fh:
                fh.write(" ")

    monkeypatch.setattr(shutil, "copyfileobj", still_written)
    with pytest.raises(SourceChangedError, match="source_changed: .*night.meta.json"):
        storage.register(src)
    assert (run.read_bytes(), meta.read_bytes()) == before  # not the new rows with the old prompt
    assert sorted(p.name for p in run.parent.iterdir()) == ["night.jsonl", "night.meta.json"]


def test_a_run_that_changes_while_it_is_copied_leaves_the_inbox_pair_as_it_was(storage, tmp_path, monkeypatch):
    key = storage.register(_run(tmp_path / "v1", b'{"prompt": "one"}\n', "old prompt"))
    run, meta = storage.run_path(key), storage.run_meta_path(key)
    before = (run.read_bytes(), meta.read_bytes())
    src = _run(tmp_path / "v2", b'{"prompt": "two"}\n', "new prompt")
    copy = shutil.copyfileobj

    def still_written(fin, fout, *args):
        copy(fin, fout, *args)
        if fin.name == str(src):
            with open(src, "ab") as fh:
                fh.write(b'{"prompt": "three"}\n')

    monkeypatch.setattr(shutil, "copyfileobj", still_written)
    with pytest.raises(SourceChangedError, match="source_changed: .*night.jsonl"):
        storage.register(src)
    assert (run.read_bytes(), meta.read_bytes()) == before  # not the old rows with the new prompt
    assert sorted(p.name for p in run.parent.iterdir()) == ["night.jsonl", "night.meta.json"]
