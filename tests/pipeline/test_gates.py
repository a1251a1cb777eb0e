"""What must be shown, points 3 and 4: a failed gate fails the run, stops downstream, never replaces
the published export, and keeps the candidate under rejected/; validate=False publishes with WARN."""

import json
import math
import os

import dagster as dg
import orjson
import pytest

from whileai_pipeline.defs.assets import ASSETS, sft_export
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.partitions import simulation_runs

from .conftest import (bad_arguments_rows, check_results, executed_steps, export_config, leaking_rows, materialization,
                       read_rows, sample_rows, tree_bytes, unprivileged_rows)

pytestmark = pytest.mark.pipeline
ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN


@dg.asset(partitions_def=simulation_runs, deps=[sft_export])
def downstream_trainer() -> None:
    """Stands in for anything that consumes the SFT export (a training job)."""


def _failed_steps(result):
    return {e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"}


def _rejected_dirs(chain, key):
    root = chain.storage.rejected_root(key)
    return sorted(p for p in root.iterdir()) if root.exists() else []


def test_leak_fails_the_right_check_and_the_run_and_keeps_published(published):
    chain, key, before = published
    rows, leaked_index = leaking_rows()
    chain.register(rows)
    result = chain.materialize(key)

    assert not result.success
    checks = check_results(result)
    leak = checks[("sft_export", "privileged_leak")]
    assert not leak.passed and leak.severity == ERROR and leak.blocking
    assert "1 quoted privileged context" in leak.description
    assert checks[("sft_export", "tool_call_roundtrip")].passed
    # the leaking row passes, so it is the chosen side of its prompt's pair: the DPO gate refuses too
    assert not checks[("dpo_export", "privileged_leak")].passed
    assert checks[("dpo_export", "tool_call_roundtrip")].passed
    assert _failed_steps(result) == {"sft_export_privileged_leak", "dpo_export_privileged_leak"}

    # the published export is byte-identical; the candidates are kept under rejected/
    assert tree_bytes(chain.storage.published_dir(key)) == before
    md = materialization(result, "sft_export")
    assert md["status"].value == "rejected" and md["published"].value is False
    rejected = [d for d in _rejected_dirs(chain, key)]
    assert len(rejected) == 2  # one for sft, one for dpo (same run, different folders)
    assert sorted(d.name.rsplit("-", 1)[1] for d in rejected) == ["dpo", "sft"]
    sft_dir = next(d for d in rejected if d.name.endswith("-sft"))
    assert md["rejected_path"].value == str(sft_dir)
    assert f"kept in `rejected/{key}/{sft_dir.name}/` under the storage root;" in md["summary"].value
    assert sorted(p.name for p in sft_dir.iterdir()) == [
        "gates.json", "sft.openai.jsonl", "sft.openai.report.json", "sft.trl.jsonl", "sft.trl.report.json"]
    gates = orjson.loads((sft_dir / "gates.json").read_bytes())
    assert gates["failed"] == {"openai": ["privileged_leak"], "trl": ["privileged_leak"]}
    report = orjson.loads((sft_dir / "sft.openai.report.json").read_bytes())
    assert report["privileged_leaks"]["n_leaked"] == 1
    assert report["path"] == str(sft_dir / "sft.openai.jsonl")
    quote = rows[leaked_index]["final_text"]
    assert quote.encode() in (sft_dir / "sft.openai.jsonl").read_bytes()
    assert quote.encode() not in chain.storage.published_path(key, "sft", "openai").read_bytes()


def test_unparseable_arguments_fail_the_roundtrip_check(published):
    chain, key, before = published
    rows, _ = bad_arguments_rows()
    chain.register(rows)
    result = chain.materialize(key)

    assert not result.success
    checks = check_results(result)
    roundtrip = checks[("sft_export", "tool_call_roundtrip")]
    assert not roundtrip.passed and roundtrip.severity == ERROR
    assert "openai: 1 of" in roundtrip.description and "trl: 1 of" in roundtrip.description
    assert checks[("sft_export", "privileged_leak")].passed
    assert not checks[("dpo_export", "tool_call_roundtrip")].passed
    assert checks[("dpo_export", "privileged_leak")].passed
    assert _failed_steps(result) == {"sft_export_tool_call_roundtrip", "dpo_export_tool_call_roundtrip"}

    assert tree_bytes(chain.storage.published_dir(key)) == before
    md = materialization(result, "sft_export")
    assert md["openai/tool_calls_invalid"].value == 1 and md["trl/tool_calls_invalid"].value == 1
    assert md["gates"].value["openai"] == {"tool_call_roundtrip": False, "privileged_leak": True}
    rejected_dir = md["rejected_path"].value
    assert rejected_dir.startswith(str(chain.storage.rejected_root(key)))
    assert b"{order_id: ORD-1001" in (chain.storage.base / rejected_dir / "sft.openai.jsonl").read_bytes()


def test_failed_blocking_check_stops_downstream(published):
    chain, key, _ = published
    rows, _ = leaking_rows()
    chain.register(rows)
    def run():
        return dg.materialize([*ASSETS, *CHECKS, downstream_trainer], instance=chain.instance, partition_key=key,
                              resources={"storage": chain.storage}, raise_on_error=False)

    result = run()
    assert not result.success
    assert "downstream_trainer" not in executed_steps(result)
    assert not [e for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == "downstream_trainer"]
    # with clean data the same downstream asset runs
    chain.register()
    ok = run()
    assert ok.success and "downstream_trainer" in executed_steps(ok)


@pytest.mark.filterwarnings("ignore:Parameter `include_sources`")  # Dagster's evaluation, beta in 1.13
def test_a_downstream_asset_in_a_later_run_waits_for_the_blocking_checks_when_its_condition_says_so(published):
    """Across runs, a refused export is still a materialization (Dagster records that the step ran, with the
    candidate's numbers and status "rejected"), so eager() alone requests what depends on it, as an asset
    sensor would fire. all_deps_blocking_checks_passed() is Dagster's condition for it (README, Checks)."""
    from whileai_pipeline.definitions import defs as ours

    chain, key, _ = published
    eager = dg.AutomationCondition.eager()

    @dg.asset(partitions_def=simulation_runs, deps=[sft_export], automation_condition=eager)
    def trainer_eager() -> None:
        """Reacts to any new materialization of the SFT export."""

    @dg.asset(partitions_def=simulation_runs, deps=[sft_export],
              automation_condition=eager & dg.AutomationCondition.all_deps_blocking_checks_passed())
    def trainer_gated() -> None:
        """Reacts to one whose blocking checks passed."""

    defs = dg.Definitions.merge(ours, dg.Definitions(assets=[trainer_eager, trainer_gated]))
    cursor = None
    for _ in range(2):  # the first evaluation requests both, as missing; the second nothing
        evaluation = dg.evaluate_automation_conditions(defs=defs, instance=chain.instance, cursor=cursor)
        cursor = evaluation.cursor
    assert evaluation.total_requested == 0
    rows, _ = leaking_rows()
    chain.register(rows)
    assert not chain.materialize(key).success
    evaluation = dg.evaluate_automation_conditions(defs=defs, instance=chain.instance, cursor=cursor)
    assert evaluation.get_requested_partitions(trainer_eager.key) == {key}
    assert evaluation.get_requested_partitions(trainer_gated.key) == set()


def test_reexport_never_picks_up_a_rejected_candidate(published):
    chain, key, before = published
    rows, _ = leaking_rows()
    chain.register(rows)
    assert not chain.materialize(key).success
    # a scheduled re-export (exports + checks only) reads the stage files, refuses again
    again = chain.materialize(key, selection=["sft_export", "dpo_export"])
    assert not again.success
    assert tree_bytes(chain.storage.published_dir(key)) == before
    assert len(_rejected_dirs(chain, key)) == 2  # the same refusal again: kept once (test_storage_growth)
    # fixing the input publishes the fixed data, never a rejected file
    chain.register()
    assert chain.materialize(key).success
    assert tree_bytes(chain.storage.published_dir(key)) == before


def test_validate_false_publishes_with_warn_and_warnings(published):
    chain, key, before = published
    rows, leaked_index = leaking_rows()
    chain.register(rows)
    result = chain.materialize(key, run_config=export_config(validate=False))

    assert result.success
    checks = check_results(result)
    for (asset, gate), ev in checks.items():
        assert ev.passed and ev.severity == WARN, (asset, gate, ev.description)
    assert "Exported anyway (validate: false)" in checks[("sft_export", "privileged_leak")].description
    assert "would not have blocked" in checks[("sft_export", "tool_call_roundtrip")].description
    md = materialization(result, "sft_export")
    assert md["status"].value == "published" and md["validate"].value is False
    assert md["gates"].value["openai"]["privileged_leak"] is False
    assert any("privileged context" in w for w in md["warnings"].value["openai"])
    assert md["openai/report"].value["warnings"] == md["warnings"].value["openai"]
    published_bytes = chain.storage.published_path(key, "sft", "openai").read_bytes()
    assert rows[leaked_index]["final_text"].encode() in published_bytes
    assert published_bytes != before["sft.openai.jsonl"]
    assert not chain.storage.rejected_root(key).exists()


def test_leak_check_with_nothing_to_read_passes_with_warn(chain):
    key = chain.register(unprivileged_rows(), name="scrubbed_run")
    result = chain.materialize(key)
    assert result.success
    checks = check_results(result)
    for asset in ("sft_export", "dpo_export"):
        ev = checks[(asset, "privileged_leak")]
        assert ev.passed and ev.severity == WARN
        assert ev.description.startswith("NOTHING TO READ: checked 0 of")
        assert "says nothing about leaks" in ev.description
    assert materialization(result, "raw_simulation_data")["rows_with_privileged"].value == 0


def test_privileged_blocks_written_as_json_text_are_named_as_the_reason_nothing_was_read(chain):
    """A warehouse pull often gives JSON columns back as text: ``"privileged": "{\\"reference\\": ...}"``. The
    gates read only an object (spec 6.2), so such a run passes with NOTHING TO READ; the raw stage and the
    checks then said the rows came "through the export", which sends the user after the wrong cause."""
    rows = sample_rows()
    for row in rows:
        if isinstance(row.get("privileged"), dict):
            row["privileged"] = json.dumps(row["privileged"])
    n_text = sum(isinstance(row.get("privileged"), str) for row in rows)
    assert n_text > 0
    key = chain.register(rows, name="privileged_as_text")
    result = chain.materialize(key)
    assert result.success
    raw = materialization(result, "raw_simulation_data")
    assert raw["rows_with_privileged"].value == 0
    assert raw["rows_with_privileged_text"].value == n_text
    said = [e.user_message for e in chain.instance.all_logs(result.run_id) if "as text" in (e.user_message or "")]
    assert len(said) == 1 and f"{n_text} row(s) carry privileged as text, not an object" in said[0], said
    assert not [e for e in chain.instance.all_logs(result.run_id) if "scrubbed" in (e.user_message or "")]
    for asset in ("sft_export", "dpo_export"):
        ev = check_results(result)[(asset, "privileged_leak")]
        assert ev.passed and ev.severity == WARN
        assert ev.description.startswith("NOTHING TO READ: checked 0 of")
        assert ("a privileged block written as JSON text is not read either (raw_simulation_data's "
                "rows_with_privileged_text counts them)") in ev.description, ev.description


def test_sft_rows_all_exports_failing_rows_with_the_warning(chain):
    key = chain.register()
    result = chain.materialize(key, run_config={"ops": {"sft_export": {"config": {"sft_rows": "all"}}}},
                               selection=["raw_simulation_data", "scored_simulation_data", "sft_export"])
    assert result.success
    md = materialization(result, "sft_export")
    assert md["openai/rows_written"].value == 48 and md["openai/fails"].value == 16
    # the advice is the pipeline's option, not the library's ``scored.passes()``, which a pipeline user cannot pass
    for fmt in ("openai", "trl"):
        said = [w for w in md["warnings"].value[fmt] if "reward below 0.5" in w]
        assert said == ["16 of 48 rows have reward below 0.5 and are exported as SFT targets; a model trained on them "
                        "learns the failure. Set sft_rows: pass to export the passing rows only, unless that is "
                        "intended."], said


def test_bad_line_fails_raw_with_file_and_line(chain):
    key = chain.register()
    path = chain.storage.run_path(key)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + [b'{"prompt": "broken\n'] + lines[3:]))
    result = chain.materialize(key)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "raw_simulation_data"
    assert f"bad_jsonl: {path}:4:" in failure.event_specific_data.error.message
    assert "scored_simulation_data" not in executed_steps(result)


