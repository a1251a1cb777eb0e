"""The trl exports are conversational for TRL and render under the chat templates shipped inside trl.

Tool-call arguments must appear in the rendered text encoded exactly once: `{"id": 7}` appears,
the quoted-again `"{\\"id\\": 7}"` does not. The tools are passed through and rendered too.
"""

import json

import pytest

from .conftest import MISSING, SKIP_REASON, read_rows

if MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

from trl.data_utils import is_conversational, maybe_apply_chat_template  # noqa: E402

from . import hf  # noqa: E402

pytestmark = [
    pytest.mark.consumers,
    # transformers 5.23 deprecates names that trl 1.16 still calls; not ours to fix.
    pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning"),
]

TRL_EXPORTS = ["sft_trl_messages", "sft_trl_final", "sft_trl_unroll", "dpo_trl"]
WANTED = list(hf.TEMPLATES)


def test_the_wanted_templates_ship_inside_trl():
    found = hf.found_templates()
    assert found == {name: True for name in WANTED}, (
        f"chat templates missing from {hf.TRL_TEMPLATES_DIR}: {[n for n, ok in found.items() if not ok]}")


def _rendered(out: dict) -> str:
    return "".join(out.get(k, "") for k in ("text", "prompt", "completion", "chosen", "rejected"))


@pytest.mark.parametrize("template", WANTED)
@pytest.mark.parametrize("name", TRL_EXPORTS)
def test_trl_rows_render_with_arguments_encoded_once(exports, hf_cache, base_tokenizer, name, template):
    tokenizer = hf.wrap_tokenizer(base_tokenizer, template)
    ds = hf.load_jsonl(exports[name]["path"], hf_cache)
    calls_seen = 0
    for i, example in enumerate(ds):
        assert is_conversational(example), f"{name} row {i} is not conversational for TRL"
        out = maybe_apply_chat_template(example, tokenizer, tools=example.get("tools"))
        text = _rendered(out)
        for tool in example.get("tools") or []:
            assert tool["function"]["name"] in text and tool["function"]["description"] in text, (
                f"{name} row {i}: tool {tool['function']['name']!r} was not rendered")
        calls = hf.tool_calls_of(example)
        for fn_name, arguments in calls:
            assert isinstance(arguments, dict), f"{name} row {i}: arguments are {type(arguments).__name__}"
            once, twice = hf.encodings(arguments)
            expected = sum(1 for _, a in calls if a == arguments)
            assert text.count(once) == expected, (
                f"{name} row {i} under {template}: {once} rendered {text.count(once)} times, expected {expected}")
            assert twice not in text, f"{name} row {i} under {template}: arguments quoted twice: {twice}"
            calls_seen += 1
        for key in ("messages", "prompt", "completion", "chosen", "rejected"):
            for message in example.get(key) or []:
                words = (message["content"] or "").strip()
                if message["role"] in ("user", "system") or (
                        message["role"] == "assistant" and not message.get("tool_calls")):
                    assert words in text, f"{name} row {i}: {words[:60]!r} lost"
                elif message["role"] == "assistant" and words:
                    # Words said with a call: Qwen renders them before <tool_call>, Llama 3.1 drops them.
                    assert (words in text) == (template not in hf.DROPS_TOOL_CALL_TEXT), (template, words)
    assert calls_seen > 0, f"{name}: no tool call was rendered, the check proved nothing"


def test_string_arguments_would_be_quoted_twice(exports, base_tokenizer):
    """The control: an openai row (arguments as JSON strings) under the same template shows the double
    encoding the check above looks for, so a clean trl render is not vacuous."""
    tokenizer = hf.wrap_tokenizer(base_tokenizer, "qwen2_5")
    row = next(r for r in read_rows(exports["sft_openai"]["path"])
               if any(m.get("tool_calls") for m in r["messages"]))
    text = tokenizer.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=False)
    wire = row["messages"][[bool(m.get("tool_calls")) for m in row["messages"]].index(True)]
    arguments = wire["tool_calls"][0]["function"]["arguments"]
    assert isinstance(arguments, str)
    assert json.dumps(arguments, ensure_ascii=False) in text  # "{\"id\":7}": quoted a second time


