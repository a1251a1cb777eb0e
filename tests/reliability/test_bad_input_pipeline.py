"""Issue 6.1 through the pipeline: the same bad inputs, on real Dagster runs.

Every case first publishes a good export for the run, then brings the bad version of the run and
materializes the chain again. The outcome must be the one named in ``cases.py``; the published files
stay byte-identical whenever the run fails; no temporary file is left anywhere under the storage
root; the source file handed to the pipeline is byte-identical afterwards.
"""

import shutil

import dagster as dg
import orjson
import pytest

from whileai_pipeline.core.errors import ExportError
from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.partitions import PARTITIONS_NAME
from whileai_pipeline.defs.resources import PipelineStorage

from .cases import CASES, GOOD_LINE

pytestmark = pytest.mark.pipeline

# Lines a quarantine keeps for the cases whose bad line is unreadable (the rest are set aside).
QUARANTINE_KEEPS = {"truncated_last_line": 1, "invalid_utf8": 1, "array_line": 1, "number_line": 1,
                    "string_line": 1, "null_line": 1, "nesting_10000_deep": 1, "open_brace_only": 2,
                    "python_repr_line": 1, "trailing_garbage": 0, "two_objects_one_line": 0, "nul_byte": 0}


@pytest.fixture(scope="module")
def instance():
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def _materialize(instance, storage, key, run_config=None):
    return dg.materialize([*ASSETS, *CHECKS], instance=instance, partition_key=key,
                          resources={"storage": storage}, run_config=run_config, raise_on_error=False)


def _register(instance, storage, src):
    key = storage.register(src)
    if not instance.has_dynamic_partition(PARTITIONS_NAME, key):
        instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
    return key


def _failure(result, step):
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE" and event.step_key == step:
            return event.event_specific_data.error.message
    return None


def _tree(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _temps(root):
    return [str(p) for p in root.rglob("*") if p.name.endswith(".tmp") or ".incoming" in p.name]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_through_the_pipeline(tmp_path, instance, case):
    storage = PipelineStorage(root=str(tmp_path / "home"))
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    good = incoming / f"{case.name}.jsonl"
    good.write_bytes(GOOD_LINE * 4)
    key = _register(instance, storage, good)
    assert _materialize(instance, storage, key).success
    published = _tree(storage.published_dir(key))
    assert published

    src = incoming / f"{case.name}.jsonl"
    src.write_bytes(case.run)
    if case.sidecar is not None:
        (incoming / f"{case.name}.meta.json").write_bytes(case.sidecar)
    before = src.read_bytes()
    if case.pipeline.startswith("raw:bad_sidecar"):
        # register (the CLI's way in) refuses it before copying anything; the sensor's and the UI's way in is a
        # run dropped into the inbox by hand, which the raw stage refuses
        inbox = _tree(storage.inbox)
        with pytest.raises(ExportError, match=r"^bad_sidecar: "):
            storage.register(src)
        assert _tree(storage.inbox) == inbox
        shutil.copyfile(src, storage.run_path(key))
        shutil.copyfile(incoming / f"{case.name}.meta.json", storage.run_meta_path(key))
    else:
        assert _register(instance, storage, src) == key
    result = _materialize(instance, storage, key)

    if case.pipeline == "ok":
        assert result.success, [e.message for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    elif case.pipeline.startswith("raw:"):
        assert not result.success
        message = _failure(result, "raw_simulation_data")
        assert message is not None and case.pipeline[4:] in message, message
        if case.pipeline_line is not None:
            assert f"{storage.run_path(key)}:{case.pipeline_line}: " in message, message
        assert not [e for e in result.get_asset_materialization_events()]
    else:
        check = case.pipeline[len("gate:"):]
        assert not result.success
        failed = {(e.asset_key.to_user_string(), e.check_name) for e in result.get_asset_check_evaluations()
                  if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR}
        assert ("sft_export", check) in failed, failed
        assert list(storage.rejected_root(key).iterdir())
    if not result.success:
        assert _tree(storage.published_dir(key)) == published, "a failed run changed the published export"
    assert src.read_bytes() == before
    assert _temps(tmp_path / "home") == []


@pytest.mark.parametrize("name", sorted(QUARANTINE_KEEPS))
def test_unreadable_lines_are_quarantined_and_counted(tmp_path, instance, name):
    case = next(c for c in CASES if c.name == name)
    storage = PipelineStorage(root=str(tmp_path / "home"))
    src = tmp_path / f"q_{name}.jsonl"
    src.write_bytes(case.run)
    key = _register(instance, storage, src)
    result = _materialize(instance, storage, key,
                          {"ops": {"raw_simulation_data": {"config": {"on_bad_line": "quarantine"}}}})
    keeps = QUARANTINE_KEEPS[name]
    quarantine = storage.stage_path(key, "quarantine")
    assert quarantine.is_file()
    records = quarantine.read_bytes().splitlines()
    assert len(records) == 1
    record = orjson.loads(records[0])
    assert record["path"] == str(storage.run_path(key)) and record["line"] >= 1 and record["reason"]
    if keeps:
        assert result.success
        raw = [e for e in result.get_asset_materialization_events()
               if e.asset_key.to_user_string() == "raw_simulation_data"][-1].materialization.metadata
        assert raw["quarantined_lines"].value == 1
        assert raw["rows"].value == keeps
    else:
        assert not result.success
        assert "empty_run:" in _failure(result, "raw_simulation_data")
