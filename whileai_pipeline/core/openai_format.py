"""Check a training file against what its consumer accepts: OpenAI's fine-tuning rules or TRL's shapes.

Pure Python, no Dagster, no network. ``validate_file(path, "openai" | "trl")`` reads a JSONL file line
by line and returns a report dict whose ``ok`` flag is false when any line breaks a rule; every
problem names its 1-based line, where in the row it is (``messages[3].tool_calls[0].function.arguments``),
a stable code, and a sentence.

``format="openai"`` follows the documented chat fine-tuning format:

* each line is one JSON object (UTF-8, strict RFC 8259 JSON: no ``NaN``/``Infinity``);
* ``messages`` is a non-empty list; roles are ``system``, ``user``, ``assistant``, ``tool``; message keys
  are ``role``, ``content``, ``name``, ``weight``, ``tool_calls``, ``tool_call_id`` (the legacy
  ``function_call`` and row ``functions`` keys are let through unchecked; rows in that deprecated shape,
  with ``function`` messages, are not supported); at least one assistant message;
* ``content`` is a string; an assistant message with ``tool_calls`` may have ``null`` (or no) content;
  user and system content may also be a list of ``text`` / ``image_url`` parts; tool content is a string;
* assistant ``tool_calls``: each has a non-empty string ``id`` (unique in the conversation),
  ``type: "function"``, ``function.name`` matching ``^[a-zA-Z0-9_-]{1,64}$``, and ``function.arguments``
  a JSON *string* that parses to an object;
* every tool message has a ``tool_call_id`` answering a call made earlier in the same conversation and
  not answered yet; a call left unanswered when the conversation moves on is an error (a call in the
  last assistant turn, with nothing after it, is fine: it teaches the model to make the call);
* ``weight`` only on assistant messages, and only 0 or 1;
* optional ``tools``: a list of ``{"type": "function", "function": {"name", "description"?,
  "parameters"?, "strict"?}}`` with unique names, ``parameters`` a JSON-schema object (``type: "object"``,
  ``properties`` an object of schema objects, ``required`` names that are in ``properties``);
* optional ``parallel_tool_calls`` boolean; when false, no assistant turn has more than one call.

Preference files: OpenAI's hosted DPO takes ``input`` / ``preferred_output`` / ``non_preferred_output``
and that shape is checked when present. This project's preference rows are ``prompt`` / ``chosen`` /
``rejected`` with each side a whole conversation (spec 7.6): each side is checked as a conversation under
the rules above, and the report says so in ``notes``.

``format="trl"`` checks TRL's conversational shapes (the key sets ``trl.data_utils.apply_chat_template``
accepts: ``messages``; ``prompt``; ``prompt`` + ``completion``; ``prompt`` + ``chosen`` + ``rejected``;
``chosen`` + ``rejected``, whose prompt TRL takes as their shared leading messages; ``prompt`` +
``completion`` + ``label``), every one a list of messages; tool-call ``arguments`` must be objects (a chat
template renders them with ``| tojson``, so a JSON string would be quoted a second time); ``tools`` may
be a JSON string (the trainers parse it); a prompt must end on a user, tool or assistant turn (one that
ends on the system turn, or on an assistant turn with no content, is a warning: the trainers take it,
``maybe_apply_chat_template`` does not); a completion (or chosen / rejected side) must start with an
assistant turn, and a user or system turn inside it is learned as the model's own words (an error in a
completion, a warning in a DPO side, where multi-turn pairs have no other shape), as is a tool result
that ends a completion (a warning); ``chat_template_kwargs`` must be an object; a column TRL
reads in place of the conversation (``input_ids``, ``labels``, masks, reference log-probs) is an
error. Blank lines and a byte-order mark are warnings here (``datasets`` reads them), errors for openai.
A value whose type changes from row to row at one path (``arguments.id`` an integer in one row, a float
or a string in another) is a warning: ``datasets.load_dataset`` gives the path one type and changes the
value the template renders (``7`` loads as ``7.0``; ``"null"`` as ``None``), see ``datasets_types``; so
is an integer no int64 holds (``datasets_big_int``: it loads as a float or ``inf``), an error where the
path also holds other kinds of value and the loader refuses the file. Lines are read as the exporter
reads them (``exact_numbers.strict_line``): an integer of any size is JSON, in both formats.

In the openai format, row keys beyond what the format defines (``loss_mask``, ``reward``, ``lineage``...)
are reported once per key as a warning (``extra_keys``): OpenAI's per-line schema has only ``messages``,
``tools``, ``parallel_tool_calls`` and ``functions`` and its upload has been seen refusing an extra key;
pass ``strict_keys=True`` to make them errors. A ``loss_mask`` that masks assistant turns without a
``weight: 0`` on them is a warning (``loss_mask_ignored``): OpenAI trains every assistant turn whose
weight is not 0. TRL drops the other columns, so the trl format reports no other extra key.

A warning whose words are the same on every line that has it (``loss_mask_ignored``, ``crlf``, a
``blank_line``, ``prompt_last_role``, ``prompt_last_content`` or ``completion_ends_on_tool`` warning) is
listed once in a file's report, at its first line, with ``lines``: how many lines have it (``counts``
still counts every one).

A file checked as one format whose rows do things the other format's way (``trl`` rows' object arguments
or prompt / completion lists in an ``openai`` check; ``openai`` rows' JSON-string arguments or prompt text
in a ``trl`` check) gets ``looks_like``: the other format, how many rows and the first line, and a
sentence saying which ``--format`` to try, when at least half the rows with errors are such rows. It
is decided from what the one pass over the file sees.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import orjson

from .datasets_types import ColumnKinds, json_type
from .exact_numbers import lines_with_runs, split_with_runs, strict_line, strict_loads, too_many_digits
from .exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from .gates import FORMATS

ROLES = ("system", "user", "assistant", "tool")
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MIN_EXAMPLES = 10

OPENAI_MESSAGE_KEYS = frozenset(
    {"role", "content", "name", "weight", "tool_calls", "tool_call_id", "function_call"})
OPENAI_ROW_KEYS = frozenset({"messages", "tools", "parallel_tool_calls", "functions"})
OPENAI_PREF_KEYS = frozenset({"input", "preferred_output", "non_preferred_output"})
# What our own preference rows carry besides the sides (spec 7.2 pair keys): metadata, never content.
OUR_PREF_KEYS = frozenset({"prompt", "chosen", "rejected", "tools"})
TRL_KEYS = ("prompt", "completion", "chosen", "rejected", "messages", "label")
TRL_SHAPES = {
    frozenset({"messages"}): "messages",
    frozenset({"prompt"}): "prompt_only",
    frozenset({"prompt", "completion"}): "prompt_completion",
    frozenset({"prompt", "chosen", "rejected"}): "preference",
    frozenset({"chosen", "rejected"}): "preference_implicit_prompt",
    frozenset({"prompt", "completion", "label"}): "unpaired_preference",
}
# Columns SFTTrainer / DPOTrainer read when present: "input_ids" makes SFTTrainer skip tokenizing the
# conversation, "labels" / masks replace the ones it would build, ref logps replace the reference model's.
TRL_READ_COLUMNS = ("input_ids", "labels", "attention_mask", "assistant_masks", "completion_mask",
                    "prompt_ids", "chosen_ids", "rejected_ids", "ref_chosen_logps", "ref_rejected_logps")

CHECKED_FOR = {
    "openai": ("OpenAI chat fine-tuning rules: roles, content types, assistant tool_calls with id, "
               "type 'function', a valid function name and JSON-string arguments that parse to an object, "
               "tool messages answering an earlier call id, weight 0/1 on assistant turns, tools schema shape."),
    "trl": ("TRL conversational shapes: messages, prompt/completion or prompt/chosen/rejected lists of "
            "messages, tool-call arguments as objects (rendered once by | tojson), prompts ending on a "
            "user/tool/assistant turn, completions starting with an assistant turn, tools schema shape, "
            "values datasets.load_dataset would change (one type per path across rows)."),
}
# Warnings whose words are the same on every line that has one (a whole file of them says nothing new
# after the first): a file's report lists each (code, where) once, at its first line, with ``lines``
# (how many lines have it); ``counts``, ``warnings`` and ``problems_truncated`` still count every one.
REPEATED_WARNINGS = frozenset({"loss_mask_ignored", "crlf", "blank_line", "prompt_last_role",
                               "prompt_last_content", "completion_ends_on_tool"})
# A file checked as one format whose rows do things the other's way (object arguments in an openai
# check, JSON-string arguments or a prompt text beside messages in a trl check: each an error the check
# finds anyway) gets a ``looks_like`` note naming the other format, decided on the same one pass.
OTHER_FORMAT = {"openai": "trl", "trl": "openai"}
# keys of the SDK's trajectory rows that no training file has (the exporters turn them into messages or drop them)
RUN_KEYS = ("steps", "tool_trace", "final_text", "privileged")

NOTE_OUR_PREFERENCE = (
    "prompt/chosen/rejected rows are this project's preference shape, not OpenAI's hosted DPO shape "
    "(input/preferred_output/non_preferred_output): each side was checked as a whole conversation under "
    "the chat rules. Upload to OpenAI's DPO needs a conversion; trainers that read whole conversations "
    "take the file as it is."
)


def _short(value, n=60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


class _Row:
    """Problems of one row; ``where`` paths are relative to the row."""

    def __init__(self, fmt: str, strict_keys: bool):
        self.fmt = fmt
        self.strict_keys = strict_keys
        self.problems: list[dict] = []
        self.other_format = None  # the first thing the row does the other format's way (OTHER_FORMAT)

    def looks_like_other(self, tell):
        """The row does something the way the other format does (an error here, found while checking it):
        ``tell`` says what, for the report's ``looks_like`` note."""
        if self.other_format is None:
            self.other_format = tell

    def error(self, code, where, message):
        self.problems.append({"severity": "error", "code": code, "where": where, "message": message})

    def warn(self, code, where, message):
        self.problems.append({"severity": "warning", "code": code, "where": where, "message": message})

    # ------------------------------------------------------------ tools

    def tools(self, tools, where="tools"):
        if tools is None:
            return set()
        if self.fmt == "trl" and isinstance(tools, str):  # SFTTrainer/DPOTrainer json.loads a string column
            try:
                tools = orjson.loads(tools)
            except orjson.JSONDecodeError as exc:
                self.error("tools_not_json", where, f"tools is a string that is not JSON ({exc})")
                return set()
        if not isinstance(tools, list):
            self.error("tools_not_list", where, f"tools must be a list, got {json_type(tools)}")
            return set()
        names = set()
        for i, tool in enumerate(tools):
            w = f"{where}[{i}]"
            if not isinstance(tool, dict):
                self.error("tool_not_object", w, f"a tool must be an object, got {json_type(tool)}")
                continue
            if tool.get("type") != "function":
                self.error("tool_type", f"{w}.type",
                           f"tool type must be 'function', got {_short(tool.get('type'))}")
            fn = tool.get("function")
            if not isinstance(fn, dict):
                self.error("tool_function_missing", f"{w}.function",
                           f"a tool needs a 'function' object, got {json_type(fn)}")
                continue
            name = fn.get("name")
            if not isinstance(name, str) or not name or (self.fmt == "openai" and not NAME_RE.match(name)):
                self.error("tool_name", f"{w}.function.name",
                           f"function name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {_short(name)}")
            elif name in names:
                self.error("tool_name_duplicate", f"{w}.function.name", f"tool {name!r} is declared twice")
            else:
                names.add(name)
            if "description" in fn and not isinstance(fn["description"], str):
                self.error("tool_description", f"{w}.function.description",
                           f"description must be a string, got {json_type(fn['description'])}")
            if "strict" in fn and not isinstance(fn["strict"], bool):
                self.error("tool_strict", f"{w}.function.strict",
                           f"strict must be a boolean, got {json_type(fn['strict'])}")
            if "parameters" in fn:
                self.schema(fn["parameters"], f"{w}.function.parameters")
        return names

    def schema(self, params, where):
        if not isinstance(params, dict):
            self.error("parameters_not_object", where,
                       f"parameters must be a JSON-schema object, got {json_type(params)}")
            return
        if params.get("type", "object") != "object":
            self.error("parameters_type", f"{where}.type",
                       f"the parameters schema must have type 'object', got {_short(params.get('type'))}")
        props = params.get("properties")
        if props is not None:
            if not isinstance(props, dict):
                self.error("parameters_properties", f"{where}.properties",
                           f"properties must be an object, got {json_type(props)}")
                props = None
            else:
                for key, sub in props.items():
                    if not isinstance(sub, dict):
                        self.error("parameters_property", f"{where}.properties.{key}",
                                   f"each property must be a schema object, got {json_type(sub)}")
        required = params.get("required")
        if required is not None:
            if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
                self.error("parameters_required", f"{where}.required", "required must be a list of property names")
            elif isinstance(props, dict):
                missing = [r for r in required if r not in props]
                if missing:
                    self.error("parameters_required", f"{where}.required",
                               f"required names {missing} are not in properties")

    # ------------------------------------------------------------ messages

    def content(self, message, role, where, has_calls):
        if "content" not in message or message["content"] is None:
            if role == "assistant" and has_calls:
                return
            self.error("content_missing", f"{where}.content",
                       f"a {role} message needs content "
                       "(null is allowed only for an assistant turn with tool_calls)")
            return
        content = message["content"]
        if isinstance(content, str):
            return
        if self.fmt == "openai" and role in ("user", "system") and isinstance(content, list):
            for j, part in enumerate(content):
                w = f"{where}.content[{j}]"
                ok = isinstance(part, dict) and (
                    (part.get("type") == "text" and isinstance(part.get("text"), str))
                    or (role == "user" and part.get("type") == "image_url"
                        and isinstance(part.get("image_url"), dict)
                        and isinstance(part["image_url"].get("url"), str)))
                if not ok:
                    self.error("content_part", w, f"a content part must be {{'type': 'text', 'text': str}}"
                               f"{' or an image_url part' if role == 'user' else ''}, got {_short(part)}")
            return
        self.error("content_not_string", f"{where}.content",
                   f"{role} content must be a string, got {json_type(content)}")

    def call(self, call, i, where, ids_seen, declared):
        """One assistant tool call; returns its id (or None)."""
        w = f"{where}.tool_calls[{i}]"
        if not isinstance(call, dict):
            self.error("tool_call_not_object", w, f"a tool call must be an object, got {json_type(call)}")
            return None
        call_id = call.get("id")
        if self.fmt == "openai" or "id" in call:
            if not isinstance(call_id, str) or not call_id:
                self.error("tool_call_id_missing", f"{w}.id",
                           f"a tool call needs a non-empty string id, got {_short(call_id)}")
                call_id = None
            elif call_id in ids_seen:
                self.error("tool_call_id_duplicate", f"{w}.id",
                           f"call id {call_id!r} is used twice in the conversation")
        if self.fmt == "openai" or "type" in call:
            if call.get("type") != "function":
                self.error("tool_call_type", f"{w}.type",
                           f"tool call type must be 'function', got {_short(call.get('type'))}")
        fn = call.get("function")
        if not isinstance(fn, dict):
            self.error("tool_call_function_missing", f"{w}.function",
                       f"a tool call needs a 'function' object with name and arguments, got {json_type(fn)}")
            return call_id
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            self.error("function_name_missing", f"{w}.function.name",
                       f"function.name must be a non-empty string, got {_short(name)}")
        elif self.fmt == "openai" and not NAME_RE.match(name):
            self.error("function_name", f"{w}.function.name",
                       f"function name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {name!r}")
        elif declared and name not in declared:
            self.warn("function_not_declared", f"{w}.function.name", f"{name!r} is not one of the row's tools")
        aw = f"{w}.function.arguments"
        if "arguments" not in fn:
            self.error("arguments_missing", aw, "function.arguments is missing")
            return call_id
        args = fn["arguments"]
        if self.fmt == "openai":
            if not isinstance(args, str):
                if isinstance(args, dict):
                    self.looks_like_other("tool-call arguments as JSON objects")
                self.error("arguments_not_string", aw,
                           f"OpenAI wants arguments as a JSON string, got {json_type(args)} (export format='openai')")
                return call_id
            try:
                parsed = strict_loads(args, exact=False)  # a big integer is JSON: the text keeps its digits
            except orjson.JSONDecodeError as exc:
                self.error("arguments_not_json", aw, f"arguments are not strict JSON ({exc}): {_short(args)}")
                return call_id
            if not isinstance(parsed, dict):
                self.error("arguments_not_object", aw,
                           f"arguments must parse to an object, parsed to {json_type(parsed)}: {_short(args)}")
        elif not isinstance(args, dict):
            if isinstance(args, str):
                self.looks_like_other("tool-call arguments as JSON strings")
            hint = (" (a JSON string is rendered quoted a second time by | tojson; export format='trl')"
                    if isinstance(args, str) else "")
            self.error("arguments_not_object", aw, f"TRL wants arguments as an object, got {json_type(args)}{hint}")
        return call_id

    def conversation(self, messages, where, *, declared=frozenset(), parallel=None,
                     need_assistant=True, state=None):
        """Check a list of messages; ``state`` carries call ids across prompt + completion."""
        if state is None:
            state = {"seen": set(), "pending": [], "assistant": 0}
        if not isinstance(messages, list):
            self.error("messages_not_list", where, f"must be a list of messages, got {json_type(messages)}")
            return state
        if not messages:
            self.error("messages_empty", where, "the list of messages is empty")
            return state
        for i, message in enumerate(messages):
            w = f"{where}[{i}]"
            if not isinstance(message, dict):
                self.error("message_not_object", w, f"a message must be an object, got {json_type(message)}")
                continue
            role = message.get("role")
            if role not in ROLES:
                self.error("role", f"{w}.role", f"role must be one of {list(ROLES)}, got {_short(role)}")
                continue
            if self.fmt == "openai":
                extra = sorted(set(message) - OPENAI_MESSAGE_KEYS)
                if extra:
                    self.error("message_unrecognized_key", w, f"OpenAI does not accept message keys {extra}")
            calls = message.get("tool_calls")
            has_calls = bool(calls)
            self.content(message, role, w, has_calls)
            if "name" in message and (not isinstance(message["name"], str) or not message["name"]):
                self.error("name", f"{w}.name", f"name must be a non-empty string, got {_short(message['name'])}")
            if "weight" in message:
                if role != "assistant":
                    self.error("weight_not_assistant", f"{w}.weight",
                               f"weight is only allowed on assistant messages, not {role}")
                elif message["weight"] not in (0, 1) or isinstance(message["weight"], bool):
                    self.error("weight", f"{w}.weight", f"weight must be 0 or 1, got {_short(message['weight'])}")
            if role != "tool" and state["pending"]:
                for call_id in state["pending"]:
                    self.error("tool_call_unanswered", w,
                               f"call {call_id!r} has no tool message before this {role} turn")
                state["pending"] = []
            if role == "assistant":
                state["assistant"] += 1
                if "tool_calls" in message and calls is not None:
                    if not isinstance(calls, list):
                        self.error("tool_calls_not_list", f"{w}.tool_calls",
                                   f"tool_calls must be a list, got {json_type(calls)}")
                        continue
                    if not calls:
                        self.error("tool_calls_empty", f"{w}.tool_calls", "tool_calls is an empty list (omit it)")
                    if parallel is False and len(calls) > 1:
                        self.error("parallel_tool_calls", f"{w}.tool_calls",
                                   f"{len(calls)} calls in one turn but parallel_tool_calls is false")
                    for j, call in enumerate(calls):
                        state["calls"] = state.get("calls", 0) + 1
                        call_id = self.call(call, j, w, state["seen"], declared)
                        if call_id:
                            state["seen"].add(call_id)
                            state["pending"].append(call_id)
                elif (self.fmt == "openai" and isinstance(message.get("content"), str)
                      and not message["content"].strip()):
                    self.warn("assistant_empty", f"{w}.content", "an assistant turn with no text and no tool call")
            elif role == "tool":
                answer = message.get("tool_call_id")
                if answer is None and self.fmt == "trl":
                    if state["pending"]:  # HF chat templates link tool results by position
                        state["pending"].pop(0)
                    elif not state.get("calls"):
                        self.error("tool_without_call", w, "a tool message with no tool call before it")
                    continue
                if not isinstance(answer, str) or not answer:
                    self.error("tool_call_id_missing", f"{w}.tool_call_id",
                               f"a tool message needs the tool_call_id it answers, got {_short(answer)}")
                elif answer not in state["seen"]:
                    self.error("tool_call_id_unknown", f"{w}.tool_call_id",
                               f"{answer!r} answers no call made earlier in this conversation")
                elif answer not in state["pending"]:
                    self.error("tool_call_id_not_pending", f"{w}.tool_call_id",
                               f"{answer!r} was already answered or the conversation moved on")
                else:
                    state["pending"].remove(answer)
            if role in ("user", "system", "tool") and message.get("tool_calls"):
                self.error("tool_calls_not_assistant", f"{w}.tool_calls",
                           "only assistant messages carry tool_calls")
        if need_assistant and not state["assistant"]:
            self.error("no_assistant_message", where, "no assistant message: nothing to train on")
        return state

    # ------------------------------------------------------------ rows

    def extra_keys(self, row, allowed):
        for key in sorted(set(row) - allowed):
            (self.error if self.strict_keys else self.warn)(
                "extra_keys", key, f"key {key!r} is not part of the {self.fmt} format")

    def loss_mask(self, row):
        """OpenAI reads ``weight``, not this project's ``loss_mask``: masked assistant turns would be trained."""
        mask, messages = row.get("loss_mask"), row.get("messages")
        if not isinstance(mask, list) or not isinstance(messages, list) or len(mask) != len(messages):
            return
        ignored = [i for i, (m, bit) in enumerate(zip(messages, mask))
                   if isinstance(m, dict) and m.get("role") == "assistant" and bit == 0 and m.get("weight") != 0]
        if ignored:  # the same words on every row: a file lists it once (REPEATED_WARNINGS)
            self.warn("loss_mask_ignored", "loss_mask",
                      "loss_mask masks assistant turns, but OpenAI reads only 'weight': a masked turn "
                      "without weight 0 is trained")

    def openai_row(self, row):
        declared = self.tools(row.get("tools"))
        parallel = row.get("parallel_tool_calls")
        if parallel is not None and not isinstance(parallel, bool):
            self.error("parallel_tool_calls_type", "parallel_tool_calls",
                       f"must be a boolean, got {json_type(parallel)}")
            parallel = None
        if "messages" in row:
            self.extra_keys(row, OPENAI_ROW_KEYS)
            self.conversation(row["messages"], "messages", declared=declared, parallel=parallel)
            self.loss_mask(row)
            return "messages"
        if OPENAI_PREF_KEYS & set(row):
            self.extra_keys(row, OPENAI_PREF_KEYS)
            inp = row.get("input")
            if not isinstance(inp, dict):
                self.error("input_not_object", "input", f"input must be an object with messages, got {json_type(inp)}")
                return "openai_preference"
            declared = self.tools(inp.get("tools"), "input.tools")
            parallel = inp.get("parallel_tool_calls")
            if parallel is not None and not isinstance(parallel, bool):
                self.error("parallel_tool_calls_type", "input.parallel_tool_calls",
                           f"must be a boolean, got {json_type(parallel)}")
                parallel = None
            for key in sorted(set(inp) - OPENAI_ROW_KEYS):
                self.error("input_unrecognized_key", f"input.{key}", f"input does not accept key {key!r}")
            state = self.conversation(inp.get("messages"), "input.messages", declared=declared,
                                      parallel=parallel, need_assistant=False)
            for side in ("preferred_output", "non_preferred_output"):
                out = row.get(side)
                if not isinstance(out, list) or len(out) != 1:
                    self.error("output_not_single_message", side,
                               f"{side} must be a list holding one assistant message, got {_short(out)}")
                    continue
                if isinstance(out[0], dict) and out[0].get("role") != "assistant":
                    self.error("output_not_assistant", f"{side}[0].role",
                               "the output message must be an assistant turn")
                side_state = {"seen": set(state["seen"]), "pending": list(state["pending"]), "assistant": 0}
                self.conversation(out, side, declared=declared, parallel=parallel, state=side_state)
            return "openai_preference"
        if "chosen" in row or "rejected" in row:
            self.extra_keys(row, OUR_PREF_KEYS | _pair_keys())
            prompt = row.get("prompt")
            if prompt is not None and not isinstance(prompt, str):
                if isinstance(prompt, list):
                    self.looks_like_other("a prompt that is a list of messages")
                self.error("prompt_type", "prompt",
                           f"prompt is the raw prompt text (string or null), got {json_type(prompt)}")
            for side in ("chosen", "rejected"):
                if side not in row:
                    self.error("side_missing", side, f"a preference row needs {side!r}")
                    continue
                self.conversation(row[side], side, declared=declared, parallel=parallel)
            return "preference"
        if isinstance(row.get("prompt"), list) or isinstance(row.get("completion"), list):
            self.looks_like_other("prompt / completion lists of messages")
        self.error("unknown_shape", "", "the row has no 'messages' (chat), no 'input'/'preferred_output'/"
                   "'non_preferred_output' (OpenAI DPO) and no 'chosen'/'rejected' (this project's pairs)")
        return "unknown"

    def trl_row(self, row):
        keys = frozenset(k for k in TRL_KEYS if k in row)
        shape = TRL_SHAPES.get(keys)
        if shape is None:
            if "messages" in row and isinstance(row.get("prompt"), str):
                self.looks_like_other("a prompt text beside messages")
            elif OPENAI_PREF_KEYS & set(row):
                self.looks_like_other("OpenAI's DPO keys (input, preferred_output, non_preferred_output)")
            self.error("trl_keys", "", f"TRL accepts the key sets {sorted(sorted(s) for s in TRL_SHAPES)}; "
                       f"this row has {sorted(keys)}")
            return "unknown"
        declared = self.tools(row.get("tools"))
        kwargs = row.get("chat_template_kwargs", {})
        if not isinstance(kwargs, dict):  # TRL does **example.get("chat_template_kwargs", {})
            self.error("chat_template_kwargs_type", "chat_template_kwargs",
                       f"chat_template_kwargs must be an object, got {json_type(kwargs)} (TRL raises TypeError)")
        for key in TRL_READ_COLUMNS:
            if key in row:
                self.error("trl_reads_column", key, f"TRL reads a {key!r} column: it replaces what TRL would "
                           "build from the conversation (drop or rename it)")
        if "label" in row and not isinstance(row["label"], bool):
            self.error("label_type", "label", f"label must be a boolean, got {json_type(row['label'])}")
        if shape == "messages":
            self.conversation(row["messages"], "messages", declared=declared)
            return shape
        state = None
        if shape == "preference_implicit_prompt":
            return self.implicit_preference(row, declared)
        if "prompt" in row:
            prompt = row["prompt"]
            if isinstance(prompt, str) and shape == "preference":
                self.looks_like_other("a prompt text beside chosen / rejected conversations")
            state = self.conversation(prompt, "prompt", declared=declared, need_assistant=False)
            if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
                last = prompt[-1].get("role")
                if last == "system":  # an agent that speaks first: its opener follows the system prompt alone
                    self.warn("prompt_last_role", f"prompt[{len(prompt) - 1}].role",
                              "the prompt ends on a system turn: SFTTrainer and DPOTrainer take it, but "
                              "trl.data_utils.maybe_apply_chat_template raises on it")
                elif last == "assistant" and prompt[-1].get("content") is None:
                    self.warn("prompt_last_content", f"prompt[{len(prompt) - 1}].content",
                              "the prompt ends on an assistant turn with no content (null or missing): "
                              "SFTTrainer and DPOTrainer take it, but trl.data_utils.maybe_apply_chat_template "
                              "asks the template to continue that turn's content and raises (give it \"\" "
                              "or its text)")
                elif last not in ("user", "tool", "assistant"):
                    self.error("prompt_last_role", f"prompt[{len(prompt) - 1}].role",
                               "a prompt must end on a user, tool or assistant turn (TRL raises), "
                               f"got {_short(last)}")
        for side in ("completion", "chosen", "rejected"):
            if side not in row:
                continue
            side_state = None if state is None else {
                "seen": set(state["seen"]), "pending": list(state["pending"]), "assistant": 0,
                "calls": state.get("calls", 0)}
            self.conversation(row[side], side, declared=declared, state=side_state)
            value = row[side]
            first = value[0] if isinstance(value, list) and value else None
            if isinstance(first, dict) and first.get("role") != "assistant":
                self.error("completion_not_assistant", f"{side}[0].role",
                           f"{side} must start with an assistant turn, got {_short(first.get('role'))}")
            self.trained_turns(value, side)
        return shape

    def trained_turns(self, value, side, start=1):
        """TRL trains (SFT) or scores (DPO) every token of a completion / chosen / rejected side, so a
        user or system turn in one is learned as the model's own words.

        In a ``completion`` that is an error. In a DPO side it is a warning: a pair of multi-turn
        conversations has no other TRL shape (the sides part at the first assistant turn, and each
        later user turn answers a different reply), and this project's TRL preference export writes it
        so (spec 4.1); the message says what it costs. A tool turn in a DPO side is scored the same way
        (the tool's output as the model's words): a warning too. A completion that ends on a tool turn (a run that
        stopped after a call) has the tool's result trained as the model's words: a warning.
        """
        if not isinstance(value, list):
            return
        last = value[-1] if len(value) > start else None
        if side == "completion" and isinstance(last, dict) and last.get("role") == "tool":
            self.warn("completion_ends_on_tool", f"{side}[{len(value) - 1}].role",
                      "the completion ends on a tool turn: TRL trains the whole completion as model output, "
                      "the tool's result included; end it on the assistant turn (a run that stopped after a "
                      "call has no reply to train on)")
        if side != "completion":
            tool = next((i for i, m in enumerate(value) if isinstance(m, dict) and m.get("role") == "tool"), None)
            if tool is not None:
                self.warn("side_tool_output", f"{side}[{tool}].role",
                          f"a tool turn inside {side}: DPOTrainer scores the whole side as the model's words, "
                          "the tool's output included; pair one-turn replies if that matters")
        for i, m in enumerate(value[start:], start):
            if isinstance(m, dict) and m.get("role") in ("user", "system"):
                if side == "completion":
                    self.error("completion_not_model_output", f"{side}[{i}].role",
                               f"a {m.get('role')} turn inside {side}: TRL trains the whole {side} as model output")
                else:
                    self.warn("side_not_model_output", f"{side}[{i}].role",
                              f"a {m.get('role')} turn inside {side}: DPOTrainer scores the whole side as the "
                              "model's words, this turn included; keep pairs that part after the last user turn "
                              "if that matters")
                return

    def implicit_preference(self, row, declared):
        """chosen + rejected without prompt: TRL's extract_prompt takes their common leading messages."""
        chosen, rejected = row["chosen"], row["rejected"]
        for side in ("chosen", "rejected"):
            self.conversation(row[side], side, declared=declared)
        if not (isinstance(chosen, list) and isinstance(rejected, list) and chosen and rejected):
            return "preference_implicit_prompt"
        n = 0
        try:
            while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
                n += 1
        except RecursionError:
            self.error("implicit_prompt_too_deep", f"chosen[{n}]", "chosen and rejected are nested too deep to "
                       "compare: Python's ==, which TRL's extract_prompt also uses to find the shared prompt, raises "
                       "RecursionError; nest the values less deeply or give the prompt as its own column")
            return "preference_implicit_prompt"
        if n == 0:
            self.error("implicit_prompt_empty", "", "chosen and rejected share no leading message: TRL's "
                       "extract_prompt gives an empty prompt and DPOTrainer raises")
            return "preference_implicit_prompt"
        for side in ("chosen", "rejected"):
            rest = row[side][n:]
            first = rest[0] if rest else None
            if not isinstance(first, dict) or first.get("role") != "assistant":
                self.error("completion_not_assistant", f"{side}[{n}].role",
                           f"after the shared prompt, {side} must start with an assistant turn, got "
                           f"{_short(first.get('role') if isinstance(first, dict) else first)}")
            self.trained_turns(rest, side, start=1)
        return "preference_implicit_prompt"


