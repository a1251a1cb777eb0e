"""The journal's renames on real files: a refused one puts back what was already replaced (whole or not at
all), a crash is completed by the next step (``finish_all``)."""

import errno
import os
import shutil

import orjson
import pytest

from whileai_pipeline.defs import journal
from whileai_pipeline.defs.assets import _put_in_place
from whileai_pipeline.defs.resources import incoming_path as _incoming, meta_path_for

pytestmark = pytest.mark.pipeline

OLD = {"sft.openai.jsonl": b"old openai\n", "sft.openai.report.json": b'{"old": 1}\n',
       "sft.trl.jsonl": b"old trl\n", "sft.trl.report.json": b'{"old": 2}\n'}
NEW = {"sft.openai.jsonl": b"new openai\n", "sft.openai.report.json": b'{"new": 1}\n',
       "sft.chatml.jsonl": b"new chatml, a format not published before\n"}
REMOVED = ("sft.trl.jsonl", "sft.trl.report.json")


class Killed(BaseException):
    """SIGKILL, as far as the code under test can tell: nothing after it runs."""


def _snapshot(folder):
    """{name: (bytes, mode, inode)}: a file put back is the very file that was there."""
    return {p.name: (p.read_bytes(), os.stat(p).st_mode, os.stat(p).st_ino) for p in sorted(folder.iterdir())}


@pytest.fixture
def export(tmp_path):
    """A run's folders: ``published/`` with an earlier export (a mode a trainer reads), a candidate folder
    with this export's staged files; returns (stage folder, journal, moves, removals, published folder)."""
    out = tmp_path / "published" / "run"
    out.mkdir(parents=True)
    for name, data in OLD.items():
        (out / name).write_bytes(data)
        os.chmod(out / name, 0o640)
    stage = tmp_path / "stages" / "run"
    cand = stage / "candidates" / "0123abcd"
    cand.mkdir(parents=True)
    moves = []
    for name, data in NEW.items():
        (cand / name).write_bytes(data)
        moves.append((cand / name, out / name))
    return stage, cand / f"publish-sft{journal.SUFFIX}", moves, [out / name for name in REMOVED], out


def _refusing(monkeypatch, call, refused):
    """``os.<call>`` refuses ``refused`` (EACCES) as an immutable file or another user's file in a sticky
    folder would; every other path goes through."""
    real = getattr(os, call)

    def refuse(*args, **kwargs):
        if os.fspath(args[1] if call == "replace" else args[0]) == str(refused):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, call, refuse)


