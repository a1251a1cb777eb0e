"""Gate decisions and the publish / reject moves (plain Python; the assets call it).

An export asset writes its candidate files with the library called ``validate=False`` so it always
gets the full report, then:

* ``gate_results`` reads the two gates out of each report (``tool_call_roundtrip.invalid`` and
  ``privileged_leaks.n_leaked``);
* when no gate failed, or ``validate`` is off, ``publish`` writes every report beside its candidate,
  then renames the candidates and reports into ``published/<run>/`` (same filesystem, so each file
  appears atomically). A published file or report that already holds the same bytes is left as it is
  (its mtime and inode too). A candidate with no rows is not published: an empty training file is no export
  (OpenAI and TRL both refuse it), so when no format has a row the earlier files of that kind stay, and
  the metadata says so. Once a kind is published, its files in the formats this export did not publish
  are removed (``others``);
* otherwise ``reject`` moves the candidates and their reports under ``rejected/<run>/<time>-<id>-<kind>/``
  with a ``gates.json`` saying why, and the published files are not touched. A refusal identical to the
  latest one of its kind (``same_refusal``) goes into that folder, so nightly re-exports add no copies.

The set of formats is all-or-nothing: one failing format rejects the whole candidate set, so the
files of one kind (``sft.*`` or ``dpo.*``) never mix two inputs or configs. The two kinds are
exported, gated and published apart: each file's report names its source and SHA-256.

The renames of one publish are several system calls: a process killed between two of them would leave
a new file beside an old one. So they are journaled (``journal.commit``: ``publish-<kind>.journal.json``
in the candidate folder), and the next step of the run finishes any journal it finds. A rename refused
half-way (EPERM, EACCES) is undone instead: the files already replaced are put back.
"""

import datetime
import os
import shutil
import stat
from pathlib import Path

import orjson

from whileai_pipeline.core.atomic import fsync_dir, mode_for
from whileai_pipeline.core.jsonl import json_document, sha256_file, write_json

from . import journal

GATES = ("tool_call_roundtrip", "privileged_leak")
VOLATILE_REPORT_KEYS = ("elapsed_seconds",)


def gate_results(report: dict) -> dict:
    """``{"tool_call_roundtrip": bool, "privileged_leak": bool}``: True when that gate passes."""
    roundtrip = report.get("tool_call_roundtrip") or {}
    leaks = report.get("privileged_leaks") or {}
    return {
        "tool_call_roundtrip": int(roundtrip.get("invalid") or 0) == 0,
        "privileged_leak": int(leaks.get("n_leaked") or 0) == 0,
    }


def failed_gates(reports: dict) -> dict:
    """``{format: [failed gate, ...]}`` for the formats with at least one failed gate."""
    out = {}
    for fmt, report in reports.items():
        bad = [gate for gate, ok in gate_results(report).items() if not ok]
        if bad:
            out[fmt] = bad
    return out


def report_for_file(report: dict, path) -> dict:
    """The report as stored beside a file: ``path`` names where the file now is, and the volatile
    ``elapsed_seconds`` is left out so an unchanged re-export comes to identical bytes (and ``publish``
    leaves the stored report alone)."""
    out = {k: v for k, v in report.items() if k not in VOLATILE_REPORT_KEYS}
    if "path" in out and out["path"] is not None:
        out["path"] = str(path) if path is not None else None
    return out


def report_file(data_path: Path) -> Path:
    """``sft.openai.jsonl`` -> ``sft.openai.report.json``."""
    name = data_path.name[: -len(".jsonl")] if data_path.name.endswith(".jsonl") else data_path.name
    return data_path.with_name(f"{name}.report.json")


def _written(report, candidate: Path) -> bool:
    return report.get("path") is not None and candidate.is_file()


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file (not a link) holding exactly ``data``. Such a report is left alone:
    the docs promise an unchanged re-run leaves the published files untouched, and a sync or backup that
    compares mtimes would otherwise copy four reports again after every re-run. Unreadable: False (rewritten)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            return stat.S_ISREG(st.st_mode) and st.st_size == len(data) and fh.read(len(data) + 1) == data
    except OSError:
        return False


def has_rows(report: dict) -> bool:
    """Whether the export wrote at least one row (an SFT report's ``n_written``, a DPO report's pairs)."""
    return bool(report.get("n_written", report.get("pairs")))


