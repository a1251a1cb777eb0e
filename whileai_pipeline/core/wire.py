"""Chat-completions wire messages: roles, tool-call ids, argument encoding, think stripping, cuts.

``to_wire`` is the one message conversion every exporter uses (spec 3.4 with DECISIONS 2, 3, 9, 10).
"""

import json
import math
import re
from collections import deque

import orjson

from .errors import ExportError
from .exact_numbers import LONG_DIGIT_RUN
from .exact_numbers import strict_loads as exact_numbers_strict_loads
from .jsonl import dumps, dumps_reusing, jsonable
from .text import pyjson, text

DECODE_PASSES = 3
# ``<think>.*?</think>\s*`` (IGNORECASE, DOTALL) with its lazy ``.*?`` unrolled: the same matches (only the
# letters fold case, and no character folds to ``<``, ``>`` or ``/``), but the body is skipped a run of
# non-``<`` characters at a time instead of one character per step. Bench think blocks are about 1.7k
# characters: 5.6 -> 1.9 µs a 20 KB row. tests/core/test_think_pattern.py compares the two.
_THINK = re.compile(r"<(?i:think)>[^<]*(?:<(?!(?i:/think>))[^<]*)*<(?i:/think)>\s*")


# ---------------------------------------------------------------- arguments

def strict_loads(value: str):
    """RFC 8259 JSON, what the round-trip gate accepts (DECISIONS 3): ``NaN``/``Infinity`` are not JSON,
    an integer of any size is (``exact_numbers.strict_loads``; the gate needs only the value's type). orjson
    alone answers for nearly every text: the gate calls this for every tool call."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return exact_numbers_strict_loads(value, exact=False)


def lenient_loads(value: str):
    """The spec's decoder: Python's ``json.loads``, which also reads ``NaN``/``Infinity`` tokens.

    orjson gives the same value five times as fast for all it accepts but one thing: it turns an
    integer beyond 64 bits into a float. So text with 19 digits in a row, and text orjson refuses
    (``NaN``, ``1e400``, lone surrogates, bad JSON), goes to ``json.loads`` (a hypothesis property
    compares the two).
    """
    if _LONG_DIGITS.search(value) is None:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    return json.loads(value)


_LONG_DIGITS = re.compile(f"[0-9]{{{LONG_DIGIT_RUN}}}")  # the rule files are read by (jsonl)


def decode_arguments(raw):
    """Unwrap string-encoded JSON up to three times; stop at the first text that is not JSON.

    Decoding is the spec's (lenient, DECISIONS 2), so a ``NaN`` the agent sent stays visible as a
    number: the strict gate then refuses it (DECISIONS 3) instead of the text hiding it.
    """
    value = raw
    for _ in range(DECODE_PASSES):
        if not isinstance(value, str):
            break
        try:
            value = lenient_loads(value)
        except ValueError:
            break
    return value


def has_nonfinite(value) -> bool:
    """True when a NaN or an infinity sits anywhere in ``value`` (dicts, lists and tuples are searched)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return False
    for item in value:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:  # the common leaves, skipped at once
            continue
        if has_nonfinite(item):
            return True
    return False


def nonfinite_arguments_as_text(row):
    """Write each tool call's arguments in ``row`` that hold a NaN or an infinity as JSON text (Python's
    ``json.dumps``, which writes the ``NaN``/``Infinity`` tokens); returns ``row``, changed in place.

    For a stage file the exports read again (the pipeline's scored stage): written as they are, orjson
    makes those values null (DECISIONS 1), and the round-trip gate, which refuses such arguments
    (DECISIONS 3) when it reads the run itself, would pass a call the agent never made. The exports
    decode the text to the same values, so they write the same bytes and reach the same verdict.
    """
    if row.get("messages"):
        for message in row["messages"] if isinstance(row["messages"], list) else ():
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    fn = call.get("function")
                    _as_text(fn if isinstance(fn, dict) and "arguments" in fn else call, "arguments")
    elif row.get("steps"):
        for step in row["steps"] if isinstance(row["steps"], list) else ():
            if isinstance(step, dict):
                _as_text(step, "arguments")
    elif isinstance(row.get("tool_trace"), list):
        for element in row["tool_trace"]:
            if isinstance(element, dict):
                _as_text(element, "input")
    return row


def _as_text(holder, key):
    value = holder.get(key)
    if isinstance(value, (dict, list, float)) and has_nonfinite(value):
        holder[key] = json.dumps(value)


