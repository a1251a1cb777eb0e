"""What ``datasets.load_dataset("json", ...)`` does to values whose type changes from row to row.

The JSON loader (datasets 5.2) gives each path of a column one Arrow type. A path whose objects do
not all have the same keys, or that holds both containers and scalars, is stored as JSON text and
comes back as written. Any other path is typed from all of its values, and two mixes change values
without a word (both rendered into the chat template, so both are trained):

* integers and floats at one path: the path is ``float64``, so ``{"id": 7}`` loads as ``{"id": 7.0}``;
* strings and other scalars at one path: the path is JSON text and a string that is itself JSON
  text is decoded, so ``{"q": "null"}`` loads as ``{"q": None}`` and ``{"id": "7"}`` as ``{"id": 7}``.

An integer no int64 holds is changed whatever the other rows hold: Arrow reads it as a double
(``2**70`` loads as ``1.1805916207174113e+21``, ``10**400`` as ``inf``) and types its path float64; a path
that also holds strings, booleans or containers goes to pandas' ujson, which refuses the file beyond 64
bits (``ValueError: Value is too big!``). ``add_big_ints`` notes them.

``ColumnKinds`` collects, line by line, the kinds of value seen at each path of the conversational
columns (list items share one path, as in Arrow); ``problems()`` says which paths the loader will
change. Arrow's depth limit (``datasets_too_deep``) holds for every column: the other columns are
walked too, for that alone. Pure Python: this mirrors the loader's rules, it does not import it. (The
loader decides which objects are JSON text from its first 10 MB only; here the whole file decides, so a
file over 10 MB can still fail to load or lose keys where this check sees objects it keeps as text.)
"""

from __future__ import annotations

import orjson

COLUMNS = ("messages", "prompt", "completion", "chosen", "rejected", "tools")
ITEM = "[]"  # a list's items, all at one path
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1  # what an Arrow int64 holds
UJSON_MIN, UJSON_MAX = -2**63, 2**64 - 1  # what pandas' ujson reads as an integer (int64 or uint64)
_CONTAINERS = ("object", "array")
# Arrow refuses a column value nested this many containers deep (the value itself the first):
# "ArrowInvalid: Recursion level in ArrowSchema struct exceeded" (checked against datasets 5.2).
ARROW_MAX_DEPTH = 63
_JSON_STARTS = frozenset('{["-0123456789tfn')


def json_type(value) -> str:
    """The JSON type name of a parsed value ("object", "integer", ...); another Python type's own name."""
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "integer", float: "number"}.get(type(value), type(value).__name__)


