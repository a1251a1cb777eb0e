"""What the inbox sensor remembers of each run file, kept in a file under the storage root.

Dagster writes a sensor's cursor into every tick it records: one tick every 30 seconds, skipped ticks
kept for 7 days and the others for good. The sensor's memory grows with the inbox, about 140 bytes a
run file, so at 1000 runs the cursor alone would be some 400 MB of tick rows a day. The memory goes to
``<root>/sensor/<sha256>.json`` instead, named by its content, and the cursor holds that name
(``state:<sha256>``, 70 bytes). Dagster still decides which memory is current: a tick that fails
keeps the old cursor, which names a file that is still there; and a tick that changes nothing writes
nothing.
"""

import hashlib
import os
from pathlib import Path

import orjson

from whileai_pipeline.core.atomic import atomic_file

PREFIX = "state:"
KEEP = 8  # the newest state files kept besides the two a tick reads and writes (older cursors, a tick that failed)


def state_dir(storage) -> Path:
    return storage.base / "sensor"


def load(storage, cursor):
    """``(state, problem)``: the dict the cursor names, and None; or ``{}`` and a sentence saying why
    the memory is lost (every inbox file is then hashed again). A cursor from before this module held
    the dict itself, and is read as it is."""
    if not cursor:
        return {}, None
    if not cursor.startswith(PREFIX):
        try:
            state = orjson.loads(cursor)
        except orjson.JSONDecodeError:
            state = None
        # each run's entry an object with a whole version number, as this sensor wrote them (a "_" entry is a list)
        if isinstance(state, dict) and all(isinstance(v, dict) and type(v.get("n", 1)) is int
                                           for k, v in state.items() if not k.startswith("_")):
            return state, None
        return {}, f"its cursor {cursor[:80]!r} is not one this sensor wrote (set by hand?)"
    digest = cursor[len(PREFIX):]
    path = state_dir(storage) / f"{digest}.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, f"its memory of the inbox, {path}, is gone (was the storage root moved or cleaned?)"
    except OSError as exc:  # e.g. a cursor set by hand naming what no file can be named (File name too long)
        return {}, f"its memory of the inbox, {str(path)[:200]}, cannot be read ({exc.strerror or exc})"
    if hashlib.sha256(data).hexdigest() != digest:
        return {}, f"its memory of the inbox, {path}, was changed by hand"
    return orjson.loads(data), None


def save(storage, state: dict, cursor) -> str:
    """Write ``state`` (unless the cursor already names it) and return the cursor that names it."""
    data = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(data).hexdigest()
    new_cursor = PREFIX + digest
    directory = state_dir(storage)
    path = directory / f"{digest}.json"
    if path.is_file():
        if new_cursor == cursor:
            return cursor
        os.utime(path)  # a state seen before (a file removed, then put back): newest again
    else:
        with atomic_file(path) as fh:
            fh.write(data)
    _prune(directory, keep={path.name, f"{cursor[len(PREFIX):]}.json" if cursor else None})
    return new_cursor


def _prune(directory: Path, keep: set) -> None:
    """Remove all but the newest ``KEEP`` state files and those in ``keep``."""
    files = sorted(directory.glob("*.json"), key=_mtime, reverse=True)
    for old in files[KEEP:]:
        if old.name not in keep:
            old.unlink(missing_ok=True)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # removed meanwhile
        return 0