def test_bad_line_quarantined_when_configured(chain):
    key = chain.register()
    path = chain.storage.run_path(key)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + [b"not json\n", b"[1, 2]\n"] + lines[3:]))
    result = chain.materialize(key, run_config={"ops": {"raw_simulation_data": {"config": {"on_bad_line": "quarantine"}}}})
    assert result.success
    md = materialization(result, "raw_simulation_data")
    assert md["quarantined_lines"].value == 2 and md["rows"].value == 48
    quarantined = read_rows(md["quarantine_path"].value)
    assert [q["line"] for q in quarantined] == [4, 5]
    assert quarantined[0]["text"] == "not json"
    assert read_rows(chain.storage.stage_path(key, "raw")) == [orjson.loads(x) for x in lines]


def test_a_new_version_without_passing_rows_publishes_no_empty_file_and_says_what_is_kept(published):
    """An empty training file is no export (OpenAI and TRL refuse it): the earlier files stay, named in
    the metadata as coming from an earlier materialization."""
    chain, key, before = published
    failing = [{**row, "reward": 0.0} for row in sample_rows()]
    chain.register(failing)
    result = chain.materialize(key)
    assert result.success
    for asset, count in (("sft_export", "openai/rows_written"), ("dpo_export", "openai/pairs")):
        md = materialization(result, asset)
        assert md["status"].value == "nothing to publish" and md[count].value == 0, asset
        assert md["published"].value is False
        kind = asset[:3]
        assert md["kept_earlier"].value == [str(chain.storage.published_path(key, kind, f)) for f in ("openai", "trl")]
    assert tree_bytes(chain.storage.published_dir(key)) == before
    # the numbers plotted across re-exports keep their keys: NaN where there is no value
    assert math.isnan(materialization(result, "preference_pairs")["mean_margin"].value)
    dpo = materialization(result, "dpo_export")
    assert math.isnan(dpo["openai/mean_margin"].value) and math.isnan(dpo["openai/chosen_longer_frac"].value)
    chain.register([{**row, "reward": None} for row in sample_rows()])
    ungraded = chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data"])
    scored = materialization(ungraded, "scored_simulation_data")
    assert math.isnan(scored["mean_reward"].value) and math.isnan(scored["pass_rate"].value)


