"""The storage resource: one root directory owns every file the pipeline reads or writes.

Layout under the root (default ``./whileai_data``; the ``WHILEAI_PIPELINE_HOME`` environment variable
moves it, a configured ``root`` wins over both)::

    inbox/<run>.jsonl                 run files (the sensor watches this folder)
    inbox/<run>.meta.json             optional sidecar: system prompt and tools
    stages/<run>/raw.jsonl            snapshot of the run the chain read (+ raw.meta.json)
    stages/<run>/quarantine.jsonl     unreadable lines, when on_bad_line=quarantine
    stages/<run>/scored.jsonl         scored rows (+ scored.meta.json)
    stages/<run>/sft_source.jsonl     the rows the SFT export reads (+ sft_source.meta.json)
    stages/<run>/pairs.jsonl          preference pairs
    stages/<run>/candidates/<id>/     export candidates while the gates decide (short-lived)
    published/<run>/                  sft.openai.jsonl, sft.trl.jsonl, dpo.openai.jsonl, dpo.trl.jsonl
                                      and a <file>.report.json beside each
    rejected/<run>/<time>-<id>-<kind>/  candidates a gate refused, with their reports and gates.json
    dagster_home/                     the CLI's embedded SQLite Dagster instance (when DAGSTER_HOME is unset)

Downstream stages read only ``stages/`` (and the inbox through the raw stage); nothing ever reads
``rejected/``, so a refused candidate can never be published by a later re-export.
"""

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Optional

import dagster as dg
import orjson
from pydantic import Field

from whileai_pipeline.core.atomic import TMP_SUFFIX, atomic_file
from whileai_pipeline.core.errors import ExportError, SourceChangedError, WriteFailedError
from whileai_pipeline.core.jsonl import require_file, sha256_file
from whileai_pipeline.core.runs import check_unchanged, file_stamp, read_sidecar_file, sidecar_file, sidecar_path
from whileai_pipeline.core.settings import seconds_from_env

ENV_HOME = "WHILEAI_PIPELINE_HOME"
ENV_LOCK_TIMEOUT = "WHILEAI_PIPELINE_LOCK_TIMEOUT"
ENV_SETTLE = "WHILEAI_PIPELINE_SETTLE_SECONDS"  # read by the inbox sensor (automation.py)
ENV_SENSOR_BUDGET = "WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS"  # likewise
DEFAULT_LOCK_TIMEOUT = 600.0
LOCK_POLL_SECONDS = 0.1
DEFAULT_HOME = "whileai_data"
RUN_SUFFIX = ".jsonl"
META_SUFFIX = ".meta.json"
LEFTOVER_SUFFIXES = (TMP_SUFFIX, ".incoming", ".readable")  # what a step writes before it renames
PARTIAL_SUFFIX = ".partial"  # a rejected/<run>/ folder being filled (publishing.reject)
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.\-]+")


def incoming_path(path: Path) -> Path:
    """Where a file is written before it is renamed onto ``path`` (``.scored.jsonl.incoming``): hidden, and
    a leftover ``remove_leftovers`` knows (``LEFTOVER_SUFFIXES``)."""
    return path.with_name(f".{path.name}.incoming")


def lock_timeout() -> float:
    """``$WHILEAI_PIPELINE_LOCK_TIMEOUT``: how long a step waits for its run's lock."""
    return seconds_from_env(ENV_LOCK_TIMEOUT, DEFAULT_LOCK_TIMEOUT,
                            "how long a step waits for its run's lock held by another process; unset: "
                            f"{DEFAULT_LOCK_TIMEOUT:g}")


class PartitionLockedError(RuntimeError):
    """Another process held the run's lock for longer than the configured wait."""


def default_root() -> Path:
    """The root used when none is configured: ``$WHILEAI_PIPELINE_HOME`` or ``./whileai_data``."""
    return Path(os.environ.get(ENV_HOME) or DEFAULT_HOME).expanduser().resolve()


def partition_key_for(path) -> str:
    """The partition key of a run file: its name without ``.jsonl``, reduced to ``[A-Za-z0-9_.-]``.

    ``runs/My Run (v2).jsonl`` -> ``My_Run_v2``. Dagster partition keys may not hold commas,
    brackets or newlines; restricting to a small alphabet also keeps every derived path safe.
    """
    name = Path(path).name
    if name.endswith(RUN_SUFFIX):
        name = name[: -len(RUN_SUFFIX)]
    elif "." in name.lstrip("."):
        name = name.rsplit(".", 1)[0]
    return _key(name, f"cannot derive a run name from {str(path)!r}; rename the file (letters, digits, _ . -) or "
                      "give the run a name with --name")