class ColumnKinds:
    """Per path: the kinds seen (kind -> first line), key sets of its objects, JSON-text strings."""

    def __init__(self):
        self.paths: dict[tuple, dict] = {}
        self.big_ints: dict[tuple, list] = {}  # path -> [first line, its value, values beyond int64]
        self.recounted: dict[tuple, set] = {}  # path -> every kind at it, read again (``recount``)
        self._last_tools = None  # the JSON of the last ``tools`` walked
        self.kwargs_lines: dict[bool, int] = {}  # has chat_template_kwargs -> first such line
        self.too_deep: dict[tuple, int] = {}  # path of a container ARROW_MAX_DEPTH deep -> first line

    def add_big_ints(self, line, row):
        """Note the integers beyond int64 in a row's conversational columns (the caller calls this only
        for a line with 19 digits in a row: no other line can hold one)."""
        if isinstance(row, dict):
            for column in COLUMNS:
                if column in row:
                    self._find_big(line, (column,), row[column])

    def _find_big(self, line, path, value):
        todo = [(path, value)]  # a stack, not recursion: a value may be nested 1,000 deep
        while todo:
            path, value = todo.pop()
            kind = type(value)
            if kind is int:
                if not INT64_MIN <= value <= INT64_MAX:
                    seen = self.big_ints.get(path)
                    if seen is None:
                        self.big_ints[path] = [line, value, 1]
                    else:
                        seen[2] += 1
            elif kind is dict:
                todo.extend(reversed([((*path, key), sub) for key, sub in value.items()]))
            elif kind is list:
                todo.extend(reversed([((*path, ITEM), item) for item in value]))

    def add(self, line, row):
        if not isinstance(row, dict):
            return
        self.kwargs_lines.setdefault("chat_template_kwargs" in row, line)
        for column, value in row.items():
            if column not in COLUMNS:  # a column TRL does not read: only Arrow's depth limit is reported there
                self._walk(line, (column,), value)
        for column in COLUMNS:
            if column in row:
                value = row[column]
                if column == "tools":  # every row of a run carries the same tools: walking them again adds nothing
                    try:
                        text = orjson.dumps(value)  # not ==, which holds 7 == 7.0 == True
                    except (orjson.JSONEncodeError, TypeError):
                        text = None
                    if text is not None and text == self._last_tools:
                        continue
                    self._last_tools = text
                self._walk(line, (column,), value)

    def _walk(self, line, path, value):
        if value is None:
            return
        seen = self.paths.get(path)
        if seen is None:
            seen = self.paths[path] = {"kinds": {}, "keys": None, "mixed_keys": False, "json_text": None,
                                       "text": False}
        elif seen["text"]:
            return  # the loader keeps this path as JSON text whatever later rows hold: nothing below changes
        kind = json_type(value)
        seen["kinds"].setdefault(kind, line)
        if kind == "object":
            keys = frozenset(value)
            if seen["keys"] is None:
                seen["keys"] = keys
            if keys != seen["keys"] or not keys:
                seen["mixed_keys"] = True
        if kind in _CONTAINERS:
            if _kept_as_text(seen):
                seen["text"] = True  # for good: a path only gains kinds and key sets
                return
            if len(path) >= ARROW_MAX_DEPTH:
                self.too_deep.setdefault(path, line)
                return
            for key, sub in (value.items() if kind == "object" else ((ITEM, item) for item in value)):
                self._walk(line, (*path, key), sub)
        elif len(seen["kinds"]) > 1 and _kept_as_text(seen):
            seen["text"] = True
        elif kind == "string" and seen["json_text"] is None and path[0] in COLUMNS and _is_json_text(value):
            seen["json_text"] = (line, value)

    def merge(self, other: ColumnKinds):
        """Fold in the paths of a later part of the file (a worker's chunk)."""
        for path, line in other.too_deep.items():
            self.too_deep[path] = min(line, self.too_deep.get(path, line))
        for has, line in other.kwargs_lines.items():
            self.kwargs_lines[has] = min(line, self.kwargs_lines.get(has, line))
        for path, (line, value, count) in other.big_ints.items():
            mine = self.big_ints.get(path)
            if mine is None:
                self.big_ints[path] = [line, value, count]
            else:
                if line < mine[0]:
                    mine[0], mine[1] = line, value
                mine[2] += count
        for path, theirs in other.paths.items():
            mine = self.paths.get(path)
            if mine is None:
                self.paths[path] = theirs
                continue
            for kind, line in theirs["kinds"].items():
                if kind not in mine["kinds"] or line < mine["kinds"][kind]:
                    mine["kinds"][kind] = line
            if mine["keys"] is None:
                mine["keys"] = theirs["keys"]
            elif theirs["keys"] is not None and theirs["keys"] != mine["keys"]:
                mine["mixed_keys"] = True
            mine["mixed_keys"] = mine["mixed_keys"] or theirs["mixed_keys"]
            mine["text"] = _kept_as_text(mine)
            if theirs["json_text"] and (not mine["json_text"] or theirs["json_text"][0] < mine["json_text"][0]):
                mine["json_text"] = theirs["json_text"]

    def problems(self) -> list[tuple[int, dict]]:
        """``(line, warning)`` pairs, one per path, in path order; a warning has ``severity``, ``code``,
        ``where`` and ``message``."""
        out = []
        text_paths = {path for path, seen in self.paths.items() if seen["text"]}
        for path in sorted(self.paths, key=lambda p: tuple(map(str, p))):
            if path[0] not in COLUMNS or _under(path, text_paths):
                continue  # not rendered by the template, or stored as JSON text: comes back as written
            kinds = self.paths[path]["kinds"]
            where = _where(path)
            if "string" in kinds and len(set(kinds) - {"string"}) and self.paths[path]["json_text"]:
                line, text = self.paths[path]["json_text"]
                others = sorted(set(kinds) - {"string"})
                out.append(_problem(line, "datasets_decodes_string", where,
                                    f"strings and {', '.join(others)} (first at line {kinds[others[0]]}) at one path: "
                                    f"datasets.load_dataset stores the path as JSON text and decodes the string {text!r:.40} "
                                    f"to {_kind_of_text(text)}, which the chat template renders instead; write one "
                                    "type per path across rows"))
            elif set(kinds) == {"integer", "number"}:
                line = kinds["integer"]
                out.append(_problem(line, "datasets_int_as_float", where,
                                    f"integers and floats (first float at line {kinds['number']}) at one path: "
                                    "datasets.load_dataset types the path float64, so an integer such as 7 loads as 7.0 "
                                    "and is rendered and trained so; write one number type per path across rows"))
        big = sorted((self._big_int_problem(path) for path in self.big_ints), key=lambda p: (p[0], p[1]["where"]))
        deep = sorted((_problem(line, "datasets_too_deep", _where(path), (
            f"a value nested {len(path)} containers deep in the {path[0]} column: datasets.load_dataset refuses "
            "the file (ArrowInvalid: Recursion level in ArrowSchema struct exceeded); nest it less deeply "
            f"(at most {ARROW_MAX_DEPTH - 1} levels, the column's own value counted)"), "error")
            for path, line in self.too_deep.items()
            if not _under(path, text_paths)), key=lambda p: (p[0], p[1]["where"]))
        return out + big + deep + self._kwargs_problem()

    def _kwargs_problem(self):
        """A row without ``chat_template_kwargs`` in a file where another row has it: the loader gives it
        None and TRL's ``**example.get("chat_template_kwargs", {})`` raises TypeError."""
        if len(self.kwargs_lines) < 2:
            return []
        return [_problem(self.kwargs_lines[False], "chat_template_kwargs_missing", "chat_template_kwargs", (
            f"this row has no chat_template_kwargs but line {self.kwargs_lines[True]} has: datasets.load_dataset "
            "gives this row None, and TRL's **example.get('chat_template_kwargs', {}) raises TypeError (argument "
            "after ** must be a mapping, not NoneType); give every row the key ({} when it has nothing to "
            "pass) or none"), "error")]

    def _big_int_problem(self, path):
        """What the loader does with an integer beyond int64 (checked against datasets 5.2: Arrow reads
        it as a double, pandas' ujson, which reads a path kept as JSON text, refuses it beyond uint64)."""
        line, value, count = self.big_ints[path]
        digits = int.__repr__(value)
        shown = digits if len(digits) <= 30 else f"{digits[:12]}...({len(digits)} digits)"
        try:
            as_float = repr(float(value))
        except OverflowError:
            as_float = "inf"
        where = _where(path)
        others = sorted(set(self._kinds_at(path)) - {"integer", "number"})
        more = f" ({count} such values at this path)" if count > 1 else ""
        fix = "; write such ids as strings in the run (the model then learns the digits as text)"
        if others and not UJSON_MIN <= value <= UJSON_MAX:
            return _problem(line, "datasets_big_int", where, (
                f"the integer {shown}{more} does not fit in 64 bits and the path also holds {', '.join(others)}: "
                "datasets.load_dataset refuses the file (ValueError: Value is too big!)" + fix), "error")
        typed = ("types the path float64" if value > UJSON_MAX or value < UJSON_MIN else
                 "types the path float64 (unless it keeps the column as JSON text)")
        return _problem(line, "datasets_big_int", where, (
            f"the integer {shown}{more} does not fit in int64: datasets.load_dataset {typed} and loads it as "
            f"{as_float}, and every integer at this path as a float (7 as 7.0); the chat template renders and "
            "TRL trains that" + fix))

    def _kinds_at(self, path):
        """The kinds seen at ``path``; under a path kept as JSON text the walk stopped, so those come from
        reading the file again (``recount``), which the validator does only for a big integer there."""
        if path in self.recounted:
            return self.recounted[path]
        return self.paths.get(path, {}).get("kinds", ())

    def unfollowed_big_ints(self) -> list:
        """Paths of big integers below a path the walk stopped at (kept as JSON text)."""
        return [path for path in self.big_ints if path not in self.recounted and any(
            self.paths.get(path[:n], {}).get("text") for n in range(1, len(path)))]

    def recount(self, rows, paths):
        """Collect every kind at ``paths`` from ``rows`` (the whole file read again)."""
        found = {path: set() for path in paths}
        for row in rows:
            if isinstance(row, dict):
                for path in paths:
                    _kinds_along(row, path, found[path])
        self.recounted.update(found)


