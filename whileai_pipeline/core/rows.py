"""Source rows -> training rows (spec 3): conversion, carried keys, schema stamp and check."""

from .conversation import bridge_tool_trace, conversation
from .errors import ExportError, SchemaInvalidError
from .gates import SCALAR_TYPES, scrub
from .groups import stamp_groups
from .masks import check_mask_mode, loss_mask, unroll as unroll_entry
from .runs import resolve_source
from .wire import WireStats, check_tool_output_cap, to_wire

MESSAGE_EXAMPLES = 5
SCHEMA_KEY, SCHEMA_VERSION = "schema_version", "1"
CARRIED_KEYS = (
    "reward", "qwen_reward", "reason", "prompt", "scenario_id", "world_state", "faults",
    "fault_detected", "label_source", "failure_class", "judge_status", "judge_name", "lineage",
    "logprob", "n_tokens", "token_logprobs", "sampling", "policy_version", "writer_model",
    "user_model", "usage", "tier", "ask_family", "ask", "stance", "tone", "texture", "vagueness",
    "phrasing", "pressure", "user", "history", "length", "intent_known", "tool_known",
)
_CARRIED = frozenset(CARRIED_KEYS)
_CARRIED_ORDER = {key: i for i, key in enumerate(CARRIED_KEYS)}


# what ``shape_problem`` says of a preference pair given as a trajectory: the whole file is the wrong one
PAIRS_FILE = "this file looks like a DPO export or a pairs file"


def shape_problem(row: dict):
    """Why a trajectory cannot be exported as it stands, or None: ``messages`` that is not a list, or
    a ``tool_calls`` that is not a list of call objects. The exporters would crash on it (a number), or
    read it into empty rows (a string) and made-up calls with no name (a string or a number as a call)
    that pass the gates. The pipeline's raw stage refuses such a line (or quarantines it). So is a
    preference pair (a DPO export's or a pairs file's row, given as a run): it would be read as its prompt
    with no reply, and the run would end with nothing to publish and a scorer that graded nothing."""
    messages = row.get("messages")
    if not (messages or row.get("steps") or row.get("final_text")):
        for sides in (("chosen", "rejected"), ("preferred_output", "non_preferred_output")):  # TRL's, OpenAI's
            if sides[0] in row and sides[1] in row:
                return (f"a preference pair ({sides[0]!r} and {sides[1]!r}), not a trajectory: {PAIRS_FILE}; pass "
                        "the simulation run the pairs were made from")
    if not messages:
        return None  # rebuilt from prompt and steps
    if not isinstance(messages, list):
        return f"'messages' must be a list of message objects, got {type(messages).__name__}"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue  # left out, as the exporters leave it out
        calls = message.get("tool_calls")
        if not calls:
            continue
        if not isinstance(calls, list):
            return f"messages[{i}].tool_calls must be a list of call objects, got {type(calls).__name__}"
        for j, call in enumerate(calls):
            if not isinstance(call, dict):
                return f"messages[{i}].tool_calls[{j}] must be a call object, got {type(call).__name__}"
    return None


def stamp(row):
    if isinstance(row, dict) and SCHEMA_KEY not in row:
        row[SCHEMA_KEY] = SCHEMA_VERSION
    return row


def convert_row(raw, system, tools, strip_think, mask_mode, unroll, cap, rebuilt=None, objects=None, stats=None):
    """One source row -> its training entries (one, or one per assistant turn when unrolling).

    ``rebuilt`` is ``conversation(raw)`` when the caller already built it; ``objects``: see ``to_wire``;
    ``stats``: a ``WireStats`` to fill, for a caller that reads it after.
    """
    row = bridge_tool_trace(raw)
    messages = row.get("messages")
    call_ids = None  # read by to_wire
    if not messages:
        messages = rebuilt if (rebuilt is not None and row is raw) else conversation(row)
        call_ids = ()  # a rebuilt conversation's calls bring no ids
    stats = WireStats() if stats is None else stats
    wire = to_wire(messages, system=system, strip_think=strip_think, max_tool_output_chars=cap, stats=stats,
                   objects=objects, call_ids=call_ids)
    entry = {"messages": wire}
    if stats.truncated:
        entry["tool_output_truncated"] = stats.truncated
        entry["tool_output_chars_cut"] = stats.chars_cut
    entry["loss_mask"] = loss_mask(wire, mode=mask_mode)
    if tools:
        entry["tools"] = list(tools)
    present = _CARRIED.intersection(row)
    for key in sorted(present, key=_CARRIED_ORDER.__getitem__) if len(present) > 1 else present:
        value = row[key]
        if value is not None:
            # a scalar has nothing to scrub: skipping the call is 1.4 of 7.4 µs a bench row's carried keys
            entry[key] = value if type(value) in SCALAR_TYPES else scrub(value)
    if unroll:
        return [stamp(s) for s in unroll_entry(entry, row, stats.cuts)]
    return [stamp(entry)]