def test_quarantine_of_a_run_with_no_readable_line_keeps_the_previous_stage(published):
    chain, key, _ = published
    stage = chain.storage.stage_path(key, "raw")
    staged = stage.read_bytes()
    chain.storage.run_path(key).write_bytes(b'{"prompt": "cut\n[1, 2]\n')
    quarantine = {"ops": {"raw_simulation_data": {"config": {"on_bad_line": "quarantine"}}}}
    result = chain.materialize(key, run_config=quarantine, selection=["raw_simulation_data"])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.event_specific_data.error.message.startswith(
        f"dagster._core.definitions.events.Failure: empty_run: none of the 2 non-blank line(s) of "
        f"{chain.storage.run_path(key)} is a readable trajectory (first: line 1: ")
    assert stage.read_bytes() == staged
    assert [q["line"] for q in read_rows(chain.storage.stage_path(key, "quarantine"))] == [1, 2]


def test_checks_without_a_materialization_fail_at_their_own_severity(chain, monkeypatch):
    """The gates block (ERROR); consumer_format never does (WARN), not even with nothing to check. (The
    checks are made to find no materialization: a run of the checks alone needs a partitioned job.)"""
    from whileai_pipeline.defs import checks as checks_module

    monkeypatch.setattr(checks_module, "_report_metadata", lambda context, asset_key: (None, None))
    key = chain.register()
    result = chain.materialize(key)
    checks = {name: (ev.passed, ev.severity) for (asset, name), ev in check_results(result).items()
              if asset == "sft_export"}
    assert checks == {"tool_call_roundtrip": (False, ERROR), "privileged_leak": (False, ERROR),
                      "consumer_format": (False, WARN)}