def _left_in(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", journal.SUFFIX)))


@pytest.mark.parametrize("call, refused", [("replace", "sft.openai.jsonl"),  # the first rename: nothing done yet
                                           ("replace", "sft.openai.report.json"),
                                           ("replace", "sft.chatml.jsonl"),  # a destination new to the folder
                                           ("unlink", "sft.trl.report.json")])  # every rename done, one removal
def test_a_refused_rename_or_removal_puts_back_every_file_already_replaced(export, monkeypatch, call, refused):
    """A refused rename left the renames before it done and those after it not: new openai files beside
    the old trl ones, until a later export succeeded."""
    stage, jpath, moves, remove, out = export
    before = _snapshot(out)
    _refusing(monkeypatch, call, out / refused)
    with pytest.raises(PermissionError) as raised:
        journal.commit(jpath, moves, remove)
    assert raised.value.errno == errno.EACCES  # the refusal itself, not something of the rollback
    monkeypatch.undo()
    assert _snapshot(out) == before  # the same files (bytes, mode, inode), none new, none missing
    assert _left_in(jpath.parent) == []  # neither the journal nor a kept copy
    assert journal.pending(stage) == []


def test_a_commit_that_goes_through_leaves_only_the_new_files(export):
    stage, jpath, moves, remove, out = export
    journal.commit(jpath, moves, remove)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == NEW
    assert _left_in(jpath.parent) == []


def test_a_file_that_cannot_be_kept_is_named_by_the_journal_left_behind(export, monkeypatch):
    """No hard link across filesystems: the replaced file cannot be put back, so the journal stays and says
    which files are new; the next step of the run completes it."""
    stage, jpath, moves, remove, out = export

    def other_filesystem(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", other_filesystem)
    _refusing(monkeypatch, "replace", out / "sft.openai.report.json")
    with pytest.raises(PermissionError):
        journal.commit(jpath, moves, remove)
    monkeypatch.undo()
    assert journal.replaced(jpath) == [str(out / "sft.openai.jsonl")]
    assert (out / "sft.openai.jsonl").read_bytes() == NEW["sft.openai.jsonl"]
    assert journal.finish_all(stage) == [str(jpath)]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == NEW


def test_a_commit_killed_between_two_renames_is_completed_by_the_next_step(export, monkeypatch):
    """Crash recovery rolls forward: the staged files hold the whole new export, and a killed process
    cannot put anything back."""
    stage, jpath, moves, remove, out = export
    real = os.replace

    def replace_then_die(src, dst):
        real(src, dst)
        if os.path.dirname(dst) == str(out):  # the first rename into published/, not the journal's own
            raise Killed

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(Killed):
        journal.commit(jpath, moves, remove)
    monkeypatch.undo()
    assert (out / "sft.openai.jsonl").read_bytes() == NEW["sft.openai.jsonl"]
    assert (out / "sft.trl.jsonl").read_bytes() == OLD["sft.trl.jsonl"]  # old and new side by side
    assert journal.finish_all(stage) == [str(jpath)]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == NEW
    assert _left_in(jpath.parent) == []


def test_a_rollback_killed_half_way_is_completed_by_the_next_step(export, monkeypatch):
    """The putting back is journaled too: a kill while it runs leaves the earlier export to finish putting
    back, never a mix."""
    stage, jpath, moves, remove, out = export
    before = _snapshot(out)
    real = os.replace

    def refuse_then_die_putting_back(src, dst):
        if os.fspath(dst) == str(out / "sft.chatml.jsonl"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src))
        if os.path.basename(src).startswith(".publish-sft.previous"):  # putting back the first kept copy
            real(src, dst)
            raise Killed
        return real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_then_die_putting_back)
    with pytest.raises(Killed):
        journal.commit(jpath, moves, remove)
    monkeypatch.undo()
    assert journal.finish_all(stage) == [str(jpath)]
    assert _snapshot(out) == before
    assert _left_in(jpath.parent) == []


def test_a_stage_and_its_sidecar_are_put_back_together(tmp_path, monkeypatch):
    """The stage journals get the same: refused on the sidecar, the new rows do not stay beside the
    previous run's system prompt and tools."""
    stage = tmp_path / "scored.jsonl"
    meta = meta_path_for(stage)
    stage.write_bytes(b"old rows\n")
    meta.write_bytes(b'{"system_prompt": "old"}\n')
    before = _snapshot(tmp_path)
    _incoming(stage).write_bytes(b"new rows\n")
    _incoming(meta).write_bytes(b'{"system_prompt": "new"}\n')
    _refusing(monkeypatch, "replace", meta)
    with pytest.raises(PermissionError):
        _put_in_place(stage, _incoming(stage), True)
    monkeypatch.undo()
    after = _snapshot(tmp_path)
    assert {name: after[name] for name in before} == before
    assert journal.pending(tmp_path) == []
    assert [name for name in after if name.endswith(".tmp")] == []


def test_a_rollback_that_fails_raises_the_refusal_and_leaves_what_to_put_back(export, monkeypatch):
    """Putting back refused too: the error raised is still the rename's (with a note), and the journal left
    says which files are not the earlier ones yet; the next ``finish_all`` completes the putting back."""
    stage, jpath, moves, remove, out = export
    before = _snapshot(out)
    real = os.replace

    def refuse_chatml_and_putting_back(src, dst):
        if os.fspath(dst) == str(out / "sft.chatml.jsonl"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src))
        if os.path.basename(src).startswith(".publish-sft.previous"):
            raise OSError(errno.EIO, "Input/output error", os.fspath(src))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_chatml_and_putting_back)
    with pytest.raises(PermissionError) as raised:
        journal.commit(jpath, moves, remove)
    monkeypatch.undo()
    assert raised.value.filename.endswith("sft.chatml.jsonl")
    assert any("putting back" in note for note in raised.value.__notes__)
    assert journal.replaced(jpath) == [str(out / "sft.openai.jsonl"), str(out / "sft.openai.report.json")]
    assert journal.finish_all(stage) == [str(jpath)]
    assert _snapshot(out) == before
    assert _left_in(jpath.parent) == []


