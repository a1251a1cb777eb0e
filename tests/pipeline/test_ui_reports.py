"""What the Dagster UI shows an engineer who owns the exports, read from the events the UI reads: a refused
gate says what failed, where and what to do (in the failed step's own log too, which is all Dagster's
"blocking asset check failed" error says); the numbers worth trending are plottable (int or float) under the
same labels in every materialization, published, refused or let through; the summary opens the table."""

import dagster as dg
import pytest

from .conftest import bad_arguments_rows, check_results, export_config, leaking_rows, materialization

pytestmark = pytest.mark.pipeline
ERROR = dg.AssetCheckSeverity.ERROR


def _error_logs(chain, result, step_key):
    return [e.user_message for e in chain.instance.all_logs(result.run_id)
            if e.dagster_event is None and e.step_key == step_key and e.level >= 40]


def _plotted(metadata):
    """The labels the UI plots: int and float values."""
    return {label for label, value in metadata.items()
            if isinstance(value, (dg.IntMetadataValue, dg.FloatMetadataValue))}


def test_a_refused_leak_names_the_rows_the_candidate_and_what_to_do(published):
    chain, key, _ = published
    rows, i = leaking_rows()
    chain.register(rows)
    result = chain.materialize(key)
    assert not result.success
    scenario, rollout = rows[i]["scenario_id"], rows[i]["rollout_index"]
    rejected = materialization(result, "sft_export")["rejected_path"].value

    leak = check_results(result)[("sft_export", "privileged_leak")]
    assert not leak.passed and leak.severity == ERROR
    # which row, which field, what to do: the description the check page and the CLI show
    assert f"{scenario} rollout {rollout} quotes privileged.reference" in leak.description
    assert "To fix: drop or regenerate the rollouts named" in leak.description
    assert "validate=False would publish it anyway" in leak.description
    table = leak.metadata["leaked_rows"].value
    assert f"| {scenario} | {rollout} | reference |" in table
    # the failed step's own log at ERROR says it all, with the candidate's folder
    logs = _error_logs(chain, result, "sft_export_privileged_leak")
    assert len(logs) == 1, logs
    assert f"{scenario} rollout {rollout}" in logs[0] and rejected in logs[0] and "To fix:" in logs[0]


def test_a_refused_roundtrip_says_what_to_do_in_its_step_log(published):
    chain, key, _ = published
    rows, _ = bad_arguments_rows()
    chain.register(rows)
    result = chain.materialize(key)
    roundtrip = check_results(result)[("sft_export", "tool_call_roundtrip")]
    assert not roundtrip.passed
    assert "To fix: fix those tool calls in the run" in roundtrip.description
    logs = _error_logs(chain, result, "sft_export_tool_call_roundtrip")
    assert len(logs) == 1 and "To fix:" in logs[0], logs
    assert not _error_logs(chain, result, "sft_export_privileged_leak")  # a passing gate says nothing