def test_a_consumer_format_check_whose_file_is_gone_says_so(chain, monkeypatch):
    """Run after the file it validates was removed (a check run without its asset reads the partition's
    latest materialization): it raised FileNotFoundError, a traceback in place of a check result."""
    from whileai_pipeline.defs import checks as checks_module

    real = checks_module._report_metadata

    def file_removed_since(context, asset_key):
        metadata, run_id = real(context, asset_key)
        if asset_key.to_user_string() == "sft_export":
            os.unlink(metadata["openai/published_path"].value)
        return metadata, run_id

    monkeypatch.setattr(checks_module, "_report_metadata", file_removed_since)
    key = chain.register()
    result = chain.materialize(key)
    check = check_results(result)[("sft_export", "consumer_format")]
    assert (check.passed, check.severity) == (False, WARN)
    gone = chain.storage.published_path(key, "sft", "openai")
    assert check.description == (f"consumer format problems: openai: {gone} is gone (removed since the export?); "
                                 "materialize sft_export again"), check.description


def test_consumer_format_on_a_refused_export_says_whose_files_it_checked(published):
    """Found by a review: on a refused export the consumer_format check validates the refused candidate's
    files, and said "2 file(s) pass their consumer's format rules" with nothing naming the materialization
    or saying these files were not published (the gates carry both)."""
    chain, key, _before = published
    rows, _ = leaking_rows()
    chain.register(rows)
    result = chain.materialize(key)
    check = check_results(result)[("sft_export", "consumer_format")]
    md = materialization(result, "sft_export")
    assert check.metadata["export_status"].value == "rejected"
    assert check.metadata["materialization_run_id"].value == result.run_id
    assert check.metadata["live"].value == md["live"].value
    assert check.description == ("2 file(s) pass their consumer's format rules (the refused export's files, "
                                 "kept under rejected/; the published files were not replaced)")