def test_an_undo_journal_the_disk_cannot_take_leaves_the_refusal_raised_and_the_journal_as_it_was(export, monkeypatch):
    """A refused rename, then no room to write the undo journal: ``write_json`` raises ``WriteFailedError`` (not
    an OSError), which escaped ``commit`` in place of the refusal, and the export step took it for something
    else and rolled the journal forward. Now the refusal is raised, with a note, and the journal is left for
    the run's next step."""
    from whileai_pipeline.core.errors import WriteFailedError

    stage, jpath, moves, remove, out = export
    _refusing(monkeypatch, "replace", out / "sft.chatml.jsonl")
    real_write = journal.write_json

    def full_disk_for_the_undo(path, value, **kwargs):
        if value.get("undo"):
            raise WriteFailedError(path, OSError(errno.ENOSPC, "No space left on device"))
        return real_write(path, value, **kwargs)

    monkeypatch.setattr(journal, "write_json", full_disk_for_the_undo)
    with pytest.raises(PermissionError) as raised:
        journal.commit(jpath, moves, remove)
    assert any("putting back the files already replaced failed too" in note for note in raised.value.__notes__)
    assert not journal.undoing(jpath)
    assert journal.replaced(jpath) == [str(out / "sft.openai.jsonl"), str(out / "sft.openai.report.json")]


def _killed_after_the_first_rename(monkeypatch, jpath, moves, remove, out):
    real = os.replace

    def replace_then_die(src, dst):
        real(src, dst)
        if os.path.dirname(dst) == str(out):
            raise Killed

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(Killed):
        journal.commit(jpath, moves, remove)
    monkeypatch.undo()


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_journal_is_finished_where_the_storage_root_now_is(export, monkeypatch, tmp_path, how):
    """The journal named its files by absolute path. A storage root moved (or copied, the old one kept) after a
    step was killed between two renames: the next step found none of the staged files at their old paths, did
    nothing and deleted the journal, leaving the new openai file beside the old trl files for good; with the
    old root kept, it completed the publish there instead, in a folder no step reads any more."""
    stage, jpath, moves, remove, out = export
    _killed_after_the_first_rename(monkeypatch, jpath, moves, remove, out)
    old = _snapshot(out)
    new_root = tmp_path / "elsewhere"
    new_root.mkdir()
    for name in ("stages", "published"):
        (os.rename if how == "moved" else shutil.copytree)(tmp_path / name, new_root / name)
    new_stage, new_out = new_root / "stages" / "run", new_root / "published" / "run"
    assert journal.finish_all(new_stage) == [str(new_stage / "candidates" / "0123abcd" / jpath.name)]
    assert {p.name: p.read_bytes() for p in new_out.iterdir()} == NEW
    assert _left_in(new_stage / "candidates" / "0123abcd") == []
    if how == "copied":
        assert _snapshot(out) == old  # the root left behind is not written to



def test_a_journal_an_earlier_version_wrote_with_absolute_names_is_still_finished(export):
    """Journals left by a step of the version before names were relative (an upgrade between a crash and the
    next step) hold absolute names: they read as themselves."""
    stage, jpath, moves, remove, out = export
    jpath.write_bytes(orjson.dumps({"moves": [[str(s), str(d)] for s, d in moves],
                                    "remove": [str(p) for p in remove], "kept": {}}))
    assert journal.finish_all(stage) == [str(jpath)]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == NEW


def test_a_journal_whose_destination_folder_was_removed_is_finished_without_it(export, monkeypatch):
    """``published/<run>/`` removed by hand after a step was killed between two renames (the export looked
    broken, so it was cleared): every later step of the run failed on the journal (``No such file or
    directory``), however often it was materialized again."""
    stage, jpath, moves, remove, out = export
    _killed_after_the_first_rename(monkeypatch, jpath, moves, remove, out)
    shutil.rmtree(out)
    assert journal.finish_all(stage) == [str(jpath)]
    assert not out.exists()  # not made again to hold the part of the export that was not yet renamed
    assert journal.pending(stage) == []
