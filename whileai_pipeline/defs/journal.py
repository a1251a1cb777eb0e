"""Renames that must all happen or none: a file and its sidecar staged together, the formats and reports
of one export published together.

Each is one system call, and a process killed between two of them (the OOM killer, Ctrl-C) left a new
file beside an old one: new scored rows beside the previous run's system prompt and tools, which the
next re-export then published together. So the renames (and removals) are first written down in a
journal beside the files, then done, and the journal is deleted last.

A set of renames a step could not complete is settled in one of two directions:

* forward, after a crash: every step of a run finishes the journals it finds under the run's lock
  (``finish_all``) before it reads or writes anything. A killed process can do nothing more, and the
  staged files hold the whole new set, so completing it is what always works.
* back, when a rename or removal is refused (EPERM, EACCES: an immutable file, another user's file in a
  sticky folder): the process is alive, and doing the journal again would be refused again, so the
  files already replaced get their previous version back (``rollback``). ``commit`` keeps each file it
  replaces or removes as a hard link beside the staged files before the journal is written, so putting
  it back is a rename too: the same bytes, mode and owner. A file that cannot be hard-linked (another
  filesystem) cannot be put back: that journal is left as it is, naming what was replaced, and so is an
  undo that was refused too; the run's next step settles either (``finish_all``), so the folder holding
  a journal is kept (``left_in``).

A journal names its files relative to its own folder: a storage root moved or copied after a crash is
finished where it now is (absolute names, as journals of earlier versions hold, read as themselves).
"""

import contextlib
import os
from pathlib import Path

import orjson

from whileai_pipeline.core.atomic import fsync_dir
from whileai_pipeline.core.errors import WriteFailedError
from whileai_pipeline.core.jsonl import write_json

SUFFIX = ".journal.json"


def commit(journal: Path, moves, remove=()) -> None:
    """Rename each ``(staged, dest)`` of ``moves`` and delete each path of ``remove``, journaled first in
    ``journal`` (a file name ending in ``.journal.json``, in the folder of the staged files). When one is
    refused, those already done are put back (``rollback``) and the error is raised."""
    journal = Path(journal)
    kept = {}  # each destination or path to remove that exists: its kept copy, or None when none could be made
    for i, path in enumerate([str(dest) for _, dest in moves] + [str(path) for path in remove]):
        if os.path.lexists(path):
            copy = str(journal.with_name(f".{journal.name[:-len(SUFFIX)].lstrip('.')}.previous{i}.tmp"))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(copy)  # one a killed step left: not a copy of this file
            try:
                os.link(path, copy, follow_symlinks=False)
            except OSError:  # another filesystem (EXDEV), a file the kernel will not link (EPERM)
                copy = None
            kept[path] = copy
    _write(journal, [[str(staged), str(dest)] for staged, dest in moves], [str(path) for path in remove], kept=kept)
    try:
        finish(journal)
    except OSError as exc:
        try:
            rollback(journal)
        except (OSError, WriteFailedError) as failed:  # the latter: no room for the undo journal
            exc.add_note(f"putting back the files already replaced failed too: {failed}")
        raise


def _write(journal: Path, moves, remove, **extra) -> None:
    """Write a journal, its paths relative to its folder (``_read`` makes them whole again)."""
    here = os.path.dirname(os.path.abspath(journal))

    def rel(path):
        return os.path.relpath(path, here)

    if "kept" in extra:
        extra["kept"] = {rel(path): rel(copy) if copy else None for path, copy in extra["kept"].items()}
    write_json(journal, {"moves": [[rel(staged), rel(dest)] for staged, dest in moves],
                         "remove": [rel(path) for path in remove], **extra})


def _read(journal: Path) -> dict:
    """A journal with the paths it names made whole from its folder, where that folder is now."""
    plan = orjson.loads(Path(journal).read_bytes())
    here = os.path.dirname(os.path.abspath(journal))

    def whole(path):
        return os.path.normpath(os.path.join(here, path))  # an absolute name stays as it is

    plan["moves"] = [[whole(staged), whole(dest)] for staged, dest in plan["moves"]]
    plan["remove"] = [whole(path) for path in plan["remove"]]
    if plan.get("kept"):
        plan["kept"] = {whole(path): whole(copy) if copy else None for path, copy in plan["kept"].items()}
    return plan


