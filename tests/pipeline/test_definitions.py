"""What must be shown, point 1: the definitions load, and a snapshot pins their shape."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from whileai_pipeline.definitions import defs

pytestmark = pytest.mark.pipeline
ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "assets": {
        "raw_simulation_data": {"deps": [], "partitions": "simulation_runs"},
        "scored_simulation_data": {"deps": ["raw_simulation_data"], "partitions": "simulation_runs"},
        "preference_pairs": {"deps": ["scored_simulation_data"], "partitions": "simulation_runs"},
        "sft_export": {"deps": ["scored_simulation_data"], "partitions": "simulation_runs"},
        "dpo_export": {"deps": ["preference_pairs"], "partitions": "simulation_runs"},
    },
    "checks": {
        ("sft_export", "tool_call_roundtrip"): {"blocking": True},
        ("sft_export", "privileged_leak"): {"blocking": True},
        ("dpo_export", "tool_call_roundtrip"): {"blocking": True},
        ("dpo_export", "privileged_leak"): {"blocking": True},
        ("sft_export", "consumer_format"): {"blocking": False},
        ("dpo_export", "consumer_format"): {"blocking": False},
    },
    "jobs": {
        "simulation_chain": ["dpo_export", "preference_pairs", "raw_simulation_data", "scored_simulation_data",
                             "sft_export"],
        "reexport": ["dpo_export", "sft_export"],
    },
    "sensors": {"inbox_sensor": "simulation_chain"},
    "schedules": {"reexport_schedule": "reexport"},
    "resources": ["storage"],
}


def snapshot():
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assets = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "partitions": getattr(node.partitions_def, "name", None),
        }
    checks = {}
    for checks_def in defs.asset_checks:
        for spec in checks_def.check_specs:
            checks[(spec.asset_key.to_user_string(), spec.name)] = {"blocking": spec.blocking}
    jobs = {}
    for name in ("simulation_chain", "reexport"):
        job = defs.resolve_job_def(name)
        jobs[name] = sorted(k.to_user_string() for k in job.asset_layer.selected_asset_keys)
    return {
        "assets": assets,
        "checks": checks,
        "jobs": jobs,
        "sensors": {s.name: s.job_name for s in defs.sensors},
        "schedules": {s.name: s.job_name for s in defs.schedules},
        "resources": sorted(defs.resources),
    }


def test_definitions_validate_loadable():
    dg.Definitions.validate_loadable(defs)


def test_snapshot_pins_assets_deps_partitions_checks_and_blocking():
    assert snapshot() == EXPECTED


def test_jobs_carry_the_gate_checks():
    for name in ("simulation_chain", "reexport"):
        job = defs.resolve_job_def(name)
        keys = {(k.asset_key.to_user_string(), k.name) for k in job.asset_layer.asset_graph.asset_check_keys}
        assert keys == set(EXPECTED["checks"]), name


def test_checks_are_partitioned_like_their_assets():
    for checks_def in defs.asset_checks:
        for spec in checks_def.check_specs:
            assert spec.partitions_def is not None and spec.partitions_def.name == "simulation_runs"


def test_definitions_module_has_no_future_annotations():
    # Dagster reads the annotations of asset/check/sensor functions at definition time.
    for path in [ROOT / "whileai_pipeline" / "definitions.py", *(ROOT / "whileai_pipeline" / "defs").glob("*.py")]:
        assert "from __future__ import annotations" not in path.read_text(), path


def test_workspace_yaml_loads_module_with_fixed_location_name():
    import yaml

    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    assert workspace == {"load_from": [{"python_module": {
        "module_name": "whileai_pipeline.definitions", "location_name": "whileai_pipeline"}}]}


@pytest.mark.skipif(shutil.which("dg") is None, reason="dagster-dg-cli is not installed")
def test_dg_check_defs(tmp_path):
    env = {**os.environ, "WHILEAI_PIPELINE_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    proc = subprocess.run(["dg", "check", "defs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All definitions loaded successfully" in proc.stdout + proc.stderr


def test_dagster_cli_lists_the_definitions(tmp_path):
    env = {**os.environ, "WHILEAI_PIPELINE_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "dagster", "asset", "list", "-m", "whileai_pipeline.definitions"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) >= set(EXPECTED["assets"])


def test_automation_descriptions_say_where_when_and_with_which_options_in_plain_text():
    """The sensor, schedule and job pages show descriptions as plain text: no markdown backticks, and the
    settings named as a user sets them; a hand launch of reexport does not get the run's last options."""
    sensor = defs.resolve_sensor_def("inbox_sensor").description
    schedule = defs.resolve_schedule_def("reexport_schedule").description
    job = defs.resolve_job_def("reexport").description
    for text in (sensor, schedule, job):
        assert "`" not in text, text
    assert "$WHILEAI_PIPELINE_HOME" in sensor and "$WHILEAI_PIPELINE_SETTLE_SECONDS" in sensor
    assert "$WHILEAI_PIPELINE_CRON" in schedule and "options it was last exported with" in schedule
    # a run in which nothing changed is left out, and how to have it re-exported anyway
    assert "is not re-exported" in schedule and "$WHILEAI_PIPELINE_REEXPORT=all" in schedule
    assert "launched by hand" in job and "not the run's last options" in job
