"""Where an export goes: the destination name, the source guard, one path per format, and the
elapsed time every export report carries. The bytes get there through the ``spool``.
"""

import contextlib
import errno
import os
import time
from pathlib import Path

from .errors import ExportError, OutputIsSourceError, WriteFailedError
from .gates import check_format
from .runs import sidecar_path


def check_output(output, none_means):
    """An output that is a path or None; anything else is a TypeError that says so (pathlib's own says
    "expected str, bytes or os.PathLike object", and the spec takes a falsy one, 0 or False, as none).
    ``none_means`` says what None does for this exporter."""
    if output is None:
        return
    if isinstance(output, (str, os.PathLike)):
        refuse_folder_name(output)
        return
    raise TypeError(f"output must be a path (str or os.PathLike) or None, got {type(output).__name__} "
                    f"{output!r:.60}: pass the file to write, e.g. 'train.jsonl', or None {none_means}")


def refuse_folder_name(output):
    """Refuse an output written as a folder (``newdir/``), as writing onto a folder is refused: pathlib drops
    the trailing separator, and the export would write a file by the folder's name."""
    text = os.fspath(output)
    if isinstance(text, str) and text.endswith(("/", os.sep)) and text.strip("/" + os.sep):
        raise WriteFailedError(text, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), text))


def destination(output, source_path):
    if output:
        return Path(output).expanduser()
    if source_path is None:
        return None
    suffix = source_path.suffix
    if suffix:
        return source_path.with_name(f"{source_path.stem}.train{suffix}")
    return source_path.with_name(f"{source_path.name}.train.jsonl")


def refuse_source(dest, source_path, advice="Pass another output path, or none to get <name>.train<suffix> beside it."):
    """DECISIONS 4: never write over the file being read (links and hard links included), nor over its
    sidecar (``<name>.meta.json``: the system prompt and tools the export itself reads). ``advice``
    says what to do instead, for the caller's own meaning of no output."""
    if _same_file(dest, source_path):
        raise OutputIsSourceError(
            f"output_is_source: {dest} is the source file {source_path}; writing there would destroy "
            f"the raw run. {advice}"
        )
    meta = sidecar_path(source_path)
    if _same_file(dest, meta):
        if os.path.exists(meta):
            raise OutputIsSourceError(
                f"output_is_source: {dest} is the sidecar of the source file {source_path} (its system prompt "
                "and tools); writing there would destroy them. Pass another output path."
            )
        # none yet: every later export of the source would read the rows written there as its sidecar, and fail
        raise OutputIsSourceError(
            f"output_is_source: {dest} is the name of the sidecar of the source file {source_path} (where an "
            "export reads its system prompt and tools): rows written there would be read as one by every "
            "later export of it. Pass another output path."
        )


@contextlib.contextmanager
def published_one_of(published):
    """Publishing one file of several: a failure says which of the call's files were already published
    (``published``, their paths), as they stay in place."""
    try:
        yield
    except WriteFailedError as exc:
        if not published:
            raise
        raise WriteFailedError(exc.dest, exc.reason, published) from exc


def _same_file(a, b) -> bool:
    if _resolved(a) == _resolved(b):
        return True
    with contextlib.suppress(OSError):  # ``a`` missing, or a name too long to be a file: not the source
        return os.path.samefile(a, b)
    return False


def _resolved(path) -> Path:
    """``path`` with its links resolved, else only made absolute: a name too long for the filesystem or a
    link loop (RuntimeError before Python 3.13) names no file, so no source either, and writing there
    fails as the write's own error (``WriteFailedError``), not a bare OSError or RuntimeError from here."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def check_outputs(outputs, who):
    """``{format: path}`` for an export in several formats (``who`` names it in errors): known formats,
    one path each, no path twice. Returned as a dict, in the order given."""
    try:
        outputs = dict(outputs)
    except (TypeError, ValueError):
        raise ExportError(f"{who} takes outputs as {{format: path}}, e.g. {{'openai': 'out.openai.jsonl', "
                          f"'trl': 'out.trl.jsonl'}}; got {type(outputs).__name__}") from None
    if not outputs:
        raise ExportError(f"{who} needs at least one {{format: path}} in outputs")
    seen = {}
    for fmt, output in outputs.items():
        check_format(fmt)
        if output is not None and not isinstance(output, (str, os.PathLike)):
            raise TypeError(f"outputs[{fmt!r}] must be a path (str or os.PathLike), got {type(output).__name__} "
                            f"{output!r:.60}: give every format its own file, e.g. {{'openai': "
                            "'out.openai.jsonl', 'trl': 'out.trl.jsonl'}")
        if not output:
            raise ExportError(f"{who}: no output path for format {fmt!r}; give every format its own path")
        refuse_folder_name(output)
        where = _resolved(Path(output).expanduser())
        if where in seen:
            raise ExportError(f"{who}: formats {seen[where]!r} and {fmt!r} would both write {output}; "
                              "give every format its own path")
        seen[where] = fmt
    return outputs


def with_elapsed(report, started):
    """``report`` with ``elapsed_seconds`` since ``started`` (``time.perf_counter``), as every export returns it."""
    report["elapsed_seconds"] = round(time.perf_counter() - started, 3)
    return report
