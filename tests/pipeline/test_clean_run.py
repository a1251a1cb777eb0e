"""What must be shown, point 2: a clean run passes everything, publishes, and its metadata is the
library's report for the same input. Plus re-exports: unchanged input + config -> identical bytes."""

import hashlib

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.scoring import verdict
from whileai_pipeline.defs.summaries import tool_calls_in

from .conftest import SAMPLE, check_results, materialization, read_rows, sample_rows, tree_bytes

pytestmark = pytest.mark.pipeline

VOLATILE = ("elapsed_seconds", "path")
PUBLISHED = sorted(
    f"{kind}.{fmt}.{ext}" for kind in ("sft", "dpo") for fmt in ("openai", "trl") for ext in ("jsonl", "report.json")
)


def _stable(report):
    return {k: v for k, v in report.items() if k not in VOLATILE}


@pytest.fixture
def clean(chain):
    key = chain.register()
    result = chain.materialize(key)
    return chain, key, result


def test_clean_run_every_asset_and_check_passes(clean):
    chain, key, result = clean
    assert result.success
    for asset in ("raw_simulation_data", "scored_simulation_data", "preference_pairs", "sft_export", "dpo_export"):
        materialization(result, asset)
    checks = check_results(result)
    assert set(checks) == {(a, g) for a in ("sft_export", "dpo_export")
                           for g in ("tool_call_roundtrip", "privileged_leak", "consumer_format")}
    for ev in checks.values():
        assert ev.passed, ev.description
        assert ev.partition == key
    assert sorted(p.name for p in chain.storage.published_dir(key).iterdir()) == PUBLISHED
    for asset in ("scored_simulation_data", "sft_export", "dpo_export"):   # pictures in the UI (issue 5.3)
        md = materialization(result, asset)
        assert md["reward_histogram"].value.startswith("| reward | rows |")
        assert md["group_pass_rates"].value.startswith("| group | rollouts | pass |")
    assert not chain.storage.rejected_root(key).exists()
    assert not (chain.storage.stage_dir(key) / "candidates").exists()
    # the tool calls of one export, counted once: each format writes the same calls
    sft = materialization(result, "sft_export")
    calls = sft["openai/tool_calls_checked"].value
    assert calls == sft["trl/tool_calls_checked"].value > 0
    assert checks[("sft_export", "tool_call_roundtrip")].description == (
        f"all {calls} tool call(s) parse back to structured arguments in each of 2 format(s)")


def test_sft_metadata_equals_library_report_for_the_same_input(clean, tmp_path):
    chain, key, result = clean
    md = materialization(result, "sft_export")
    source = chain.storage.stage_path(key, "sft_source")
    # the SFT source is the scored rows that pass
    expected_rows = [r for r in read_rows(chain.storage.stage_path(key, "scored")) if verdict(r["reward"]) == "pass"]
    assert read_rows(source) == expected_rows
    for fmt in ("openai", "trl"):
        out = tmp_path / f"lib.{fmt}.jsonl"
        lib = wai.export_dataset(str(source), str(out), format=fmt)  # validate=True, library defaults
        assert _stable(md[f"{fmt}/report"].value) == _stable(lib)
        published = chain.storage.published_path(key, "sft", fmt)
        assert published.read_bytes() == out.read_bytes()
        assert md[f"{fmt}/published_path"].value == str(published)
        assert md[f"{fmt}/sha256"].value == hashlib.sha256(out.read_bytes()).hexdigest() == lib["sha256"]
        assert md[f"{fmt}/rows_written"].value == lib["n_written"]
        assert md[f"{fmt}/passes"].value == lib["rewards"]["n_pass"]
        assert md[f"{fmt}/fails"].value == lib["rewards"]["n_fail"] == 0
        assert md[f"{fmt}/trained_messages"].value == lib["trained_messages"]
        assert md[f"{fmt}/masked_messages"].value == lib["masked_messages"]
        assert md[f"{fmt}/tool_calls_checked"].value == lib["tool_call_roundtrip"]["checked"] > 0
        assert md[f"{fmt}/tool_calls_invalid"].value == 0
        assert md[f"{fmt}/rows_checked"].value == lib["privileged_leaks"]["n_checked"] > 0
        assert md[f"{fmt}/rows_leaked"].value == 0
    assert md["dagster/row_count"].value == md["openai/rows_written"].value == 32
    assert md["status"].value == "published" and md["published"].value is True and md["validate"].value is True
    assert "rejected_path" not in md
    assert "sft export: published" in md["summary"].value
    assert md["openai/report"].value["system_prompt_source"] == "sidecar"


def test_dpo_metadata_equals_library_report_for_the_same_input(clean, tmp_path):
    chain, key, result = clean
    md = materialization(result, "dpo_export")
    pairs_path = chain.storage.stage_path(key, "pairs")
    pairs = read_rows(pairs_path)
    profile = wai.load_run(SAMPLE).profile
    for fmt in ("openai", "trl"):
        out = tmp_path / f"lib.dpo.{fmt}.jsonl"
        lib = wai.export_preference(str(pairs_path), str(out), format=fmt)  # same input: the stage file + sidecar
        assert _stable(md[f"{fmt}/report"].value) == _stable(lib)
        assert lib["system_prompt_source"] == "sidecar" and lib["source_path"] == str(pairs_path)
        assert chain.storage.published_path(key, "dpo", fmt).read_bytes() == out.read_bytes()
        # the same pairs as a list with the run's prompt and tools give the same file
        listed = tmp_path / f"lib.list.{fmt}.jsonl"
        wai.export_preference(pairs, str(listed), system_prompt=profile.policy, tools=profile.tools, format=fmt)
        assert listed.read_bytes() == out.read_bytes()
        assert md[f"{fmt}/pairs"].value == lib["pairs"] == 8
        assert md[f"{fmt}/mean_margin"].value == lib["mean_margin"]
        assert md[f"{fmt}/ties_dropped"].value == 0
        assert md[f"{fmt}/rows_leaked"].value == 0
    assert md["dagster/row_count"].value == 8