def _pair_keys():
    from .preference import PAIR_KEYS  # noqa: PLC0415 (imported late: this module stands on its own)
    return frozenset(PAIR_KEYS) | {"schema_version"}


def _check_format(format):
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}: pass format='openai' (OpenAI's "
                         "fine-tuning files) or format='trl' (TRL's conversational shapes)")


def validate_row(row, format="openai", *, strict_keys=False) -> tuple[str, list[dict]]:
    """(shape, problems) of one parsed row; problems have ``severity``, ``code``, ``where``, ``message``."""
    _check_format(format)
    shape, problems, _ = _check_row(row, format, strict_keys)
    return shape, problems


def _check_row(row, format, strict_keys):
    """``validate_row``'s (shape, problems), and what the row does the other format's way (or None)."""
    checker = _Row(format, strict_keys)
    if not isinstance(row, dict):
        checker.error("not_an_object", "", f"each line must be a JSON object, got {json_type(row)}")
        return "unknown", checker.problems, None
    shape = checker.openai_row(row) if format == "openai" else checker.trl_row(row)
    return shape, checker.problems, checker.other_format


class _Report:
    def __init__(self, fmt, max_problems):
        self.fmt = fmt
        self.max_problems = max_problems
        self.rows = 0
        self.rows_with_errors = 0
        self.shapes: Counter = Counter()
        self.counts: Counter = Counter()
        self.severity = Counter()
        self.problems: list[dict] = []
        self.extra_keys: dict[str, dict] = {}
        self.repeated: dict[tuple, dict] = {}  # (code, where) -> its one entry (REPEATED_WARNINGS)
        self.other_rows = 0  # rows that did something the other format's way, the first one's line, what
        self.other_first_line = None
        self.other_tells: dict[str, None] = {}  # (ordered: first seen first)
        self.first_shape = None
        self.kinds = ColumnKinds() if fmt == "trl" else None  # what datasets' JSON loader changes
        self.run_rows, self.run_keys = 0, {}  # rows with a RUN_KEYS key (a run, not yet exported), which keys

    def add(self, line, problems, *, row=True, errored=False):
        """Count one line's problems (``errored``: it already had an error the caller took out)."""
        for p in problems:
            if p["code"] == "extra_keys":  # one entry per key, not one per row
                _count_extra_key(self.extra_keys, line, p)
                errored = errored or p["severity"] == "error"
                continue
            self.counts[p["code"]] += 1
            self.severity[p["severity"]] += 1
            errored = errored or p["severity"] == "error"
            if p["severity"] == "warning" and p["code"] in REPEATED_WARNINGS:
                key = (p["code"], p["where"])
                seen = self.repeated.get(key)
                if seen is not None:  # listed once (or not at all, when the list was full at its first line)
                    seen["lines"] += 1
                    continue
                entry = self.repeated[key] = {"line": line, **p, "lines": 1}
                if len(self.problems) < self.max_problems:
                    self.problems.append(entry)
                continue
            if len(self.problems) < self.max_problems:
                self.problems.append({"line": line, **p})
        if errored and row:
            self.rows_with_errors += 1

    def merge_extra_keys(self, extra_keys):
        """Fold in the per-key entries of a later part of the file (a worker's chunk)."""
        for key, entry in extra_keys.items():
            seen = self.extra_keys.get(key)
            if seen is None:
                self.extra_keys[key] = dict(entry)
            else:
                seen["rows"] += entry["rows"]

    def replay(self, line, events):
        """Count one line's findings (the events ``_line_findings`` made of it, in order)."""
        for event in events:
            kind = event[0]
            if kind == "line":  # a problem of the line itself, not of a row
                self.add(line, event[1], row=False)
            elif kind == "counted":  # a row that could not be read
                self.rows += 1
                self.add(line, event[1], errored=event[2])
            elif kind == "run_row":
                self.run_rows += 1
                self.run_keys.update(dict.fromkeys(event[1]))
            else:
                self.shaped(line, event[1], event[2], errored=event[3], other=event[4])

    def shaped(self, line, shape, problems, errored=False, other=False):
        self.rows += 1
        self.shapes[shape] += 1
        if other:
            self.other_rows += 1
            self.other_tells.setdefault(other)
            if self.other_first_line is None:
                self.other_first_line = line
        if shape != "unknown":
            if self.first_shape is None:
                self.first_shape = (shape, line)
            elif shape != self.first_shape[0]:
                problems = [*problems, {"severity": "error", "code": "mixed_shapes", "where": "",
                                        "message": f"a {shape} row in a file whose line {self.first_shape[1]} "
                                                   f"is a {self.first_shape[0]} row"}]
        self.add(line, problems, errored=errored)

    def finish(self, path=None) -> dict:
        notes = []
        if self.kinds is not None:
            unfollowed = self.kinds.unfollowed_big_ints()
            if unfollowed and path is not None:  # rare: a big integer below a path kept as JSON text
                self.kinds.recount(_rows_of(path), unfollowed)
            for line, problem in self.kinds.problems():
                self.add(line, [problem], row=False)
        looks_like = self.looks_like()
        if self.run_rows * 2 >= self.rows > 0:
            notes.append(self._run_note())
        if path is not None and self.rows > 1 and self.counts.get("bad_json", 0) * 2 >= self.rows:
            note = _one_document_note(path, self.rows)
            if note:
                notes.append(note)
        if self.fmt == "openai" and self.shapes.get("preference") and looks_like is None:
            notes.append(NOTE_OUR_PREFERENCE)
        if self.fmt == "openai" and self.rows and self.rows < MIN_EXAMPLES and not self.shapes.get("preference"):
            self.add(None, [{"severity": "warning", "code": "too_few_examples", "where": "",
                             "message": f"{self.rows} examples; OpenAI fine-tuning needs at least "
                                        f"{MIN_EXAMPLES}"}],
                     row=False)
        if self.rows == 0:
            self.add(None, [{"severity": "error", "code": "empty_file", "where": "",
                             "message": "no rows: an empty training file"}], row=False)
        extra = {k: v for k, v in sorted(self.extra_keys.items())}
        n_extra_errors = sum(1 for v in extra.values() if v["severity"] == "error")
        errors = self.severity["error"] + n_extra_errors
        warnings = self.severity["warning"] + len(extra) - n_extra_errors
        report = {
            "ok": errors == 0,
            "format": self.fmt,
            "path": str(path) if path is not None else None,
            "rows": self.rows,
            "rows_with_errors": self.rows_with_errors,
            "shapes": dict(self.shapes),
            "errors": errors,
            "warnings": warnings,
            "counts": dict(sorted(self.counts.items())),
            "problems": self.problems,
            "problems_truncated": sum(self.counts.values()) > _listed(self.problems),
            "extra_keys": extra,
            "looks_like": looks_like,
            "notes": notes,
            "checked_for": CHECKED_FOR[self.fmt],
        }
        return report

    def _run_note(self):
        """What to do with a file whose rows are mostly a simulation run's: it is checked as if it were the
        training file, so every row fails for what the export would have written."""
        share = f"all {self.rows} rows" if self.run_rows == self.rows else f"{self.run_rows} of {self.rows} rows"
        article = "an" if self.fmt == "openai" else "a"
        return (f"{share} have {', '.join(self.run_keys)}: this looks like a simulation run, not {article} "
                f"{self.fmt} training file. Export it first (whileai-pipeline run FILE, or export_dataset(FILE, "
                f"OUT, format={self.fmt!r})), then validate the file it writes")

    def looks_like(self):
        """The other format, when at least half the rows with errors do something its way; else None.

        Decided from what the one pass saw (``_Row.looks_like_other``), not by checking the file again.
        """
        if not self.other_rows or self.other_rows * 2 < self.rows_with_errors:
            return None
        other = OTHER_FORMAT[self.fmt]
        n = self.other_rows
        share = (f"all {n} rows" if n == self.rows and n > 1 else
                 f"{n} of {self.rows} row{'s' if self.rows > 1 else ''} (the first at line {self.other_first_line})")
        return {
            "format": other,
            "rows": n,
            "first_line": self.other_first_line,
            "message": f"the rows look like {other} rows, not {self.fmt} ones: {share} "
                       f"{'has' if n == 1 else 'have'} {' or '.join(self.other_tells)}, as {other} files do. "
                       f"If this is {'an' if other == 'openai' else 'a'} {other} export, check it with --format {other}",
        }