def publish(candidates: dict, reports: dict, destinations: dict, kind: str, others=None) -> tuple:
    """Move each written candidate onto its destination; returns ``({format: outcome}, removed paths)``.

    ``outcome`` has ``path`` (None when nothing is published: the library wrote no file, e.g. no
    preference pairs, or a file without rows), ``sha256`` and ``unchanged`` (True when the published
    bytes were already identical, in which case the file is left alone; so is a published report that
    already holds the bytes it would get). ``others`` maps every format
    of ``kind`` to its published path: once something is published, the files (and reports) of the
    formats not published this time are removed, so the files of one kind never mix two inputs.

    Everything that can fail (hashing, writing each report beside its candidate) is done before the
    first rename, and the renames then follow one another: a full disk or a failed write leaves every
    format's published file and report as they were, never a new ``sft.openai.jsonl`` beside an old
    ``sft.trl.jsonl`` or an old report. A replaced file keeps its mode (a trainer's read access). The
    renames and removals are journaled first (``journal.commit``), so a crash among them is completed
    by the next step of the run instead of leaving old and new files side by side, and a refused one
    puts back the files already replaced before its error is raised.
    """
    outcomes, moves = {}, []
    for fmt, candidate in candidates.items():
        report, dest = reports[fmt], destinations[fmt]
        if not (_written(report, candidate) and has_rows(report)):
            outcomes[fmt] = {"path": None, "sha256": None, "unchanged": False}
            continue
        sha = report.get("sha256") or sha256_file(candidate)  # the exporter hashed what it wrote
        dest.parent.mkdir(parents=True, exist_ok=True)
        unchanged = dest.is_file() and dest.stat().st_size == candidate.stat().st_size and sha256_file(dest) == sha
        stored = report_for_file(report, dest)
        if not unchanged:
            moves.append((candidate, dest))
        if not _holds(report_file(dest), json_document(stored)):
            staged_report = report_file(candidate)  # beside the candidate: the same filesystem as dest
            write_json(staged_report, stored)
            moves.append((staged_report, report_file(dest)))
        outcomes[fmt] = {"path": str(dest), "sha256": sha, "unchanged": unchanged}
    removed = []
    if others and any(o["path"] for o in outcomes.values()):
        # formats not written, or written without a row: their earlier files would sit beside this
        # export's, from another input or config
        removed = [str(stale) for fmt, path in others.items() if not outcomes.get(fmt, {}).get("path")
                   for stale in (path, report_file(path)) if stale.is_file()]
    for staged, dest in moves:
        os.chmod(staged, mode_for(dest))  # a replaced file keeps its mode (a trainer's read access)
    if moves or removed:
        journal.commit(next(iter(candidates.values())).parent / f"publish-{kind}{journal.SUFFIX}", moves, removed)
    return outcomes, removed


def rejected_dir_name(run_id: str, kind: str, now=None) -> str:
    """``20260102T030405Z-1a2b3c4d-sft``: UTC time, the Dagster run id's first 8 characters, the export."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{run_id[:8]}-{kind}"


def same_refusal(rejected_root: Path, kind: str, candidates: dict, reports: dict, failed: dict, validate: bool):
    """The latest folder of ``kind`` under ``rejected_root`` when it already holds this refusal (the same
    formats, failed gates and reports, so the same candidate bytes), else None.

    The schedule re-exports a refused run every night with the same input, and each refusal kept a full
    copy of the candidates: a run left refused for a month held 30 copies under ``rejected/``. An
    identical refusal goes into the folder of the first one instead."""
    try:
        folders = sorted(p for p in rejected_root.iterdir() if p.name.endswith(f"-{kind}") and p.is_dir())
    except OSError:
        return None
    if not folders:
        return None
    latest = folders[-1]
    try:
        gates = orjson.loads((latest / "gates.json").read_bytes())
        if (gates.get("validate"), gates.get("failed"), sorted(gates.get("reports") or ())) != (
                validate, failed, sorted(candidates)):
            return None
        for fmt, candidate in candidates.items():
            kept = latest / candidate.name
            written = _written(reports[fmt], candidate)
            if written != kept.is_file() or (written and kept.stat().st_size != candidate.stat().st_size):
                return None
            expected = report_for_file(reports[fmt], kept if written else None)
            if orjson.loads(report_file(kept).read_bytes()) != orjson.loads(orjson.dumps(expected)):
                return None
    except (OSError, ValueError, AttributeError):
        return None  # a folder someone edited: a new one is made
    return latest


def reject(candidates: dict, reports: dict, rejected_dir: Path, failed: dict, validate: bool) -> dict:
    """Move every candidate and its report under ``rejected_dir``; returns ``{format: outcome}``.

    A new folder is filled under a hidden name and renamed to ``rejected_dir`` once its ``gates.json`` is
    written: a refusal half-way (no room, a permission) leaves no folder holding candidates without the
    word of why they were refused. An existing folder (``same_refusal``) already has its ``gates.json``."""
    fresh = not rejected_dir.is_dir()
    folder = rejected_dir.with_name(f".{rejected_dir.name}.partial") if fresh else rejected_dir
    outcomes = {}
    try:
        if fresh:  # folders a killed step left half-filled (the run's partition is locked: none is live)
            for stale in rejected_dir.parent.glob(".*.partial"):
                shutil.rmtree(stale, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        for fmt, candidate in candidates.items():
            report = reports[fmt]
            kept, dest = folder / candidate.name, rejected_dir / candidate.name
            if _written(report, candidate):
                os.replace(candidate, kept)
                sha = report.get("sha256") or sha256_file(kept)
            else:
                dest, sha = None, None
            write_json(report_file(kept), report_for_file(report, dest))
            outcomes[fmt] = {"path": None if dest is None else str(dest), "sha256": sha, "unchanged": False}
        write_json(folder / "gates.json", {
            "validate": validate,
            "failed": failed,
            "reports": {fmt: report_file(rejected_dir / c.name).name for fmt, c in candidates.items()},
        })
        fsync_dir(folder)
        if fresh:
            os.rename(folder, rejected_dir)
        fsync_dir(rejected_dir.parent)
    except BaseException:
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return outcomes


def discard(directory: Path) -> None:
    """Remove a candidate folder (after everything in it was published or rejected)."""
    shutil.rmtree(directory, ignore_errors=True)
    parent = directory.parent
    try:
        parent.rmdir()  # the per-run `candidates/` folder, when empty
    except OSError:
        pass
