"""Errors a user can cause. Each message starts with a stable token callers can match on (DECISIONS 14)."""

import errno
import os


class ExportError(ValueError):
    """Base of the errors this library defines. A few argument checks raise a plain ValueError or
    TypeError, as the reference's do: min_margin, max_pairs_per_prompt, judge_pairs' entries and
    concurrency, export_preference given entries that are not pairs, rows of to_trl and
    tool_call_roundtrip, an output that is not a path, a scorer that fails (ScorerError); a JSON text
    given as a source path is a FileNotFoundError."""


LINE_ADVICE = "Fix or remove that line (each line must be one JSON object, UTF-8 encoded)."


class BadJsonlError(ExportError):
    """A JSONL line could not be read; the message names ``path:line``. ``advice`` follows the reason; None
    for a reason that already says what to do (a whole file of the wrong kind: no line of it needs fixing)."""

    def __init__(self, path, line, reason, advice=LINE_ADVICE):
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.advice = advice
        super().__init__(f"bad_jsonl: {path}:{line}: {reason}." + (f" {advice}" if advice else ""))

    def __reduce__(self):  # survives the trip back from a worker process
        return type(self), (self.path, self.line, self.reason, self.advice)


class BadRowError(ExportError):
    """A row that reads as JSON but that the exporters cannot convert as it stands (``bad_row:``); the
    message names where it is: ``path:line`` for a file, the index for rows given in memory."""

    def __init__(self, where, reason):
        self.where = str(where)
        self.reason = str(reason)
        super().__init__(f"bad_row: {where}: {reason}")

    @classmethod
    def at(cls, source, position, exc, given="rows"):
        """The error for ``exc``, raised converting the row at line ``position`` of the file ``source``
        (a path), or at index ``position`` of the rows (``given``) passed in memory (``source`` None)."""
        where = f"{source}:{position}" if source is not None else f"index {position} of the {given} given"
        return cls(where, exc)

    def __reduce__(self):  # survives the trip back from a worker process
        return type(self), (self.where, self.reason)


class WriteFailedError(ExportError):
    """Writing the output failed (disk full, no permission, ...); nothing was published."""

    def __init__(self, dest, exc, published=()):
        self.dest = str(dest)
        self.reason = exc
        code = getattr(exc, "errno", None)
        if os.path.isdir(dest):  # renaming onto "." or a mount point fails as EBUSY, not EISDIR
            code = errno.EISDIR
        advice = _WRITE_ADVICE.get(code, "Free disk space or choose a writable output directory")
        said = os.strerror(code) if code == errno.EISDIR else exc.strerror or exc
        if published:  # an export in several formats puts its files in place one after the other
            what = (f"this file was not published and any previous one there is unchanged, but "
                    f"{', '.join(map(str, published))} {'was' if len(published) == 1 else 'were'} already "
                    "published by the same call")
        else:
            what = "nothing was published and any previous file there is unchanged"
        super().__init__(f"write_failed: {dest}: {said}; {what}. {advice}, then export again.")


_WRITE_ADVICE = {
    errno.ENOSPC: "Free disk space, or write to a disk with room",
    errno.EDQUOT: "Free space within your quota, or write to a disk with room",
    errno.EACCES: "Choose an output directory you can write",
    errno.EPERM: "Choose an output directory you can write",
    errno.EROFS: "Choose an output directory on a writable disk",
    errno.ENAMETOOLONG: "Choose a shorter file name",
    errno.ENOENT: "Choose an output directory that exists or can be created",
    errno.EISDIR: "Name a file, not a directory, as the output",
    errno.ENOTDIR: "A part of the output's path is a file, not a directory: choose another output path",
    errno.EEXIST: "A part of the output's path is a file, not a directory: choose another output path",
}


class OutputIsSourceError(ExportError):
    """The output path names the file being read (DECISIONS 4)."""


class SchemaInvalidError(ExportError):
    """Rows that no trainer can read (``schema_invalid in <where>: ...``); raised whatever ``validate`` says."""


class GateError(ExportError):
    """A data gate refused the export; ``report`` is the full export report."""

    def __init__(self, message, report):
        super().__init__(message)
        self.report = report


class RoundtripInvalidError(GateError):
    """Tool-call arguments do not parse back to an object (``tool_call_roundtrip_invalid:``)."""


class PrivilegedLeakError(GateError):
    """An assistant turn quotes its own privileged context (``privileged_leak:``)."""


class NoPreferencePairsError(ExportError):
    """Nothing had both a chosen and a rejected side (``no_preference_pairs:``)."""


class SourceChangedError(ExportError):
    """The file being read changed (rewritten, truncated, appended to or removed) while it was read
    (``source_changed:``); nothing was published."""

    def __init__(self, path, message=None):
        self.path = str(path)
        super().__init__(message or f"source_changed: {path} changed while it was being exported; nothing was "
                         "written. Export again once the file is complete.")

    def __reduce__(self):
        return type(self), (self.path, str(self))


class WorkerLostError(ExportError):
    """A worker process died without an error of its own (``worker_lost:``); nothing was published."""

    def __init__(self, path):
        self.path = str(path)
        super().__init__(
            f"worker_lost: a worker process reading {path} ended abruptly (killed by the system, e.g. out "
            "of memory, or by a signal); nothing was written. Export again, or in one process: workers=1 "
            "or WHILEAI_PIPELINE_WORKERS=1.")

    def __reduce__(self):
        return type(self), (self.path,)


class JudgeStalledError(ValueError):
    """The judge stopped answering (``judge_stalled:``): too many calls in a row went unanswered, or too
    many are still running, so judging stops instead of failing pair after pair."""