def validate_file(path, format="openai", *, max_problems=50, strict_keys=False, workers=None) -> dict:
    """Validate a JSONL training file for ``format`` ("openai" or "trl"); never raises on bad content.

    Returns a report dict: ``ok`` (no errors), ``format``, ``path``, ``rows``, ``rows_with_errors``,
    ``shapes`` (rows per detected shape), ``errors``, ``warnings``, ``counts`` (problems per code),
    ``problems`` (the first ``max_problems``: ``line``, ``severity``, ``code``, ``where``, ``message``;
    a ``REPEATED_WARNINGS`` entry, listed once at its first line, also ``lines``),
    ``problems_truncated``, ``extra_keys`` (key -> first line, rows, severity), ``looks_like`` (None,
    or the other format the rows look like: ``format``, ``rows``, ``first_line``, ``message``), ``notes``
    and ``checked_for``. A missing file raises ``FileNotFoundError``. A big file is read by worker
    processes (``workers`` as for ``export_dataset``); the report is the same.
    """
    _check_format(format)
    from .jsonl import require_file  # noqa: PLC0415
    from .parallel import WorkerPool, line_chunks, workers_for  # noqa: PLC0415 (only files need it)

    path = Path(path)
    require_file(path, "file", "pass the training .jsonl file to check")
    report = _Report(format, max_problems)
    n = workers_for(path, workers)
    if n == 1:
        with open(path, "rb") as fh:
            for line_no, (raw, long_run) in enumerate(lines_with_runs(fh), 1):
                report.replay(line_no, _line_findings(line_no, raw, format, strict_keys, report.extra_keys,
                                                      report.kinds, long_run))
        return report.finish(path)
    with WorkerPool(n) as pool:
        jobs = ((chunk, format, strict_keys) for chunk in line_chunks(path))
        for findings, extra_keys, kinds in pool.ordered(_validate_chunk, path, jobs):
            report.merge_extra_keys(extra_keys)
            if report.kinds is not None:
                report.kinds.merge(kinds)
            for line_no, event in findings:
                report.replay(line_no, event)
    return report.finish(path)


