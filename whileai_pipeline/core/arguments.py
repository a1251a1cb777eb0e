"""Checks of argument shapes that several functions share: a whole number of something, and rows to loop
over. Each caller words its own error (what the argument is for, what to pass); these say what is wrong."""

import numbers
import operator
import os

from .errors import ExportError


def whole_number(value, *, strings=False):
    """``value`` as an ``int`` when it is a whole number (``2``, ``2.0``, a numpy integer), else None:
    ``2.5``, ``True``, ``None``, infinity and NaN are not, nor is a string unless ``strings`` (text read
    from an environment variable: ``"4"``, not ``"4.0"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not strings:
            return None
        try:
            return int(value)
        except ValueError:
            return None
    try:
        return operator.index(value)
    except TypeError:
        pass
    if isinstance(value, numbers.Real):
        try:
            n = int(value)
        except (OverflowError, ValueError):  # infinity, NaN
            return None
        return n if n == value else None
    return None


ROWS_HINT = "pass a list of row dicts, or read_jsonl(path) for a JSONL run"
ROWS_AS_TEXT = "pass the rows themselves, e.g. read_jsonl(path) for a JSONL file"


def trajectories_of(rows):
    """A run's trajectories (``load_run``'s ``Run``, the SDK's run objects), else ``rows`` as given: a ``Run`` is
    also a path, which ``check_rows`` would refuse."""
    if hasattr(rows, "trajectories") and not isinstance(rows, (list, tuple)):
        return rows.trajectories
    return rows


def check_rows(rows, what, path_hint, *, error=ExportError):
    """Refuse what looping over ``rows`` would misread without a word: a path's (or a JSON text's)
    characters, the integers of bytes or one row's keys are no rows, and the reference skips them all
    and reports nothing found; None or a number cannot be looped over at all. ``what`` starts the
    message ("build_preference_pairs takes rows"), ``path_hint`` is what to do with a path or text."""
    if isinstance(rows, (str, bytes, bytearray, os.PathLike)):
        raise error(f"{what}, got {type(rows).__name__} {rows!r:.60}: {path_hint}")
    if isinstance(rows, dict):
        raise error(f"{what}, got dict (one row?): pass a list of rows")
    if not hasattr(rows, "__iter__"):
        raise error(f"{what}, got {type(rows).__name__} {rows!r:.60}: {ROWS_HINT}")


def refuse_pairs_with_report(pairs, what):
    """Refuse the ``(pairs, report)`` tuple ``build_preference_pairs`` returns, passed on whole: its list
    of pairs is no pair and its report has no sides, so the entries check blames "1 of 1 entries"
    and says to build the pairs, which is what the caller did. ``what`` names the function."""
    if (isinstance(pairs, tuple) and len(pairs) == 2 and isinstance(pairs[0], list) and isinstance(pairs[1], dict)
            and "chosen" not in pairs[1]):
        raise ValueError(f"{what} takes chosen/rejected pairs, and got the (pairs, report) tuple that "
                         f"build_preference_pairs returns: pass its first item: pairs, report = "
                         f"build_preference_pairs(rows); {what}(pairs, ...)")


def refuse_rows_with_report(rows, what, call=None):
    """Refuse the ``(rows, report)`` tuple the SDK's ``scored.select_for_sft()`` returns, passed on whole:
    its list of rows is no row and its report has no conversation, so the schema check blamed the data
    ("0:messages_missing") and ``build_preference_pairs`` paired nothing. ``what`` names what was given,
    ``call`` the function to pass the rows to (None: the caller is not known here)."""
    if (isinstance(rows, tuple) and len(rows) == 2 and isinstance(rows[0], list) and isinstance(rows[1], dict)
            and not {"messages", "prompt", "steps", "final_text", "chosen", "rejected"} & rows[1].keys()):
        then = f"{call}(rows, ...)" if call else "then pass rows"
        raise ExportError(f"{what} is a (rows, report) tuple, as scored.select_for_sft() returns, not rows: pass "
                          f"its first item: rows, report = scored.select_for_sft(); {then}")


def check_path(path, what, hint):
    """``path`` as ``str`` or ``os.PathLike`` (bytes are decoded as the OS does); anything else is a
    TypeError that names the function (``what``), where pathlib's names neither it nor the argument."""
    if isinstance(path, bytes):
        return os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} (str or os.PathLike), got {type(path).__name__} {path!r:.60}: {hint}")
    return path
