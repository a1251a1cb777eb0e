"""Our exports pass the training-file validator for the format they were written in, and fail the other.

Pure Python (the validator and the exporter): no consumer package needed, no `consumers` marker.
"""

import orjson
import pytest

from whileai_pipeline.core.openai_format import format_report, validate_file

from .conftest import EXPORTS


@pytest.mark.parametrize("name", list(EXPORTS))
def test_every_export_passes_the_validator_for_its_format(exports, name):
    export = exports[name]
    report = validate_file(export["path"], export["format"])
    assert report["ok"], format_report(report)
    assert report["rows"] == (export["report"].get("n_written") or export["report"].get("pairs"))
    assert report["rows_with_errors"] == 0
    if export["format"] == "openai" and export["kind"] == "dpo":
        assert report["shapes"] == {"preference": report["rows"]} and report["notes"]
    if export["format"] == "trl":
        expected = {"sft_trl_messages": "messages", "sft_trl_final": "prompt_completion",
                    "sft_trl_unroll": "prompt_completion", "dpo_trl": "preference"}[name]
        assert report["shapes"] == {expected: report["rows"]}
        # A DPO side that holds a later user turn is scored whole (spec 4.1 shape): a warning per side
        rows = [orjson.loads(line) for line in open(export["path"], "rb")]
        later_user_turns = sum(1 for row in rows for side in ("chosen", "rejected") if name == "dpo_trl"
                               and any(m["role"] in ("user", "system") for m in row[side][1:]))
        # ... and so is a side that holds a tool result (the tool's output scored as the model's words)
        tool_results = sum(1 for row in rows for side in ("chosen", "rejected") if name == "dpo_trl"
                           and any(m["role"] == "tool" for m in row[side]))
        assert report["warnings"] == later_user_turns + tool_results
        expected = {"side_not_model_output": later_user_turns, "side_tool_output": tool_results}
        assert report["counts"] == {code: n for code, n in expected.items() if n}


@pytest.mark.parametrize("name", ["sft_openai", "dpo_openai", "sft_trl_messages", "dpo_trl"])
def test_each_export_fails_the_other_format(exports, name):
    """The check discriminates: an openai SFT row has `prompt` text beside `messages` (TRL's
    apply_chat_template raises KeyError on that key set), object arguments fail OpenAI."""
    export = exports[name]
    other = "trl" if export["format"] == "openai" else "openai"
    report = validate_file(export["path"], other)
    assert not report["ok"]
    # ...and says which format the file looks like, once, instead of leaving an error per line to read
    assert report["looks_like"]["format"] == export["format"]
    assert f"check it with --format {export['format']}" in report["looks_like"]["message"]
    assert validate_file(export["path"], export["format"])["looks_like"] is None
    if other == "trl" and name == "sft_openai":
        assert report["counts"] == {"trl_keys": report["rows"]}
    if other == "openai" and name == "sft_trl_messages":
        assert "arguments_not_string" in report["counts"]


def test_openai_sft_report_names_what_openai_would_ignore(exports):
    """Carried metadata is reported as extra keys (warnings), and a final-turn loss_mask that OpenAI would
    not honour is named: OpenAI reads `weight`, not `loss_mask`."""
    report = validate_file(exports["sft_openai_final"]["path"], "openai")
    assert report["ok"]
    assert "loss_mask" in report["extra_keys"]
    assert report["counts"].get("loss_mask_ignored", 0) > 0
    plain = validate_file(exports["sft_openai"]["path"], "openai")
    assert "loss_mask_ignored" not in plain["counts"]