def wire_arguments(raw, objects=None) -> str:
    """The OpenAI ``function.arguments`` string: compact UTF-8 JSON (DECISIONS 2).

    Text that is not JSON stays as written, so the round-trip gate can see it. Non-finite floats are
    kept as ``NaN``/``Infinity`` tokens rather than silently turned into null: the strict gate then
    refuses them (DECISIONS 3) instead of training on a value the agent never sent. ``objects``
    (``ObjectTexts``) collects the texts that a TRL row may carry as they are.
    """
    value = decode_arguments(raw)
    if isinstance(value, str):
        # Still text after three passes: either not JSON (kept as written, for the gate to see), or
        # JSON encoded four or more times, which is re-encoded compactly like everything else.
        try:
            value = lenient_loads(value)
        except ValueError:
            return value
    elif not value:
        value = {}
    try:
        # Types orjson writes itself, string keys: the text dumps writes, and it reads back as a value
        # that dumps writes as the same text (ObjectTexts relies on that).
        encoded = orjson.dumps(value)
    except orjson.JSONEncodeError:
        encoded = dumps(value)
        objects = None
    if b"null" in encoded and has_nonfinite(value):  # orjson wrote NaN/Infinity as null
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=jsonable)
    text = encoded.decode("utf-8")
    if objects is not None and isinstance(value, dict) and _fits_in_a_row(value, text):
        objects.texts.add(text)
    return text


_LEVELS_ABOVE_ARGUMENTS = 8  # row, messages (prompt, chosen...), message, tool_calls, call, function: 6, and room


def _fits_in_a_row(value, text) -> bool:
    """Whether orjson writes ``value`` at the depth a TRL row holds its arguments. A Fragment hides its
    depth: a text orjson could not write decoded there would be written where ``dumps`` of the decoded
    row falls back to Python's json (other float spellings: ``1e-07``)."""
    limit = 255 - _LEVELS_ABOVE_ARGUMENTS
    if len(text) < limit or text.count("{") + text.count("[") < limit:  # a short text cannot nest that deep
        return True
    for _ in range(_LEVELS_ABOVE_ARGUMENTS):
        value = [value]
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


class ObjectTexts:
    """Tool-call argument texts that ``to_wire`` wrote from a JSON object with plain ``orjson.dumps``.

    Such a text reads back (``decode_arguments``) as an object that ``dumps`` writes as the very same
    text, with no NaN or infinity in it. So a TRL row, which carries arguments as objects, can write
    the text as it is (``place``: an ``orjson.Fragment``) instead of decoding it and encoding it again:
    about 7 µs of a 20 KB bench row. ``undo`` decodes them after all, for ``jsonl.dumps_fragments``.
    Exporters use it only for rows read from a JSONL file, which hold nothing but JSON's own types:
    rows given in memory may hold values orjson writes unchecked (an ``orjson.Fragment`` of ``NaN``).
    """

    __slots__ = ("texts", "placed")

    def __init__(self):
        self.texts = set()
        self.placed = []

    def place(self, fn, arguments) -> bool:
        """Put ``arguments`` in ``fn`` as a Fragment when it is one of these texts."""
        if type(arguments) is not str or arguments not in self.texts:
            return False
        fn["arguments"] = orjson.Fragment(arguments)
        self.placed.append((fn, arguments))
        return True

    def undo(self):
        for fn, arguments in self.placed:
            fn["arguments"] = decode_arguments(arguments)
        self.placed.clear()

    def dumps(self, row, key, encoded) -> bytes:
        """``jsonl.dumps_reusing(row, key, encoded)`` for a row that may hold these Fragments; they are
        forgotten once it is written."""
        try:
            return dumps_reusing(row, key, encoded, undo=self.undo if self.placed else None)
        finally:
            self.placed.clear()


def arguments_are_structured(arguments, encoding: str) -> bool:
    """True when the arguments parse back to a JSON object (the round-trip gate's test)."""
    if encoding == "json_string" and isinstance(arguments, str):
        try:
            return isinstance(strict_loads(arguments), dict)  # strict JSON cannot hold NaN/Infinity
        except orjson.JSONDecodeError:
            return False
    return isinstance(arguments, dict) and not has_nonfinite(arguments)


def has_tool_calls(messages) -> bool:
    return any(isinstance(m, dict) and m.get("tool_calls") for m in messages or ())


def opens_with_two_systems(messages) -> bool:
    """Whether written messages open with two system turns: the prompt an export put first, then a row's own."""
    return (isinstance(messages, list) and len(messages) > 1 and isinstance(messages[1], dict)
            and messages[1].get("role") == "system")


