"""A simulation run on disk, and every kind of export source (spec 3.2, DECISIONS 5 and 6).

A run is a JSONL file of trajectories plus an optional ``<name>.meta.json`` sidecar holding the
system prompt and tool schemas the agent ran with. Sources are resolved to one stream of rows that
is read exactly once, so the rows exported and the rows the leak gate reads are the same rows.
"""

import concurrent.futures as cf
import contextlib
import errno
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .arguments import check_path, refuse_rows_with_report
from .errors import BadRowError, ExportError, SourceChangedError
from .jsonl import iter_jsonl, looks_like_json_text, read_json, require_file, sha256_of
from .text import text


@dataclass
class Profile:
    """The agent under test, as far as export cares: its system prompt and tool schemas."""

    policy: str = ""
    tools: list = field(default_factory=list)
    source: str = "profile"

    @property
    def system_prompt(self) -> str:
        return self.policy


class RunRows:
    """The trajectories of a run file: iterable any number of times, each time streaming the file."""

    def __init__(self, path):
        self.path = Path(path)

    def __iter__(self):
        for _, row in iter_jsonl(self.path):
            yield row


@dataclass
class Run:
    """A run on disk; has ``trajectories`` and ``profile`` like the reference's run object."""

    path: Path
    trajectories: RunRows
    profile: Profile
    meta_path: Path | None = None


def sidecar_path(path) -> Path:
    """``run.jsonl`` -> ``run.meta.json``; any other name gets ``.meta.json`` appended."""
    path = Path(path)
    if path.name.endswith(".jsonl"):
        return path.with_name(path.name[: -len(".jsonl")] + ".meta.json")
    return path.with_name(path.name + ".meta.json")


PROGRESS_SUFFIX = ".progress.json"
SIMULATE_DONE = "stopped"  # the stage a progress file ends at, finished or interrupted
SIMULATE_PATIENCE_SECONDS = 3600.0  # a progress file left unchanged this long: its simulate was killed


def progress_path(path):
    """``<run>.jsonl.progress.json``: where ``simulate(output=<run>.jsonl)`` says how far it has got."""
    path = Path(path)
    return path.with_name(path.name + PROGRESS_SUFFIX)


def progress_stage(path) -> str | None:
    """The stage the progress file of the run at ``path`` names (``"rollout"``: appending rows), None when
    it says ``"stopped"`` or there is no readable progress file.

    ``simulate`` appends rows as its rollouts finish and writes the sidecar only at the end; with an
    agent that takes minutes a rollout, the run goes unmodified for longer than any settle time while
    it is still being written. Its progress file says so exactly: its ``stage`` ends at ``"stopped"``
    (finished or interrupted; observed with whileai 0.105 and 0.131).

    ``simulate`` rewrites that file in place, so a read can catch it cut short (about one read in 80 while
    it runs): one that is not JSON is read again a few times before it counts as not simulate's.
    """
    for _ in range(5):
        try:
            data = orjson.loads(progress_path(path).read_bytes())
        except OSError:
            return None
        except orjson.JSONDecodeError:
            time.sleep(0.02)
            continue
        stage = data.get("stage") if isinstance(data, dict) else None
        return stage if isinstance(stage, str) and stage != SIMULATE_DONE else None
    return None


def simulate_stage(path) -> str | None:
    """``progress_stage`` while ``simulate`` is still writing the run: unless the run, its sidecar and
    its progress file have all gone ``SIMULATE_PATIENCE_SECONDS`` without a change (a ``simulate``
    killed mid-run never says "stopped")."""
    stage = progress_stage(path)
    return stage if stage is not None and changed_lately(path) else None


def changed_lately(path) -> bool:
    """Whether the run at ``path``, its sidecar or its progress file changed within ``SIMULATE_PATIENCE_SECONDS``."""
    times = []
    for file in (Path(path), sidecar_path(path), progress_path(path)):
        with contextlib.suppress(OSError):
            times.append(os.stat(file).st_mtime_ns)
    return bool(times) and time.time_ns() - max(times) < SIMULATE_PATIENCE_SECONDS * 1e9