@pytest.mark.parametrize("template", WANTED)
def test_a_prompt_ending_on_an_assistant_turn_with_null_content_is_what_the_validator_warns_about(tmp_path, template):
    """maybe_apply_chat_template continues a prompt's final assistant turn and raises when its content is
    null, under every template; the trainers' tokenizing (add_generation_prompt=True) renders it. The
    validator says so with a warning (prompt_last_content), not an error."""
    from whileai_pipeline.core.openai_format import validate_file

    call = {"type": "function", "function": {"name": "lookup_order", "arguments": {"id": 7}}}
    row = {"prompt": [{"role": "user", "content": "Where is order 7?"},
                      {"role": "assistant", "content": None, "tool_calls": [call]}],
           "completion": [{"role": "assistant", "content": "It is on its way."}]}
    base = hf.train_tokenizer(["Where is order 7? It is on its way. lookup_order"] * 4, vocab_size=300)
    tokenizer = hf.wrap_tokenizer(base, template)
    with pytest.raises(ValueError, match="has no \"content\" to continue"):
        maybe_apply_chat_template(row, tokenizer)
    assert tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    path = tmp_path / "row.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    report = validate_file(path, "trl", workers=1)
    assert report["ok"] and report["counts"] == {"prompt_last_content": 1}


def test_a_tool_result_inside_a_dpo_side_is_scored_as_the_models_and_both_the_export_and_the_validator_say_so(tmp_path):
    """A TRL pair's sides start at the first assistant turn, so a tool call's result stays inside them and
    TRL renders it into the side DPOTrainer scores (every token of it): the tool's output is pushed up
    (chosen) or down (rejected) as if the model wrote it. The shape is spec 4.1's; the report and the
    validator must say so, with no later user turn in the conversation to trigger the user-turn warning."""
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.openai_format import validate_file

    from .conftest import TOOLS

    result = {"id": 7, "status": "shipped", "eta": "Friday"}
    looked = {"prompt": "Where is order 7?", "reward": 1, "final_text": "It ships Friday.", "steps": [
        {"tool": "lookup_order", "arguments": {"id": 7}, "result": result, "text": "Let me look."},
        {"text": "It ships Friday."}]}
    guessed = {"prompt": "Where is order 7?", "reward": 0, "final_text": "It arrived.",
               "steps": [{"text": "It arrived."}]}
    plain = {"prompt": "Hi?", "reward": 1, "final_text": "Hello.", "steps": [{"text": "Hello."}]}
    pairs = [{"prompt": "Hi?", "chosen": plain, "rejected": {**plain, "final_text": "Go away.", "reward": 0,
                                                              "steps": [{"text": "Go away."}]}, "margin": 1.0},
             {"prompt": "Where is order 7?", "chosen": looked, "rejected": guessed, "margin": 1.0}]
    out = tmp_path / "dpo.jsonl"
    report = wai.export_preference(pairs, out, format="trl", system_prompt="You are the support agent.",
                                   tools=TOOLS)
    [_, row] = read_rows(out)
    assert [m["role"] for m in row["chosen"]] == ["assistant", "tool", "assistant"]

    base = hf.train_tokenizer([out.read_text(encoding="utf-8"), hf.template_text("qwen2_5")], vocab_size=400)
    rendered = maybe_apply_chat_template(row, hf.wrap_tokenizer(base, "qwen2_5"), tools=row["tools"])
    tool_text = row["chosen"][1]["content"]
    assert tool_text in rendered["chosen"] and tool_text not in rendered["prompt"]  # scored as the model's

    assert "user_turns_in_sides" not in report
    warned = [w for w in report.get("warnings", []) if "tool result" in w]
    assert warned and warned[0].startswith("1 of 2 pairs have a tool result inside chosen or rejected (first at "
                                           "line 2 of the output)"), report.get("warnings")
    checked = validate_file(out, "trl", workers=1)
    assert checked["ok"] and checked["counts"] == {"side_tool_output": 1}, checked["problems"]
    assert [p["line"] for p in checked["problems"]] == [2]
