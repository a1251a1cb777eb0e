"""What the Dagster UI shows an engineer who owns the exports, read from the events the UI reads: a refused
gate says what failed, where and what to do (in the failed step's own log too, which is all Dagster's
"blocking asset check failed" error says); the numbers worth trending are plottable (int or float) under the
same labels in every materialization, published, refused or let through; the summary opens the table."""

import math

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
    assert "or ops.sft_export.config.validate in Dagster's run config) would publish it anyway" in leak.description
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


def test_the_numbers_to_trend_are_plottable_under_the_same_labels_published_refused_or_let_through(published):
    chain, key, _ = published
    first = chain.materialize(key)  # a re-export of the same run: published/unchanged
    chain.register(leaking_rows()[0])
    refused = chain.materialize(key)
    let_through = chain.materialize(key, run_config=export_config(validate=False))
    for asset in ("sft_export", "dpo_export"):
        mds = [materialization(r, asset) for r in (first, refused, let_through)]
        assert [md["status"].value for md in mds] in (["unchanged", "rejected", "published"],
                                                      ["published", "rejected", "published"])
        labels = [_plotted(md) for md in mds]
        assert labels[0] == labels[1] == labels[2], asset
        for fmt in ("openai", "trl"):
            assert {f"{fmt}/rows_leaked", f"{fmt}/warnings"} <= labels[0]
            # a clean run warns of nothing, but a TRL DPO side holds its tool results (scored as the model's)
            clean = 1 if (asset, fmt) == ("dpo_export", "trl") else 0
            assert [md[f"{fmt}/warnings"].value for md in mds][0] == clean
            assert all(md[f"{fmt}/warnings"].value >= 1 for md in mds[1:]), asset
        assert [md["gates_failed"].value for md in mds] == [0, 1, 1], asset
    sft = [materialization(r, "sft_export") for r in (first, refused)]
    # the mean reward of the rows the SFT export carries (only passing rows by default)
    assert "mean_reward" in _plotted(sft[0]) and sft[0]["mean_reward"].value == 1.0
    assert "pairs" not in sft[0]


def test_sft_mean_reward_is_nan_not_missing_when_no_row_is_graded(chain):
    rows = leaking_rows()[0]
    for row in rows:
        row.pop("reward", None)
    key = chain.register(rows)
    result = chain.materialize(key, run_config=export_config(validate=False, sft_rows="all"))
    md = materialization(result, "sft_export")
    assert isinstance(md["mean_reward"], dg.FloatMetadataValue) and math.isnan(md["mean_reward"].value)


def test_the_dpo_leak_check_plots_rejected_quoting_in_every_result(published):
    chain, key, _ = published
    result = chain.materialize(key)
    checks = check_results(result)
    assert checks[("dpo_export", "privileged_leak")].metadata["rejected_quoting"].value == 0
    assert "rejected_quoting" not in checks[("sft_export", "privileged_leak")].metadata  # SFT has no sides


def test_the_export_table_opens_with_its_status_and_summary(published):
    chain, key, _ = published
    result = chain.materialize(key)
    for asset in ("sft_export", "dpo_export"):
        labels = list(materialization(result, asset))
        assert labels[:2] == ["status", "summary"], labels[:5]


def test_scored_mean_reward_sits_beside_the_pass_rate(published):
    chain, key, _ = published
    labels = list(materialization(chain.materialize(key), "scored_simulation_data"))
    assert labels[labels.index("pass_rate") + 1] == "mean_reward", labels


def test_the_summary_table_has_short_cells_and_gives_the_folder_once(published):
    """The leak sentence and absolute paths in the summary's table made it wider than the asset page, which
    cut the file column off; the sentence and the folder come once under it, the paths stay in their own
    entries."""
    chain, key, _ = published
    md = materialization(chain.materialize(key), "sft_export")
    summary = md["summary"].value
    folder = str(chain.storage.published_dir(key))
    assert "| sft.openai.jsonl (unchanged) |" in summary and "| sft.trl.jsonl (unchanged) |" in summary
    # named from the storage root: short, and the same on every machine (the full path is its own entry)
    assert folder not in summary and f"In `published/{key}/` under the storage root;" in summary
    assert "| openai | 32 | 40 (0) | 32 (0) | sft.openai.jsonl (unchanged) |" in summary
    assert summary.count("Leak check: checked 32 of 32 rows: no reply quoted its privileged context.") == 1
    assert md["openai/published_path"].value == f"{folder}/sft.openai.jsonl"