def partition_key_for_name(name: str) -> str:
    """The partition key for a name given by the user (``--name``): reduced like a file's, but only a
    ``.jsonl`` suffix is dropped, so ``nightly.2026-01-01`` and ``v1.5`` stay themselves."""
    return _key(name.removesuffix(RUN_SUFFIX), f"cannot make a run name of {name!r}: it needs a letter or digit "
                "(letters, digits, _ . - are kept, anything else becomes _, and . _ - are trimmed from both ends)")


def _key(name, error):
    # cut to 200 characters, then trimmed again: the inbox file <key>.jsonl must reduce to the same key
    key = _BAD_KEY_CHARS.sub("_", name).strip("._-")[:200].rstrip("._-")
    if not key:
        raise ValueError(error)
    return key


def checked_key(key: str) -> str:
    """``key`` itself when it is a run name this storage can use as a folder name, else ValueError.

    Keys from the CLI and the inbox sensor always are; one added by hand in the UI or the API
    (``../elsewhere``, ``a/b``) would put stages and exports outside their folders.
    """
    if _BAD_KEY_CHARS.search(key) or key != key.strip("._-") or not key or len(key) > 200:
        raise ValueError(f"partition {key!r} is not a run name this pipeline can store (letters, digits and _ . - "
                         "inside, at most 200): add runs with `whileai-pipeline register FILE` or through the "
                         "inbox, which derive such names")
    return key


meta_path_for = sidecar_path  # ``x.jsonl`` -> ``x.meta.json``: one naming rule, the library's


def fingerprint(run_path, run_sha: Optional[str] = None) -> str:
    """SHA-256 naming one version of a run: the run file's hash, folded with its sidecar's if any.

    Without a sidecar this is exactly the SHA-256 of the run file's bytes (``run_sha`` when the
    caller already hashed them).
    """
    run_sha = run_sha or sha256_file(run_path)
    meta = meta_path_for(run_path)
    if not os.path.isfile(meta):  # also a name too long to be anything (a run named near the limit)
        # a folder or a broken link by its name (bad_sidecar in the raw stage): moving it away is a change
        return hashlib.sha256(f"{run_sha}:not a file".encode()).hexdigest() if os.path.lexists(meta) else run_sha
    return hashlib.sha256(f"{run_sha}:{sha256_file(meta)}".encode()).hexdigest()


def copy_atomic(src, dest, retry="Copy it again once it is complete.") -> None:
    """Copy a file's bytes to ``dest`` through a temporary file and a rename.

    Raises SourceChangedError, leaving ``dest`` as it was, if ``src`` changed during the copy (a run
    still being written): the copy would be a prefix of the run, taken later for the whole. Its message
    ends with ``retry``, what to do then.
    """
    stamp = file_stamp(src)
    with open(src, "rb") as fin, atomic_file(dest) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        try:
            check_unchanged(src, stamp)
        except SourceChangedError:
            raise SourceChangedError(src, f"source_changed: {src} changed while it was being copied (is it "
                                     f"still being written?); nothing was copied. {retry}") from None


REGISTER_AGAIN = "Run the same command again once it is complete."