def _validate_chunk(path, chunk, format, strict_keys):
    """A worker task: the findings of a chunk's lines, its per-key entries counted apart (they are many)."""
    extra_keys = {}
    kinds = ColumnKinds() if format == "trl" else None
    with open(path, "rb") as fh:
        fh.seek(chunk.start)
        data = fh.read(chunk.end - chunk.start)
    findings = [(line_no, _line_findings(line_no, raw, format, strict_keys, extra_keys, kinds, long_run))
                for line_no, (raw, long_run) in enumerate(split_with_runs(data, 0, len(data)), chunk.first_line)]
    return findings, extra_keys, kinds


def _line_findings(line_no, raw, format, strict_keys, extra_keys, kinds=None, long_run=None):
    """What one raw line adds to a report: a list of events for ``_Report.replay``.

    ``kinds`` (a ``ColumnKinds``, trl only) is given the parsed row.
    Its ``extra_keys`` problems (one per key per row, most of a row's findings) are counted into
    ``extra_keys`` here and replaced by a flag saying whether one of them was an error.
    """
    events = []
    before = []
    if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
        before.append({"severity": "warning" if format == "trl" else "error", "code": "bom", "where": "",
                       "message": "the file starts with a UTF-8 byte-order mark: write it without one (in Python, "
                                  "open it with encoding='utf-8', not 'utf-8-sig')"})
        raw = raw[3:]
    body = raw.rstrip(b"\n")
    if body.endswith(b"\r"):
        events.append(("line", [{"severity": "warning", "code": "crlf", "where": "",
                                 "message": "the line ends with CRLF; write LF line endings"}]))
        body = body[:-1]
    if not body.strip():
        severity = "warning" if format == "trl" else "error"  # datasets.load_dataset skips blank lines
        events.append(("line", [*before, {"severity": severity, "code": "blank_line", "where": "",
                                          "message": "a blank line: JSONL has one JSON object per line"}]))
        return events
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"the line is not UTF-8 ({exc.reason} at byte {exc.start})"
        events.append(("counted", [*before, {"severity": "error", "code": "not_utf8", "where": "",
                                             "message": reason}], False))
        return events
    try:
        row, long_run = strict_line(body, long_run=long_run)  # as the reader reads it: an integer beyond 64 bits keeps every digit
    except orjson.JSONDecodeError as exc:
        reason = (long_run is not False and too_many_digits(body)) or f"not strict JSON: {exc}"
        events.append(("counted", [*before, {"severity": "error", "code": "bad_json", "where": "",
                                             "message": reason}], False))
        return events
    if kinds is not None:
        kinds.add(line_no, row)
        if long_run:  # only such a line can hold an integer beyond int64
            kinds.add_big_ints(line_no, row)
    if isinstance(row, dict) and (run_keys := [key for key in RUN_KEYS if key in row]):
        events.append(("run_row", run_keys))
    shape, problems, other = _check_row(row, format, strict_keys)
    kept, errored = [], False
    for p in problems:
        if p["code"] == "extra_keys":
            _count_extra_key(extra_keys, line_no, p)
            errored = errored or p["severity"] == "error"
        else:
            kept.append(p)
    events.append(("row", shape, [*before, *kept], errored, other))
    return events