def declared_tool_names(tools):
    """The function names a tool list declares (``{"type": "function", "function": {"name": ...}}``, or a flat
    ``{"name": ...}``), or None when there are none or one tool's name cannot be read: a call is then not
    said to be undeclared on a guess."""
    names = set()
    for tool in tools or ():
        if not isinstance(tool, dict):
            return None
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        if not isinstance(name, str) or not name:
            return None
        names.add(name)
    return frozenset(names) or None


def tool_link_problem(messages):
    """(index, what) of the first message at which written wire messages' tool results stop pairing up with
    their calls, or None.

    ``to_wire`` writes the spec's links (3.4, DECISIONS 9): an id-less result takes the oldest pending call,
    even one an earlier turn left unanswered (E21), and a row's own ids are kept, so a result can answer
    another call, one id can name two calls, and a result can answer none. The row is still written as the
    spec says; this lets the export say so, as OpenAI refuses such a row and a chat template shows the model
    the wrong result. A call still pending when the messages end is fine: it is the call a sample trains.
    """
    seen, pending = set(), []
    for i, message in enumerate(messages or ()):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            answer = message.get("tool_call_id")
            if not answer:
                return i, "a tool result with no call to answer"
            if answer not in pending:
                return i, f"a tool result for {text(answer)!r}, which is no call waiting for its result"
            pending.remove(answer)
            continue
        if pending:
            return i, f"a turn before call {pending[0]!r} has its result"
        for call in message.get("tool_calls") or ():
            call_id = call.get("id") if isinstance(call, dict) else None
            if call_id in seen:
                return i, f"call id {call_id!r} used a second time"
            seen.add(call_id)
            pending.append(call_id)
    return None


def link_problem_in(*parts):
    """``tool_link_problem`` over named message lists read as one conversation (a TRL row's prompt, then its
    completion or side), as ``"<name>[<index in that list>]: <what>"``, or None."""
    found = tool_link_problem([m for _, messages in parts for m in messages])
    if found is None:
        return None
    index, what = found
    for name, messages in parts:
        if index < len(messages):
            return f"{name}[{index}]: {what}"
        index -= len(messages)
    return None


# How the exports describe, and what they advise for, tool calls that are not call objects (``WireStats``) and
# tool results that do not pair up with their calls (``tool_link_problem``): rows and pairs alike.
MISSHAPEN_CALLS = ("a tool_calls given as text or as one object, a call that is not an object, or a function given as "
                   "its name")
CALL_SHAPE_ADVICE = ("Write each tool_calls as a list of {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                     "\"arguments\"}} objects.")
LINK_ADVICE = "Give each call an id and each tool result the tool_call_id of the call it answers, one result per call"
# ... and messages the format has no place for, which ``to_wire`` leaves out (spec 3.4, E28: ``WireStats.dropped``)
DROPPED_MESSAGES = "messages the chat-completions format has no place for, left out of what is written"
# ... and a system, user or assistant turn whose content is no text, written as its JSON text (``WireStats.textless``)
NOT_TEXT = "a turn whose content is not text, written as its JSON text"
NOT_TEXT_ADVICE = ("Join the text parts of each turn into one string before exporting, or leave those rows out.")
ROLE_ADVICE = ("A turn is written only with the role 'system', 'user', 'assistant' or 'tool', in lowercase: rename "
               "the others before exporting ('developer' is OpenAI's newer name for 'system'; ShareGPT's 'human' and "
               "'gpt' are 'user' and 'assistant'; an assistant turn's function_call goes in its tool_calls, and the "
               "'function' turn after it is a 'tool' turn), or leave those rows out.")


def tool_context_warnings(with_calls, calls_without_system, n_out, has_tools, tools_advice, system_advice) -> list:
    """The warnings of an export whose rows make tool calls the trainer cannot show in context: ``with_calls`` of
    ``n_out`` rows written without tool schemas (when ``has_tools`` is false), ``calls_without_system`` without a
    system prompt; each ends with its caller's advice (rows and pairs alike)."""
    warnings = []
    if with_calls and not has_tools:
        warnings.append(f"{with_calls} of {n_out} rows make tool calls but were exported without tool schemas; the "
                        f"trainer cannot show the model the tools it calls. {tools_advice}")
    if calls_without_system:  # a row (a side) whose own messages open with a system message has one
        warnings.append(f"{calls_without_system} of {n_out} rows make tool calls but were exported without a system "
                        f"prompt. {system_advice}")
    return warnings


