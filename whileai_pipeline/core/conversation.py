"""Rebuild a chat transcript from a trajectory's ``prompt`` + ``steps`` (spec 1.4, 1.5)."""

from .text import pyjson, text


AGENT_ERROR = "<agent error"  # how a rollout the agent crashed in ends its final_text (spec 1.1)


def crashed_rollout(row) -> bool:
    """A rollout the agent crashed in: its ``final_text`` is the error, which ``conversation`` ends on."""
    return text(row.get("final_text") or "").startswith(AGENT_ERROR)


def conversation(row, tool_text=True) -> list:
    """Messages in the loose shape: tool calls as ``{"name", "arguments"}``, tool results as text.

    ``tool_text=False`` leaves tool results empty, for callers that only read what the agent said.
    """
    if not isinstance(row, dict):  # not "'NoneType' object has no attribute 'get'"
        hint = "pass one row, e.g. conversation(rows[0])" if isinstance(row, list) else "pass a trajectory row"
        raise TypeError(f"conversation takes one row (a dict), got {type(row).__name__} {row!r:.60}: {hint}")
    messages = []
    opener = text(row.get("opener") or "")
    if opener:
        messages.append({"role": "assistant", "content": opener})
    prompt = text(row.get("prompt") or "")
    if prompt:
        messages.append({"role": "user", "content": prompt})
    for step in _steps(row.get("steps")):
        if not isinstance(step, dict):
            continue
        user = step.get("user")
        if user:
            messages.append({"role": "user", "content": text(user)})
            continue
        spoken = text(step.get("text") or "")
        tool = step.get("tool")
        if tool:
            arguments = step.get("arguments")
            messages.append({
                "role": "assistant",
                "content": spoken,
                "tool_calls": [{"name": tool, "arguments": arguments if arguments else {}}],
            })
            result = step.get("result")
            messages.append({
                "role": "tool",
                "name": tool,
                "content": result if isinstance(result, str) else (pyjson(result) if tool_text else ""),
            })
        elif spoken:
            messages.append({"role": "assistant", "content": spoken})

    final = text(row.get("final_text") or "")
    if not final.startswith(AGENT_ERROR):
        while len(messages) > 1 and messages[-1].get("role") == "user":
            messages.pop()
    if not final:
        return messages
    if final.strip() and any(m["content"] == final for m in messages if m.get("role") == "assistant"):
        return messages  # the agent already said it (a blank final matches no turn: blank turns do not count)
    if messages and messages[-1].get("role") == "assistant":
        if not messages[-1]["content"].strip():
            messages[-1]["content"] = final
        return messages
    messages.append({"role": "assistant", "content": final})
    return messages


def _steps(steps):
    if not steps or not isinstance(steps, (list, tuple)):
        return ()
    return steps


def bridge_tool_trace(row):
    """Give a platform-pull row (``tool_trace``, no steps, no messages) synthetic steps (spec 1.5)."""
    if row.get("messages") or row.get("steps"):
        return row
    trace = row.get("tool_trace")
    if not isinstance(trace, list):
        return row
    steps = [
        {"tool": el.get("tool"), "arguments": el.get("input"), "result": el.get("output")}
        for el in trace
        if isinstance(el, dict)
    ]
    return {**row, "steps": steps}