def finish(journal: Path, recovering: bool = False) -> None:
    """Carry out a journal: rename every staged file still in place onto its destination, remove the
    paths to remove, then delete the kept copies and the journal. Run again after a crash (``recovering``),
    it does what is left (a staged file already renamed is no longer there), and nothing in a destination
    folder removed since (``published/<run>/`` cleared by hand): that folder is not made again to hold the
    part of the set not yet renamed."""
    plan = _read(journal)
    touched = set()
    for staged, dest in plan["moves"]:
        if os.path.lexists(staged):
            if recovering and not os.path.isdir(os.path.dirname(dest)):
                continue
            os.replace(staged, dest)
            touched.add(os.path.dirname(dest))
    for path in plan["remove"]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            touched.add(os.path.dirname(path))
    for directory in touched:
        fsync_dir(directory)
    for copy in (plan.get("kept") or {}).values():
        if copy:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(copy)
    os.unlink(journal)


def rollback(journal: Path) -> bool:
    """Undo what ``finish`` did of a journal: put back the kept copy of each file replaced or removed,
    remove each destination that did not exist before; returns whether it did (False, touching nothing,
    when a replaced or removed file has no kept copy).

    The undoing is itself a journal written over this one (``undo``: the kept copies are its staged
    files), so a crash half-way through it is completed by ``finish_all`` like any other."""
    plan = _read(journal)
    kept = plan.get("kept") or {}
    moves, remove = [], []
    for staged, dest in plan["moves"]:
        if not os.path.lexists(staged):  # done
            if dest not in kept:
                remove.append(dest)  # there was no file there
            elif kept[dest]:
                moves.append([kept[dest], dest])
            else:
                return False
    for path in plan["remove"]:
        if not os.path.lexists(path) and path in kept:  # done
            if not kept[path]:
                return False
            moves.append([kept[path], path])
    restored = {copy for copy, _ in moves}
    for copy in kept.values():  # the copies of files left in place
        if copy and copy not in restored:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(copy)
    _write(journal, moves, remove, undo=True)
    finish(journal)
    return True


def replaced(journal: Path) -> list:
    """The destinations that hold a new file of ``journal`` (a journal ``commit`` left after a refusal)."""
    plan = _read(journal)
    if plan.get("undo"):  # a rollback that failed half-way: what it has not put back yet
        return [dest for copy, dest in plan["moves"] if os.path.lexists(copy)] + [
            path for path in plan["remove"] if os.path.lexists(path)]
    return [dest for staged, dest in plan["moves"] if not os.path.lexists(staged)]


def undoing(journal: Path) -> bool:
    """Whether ``journal`` is a put-back (``rollback``) that was itself refused half-way."""
    return bool(orjson.loads(Path(journal).read_bytes()).get("undo"))


def finish_all(stage_dir: Path) -> list:
    """Finish the journals a killed step left in a run's stage folder and its candidate folders; returns
    them. Call it holding the run's lock, before anything else of the run is read or written."""
    journals = pending(stage_dir)
    for journal in journals:
        finish(journal, recovering=True)
    return [str(j) for j in journals]


def left_in(folder: Path) -> list:
    """The journals in ``folder`` itself (a candidate folder whose publish was refused and not undone)."""
    return sorted(Path(folder).glob(f"*{SUFFIX}"))


def pending(stage_dir: Path) -> list:
    """The journals a killed step left in a run's stage folder and its candidate folders: renames the next
    step of the run carries out before it reads anything (the schedule re-exports such a run)."""
    return sorted(Path(stage_dir).glob(f".*{SUFFIX}")) + sorted(Path(stage_dir).glob(f"candidates/*/*{SUFFIX}"))
