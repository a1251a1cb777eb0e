"""Atomic file writes: a file appears under its name whole, or not at all.

Every final file this project writes appears by a rename: bytes land in a temporary file in the
destination's directory, renamed over the destination only when complete, so a reader (or a crash)
never sees half a file. ``atomic_file`` does this for most; the spool (``Spool``, its temp file from
``temp_beside``) and the pipeline's publishing (a candidate written whole, then moved into place) rename
their own. Temp files carry their writer's pid, so the next writer removes what a killed one left
(``clean_stale_temps``). A module of its own, apart from ``jsonl``: the spool, the part files and
publishing write raw bytes, not JSON.
"""

import contextlib
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from .errors import WriteFailedError

TMP_SUFFIX = ".tmp"


def temp_beside(dest, kind="tmp"):
    """Create a temp file in ``dest``'s directory, named ``.<name>.<pid>.<random>.<kind>.tmp``.

    The pid in the name lets a later run tell a crashed writer's leftovers (``clean_stale_temps``)
    from a live writer's file. The file gets the mode ``dest`` will keep once it is renamed there
    (``mode_for``), not mkstemp's 0600, which would hide a published export from a trainer running
    as another user. Returns (fd, path).
    """
    dest = Path(dest)
    clean_stale_temps(dest)
    fd, tmp = tempfile.mkstemp(prefix=f"{temp_prefix(dest)}{os.getpid()}.", suffix=f".{kind}{TMP_SUFFIX}",
                               dir=dest.parent)
    try:
        os.fchmod(fd, mode_for(dest))
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def create_part(path, buffering=1 << 20):
    """Open a new worker part file for binary writing, never through what already has its name.

    Part names are predictable (``PartFiles``: the pid and a number), and the folder beside an output may
    be one other accounts write to: opened with ``"wb"``, a link planted under the name would have a
    worker truncate and fill the file it points to. Whatever is there is removed (a link goes, not its
    target; a part a killed writer of the same pid left) and the file is created exclusively, without
    following links; a name taken again in between fails instead of being written through.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o666)
    return os.fdopen(fd, "wb", buffering=buffering)


def mode_for(dest) -> int:
    """The mode a file renamed to ``dest`` should have: that of the file it replaces, else what
    ``open`` would give (0666 less the umask). A symbolic link at ``dest`` is what the rename replaces,
    not the file it points to: its target's mode is not taken."""
    try:
        st = os.lstat(dest)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return st.st_mode & 0o7777
    return 0o666 & ~_UMASK


def _process_umask() -> int:
    """The umask, read without changing it where Linux shows it (os.umask can only set it)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status", "rb") as fh:
            return int(next(line for line in fh if line.startswith(b"Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _process_umask()


def clean_stale_temps(dest) -> list:
    """Delete temp files a killed writer left beside ``dest`` (their pid is gone); returns their names."""
    dest = Path(dest)
    removed = []
    prefix = temp_prefix(dest)
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return removed
    for name in names:
        ours = _OUR_TEMP.match(name[len(prefix):]) if name.startswith(prefix) else None
        if ours is None or _alive(int(ours.group(1))):  # not ours (x.jsonl.42 is another file), or live
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dest.parent / name)
            removed.append(name)
    return removed


# what follows temp_prefix(dest) in the names of our temp files: the writer's pid, then mkstemp's eight
# random characters and a kind (``.123.ab_cd9xy.write.tmp``), maybe with a worker part after it
# (``….spool.tmp.0.part.tmp``), or a kind, writer and part number (``.123.pairs.0.7.part.tmp``, PartFiles;
# an older version left them without the writer, ``.123.pairs7.part.tmp``)
_OUR_TEMP = re.compile(r"(\d+)\.(?:[a-z0-9_]{8}\.[a-z]+\.tmp(?:\.\d+\.part\.tmp)?|[a-z]+(?:\.\d+\.)?\d+\.part\.tmp)\Z")


def make_parents(directory) -> list:
    """Create ``directory`` and whichever of its parents are missing; return the ones this call created,
    outermost first, so that a write which then fails can take them away again (``remove_made``)
    instead of leaving empty folders behind. One level at a time: a folder another process creates
    meanwhile is not counted as ours. Errors are ``Path.mkdir(parents=True, exist_ok=True)``'s (a file
    where a folder goes: FileExistsError)."""
    directory = Path(directory)
    missing = []
    probe = directory
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    made = []
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            made.append(folder)
        directory.mkdir(parents=True, exist_ok=True)  # nothing left to make: it raises what stands in the way
    except OSError:
        remove_made(made)
        raise
    return made


def remove_made(made):
    """Remove the folders ``make_parents`` created, innermost first, while they are empty."""
    for folder in reversed(made):
        try:
            os.rmdir(folder)
        except OSError:  # something is in it (a published file, another writer's): it stays, so do its parents
            return


def temp_prefix(dest) -> str:
    """``.<name>.`` for the temp files beside ``dest``; a long name is cut (and a digest of it kept), so
    the temp file and its worker parts stay within the 255 bytes a file name may have."""
    name = dest.name
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > 100:
        name = raw[:60].decode("utf-8", "ignore") + "~" + hashlib.sha1(raw).hexdigest()[:12]
    return f".{name}."


def _alive(pid) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_file(dest):
    """Open a temporary file beside ``dest`` for binary writing; rename it onto ``dest`` on success.

    On any exception the temporary file (and any folder made for it) is removed and ``dest`` is
    untouched. The data is fsynced before the rename so a crash leaves either the old file or the
    complete new one.
    """
    dest = Path(dest).expanduser()
    made = []
    try:
        made = make_parents(dest.parent)
        fd, tmp = temp_beside(dest, "write")
    except OSError as exc:
        remove_made(made)
        raise WriteFailedError(dest, exc) from exc
    try:
        fh = os.fdopen(fd, "wb", buffering=1 << 20)
        try:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        except OSError as exc:
            if not _about(exc, tmp):  # e.g. the source the caller reads, missing: its own error
                raise
            raise WriteFailedError(dest, exc) from exc
        finally:
            close_quietly(fh)
        try:
            os.replace(tmp, dest)
        except OSError as exc:
            raise WriteFailedError(dest, exc) from exc
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        remove_made(made)
        raise
    fsync_dir(dest.parent)


def _about(exc, tmp) -> bool:
    """Whether an OSError raised while writing ``tmp`` is about ``tmp`` (a failed write, a full disk)
    rather than about another file (one the caller reads) or a message of ours without an errno."""
    return exc.errno is not None and exc.filename in (None, tmp, str(tmp))


def close_quietly(fh):
    """Close a file that failed, whatever is left in its buffer: its close would flush that buffer and
    fail again (a full disk), and that second error would replace the first."""
    if not fh.closed:
        with contextlib.suppress(OSError):
            fh.close()


def fsync_dir(directory):
    """Make a rename in ``directory`` durable (best effort: some filesystems refuse a directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