def _rows_of(path):
    """Every row of a file read with orjson (a big integer's float is still a number), for ``recount``."""
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                yield orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue


def _count_extra_key(extra_keys, line, problem):
    seen = extra_keys.get(problem["where"])
    if seen is None:
        extra_keys[problem["where"]] = {"first_line": line, "rows": 1, "severity": problem["severity"]}
    else:
        seen["rows"] += 1


def _listed(problems) -> int:
    """How many problems ``problems`` stand for: a REPEATED_WARNINGS entry stands for its ``lines``."""
    return sum(p.get("lines", 1) for p in problems)


def format_report(report: dict, *, limit: int = 20) -> str:
    """Human-readable lines for a terminal: a verdict, then ``path:line: severity code at where: message``."""
    path = report.get("path") or "<rows>"
    verdict = "OK" if report["ok"] else "INVALID"
    shapes = ", ".join(f"{n} {s}" for s, n in report["shapes"].items()) or "no rows"
    lines = [f"{verdict}: {path} as {report['format']}: {report['rows']} rows ({shapes}), "
             f"{report['errors']} errors, {report['warnings']} warnings"]
    if report.get("looks_like"):  # said before the problems it explains
        lines.append(f"note: {report['looks_like']['message']}")
    lines += _problem_lines(report, path, limit)
    lines.extend(f"note: {n}" for n in report["notes"])
    return "\n".join(lines)