def test_upstream_metadata(clean):
    chain, key, result = clean
    rows = sample_rows()
    raw = materialization(result, "raw_simulation_data")
    assert raw["rows"].value == raw["dagster/row_count"].value == len(rows) == 48
    assert raw["bytes"].value == SAMPLE.stat().st_size
    assert raw["sha256"].value == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    assert raw["prompts"].value == len({r["prompt"] for r in rows}) == 8
    assert raw["groups"].value == len({r["scenario_id"] for r in rows})
    assert raw["rows_with_privileged"].value == 48
    assert raw["tool_calls"].value == sum(tool_calls_in(r) for r in rows) > 0
    assert raw["finish_reasons"].value == {"stop": 48}
    assert raw["quarantined_lines"].value == 0
    assert "| scenario |" in raw["preview"].value
    assert chain.storage.stage_path(key, "raw").read_bytes() == SAMPLE.read_bytes()

    scored = materialization(result, "scored_simulation_data")
    assert (scored["passes"].value, scored["fails"].value, scored["ungraded"].value) == (32, 16, 0)
    assert scored["mean_reward"].value == round(32 / 48, 4)
    assert scored["scorer"].value == "existing"
    assert "| [0.9, 1.0] | 32 |" in scored["reward_histogram"].value
    assert "| pass rate |" in scored["group_pass_rates"].value
    stamped = read_rows(chain.storage.stage_path(key, "scored"))
    assert all(r["scorer"] == "existing" and r["label_source"] for r in stamped)

    pairs_md = materialization(result, "preference_pairs")
    lib_pairs, lib_report = wai.build_preference_pairs(stamped)
    assert pairs_md["pair_report"].value == lib_report  # the file-to-file builder reports the same
    assert pairs_md["pairs"].value == len(lib_pairs) == 8
    assert read_rows(chain.storage.stage_path(key, "pairs")) == lib_pairs


def test_reexport_of_unchanged_input_is_byte_identical(clean):
    chain, key, result = clean
    before = tree_bytes(chain.storage.published_dir(key))
    again = chain.materialize(key, selection=["sft_export", "dpo_export"])
    assert again.success
    assert tree_bytes(chain.storage.published_dir(key)) == before
    assert materialization(again, "sft_export")["status"].value == "unchanged"
    # the whole chain again (re-read, re-score, re-pair) gives the same bytes too
    full = chain.materialize(key)
    assert full.success
    assert tree_bytes(chain.storage.published_dir(key)) == before


def _stats(directory):
    """``{relative path: (mtime_ns, inode)}`` of every file under ``directory``."""
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.stat().st_ino)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_an_unchanged_re_run_leaves_every_published_file_and_report_untouched(clean):
    """The docs say an unchanged re-run leaves the published files as they are, but every re-run renamed
    a new copy of each .report.json over the old one: the same bytes, a new mtime and inode, so a sync
    that compares mtimes copied the reports again. A report that differs is still rewritten."""
    chain, key, result = clean
    assert result.success
    published = chain.storage.published_dir(key)
    before = _stats(published)
    assert sorted(before) == PUBLISHED
    again = chain.materialize(key)  # the whole chain: re-read, re-score, re-pair, re-export
    assert again.success
    assert materialization(again, "sft_export")["status"].value == "unchanged"
    assert _stats(published) == before

    report = chain.storage.published_path(key, "sft", "openai").with_name("sft.openai.report.json")
    right = report.read_bytes()
    report.write_bytes(right.replace(b'"format"', b'"format" '))  # edited by hand: other bytes, same meaning
    edited = _stats(published)
    assert chain.materialize(key, selection=["sft_export"]).success
    assert report.read_bytes() == right
    after = _stats(published)
    assert after.pop(report.name) != edited.pop(report.name)
    assert after == edited  # the data file and the other reports were left alone


def test_config_change_republishes(clean):
    chain, key, result = clean
    before = chain.storage.published_path(key, "sft", "openai").read_bytes()
    run = chain.materialize(key, run_config={"ops": {"sft_export": {"config": {"mask_mode": "final", "formats": ["openai"]}}}},
                            selection=["sft_export"])
    assert run.success
    md = materialization(run, "sft_export")
    assert md["openai/report"].value["mask_mode"] == "final"
    assert chain.storage.published_path(key, "sft", "openai").read_bytes() != before
    # the TRL file of the earlier config is gone with its report: sft.* never mixes two configs
    trl = chain.storage.published_path(key, "sft", "trl")
    assert not trl.exists() and not trl.with_name("sft.trl.report.json").exists()
    assert md["removed"].value == [str(trl), str(trl.with_name("sft.trl.report.json"))]
    assert chain.storage.published_path(key, "dpo", "trl").is_file()  # another kind: not this export's
