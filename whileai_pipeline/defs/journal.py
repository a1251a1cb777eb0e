"""Renames that must all happen or none: a file and its sidecar staged together, the formats and reports
of one export published together.

Each is one system call, and a process killed between two of them (the OOM killer, Ctrl-C) left a new
file beside an old one: new scored rows beside the previous run's system prompt and tools, which the
next re-export then published together. So the renames (and removals) are first written down in a
journal beside the files, then done, and the journal is deleted last. Every step of a run finishes the
journals it finds under the run's lock (``finish_all``) before it reads or writes anything, so a set of
renames a crash interrupted is completed, never left half done.
"""

import contextlib
import os
from pathlib import Path

import orjson

from whileai_pipeline.core.atomic import fsync_dir
from whileai_pipeline.core.jsonl import write_json

SUFFIX = ".journal.json"


def commit(journal: Path, moves, remove=()) -> None:
    """Rename each ``(staged, dest)`` of ``moves`` and delete each path of ``remove``, journaled first in
    ``journal`` (a file name ending in ``.journal.json``, in the folder of the staged files)."""
    write_json(journal, {"moves": [[str(staged), str(dest)] for staged, dest in moves],
                         "remove": [str(path) for path in remove]})
    finish(journal)


def finish(journal: Path) -> None:
    """Carry out a journal: rename every staged file still in place onto its destination, remove the
    paths to remove, then delete the journal. Run again after a crash, it does what is left (a staged
    file already renamed is no longer there)."""
    plan = orjson.loads(Path(journal).read_bytes())
    touched = set()
    for staged, dest in plan["moves"]:
        if os.path.lexists(staged):
            os.replace(staged, dest)
            touched.add(os.path.dirname(dest))
    for path in plan["remove"]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            touched.add(os.path.dirname(path))
    for directory in touched:
        fsync_dir(directory)
    os.unlink(journal)


def finish_all(stage_dir: Path) -> list:
    """Finish the journals a killed step left in a run's stage folder and its candidate folders; returns
    them. Call it holding the run's lock, before anything else of the run is read or written."""
    journals = pending(stage_dir)
    for journal in journals:
        finish(journal)
    return [str(j) for j in journals]


def pending(stage_dir: Path) -> list:
    """The journals a killed step left in a run's stage folder and its candidate folders: renames the next
    step of the run carries out before it reads anything (the schedule re-exports such a run)."""
    return sorted(Path(stage_dir).glob(f".*{SUFFIX}")) + sorted(Path(stage_dir).glob(f"candidates/*/*{SUFFIX}"))