def called_tool(name: str) -> str:
    """How a warning names the tool a written call calls. A call its source gave no name (None, "", a call that
    is not an object or has no ``function``) is written with the name "", which ``''`` in a message hides, and
    no tool schema can declare."""
    return repr(name) if name else "a call with no function name, which validate refuses: function_name_missing"


# ---------------------------------------------------------------- content

def strip_think_blocks(content: str) -> str:
    if "<" in content:  # no tag, no regex: most replies have none
        content = _THINK.sub("", content)
    return content.strip()


def content_text(content) -> str:
    """Message content as text: None -> "", str as is, anything else as JSON text (DECISIONS 10)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return pyjson(content)


def check_tool_output_cap(cap):
    """Refuse a ``max_tool_output_chars`` that ``int()`` cannot read, once, before any row: the cut
    (``cut_tool_output``) meets it only at the first tool message, as a bare ``int()`` error."""
    if cap is None:
        return
    try:
        int(cap)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
        raise ExportError(f"max_tool_output_chars must be a whole number of characters, got {type(cap).__name__} "
                          f"{cap!r:.40}: pass e.g. max_tool_output_chars=2000, or None to keep tool outputs "
                          "whole") from None


def cut_tool_output(content: str, cap):
    """Apply ``max_tool_output_chars`` (spec 3.7); returns (content, was_cut, chars_cut)."""
    if cap is None:
        return content, False, 0
    cap = int(cap)
    if len(content) <= cap:
        return content, False, 0
    keep = max(0, cap)
    cut = len(content) - keep
    return f"{content[:keep]}\n[... {cut} chars of tool output truncated]", True, cut


# ---------------------------------------------------------------- messages

class WireStats:
    """Where ``max_tool_output_chars`` cut: ``(message_index, chars_cut)`` per truncated tool message; and
    ``unlinked``: whether a tool result may not pair up with its call (the cheap test ``to_wire`` makes as it
    links them: only then is ``tool_link_problem`` worth reading the written messages for); ``misshapen``:
    whether a message's tool calls were not call objects (see ``to_wire``); ``dropped``: the first message
    ``to_wire`` left out, said as a warning says it (``"role 'developer'"``), or None; ``textless``: the first
    system, user or assistant turn whose content is not text (``"the user turn's content is a list"``), or None;
    ``emptied``: whether ``strip_think`` left an assistant turn without a call and without a word (a reply that
    was only a ``<think>`` block), which tells such a turn from one the run itself left blank."""

    __slots__ = ("cuts", "unlinked", "misshapen", "dropped", "textless", "emptied")

    def __init__(self):
        self.cuts = []
        self.unlinked = self.misshapen = self.emptied = False
        self.dropped = self.textless = None

    @property
    def truncated(self) -> int:
        return len(self.cuts)

    @property
    def chars_cut(self) -> int:
        return sum(c for _, c in self.cuts)


def _iterable(value, name, want):
    """``value`` (or nothing, when it is empty) to loop over, or an ExportError that says what it is."""
    if not value:
        return ()
    if isinstance(value, (int, float)):  # bools too: nothing to loop over
        then = "the conversation is rebuilt from prompt and steps" if name == "messages" else "no calls"
        raise ExportError(f"{name} must be {want}, got {type(value).__name__} {value!r}: fix that row, or leave "
                          f"the key out ({then})")
    return value


def _own_call_ids(messages):
    """Every id the calls of ``messages`` bring, as ``to_wire`` writes it: generated ids avoid them."""
    ids = set()
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            calls = message.get("tool_calls")
            if calls and not isinstance(calls, (int, float)):
                for call in calls:
                    if isinstance(call, dict) and call.get("id"):
                        ids.add(text(call["id"]))
    return ids


def to_wire(messages, *, system="", strip_think=True, max_tool_output_chars=None, stats=None, objects=None,
            call_ids=None):
    """Convert loose or wire messages to chat-completions wire messages.

    Tool-call ids (DECISIONS 9): a call without an id gets ``call_NNNN`` from a per-conversation
    counter that counts only generated ids, skipping any id a call of the conversation brings (two
    calls with one id are invalid for OpenAI); every id joins a FIFO of pending calls; a tool message
    that names its id takes that id out of the queue, one without takes the oldest pending id.
    ``objects``: an ``ObjectTexts`` to collect argument texts a TRL row may carry as they are.
    ``call_ids``: the ids the calls of ``messages`` bring, when the caller knows them (none in a
    conversation rebuilt from steps: ``rows.convert_row`` passes ``()``, which spares reading them, about
    4 µs of a 20 KB bench row); None reads them when an id is first generated.
    """
    out = []
    if system:
        out.append({"role": "system", "content": system})
    pending = deque()
    counter = 0
    own_ids = call_ids  # the ids the conversation's calls bring, read when an id is first generated
    brought = set()  # the ids calls brought so far: one brought twice names two calls
    unlinked = False  # a result with no call waiting for it, a turn while one waits, an id brought twice
    misshapen = False  # tool_calls not a list, a call not an object, a function not an object
    dropped = None  # the first message left out (spec 3.4): a role the format has not, an item that is no object
    textless = None  # the first system, user or assistant turn whose content is not text (content parts, say)
    emptied = False  # an assistant turn without a call that strip_think left with no words
    if messages and not isinstance(messages, (list, tuple)):
        dropped = f"'messages' given as {_a(messages)}, not a list"  # its keys or characters follow
    for message in _iterable(messages, "messages", "a list of message objects"):
        if type(message) is not dict and not isinstance(message, dict):
            if dropped is None:
                dropped = f"{_a(message)} where a message object goes"
            continue
        role = message.get("role") or ""
        if type(role) is not str:
            role = str(role)
        content = message.get("content")
        if type(content) is not str:
            if (textless is None and content is not None and not isinstance(content, str)
                    and role in ("assistant", "user", "system")):  # a tool's object result is its JSON output
                textless = f"the {role} turn's content is {_a(content)}"
            content = content_text(content)
        if role == "assistant":
            if pending:
                unlinked = True
            if strip_think:
                stripped = strip_think_blocks(content)
                if not stripped and content and not emptied:
                    emptied = not content.isspace() and not message.get("tool_calls")
                content = stripped
            entry = {"role": "assistant", "content": content}
            calls = message.get("tool_calls")
            if calls:
                wire_calls = []
                if not isinstance(calls, (list, tuple)):  # text is read a character a call, an object by its keys
                    misshapen = True
                for call in _iterable(calls, "tool_calls", "a list of call objects"):
                    if not isinstance(call, dict):
                        call = {}
                        misshapen = True
                    fn = call.get("function")
                    if not isinstance(fn, dict):
                        if fn is not None:  # a function given as its name: the call is read in its place
                            misshapen = True
                        fn = call
                    call_id = call.get("id")
                    if call_id:
                        call_id = text(call_id)
                        if call_id in brought:
                            unlinked = True
                        brought.add(call_id)
                    else:
                        if own_ids is None:
                            own_ids = _own_call_ids(messages)
                        call_id = "call_%04d" % counter
                        counter += 1
                        while call_id in own_ids:  # an id the row's own calls use: never two calls with one id
                            call_id = "call_%04d" % counter
                            counter += 1
                    pending.append(call_id)
                    arguments = wire_arguments(fn.get("arguments"), objects)
                    wire_calls.append({
                        "id": call_id,
                        "type": "function",
                        "function": {"name": text(fn.get("name") or ""), "arguments": arguments},
                    })
                entry["tool_calls"] = wire_calls
            elif dropped is None and message.get("function_call"):  # the format reads tool_calls alone
                dropped = "an assistant turn's function_call (OpenAI's older form of tool_calls)"
            out.append(entry)
        elif role == "tool":
            if max_tool_output_chars is not None:
                content, was_cut, cut = cut_tool_output(content, max_tool_output_chars)
                if was_cut and stats is not None:
                    stats.cuts.append((len(out), cut))
            entry = {"role": "tool", "content": content}
            name = message.get("name")
            if name:
                entry["name"] = text(name)
            own_id = message.get("tool_call_id")
            if own_id:
                own_id = text(own_id)
                entry["tool_call_id"] = own_id
                try:
                    pending.remove(own_id)
                except ValueError:
                    unlinked = True
            elif pending:
                entry["tool_call_id"] = pending.popleft()
            else:
                unlinked = True
            out.append(entry)
        elif role in ("user", "system"):
            if pending:
                unlinked = True
            out.append({"role": role, "content": content})
        elif dropped is None:
            dropped = f"role {role!r}" if role else "a message without a role"
    if stats is not None:
        stats.unlinked |= unlinked
        stats.misshapen |= misshapen
        stats.emptied |= emptied
        if stats.dropped is None:
            stats.dropped = dropped
        if stats.textless is None:
            stats.textless = textless
    return out


def _a(value) -> str:
    """``value``'s type name with its article, as a warning names it (``"a list"``, ``"an int"``)."""
    name = type(value).__name__
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"