class PipelineStorage(dg.ConfigurableResource):
    """Owns every path the pipeline touches (inbox, stages, published, rejected)."""

    root: Optional[str] = Field(
        default=None,
        description=f"Root folder. Empty: ${ENV_HOME} if set, else ./{DEFAULT_HOME} (resolved at run time).",
    )

    # ------------------------------------------------------------------ roots

    @property
    def base(self) -> Path:
        return Path(self.root).expanduser().resolve() if self.root else default_root()

    @property
    def inbox(self) -> Path:
        return self.base / "inbox"

    def root_hint(self) -> str:
        """For an error about a file missing under the root: when this process fell back to the default root
        (no ``root`` configured, no ``$WHILEAI_PIPELINE_HOME``), a sentence saying so; else ``""``. A Celery
        worker or another machine started without the variable looks under its own working directory, where
        the stages made by the other processes are not. A relative root is resolved against each process's
        working directory too: said as well."""
        given = self.root or os.environ.get(ENV_HOME)
        if given and not os.path.isabs(os.path.expanduser(given)):
            where = "resources.storage.config.root" if self.root else f"${ENV_HOME}"
            return (f" {where} is the relative path {given!r}, which each process resolves against its own working "
                    f"directory (this process's working directory, {os.getcwd()}, gives {self.base}): if the file "
                    "was made by another process or machine (the code server, the run worker, a Celery worker), give "
                    "the same absolute path to every process that runs steps.")
        if given:
            return ""
        return (f" This process has no storage root set (${ENV_HOME}, resources.storage.config.root) and looks under "
                f"./{DEFAULT_HOME} of its working directory, {self.base}: if the file was made by another process "
                f"or machine (the run worker, a Celery worker), set ${ENV_HOME} to the same shared folder in every "
                "process that runs steps.")

    @property
    def dagster_home(self) -> Path:
        return self.base / "dagster_home"

    def stage_dir(self, key: str) -> Path:
        return self.base / "stages" / checked_key(key)

    def published_dir(self, key: str) -> Path:
        return self.base / "published" / checked_key(key)

    def rejected_root(self, key: str) -> Path:
        return self.base / "rejected" / checked_key(key)

    def candidate_dir(self, key: str, run_id: str) -> Path:
        return self.stage_dir(key) / "candidates" / run_id

    @contextlib.contextmanager
    def partition_lock(self, key: str, timeout: Optional[float] = None, on_wait=None):
        """Hold the run's lock while a stage reads and writes its files (issue 6.4).

        Two processes materializing the same run take turns stage by stage: the second waits (up to
        ``timeout`` seconds, default ``$WHILEAI_PIPELINE_LOCK_TIMEOUT`` or 600) and then fails with a
        message naming the run. The lock is an ``flock`` on ``locks/<run>.lock``, released by the OS if
        the holder dies, so a crash never leaves a run locked.
        """
        if timeout is None:
            timeout = lock_timeout()
        path = self.base / "locks" / f"{checked_key(key)}.lock"
        try:  # a file where locks/ goes, another user's folder: the step's write_failed, not a traceback
            path.parent.mkdir(parents=True, exist_ok=True)
            # 0666 less the umask, like every other file under the root: with users of one group and umask
            # 0002 (docs/deploying.md, Permissions), a 0644 lock made by one user refused every step to the next
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise WriteFailedError(path, exc) from exc
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if on_wait is not None:
                        on_wait(f"run {key!r} is locked by another process ({path}); waiting up to {timeout:g}s")
                        on_wait = None
                    if time.monotonic() >= deadline:
                        raise PartitionLockedError(
                            f"partition_locked: run {key!r} is being materialized by another process (lock "
                            f"{path}); waited {timeout:g}s. Let that run finish, or raise "
                            f"${ENV_LOCK_TIMEOUT}.") from None
                    time.sleep(LOCK_POLL_SECONDS)
            yield path
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def remove_leftovers(self, key: str) -> list:
        """Remove what killed steps of run ``key`` left in its stage and published folders: temp and part
        files (``.….tmp``) and snapshots being taken (``.….incoming``, ``.….readable``), and in its rejected
        folder a refusal's hidden folder being filled (``.….partial``, a whole copy of the candidates: only a
        later refusal of the run removed it); returns their names.

        Call it holding the run's lock: no other step of the run is writing then, so each such file is a
        leftover whatever pid its name holds. The library's own cleanup (``clean_stale_temps``) keeps the
        files of a pid that is alive, and a pid comes back: a container's entrypoint (a Kubernetes run
        pod, ``docker run``) is pid 1 on every start, so an OOM-killed run's files stayed for good.
        """
        removed = []
        for folder in (self.stage_dir(key), self.published_dir(key)):
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if name.startswith(".") and name.endswith(LEFTOVER_SUFFIXES) and (folder / name).is_file():
                    with contextlib.suppress(FileNotFoundError):
                        (folder / name).unlink()
                        removed.append(name)
        rejected = self.rejected_root(key)
        with contextlib.suppress(OSError):
            for name in os.listdir(rejected):
                if name.startswith(".") and name.endswith(PARTIAL_SUFFIX) and not (rejected / name).is_symlink() \
                        and (rejected / name).is_dir():
                    shutil.rmtree(rejected / name, ignore_errors=True)
                    removed.append(name)
        return removed

    # ------------------------------------------------------------------ files

    def run_path(self, key: str) -> Path:
        return self.inbox / f"{checked_key(key)}{RUN_SUFFIX}"

    def run_meta_path(self, key: str) -> Path:
        return self.inbox / f"{checked_key(key)}{META_SUFFIX}"

    def stage_path(self, key: str, name: str) -> Path:
        """``stage_path(key, "scored")`` -> ``stages/<key>/scored.jsonl``."""
        return self.stage_dir(key) / f"{name}{RUN_SUFFIX}"

    def published_path(self, key: str, kind: str, fmt: str) -> Path:
        """``published/<key>/<kind>.<fmt>.jsonl`` (kind is ``sft`` or ``dpo``)."""
        return self.published_dir(key) / f"{kind}.{fmt}{RUN_SUFFIX}"

    # ------------------------------------------------------------------ inbox

    def inbox_runs(self) -> list:
        """``(key, path)`` for every run file in the inbox, sorted by key.

        Files dropped in by hand may have names that are not keys (``My Run.jsonl`` -> ``My_Run``).
        When two names reduce to the same key, the file named exactly ``<key>.jsonl`` wins, else the
        first in sorted order.
        """
        if not self.inbox.is_dir():
            return []
        found = {}
        for path in sorted(self.inbox.glob(f"*{RUN_SUFFIX}")):
            if not path.is_file() or path.name.startswith("."):
                continue
            try:
                key = partition_key_for(path)
            except ValueError:
                continue
            if key not in found or path.name == f"{key}{RUN_SUFFIX}":
                found[key] = path
        return sorted(found.items())

    def find_run(self, key: str) -> Optional[Path]:
        """The inbox file of partition ``key`` (``inbox/<key>.jsonl``, or a file whose name reduces to it)."""
        exact = self.run_path(key)
        if exact.is_file():
            return exact
        return dict(self.inbox_runs()).get(key)

    def register(self, source, name: Optional[str] = None) -> str:
        """Copy a run file (and its ``.meta.json`` sidecar, if any) into the inbox; returns its key.

        A sidecar already in the inbox for that key is removed when the new run brings none, so the
        inbox never pairs a run with another run's system prompt.
        """
        source = Path(source)
        require_file(source, "run file", "pass the path of a .jsonl run")
        key = partition_key_for_name(name) if name else partition_key_for(source)
        dest = self.run_path(key)
        meta_src = sidecar_file(source)  # a folder by its name is refused before anything is copied
        if meta_src is not None:
            read_sidecar_file(meta_src)  # and so is one the raw stage would refuse (bad_sidecar), not left in the inbox
        meta_dest = self.run_meta_path(key)
        if meta_dest.is_dir() and not meta_dest.is_symlink():  # can be neither replaced nor removed
            raise ExportError(f"bad_sidecar: {meta_dest}: a folder by the name of the run's sidecar in the inbox; "
                              "move it away, then register the run again")
        # The sidecar is copied beside its place first and renamed in once the run is in: a copy of either that
        # fails (still being written, a full disk) leaves the inbox pair as it was, not new rows with the
        # previous run's system prompt and tools.
        staged_meta = None
        if meta_src is not None and meta_src.resolve() != meta_dest.resolve():
            staged_meta = incoming_path(meta_dest)
            copy_atomic(meta_src, staged_meta, REGISTER_AGAIN)
        try:
            if source.resolve() != dest.resolve():
                copy_atomic(source, dest, REGISTER_AGAIN)
            if staged_meta is not None:
                try:
                    os.replace(staged_meta, meta_dest)
                except OSError as exc:
                    raise WriteFailedError(meta_dest, exc) from exc
        finally:
            if staged_meta is not None:
                with contextlib.suppress(FileNotFoundError):
                    staged_meta.unlink()
        if meta_src is None and os.path.lexists(meta_dest):  # a broken link too: the raw stage would refuse it
            meta_dest.unlink()
        if source.resolve() != dest.resolve():
            self._note_origin(key, source)
        return key

    def origin_path(self, key: str) -> Path:
        return self.base / "origins" / f"{checked_key(key)}.json"

    def _note_origin(self, key, source):
        """Remember which file ``register`` copied into ``inbox/<key>.jsonl`` (and that copy's size and
        mtime), so that registering another file of the same name can say which run it replaces. Only a
        note: a failure to write it fails nothing."""
        try:
            size, mtime_ns = file_stamp(self.run_path(key))
            with atomic_file(self.origin_path(key)) as out:
                out.write(orjson.dumps({"path": str(source.resolve()), "size": size, "mtime_ns": mtime_ns}))
        except (OSError, WriteFailedError):
            pass

    def registered_from(self, key: str) -> Optional[str]:
        """The file ``register`` last copied into the inbox as run ``key``, while the inbox still holds that
        copy (a file written into the inbox another way came from somewhere unknown); else None."""
        try:
            record = orjson.loads(self.origin_path(key).read_bytes())
            stamp = file_stamp(self.run_path(key))
        except (OSError, ValueError):  # orjson.JSONDecodeError is a ValueError
            return None
        if not isinstance(record, dict) or (record.get("size"), record.get("mtime_ns")) != stamp:
            return None
        return record.get("path") if isinstance(record.get("path"), str) else None