def sidecar_file(path) -> Path | None:
    """The sidecar of run ``path`` when it is a file, None when nothing has its name. Anything else by that
    name (a folder, a broken link) is a ``bad_sidecar:`` error: going on without it would export the run
    without its system prompt and tools, with nothing but a warning to say why."""
    meta = sidecar_path(path)
    try:
        if meta.is_file():
            return meta
    except OSError as exc:  # ENAMETOOLONG: the run's own name is near the limit, so nothing can have this one
        if exc.errno != errno.ENAMETOOLONG:
            raise
        return None
    if not os.path.lexists(meta):
        return None
    kind = "a folder" if meta.is_dir() else "a broken link" if meta.is_symlink() else "a special file"
    raise ExportError(f"bad_sidecar: {meta}: {kind}, not the run's sidecar file (its system prompt and "
                      "tools); put the sidecar JSON file there, or move it away to export the run without one")


def read_sidecar(path):
    """(system_prompt, tools, sidecar path) from a run's sidecar, or (None, None, None) when there is none."""
    meta = sidecar_file(path)
    if meta is None:
        return None, None, None
    return (*read_sidecar_file(meta), meta)


def read_sidecar_file(meta):
    """(system_prompt, tools) of a sidecar file, checked; an ExportError (``bad_sidecar:``) says what is wrong."""
    try:
        data = read_json(meta)
    except ValueError as exc:
        reason = getattr(exc, "reason", exc)  # a BadJsonlError's own words, without its advice about lines
        raise ExportError(f"bad_sidecar: {meta}: not valid JSON ({reason}); fix or delete the sidecar") from None
    if not isinstance(data, dict):
        raise ExportError(f"bad_sidecar: {meta}: expected a JSON object with system_prompt and tools, "
                         f"got {type(data).__name__}; fix or delete the sidecar")
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ExportError(f"bad_sidecar: {meta}: 'tools' must be a list of tool schemas, got "
                         f"{type(tools).__name__}; fix or delete the sidecar")
    if tools and (i := _first_non_schema(tools)) is not None:
        raise ExportError(f"bad_sidecar: {meta}: 'tools' must be a list of tool schemas (JSON objects), but "
                         f"item {i} is {type(tools[i]).__name__} {tools[i]!r:.60}; fix or delete the sidecar")
    system = data.get("system_prompt")
    if system is not None and not isinstance(system, str):
        raise ExportError(f"bad_sidecar: {meta}: 'system_prompt' must be text, got {type(system).__name__} "
                         f"{system!r:.60}; fix or delete the sidecar")
    return system, tools


def load_run(path) -> Run:
    """Open a run: its JSONL rows (streamed on each iteration) and the sidecar's prompt and tools."""
    path = Path(check_path(path, "load_run takes the path of a .jsonl run", "e.g. load_run('runs/my_run.jsonl'); "
                           "rows already in memory need no loading")).expanduser()
    require_file(path, "run file", "pass the path of a .jsonl run")
    system, tools, meta = read_sidecar(path)
    profile = Profile(policy=system or "", tools=tools or [], source="sidecar")
    return Run(path=path, trajectories=RunRows(path), profile=profile, meta_path=meta)


class _HashingRows:
    """Streams a JSONL path once, hashing its bytes on the way (DECISIONS 15)."""

    def __init__(self, path):
        self.path = Path(path)
        self.sha256 = hashlib.sha256()
        self.deferred = False  # a pass over workers read the file unhashed: ``hash_whole`` does it later

    def hash_whole(self):
        """Hash the whole file now (after a pass that left it for later)."""
        self.sha256 = sha256_of(self.path)
        self.deferred = False

    def __iter__(self):
        for _, row in iter_jsonl(self.path, hasher=self.sha256):
            yield row

    def numbered(self):
        """(line number, row) of each row, hashed on the way as ``__iter__`` does."""
        return iter_jsonl(self.path, hasher=self.sha256)


