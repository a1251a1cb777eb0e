"""An export that fails (or has nothing to write) leaves no empty folders it made for its output."""

import orjson
import pytest

import whileai_pipeline as w
from whileai_pipeline.core.atomic import atomic_file, make_parents, remove_made
from whileai_pipeline.core.errors import PrivilegedLeakError

SECRET = "the refund code is QX-7731-PLUM"


def _rows(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _leaking_run(tmp_path):
    return _rows(tmp_path / "run.jsonl", [{
        "messages": [{"role": "user", "content": "what is my code?"}, {"role": "assistant", "content": SECRET}],
        "privileged": {"reference": SECRET}, "reward": 1.0}])


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_refused_sft_export_removes_the_folders_it_made(tmp_path):
    src = _leaking_run(tmp_path)
    with pytest.raises(PrivilegedLeakError):
        w.export_dataset(src, tmp_path / "out" / "a" / "sft.jsonl")
    assert _tree(tmp_path) == ["run.jsonl"]


def test_refused_multi_format_export_removes_a_folder_both_formats_share(tmp_path):
    src = _leaking_run(tmp_path)
    outputs = {"openai": tmp_path / "new" / "sft.openai.jsonl", "trl": tmp_path / "new" / "sft.trl.jsonl"}
    with pytest.raises(PrivilegedLeakError):
        w.export_datasets(src, outputs)
    assert _tree(tmp_path) == ["run.jsonl"]


def test_refused_preference_export_removes_the_folders_it_made(tmp_path):
    src = _leaking_run(tmp_path)  # rows, not pairs: refused
    with pytest.raises(ValueError, match="chosen/rejected"):
        w.export_preference(src, tmp_path / "out" / "dpo.jsonl")
    assert _tree(tmp_path) == ["run.jsonl"]


def test_a_folder_that_was_there_stays_and_a_published_file_keeps_its_folder(tmp_path):
    src = _leaking_run(tmp_path)
    (tmp_path / "kept").mkdir()
    with pytest.raises(PrivilegedLeakError):
        w.export_dataset(src, tmp_path / "kept" / "sft.jsonl")
    assert _tree(tmp_path) == ["kept", "run.jsonl"]
    w.export_dataset(src, tmp_path / "made" / "sft.jsonl", validate=False)
    assert _tree(tmp_path) == ["kept", "made", "made/sft.jsonl", "run.jsonl"]


def test_atomic_file_removes_the_folders_it_made_when_the_write_fails(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_file(tmp_path / "x" / "y" / "f.json") as fh:
            fh.write(b"{}")
            raise RuntimeError("stop")
    assert _tree(tmp_path) == []


def test_remove_made_stops_at_a_folder_that_holds_something(tmp_path):
    made = make_parents(tmp_path / "a" / "b" / "c")
    assert made == [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"]
    (tmp_path / "a" / "other").write_text("someone else's")
    remove_made(made)
    assert _tree(tmp_path) == ["a", "a/other"]
    assert make_parents(tmp_path / "a") == []


def test_make_parents_removes_what_it_made_when_a_deeper_mkdir_is_refused(tmp_path, monkeypatch):
    real_mkdir = type(tmp_path).mkdir

    def mkdir(self, *args, **kwargs):
        if self.name == "c":
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(type(tmp_path), "mkdir", mkdir)
    with pytest.raises(PermissionError):
        make_parents(tmp_path / "a" / "b" / "c")
    assert _tree(tmp_path) == []


def test_a_file_where_the_folder_goes_is_the_error_it_always_was(tmp_path):
    (tmp_path / "stage").write_bytes(b"")
    with pytest.raises(FileExistsError):
        make_parents(tmp_path / "stage")
    with pytest.raises(NotADirectoryError):
        make_parents(tmp_path / "stage" / "inner" / "deeper")
    assert _tree(tmp_path) == ["stage"]