def test_a_turn_the_format_has_no_place_for_is_named_in_the_export_warnings(chain):
    """A run whose rows give their instructions as OpenAI's ``developer`` turn: the export leaves the turn out
    (spec 3.4), and the step's warnings say so, with the row, instead of training on the rest without a word."""
    rows = sample_rows()
    conversation = [{"role": "developer", "content": "Answer in French."},
                    {"role": "user", "content": rows[3]["prompt"]}, {"role": "assistant", "content": "Bien sûr."}]
    rows[3] = {**rows[3], "messages": conversation}
    key = chain.register(rows, name="developer_turn")
    result = chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data", "sft_export"])
    assert result.success
    warnings = materialization(result, "sft_export")["warnings"].value
    run = chain.storage.run_path(key)
    passing = [row for row in rows if row.get("reward") is not None and row["reward"] >= 0.5]
    assert rows[3] in passing
    for fmt in ("openai", "trl"):
        said = [w for w in warnings[fmt] if "the chat-completions format has no place for" in w]
        # the row named by its line in the run, not by its place among the passing rows the stage holds
        assert len(said) == 1 and said[0].startswith(
            f"1 of {len(passing)} rows hold messages the chat-completions format has no place for, left out of "
            f"what is written (first: {run}:4: role 'developer')"), warnings[fmt]


def test_a_turn_whose_content_is_not_text_is_named_by_its_run_line(chain):
    """OpenAI's content parts in a run: the export writes them as JSON text, and the step's warnings say so."""
    rows = sample_rows()
    parts = [{"type": "text", "text": rows[3]["prompt"]}]
    rows[3] = {**rows[3], "messages": [{"role": "user", "content": parts},
                                      {"role": "assistant", "content": "Let me check."}]}
    key = chain.register(rows, name="content_parts")
    result = chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data", "sft_export"])
    assert result.success
    warnings = materialization(result, "sft_export")["warnings"].value["openai"]
    said = [w for w in warnings if "content is not text" in w]
    assert len(said) == 1 and (f"(first: {chain.storage.run_path(key)}:4: the user turn's content is a list)"
                               in said[0]), warnings