@dataclass
class Source:
    rows: object
    path: Path | None = None
    system: str = ""
    tools: list = field(default_factory=list)
    system_source: str = "none"
    tools_source: str = "none"
    hashed: _HashingRows | None = None
    given_as_path: bool = False  # a path, not a run object: only then does no output mean <name>.train<suffix>

    @property
    def sha256(self):
        """The file's SHA-256; None for no file, or while a pass has left it to ``SourceDigest``."""
        if self.hashed is None or self.hashed.deferred:
            return None
        return self.hashed.sha256.hexdigest()

    def numbered(self):
        """(line number, row) of a file's rows, hashed on the way; (index, row) of rows given in memory."""
        return self.hashed.numbered() if self.hashed is not None else enumerate(self.rows)

    def bad_row(self, position, exc, given="rows"):
        """The BadRowError for ``exc``, raised converting the row at ``position`` of ``numbered()``."""
        return BadRowError.at(self.path if self.hashed is not None else None, position, exc, given)


def resolve_source(source, system_prompt=None, tools=None, *, sidecar=True, lists_are_rows=False) -> Source:
    """Rows, system prompt and tools of any source; explicit arguments always win (DECISIONS 6).

    Anything with a ``trajectories`` attribute is a run, a list subclass too (spec 2.3, 3.2); only
    ``lists_are_rows`` (preference pairs, which the spec iterates as given: 7.1) keeps a list's items."""
    found_system = found_tools = None
    system_from = tools_from = "none"
    path = None
    hashed = None
    if hasattr(source, "trajectories") and not (lists_are_rows and isinstance(source, (list, tuple))):
        rows = source.trajectories
        profile = getattr(source, "profile", None)
        if profile is not None:
            found_system, found_tools = _profile_values(profile)
            system_from = tools_from = getattr(profile, "source", "profile")
        if isinstance(source, Run):
            path = Path(source.path)
            if isinstance(rows, RunRows) and rows.path == path:  # load_run's: read as its file is
                hashed = _HashingRows(path)
                rows = hashed
    elif isinstance(source, (str, Path)):
        _refuse_json_text(source)
        path = Path(source).expanduser()
        require_file(path, "source file", "pass a JSONL run, a run object or rows")
        hashed = _HashingRows(path)
        rows = hashed
        if sidecar and (system_prompt is None or tools is None):  # both passed: nothing to read it for
            found_system, found_tools, _meta = read_sidecar(path)
            system_from = tools_from = "sidecar"
    else:
        if not lists_are_rows:
            refuse_rows_with_report(source, "the source")
        if isinstance(source, (dict, bytes, bytearray)) or not hasattr(source, "__iter__"):
            raise ExportError(
                f"source must be rows, a run or a JSONL path, got {type(source).__name__}"
                + (" (one row?): wrap it in a list" if isinstance(source, dict) else
                   ": pass the file's path, or the rows parsed from it (read_jsonl)"))
        rows = source
        profile = getattr(source, "profile", None)
        if profile is not None:
            found_system, found_tools = _profile_values(profile)
            system_from = tools_from = "profile"
        if getattr(source, "system_prompt", None) is not None and not callable(source.system_prompt):
            found_system, system_from = text(source.system_prompt), "profile"
        if isinstance(getattr(source, "tools", None), list):
            found_tools, tools_from = source.tools, "profile"

    if system_prompt is not None:
        system, system_from = text(system_prompt), "argument"
    else:
        system = found_system or ""
        if not system:
            system_from = "none"
    if tools is not None:
        tool_list, tools_from = schema_list(tools), "argument"
    else:
        tool_list = schema_list(found_tools or [], f"the {tools_from}'s tools")
        if not tool_list:
            tools_from = "none"
    return Source(rows=rows, path=path, system=system, tools=tool_list, system_source=system_from,
                  tools_source=tools_from, hashed=hashed, given_as_path=isinstance(source, (str, Path)))


def _refuse_json_text(source):
    """A string that names no file and starts like JSON is the rows' text, not a path: say so, where
    opening it says "No such file" or, for a long one, "File name too long" (``OSError``, as the
    reference's). A file by that name is read as any other."""
    if isinstance(source, str) and looks_like_json_text(source) and not os.path.exists(
            os.path.expanduser(source)):
        raise FileNotFoundError(f"no such source file: got str {source!r:.60}, which looks like JSON text, not a "
                                "path: pass the rows themselves, a list of dicts (json.loads the text, or each "
                                "line of JSONL text), or the path of a .jsonl file")


