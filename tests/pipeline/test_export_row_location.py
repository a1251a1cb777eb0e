"""An export step that fails on one row names that row where the user can find it: the line of the run
file, not the line of a stage file the pipeline wrote (``stages/<run>/sft_source.jsonl`` holds only the
passing rows, so its line numbers are not the run's), and the run's sidecar, not the library's
``system_prompt=`` argument, which a pipeline user has no way to pass."""

import copy

import pytest

from .conftest import materialization, sample_rows, write_rows

pytestmark = pytest.mark.pipeline

LINE = 5  # the run's line that holds the row with no conversation


def _rows_with_an_empty_conversation():
    """The sample with a passing row that has no prompt, steps, messages or reply at line ``LINE``; the
    rows before it include failing ones, so its line in the passing rows is not ``LINE``."""
    rows = copy.deepcopy(sample_rows())
    assert any(r.get("reward") != 1 for r in rows[:LINE - 1])
    rows.insert(LINE - 1, {"scenario_id": "no_conversation", "rollout_index": 0, "reward": 1})
    return rows


def _failure(result, step):
    return next(e.event_specific_data.error.message for e in result.all_events
                if e.event_type_value == "STEP_FAILURE" and e.step_key == step)


@pytest.mark.parametrize("sft_rows", ["pass", "all"])
def test_the_failing_row_is_named_by_its_line_in_the_run(chain, sft_rows):
    key = chain.register(_rows_with_an_empty_conversation(), name="holes", meta=False)
    result = chain.materialize(key, {"ops": {"sft_export": {"config": {"sft_rows": sft_rows}}}})
    assert not result.success
    message = _failure(result, "sft_export")
    assert "schema_invalid" in message
    assert f"{chain.storage.run_path(key)}:{LINE})" in message, message
    assert str(chain.storage.stage_dir(key)) not in message, message
    assert "system_prompt=" not in message, message
    assert str(chain.storage.run_meta_path(key).name) in message, message  # where a system prompt goes
    materialization(result, "dpo_export")  # the other export went on


def test_the_cli_names_the_file_given(tmp_path, monkeypatch, capsys):
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = write_rows(tmp_path / "runs" / "holes.jsonl", _rows_with_an_empty_conversation())
    code = cli_module.main(["run", str(src), "--home", str(tmp_path / "home")])
    out = capsys.readouterr().out
    assert code == 1
    failed = [line for line in out.splitlines() if line.startswith("  step sft_export failed:")]
    assert len(failed) == 1, out
    assert f"{src}:{LINE})" in failed[0], failed[0]
    assert str(tmp_path / "home") not in failed[0], failed[0]
    assert str(src.with_name("holes.meta.json")) in failed[0], failed[0]