def _problem_lines(report, path, limit):
    """``format_report``'s lines for the problems: the first ``limit``, what is left, the extra keys."""
    lines = []
    for p in report["problems"][:limit]:
        where = f" at {p['where']}" if p["where"] else ""
        loc = f"{path}:{p['line']}" if p["line"] is not None else path
        more = p.get("lines", 1) - 1
        also = f" (and {more} more line{'s' if more > 1 else ''} like it)" if more else ""
        lines.append(f"{loc}: {p['severity']} {p['code']}{where}: {p['message']}{also}")
    hidden = sum(report["counts"].values()) - _listed(report["problems"][:limit])
    if hidden > 0:
        lines.append(f"... {hidden} more problems; counts by code: {report['counts']}")
    by_severity: dict = {}
    for key, info in report["extra_keys"].items():
        by_severity.setdefault(info["severity"], []).append(f"{key} ({info['rows']} rows)")
    for severity, keys in by_severity.items():
        lines.append(f"{path}: {severity} extra_keys: not part of the {report['format']} format: "
                     + ", ".join(keys))
    return lines


def summary(report: dict, *, limit: int = 10) -> dict:
    """A small JSON-safe digest of a report, for asset-check metadata or logs."""
    return {
        "ok": report["ok"],
        "format": report["format"],
        "rows": report["rows"],
        "rows_with_errors": report["rows_with_errors"],
        "errors": report["errors"],
        "warnings": report["warnings"],
        "counts": report["counts"],
        "first_problems": _problem_lines(report, report.get("path") or "<rows>", limit)[:limit],
        "extra_keys": sorted(report["extra_keys"]),
        "looks_like": report.get("looks_like"),
        "notes": report["notes"],
    }


