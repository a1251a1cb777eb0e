"""Rows in the shapes TRL loads (spec 4.1, DECISIONS 16).

Chat templates render tool-call arguments with ``| tojson``, so TRL rows carry arguments as
objects, not JSON strings. TRL's SFTTrainer reads no per-message mask: a row restricted to one turn
must be a prompt/completion row.
"""

from .arguments import ROWS_AS_TEXT, check_rows
from .errors import BadRowError, ExportError
from .wire import decode_arguments

KINDS = ("training", "preference", "completion")

TRL_LOSS_MESSAGES = (
    "TRL trains every token of these conversational `messages` rows unless SFTConfig("
    "assistant_only_loss=True), which trains the assistant turns (trained_messages counts those)."
)
TRL_LOSS_COMPLETION = (
    "TRL trains only the `completion` of these prompt/completion rows (the chosen assistant turn and "
    "anything after it); the `prompt` is context only."
)


def trl_messages(messages, *, copy=True, objects=None):
    """Copy messages with tool-call arguments decoded to the objects the JSON strings held.

    ``copy=False`` decodes in place instead, for messages the caller built and reads no more (the
    exporters' own rows: a row of 13 messages is 24 dict copies). ``objects`` (``wire.ObjectTexts``):
    arguments it holds are left as their text, to be written as it is, not decoded.
    """
    if not copy and type(messages) is list:
        return _decoded_in_place(messages, objects)
    out = []
    for message in messages if type(messages) is list else _listed(messages, "messages"):
        if not isinstance(message, dict):
            continue
        if copy:
            message = dict(message)
        calls = message.get("tool_calls")
        if calls:
            new_calls = []
            for call in calls if type(calls) is list else _listed(calls, "tool_calls"):
                if not isinstance(call, dict):
                    call = {}
                elif copy:
                    call = dict(call)
                fn = call.get("function")
                if fn and not isinstance(fn, dict):
                    raise ExportError(
                        f"tool call function must be an object, got {type(fn).__name__}: {fn!r:.80}; "
                        "export rows built by training_rows() or fix the tool_calls"
                    )
                if copy or not isinstance(fn, dict):
                    fn = dict(fn or {})
                arguments = fn.get("arguments")
                if objects is None or not objects.place(fn, arguments):
                    fn["arguments"] = decode_arguments(arguments)
                call["function"] = fn
                new_calls.append(call)
            message["tool_calls"] = new_calls
        out.append(message)
    return out


def _decoded_in_place(messages, objects):
    """``trl_messages(messages, copy=False)`` for messages ``to_wire`` built, the only ones the exporters
    pass: every message is a dict and every call a dict whose ``function`` is a dict, so there is nothing
    to check or copy (measured, a TRL export's whole per-row work on 3,000 bench rows, best of 7, three
    runs each: 117.0-118.6 against 118.7-119.9 µs a row)."""
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            for call in calls:
                fn = call["function"]
                if objects is None or not objects.place(fn, fn["arguments"]):
                    fn["arguments"] = decode_arguments(fn["arguments"])
    return messages


def _listed(value, name):
    """``value`` to loop over; a number (which cannot be) is an ExportError that says what to pass."""
    if isinstance(value, (int, float)):  # bools too
        raise ExportError(f"{name} must be a list, got {type(value).__name__} {value!r}: to_trl reshapes rows as "
                          "training_rows() and export_dataset() write them")
    return value or ()


def _move_prompt_text(row, out):
    prompt = row.get("prompt")
    if isinstance(prompt, str) and prompt:
        out["prompt_text"] = prompt


def trl_training_row(row, *, copy=True, objects=None):
    """A conversational ``messages`` row; the raw prompt text moves to ``prompt_text``, no loss_mask.

    ``copy=False`` and ``objects``: see ``trl_messages``."""
    out = {}
    for key, value in row.items():
        if key == "messages":
            out[key] = trl_messages(value, copy=copy, objects=objects)
        elif key not in ("prompt", "loss_mask"):
            out[key] = value
    if "messages" not in out:  # spec 4.1: every TRL training row has its messages, maybe none
        out["messages"] = []
    _move_prompt_text(row, out)
    return out


def last_assistant_index(messages) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    return -1


def trl_completion_row(row, *, copy=True, objects=None):
    """A conversational prompt/completion row split at the last assistant turn, or None.

    ``copy=False`` and ``objects``: see ``trl_messages``."""
    messages = trl_messages(row.get("messages"), copy=copy, objects=objects)
    cut = last_assistant_index(messages)
    if cut < 1:
        return None
    out = {"prompt": messages[:cut], "completion": messages[cut:]}
    for key, value in row.items():
        if key not in ("messages", "prompt", "loss_mask"):
            out[key] = value
    _move_prompt_text(row, out)
    return out


def first_assistant_index(messages) -> int:
    for i, message in enumerate(messages):
        if message.get("role") == "assistant":
            return i
    return -1


def trl_preference_row(row, objects=None):
    """Prompt = chosen side up to its first assistant turn; sides = the remainders (spec 4.1).

    ``objects``: see ``trl_messages``."""
    chosen = trl_messages(row.get("chosen"), objects=objects)
    rejected = trl_messages(row.get("rejected"), objects=objects)
    ci, ri = first_assistant_index(chosen), first_assistant_index(rejected)
    if ci < 1 or ri < 1:
        return None
    out = dict(row)
    out["prompt"] = chosen[:ci]
    out["chosen"] = chosen[ci:]
    out["rejected"] = rejected[ri:]
    return out


def to_trl(rows, kind="training"):
    """Reshape exported rows for TRL; ``kind`` is training, completion or preference."""
    if kind not in KINDS:
        raise ExportError(f"kind must be 'training' or 'preference', got {kind!r}: 'training' reshapes SFT rows, "
                          "'preference' chosen/rejected pairs ('completion' gives prompt/completion SFT rows)")
    check_rows(rows, "rows must be a list of row dicts", ROWS_AS_TEXT, error=TypeError)
    convert = {"training": trl_training_row, "completion": trl_completion_row,
               "preference": trl_preference_row}[kind]
    out = []
    for index, row in enumerate(rows):
        if isinstance(row, dict):
            try:
                new = convert(row)
            except ExportError as exc:
                raise BadRowError.at(None, index, exc) from None
            if new is not None:
                out.append(new)
    return out
