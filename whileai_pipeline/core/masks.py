"""Which messages a trainer learns from: ``loss_mask`` and per-turn unrolling (spec 3.8, 3.10)."""

from .errors import ExportError
from .text import sha1_12, text

MASK_MODES = ("assistant", "final")


def check_mask_mode(mode):
    if mode not in MASK_MODES:
        raise ExportError(f"mask_mode must be one of {MASK_MODES!r}, got {mode!r}: 'assistant' trains every "
                          "assistant turn, 'final' only the last one")


def loss_mask(messages, *, mode="assistant"):
    """1 for each assistant message, else 0; ``final`` keeps only the last 1."""
    check_mask_mode(mode)
    if type(messages) is not list:
        _check_messages(messages)
    mask = [1 if isinstance(m, dict) and m.get("role") == "assistant" else 0 for m in messages]
    if mode == "final" and 1 in mask:
        last = len(mask) - 1 - mask[::-1].index(1)
        mask = [0] * len(mask)
        mask[last] = 1
    return mask


def _check_messages(messages):
    """Refuse what ``loss_mask`` would misread without a word: a whole row (one 0 per key), text or bytes
    (one 0 per character), or None and a number (a bare "object is not iterable")."""
    if isinstance(messages, dict):
        raise TypeError("loss_mask takes a list of messages, got dict (a whole row?): pass row['messages']")
    if isinstance(messages, (str, bytes, bytearray)) or not hasattr(messages, "__iter__"):
        raise TypeError(f"loss_mask takes a list of messages, got {type(messages).__name__} {messages!r:.60}: pass "
                        "a row's messages, e.g. loss_mask(row['messages'])")


def unroll(entry, raw, cuts):
    """One sample per assistant turn, each training only that turn (DECISIONS 11).

    ``cuts`` lists ``(message_index, chars_cut)`` for every truncated tool message of the entry, so
    each sample counts only the cuts inside it.
    """
    messages = entry["messages"]
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not turns:
        return [entry]
    origin = {"prompt_sha1": sha1_12(text(raw.get("prompt") or "")), "rollout_index": raw.get("rollout_index")}
    if raw.get("scenario_id"):
        origin["scenario_id"] = raw.get("scenario_id")
    samples = []
    for k, i in enumerate(turns, 1):
        sample = dict(entry)
        sample["messages"] = messages[: i + 1]
        inside = [cut for index, cut in cuts if index <= i]
        if inside:
            sample["tool_output_truncated"] = len(inside)
            sample["tool_output_chars_cut"] = sum(inside)
        else:
            sample.pop("tool_output_truncated", None)
            sample.pop("tool_output_chars_cut", None)
        mask = [0] * (i + 1)
        mask[i] = 1
        sample["loss_mask"] = mask
        sample["unroll"] = {"turn": k, "turns": len(turns)}
        sample["lineage"] = _lineage_with_origin(entry.get("lineage"), origin)
        samples.append(sample)
    return samples


def _lineage_with_origin(lineage, origin):
    if isinstance(lineage, dict) or not lineage:
        out = dict(lineage or {})
    else:
        out = {"source_lineage": lineage}
    out["unrolled_from"] = dict(origin)
    return out