def training_problems(row):
    problems = []
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages_missing")
    elif any(not isinstance(m, dict) or not m.get("role") for m in messages):
        problems.append("message_without_role")
    if "tools" in row and not isinstance(row["tools"], list):
        problems.append("tools_not_list")
    mask = row.get("loss_mask")
    if "loss_mask" in row and (
        not isinstance(mask, list) or not isinstance(messages, list) or len(mask) != len(messages)
        or any(isinstance(b, bool) or b not in (0, 1) for b in mask)
    ):
        problems.append("loss_mask_invalid")
    return problems


def preference_problems(row):
    problems = []
    for side in ("chosen", "rejected"):
        value = row.get(side)
        if not isinstance(value, list) or not value:
            problems.append(f"{side}_missing")
    return problems


# The advice of a training row with no conversation; the pipeline, which has no system_prompt= option,
# names the run's sidecar in place of SYSTEM_PROMPT_ARGUMENT.
SYSTEM_PROMPT_ARGUMENT = "(or pass system_prompt=)"
TRAINING_SCHEMA_ADVICE = ("A training row needs a non-empty conversation: give each row a prompt, steps or messages "
                          f"{SYSTEM_PROMPT_ARGUMENT}, and fix or drop the rows named.")


class SchemaCheck:
    """Collects the first few invalid rows, as ``schema_invalid in <where>: i:code; ...``."""

    def __init__(self, where, advice=None):
        self.where = where
        self.advice = advice or TRAINING_SCHEMA_ADVICE
        self.bad = []
        self.first_source = None

    def add(self, index, problems, source=None):
        """Record row ``index``'s problems; ``source`` ("path:line") says where the first bad row came from."""
        if problems and len(self.bad) < MESSAGE_EXAMPLES:
            self.bad.append(f"{index}:{','.join(problems)}")
            if self.first_source is None and source is not None:
                self.first_source = source

    def raise_if_bad(self):
        if self.bad:
            where = f" (first bad row from {self.first_source})" if self.first_source else ""
            raise SchemaInvalidError(
                f"schema_invalid in {self.where}: {'; '.join(self.bad)}{where}. {self.advice}")


def iter_training_rows(source, *, system_prompt=None, tools=None, strip_think=True,
                       mask_mode="assistant", unroll=False, max_tool_output_chars=None):
    """Training rows one at a time, without group stamping (that needs every row's reward)."""
    check_mask_mode(mask_mode)
    check_tool_output_cap(max_tool_output_chars)
    src = resolve_source(source, system_prompt, tools)
    for position, raw in src.numbered():
        if isinstance(raw, dict):
            try:
                entries = convert_row(raw, src.system, src.tools, strip_think, mask_mode, unroll,
                                      max_tool_output_chars)
            except ExportError as exc:
                raise src.bad_row(position, exc) from None
            yield from entries


def training_rows(source, *, system_prompt=None, tools=None, strip_think=True, mask_mode="assistant",
                  unroll=False, max_tool_output_chars=None):
    """Spec 3: every source row as a chat-completions training row, groups stamped, checked."""
    rows = list(iter_training_rows(source, system_prompt=system_prompt, tools=tools, strip_think=strip_think,
                                   mask_mode=mask_mode, unroll=unroll, max_tool_output_chars=max_tool_output_chars))
    if not unroll:
        stamp_groups(rows)
    check = SchemaCheck("training_rows")
    for i, row in enumerate(rows):
        check.add(i, training_problems(row))
    check.raise_if_bad()
    return rows