def big_ints_of(row) -> list[tuple[str, int]]:
    """``(where, first value)`` of each path of a row's conversational columns that holds an integer no
    int64 holds (what ``ColumnKinds.add_big_ints`` notes), in path order: the export's report uses it."""
    kinds = ColumnKinds()
    kinds.add_big_ints(0, row)
    return sorted((_where(path), value) for path, (_, value, _) in kinds.big_ints.items())


def _kinds_along(value, path, out):
    values = [value]  # level by level, not recursion: a path may be 1,000 deep
    for part in path:
        if part == ITEM:
            values = [item for v in values if isinstance(v, list) for item in v]
        else:
            values = [v[part] for v in values if isinstance(v, dict) and part in v]
    out.update(json_type(v) for v in values if v is not None)


def _under(path, text_paths) -> bool:
    """Whether ``path`` is one of ``text_paths`` (kept as JSON text by the loader) or inside one."""
    return any(path[:n] in text_paths for n in range(1, len(path) + 1))


def _kept_as_text(seen) -> bool:
    """Whether the loader stores a path as JSON text: it held containers and scalars, objects and
    arrays, or objects whose keys differ."""
    kinds = seen["kinds"]
    containers = [k for k in kinds if k in _CONTAINERS]
    if not containers:
        return False
    if len(containers) < len(kinds) or len(containers) == 2:
        return True
    return containers == ["object"] and seen["mixed_keys"]


def _is_json_text(text: str) -> bool:
    if text.lstrip()[:1] not in _JSON_STARTS:  # most strings: no exception to build
        return False
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def _kind_of_text(text: str) -> str:
    value = orjson.loads(text)
    return "null" if value is None else f"{json_type(value)} {value!r:.40}"


def _where(path) -> str:
    out = path[0]
    for part in path[1:]:
        out += part if part == ITEM else f".{part}"
    return out


def _problem(line, code, where, message, severity="warning") -> tuple[int, dict]:
    return line, {"severity": severity, "code": code, "where": where, "message": message}