def _profile_values(profile):
    """(system prompt, tools) of a ``Profile`` or any object shaped like the reference's."""
    return text(getattr(profile, "policy", "") or ""), getattr(profile, "tools", None) or []


def schema_list(tools, what="tools"):
    """``list(tools)`` (the spec's shallow copy), refusing what it would turn into nonsense schemas
    on every row without a word: a JSON string (its characters), one schema dict (its keys)."""
    if isinstance(tools, (str, bytes, bytearray, dict)) or not hasattr(tools, "__iter__"):
        hint = {str: " (parse a JSON string first: json.loads)", dict: " (wrap one schema in a list)"}
        raise ExportError(f"{what} must be a list of tool schemas, got {type(tools).__name__}"
                          f"{hint.get(type(tools), '')}: pass tools=[{{\"type\": \"function\", ...}}, ...]")
    tool_list = list(tools)
    if (i := _first_non_schema(tool_list)) is not None:  # written into every row, where no trainer reads it
        raise ExportError(f"{what} must be a list of tool schemas (JSON objects), but item {i} is "
                          f"{type(tool_list[i]).__name__} {tool_list[i]!r:.60}: "
                          "pass tools=[{\"type\": \"function\", ...}, ...]")
    return tool_list


def _first_non_schema(tools):
    return next((i for i, tool in enumerate(tools) if not isinstance(tool, dict)), None)


def file_stamp(path):
    """(size, mtime) of a source file, to tell whether it changed while it was read; None for no file."""
    if path is None:
        return None
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def check_unchanged(path, stamp):
    """Raise SourceChangedError if the file is not the one stamped (removed counts as changed)."""
    if stamp is None:
        return
    try:
        now = file_stamp(path)
    except OSError:
        now = None
    if now != stamp:
        raise SourceChangedError(path)


@contextlib.contextmanager
def change_explains_failure(path, stamp):
    """Report a failure while ``path`` is read as SourceChangedError when the file changed meanwhile.

    A run rewritten under a pooled export otherwise surfaces as whatever broke first: a worker's
    "mmap length is greater than file size", a worker killed by SIGBUS (a mapped page cut off), or
    a bad line that was only half written.
    """
    try:
        yield
    except SourceChangedError:
        raise
    except Exception as exc:
        try:
            check_unchanged(path, stamp)
        except SourceChangedError as changed:
            raise changed from exc
        raise


class SourceDigest:
    """Completes ``report["source_sha256"]`` after a pass that left the source unhashed (DECISIONS 15),
    in every report of ``reports`` (one per format of an export; a dict's live ``values()`` may gain
    reports after this is made).

    Called once the reports exist: before a gate error, or alongside the output's flush. The file is
    hashed whole and must still be the file the pass read (same size and mtime), or nothing is
    published. Calling it again does nothing.
    """

    def __init__(self, src, stamp, reports):
        self.src, self.stamp, self.reports = src, stamp, reports  # a collection, read when the hash is done
        self._thread = None

    def start(self):
        """Begin hashing in a thread (hashlib lets go of the GIL), for a stretch where a core is idle."""
        hashed = self.src.hashed
        if hashed is not None and hashed.deferred and self._thread is None:
            self._thread = cf.ThreadPoolExecutor(1)
            self._done = self._thread.submit(self._hash)

    def __call__(self):
        if self._thread is not None:
            try:
                self._done.result()
            finally:
                self._thread.shutdown()
                self._thread = None
        hashed = self.src.hashed
        if hashed is not None and hashed.deferred:
            self._hash()

    def close(self):
        """After a failed export: let a started hash end (its outcome no longer matters)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def _hash(self):
        self.src.hashed.hash_whole()
        check_unchanged(self.src.path, self.stamp)
        for report in self.reports:
            report["source_sha256"] = self.src.sha256