ONE_DOCUMENT_MAX_BYTES = 64 << 20  # a bigger file of mostly unreadable lines is not read whole to say why


def _one_document_note(path, lines):
    """What to do with a file whose lines are mostly not JSON because the whole file is one JSON document
    (rows saved with ``json.dump(rows, f, indent=2)``, an export's pretty-printed report); None otherwise."""
    try:
        if os.path.getsize(path) > ONE_DOCUMENT_MAX_BYTES:
            return None
        value = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if isinstance(value, list):
        what = f"an array of {len(value)} value{'s' if len(value) != 1 else ''}"
    elif isinstance(value, dict):
        what = "an object"
    else:
        return None
    said = (f"the whole file is one JSON document ({what}) over {lines} lines, not JSONL (one JSON value per "
            "line): ")
    described = value.get("path") if isinstance(value, dict) else None
    if isinstance(described, str) and ("n_written" in value or "sha256" in value):
        return said + f"it looks like an export's report; validate the file it describes, {described}"
    return said + ("write each row on a line of its own, e.g. with whileai_pipeline.write_jsonl(path, rows), "
                   "then validate that file")


def run_validate(path, format="openai", *, json_output=False, strict_keys=False, limit=20,
                 out=None, err=None) -> int:
    """The body of ``whileai-pipeline validate FILE --format openai|trl``: print, return an exit code.

    0 the file is valid (warnings allowed), 1 it has errors, 2 bad usage (unknown format, no such file).
    ``json_output`` prints the whole report as JSON instead of the text lines.
    """
    import sys

    from .jsonl import compressed_file, json_document, require_file  # noqa: PLC0415

    out = out or sys.stdout
    err = err or sys.stderr
    if format not in FORMATS:
        print(f"whileai-pipeline: error: --format must be one of {', '.join(FORMATS)}, got {format!r}", file=err)
        return EXIT_USAGE
    path = Path(path).expanduser()  # a quoted "~/x.jsonl": the shell left the ~ as it is
    try:
        require_file(path, "file", "pass the training .jsonl file to check")
    except OSError as exc:
        print(f"whileai-pipeline: error: {exc}", file=err)
        return EXIT_USAGE
    if packed := compressed_file(path):  # else every line is "not UTF-8", and the file INVALID
        kind, tool = packed
        print(f"whileai-pipeline: error: {path} is {kind}-compressed, not a JSONL file: decompress it first (e.g. "
              f"{tool} {path}) and check the .jsonl file it gives", file=err)
        return EXIT_USAGE
    report = validate_file(path, format, strict_keys=strict_keys)
    if json_output:
        out.write(json_document(report).decode())
    else:
        print(format_report(report, limit=limit), file=out)
    return EXIT_OK if report["ok"] else EXIT_FAILED
