"""Real Dagster runs against real files: a temporary storage root and a temporary instance per test."""

import copy
import shutil
from pathlib import Path

import dagster as dg
import orjson
import pytest

from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.partitions import PARTITIONS_NAME
from whileai_pipeline.defs.resources import PipelineStorage

SAMPLE = Path(__file__).resolve().parents[2] / "whileai_pipeline" / "sample" / "support_orders.jsonl"
SAMPLE_META = SAMPLE.with_name("support_orders.meta.json")


def read_rows(path):
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


def write_rows(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def sample_rows():
    return read_rows(SAMPLE)


def _passing_tool_row(rows):
    """Index of the first passing row whose conversation has a tool call."""
    for i, row in enumerate(rows):
        if row.get("reward") == 1 and any(m.get("tool_calls") for m in row.get("messages") or []):
            return i
    raise AssertionError("the sample has no passing row with a tool call")


def leaking_rows():
    """The sample with one passing row whose final reply quotes its privileged reference."""
    rows = copy.deepcopy(sample_rows())
    i = _passing_tool_row(rows)
    quote = f"Per my notes: {rows[i]['privileged']['reference']}."
    rows[i]["final_text"] = quote
    rows[i]["messages"][-1]["content"] = quote
    return rows, i


def bad_arguments_rows():
    """The sample with one passing row whose tool-call arguments are not parseable JSON."""
    rows = copy.deepcopy(sample_rows())
    i = _passing_tool_row(rows)
    for message in rows[i]["messages"]:
        for call in message.get("tool_calls") or []:
            call["arguments"] = "{order_id: ORD-1001"  # not JSON
    for step in rows[i]["steps"]:
        if step.get("tool"):
            step["arguments"] = "{order_id: ORD-1001"
    return rows, i


def unprivileged_rows():
    """The sample as the export saves it: no privileged blocks, so the leak gate has nothing to read."""
    rows = copy.deepcopy(sample_rows())
    for row in rows:
        row.pop("privileged", None)
    return rows


@pytest.fixture
def storage(tmp_path):
    return PipelineStorage(root=str(tmp_path / "home"))


@pytest.fixture
def instance():
    """An in-memory instance: real runs, real event log, no SQLite (several times faster).
    The CLI tests exercise the persistent SQLite instance."""
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


@pytest.fixture
def sqlite_instance(tmp_path):
    """A persistent SQLite instance in a temp dir (schedule contexts need an instance reference)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.DagsterInstance.local_temp(tempdir=str(home)) as inst:
        yield inst


class Chain:
    """Registers runs and materializes the chain (or part of it) with real Dagster runs."""

    def __init__(self, storage, instance, tmp_path):
        self.storage = storage
        self.instance = instance
        self.tmp_path = tmp_path

    def register(self, rows=None, name="support_orders", meta=True):
        src_dir = self.tmp_path / "incoming"
        src = src_dir / f"{name}.jsonl"
        if rows is None:
            src_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SAMPLE, src)
        else:
            write_rows(src, rows)
        meta_path = src_dir / f"{name}.meta.json"
        if meta:
            shutil.copyfile(SAMPLE_META, meta_path)
        elif meta_path.exists():
            meta_path.unlink()
        key = self.storage.register(src)
        if not self.instance.has_dynamic_partition(PARTITIONS_NAME, key):
            self.instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
        return key

    def materialize(self, key, run_config=None, selection=None):
        return dg.materialize(
            [*ASSETS, *CHECKS],
            instance=self.instance,
            partition_key=key,
            resources={"storage": self.storage},
            run_config=run_config,
            selection=selection,
            raise_on_error=False,
        )


@pytest.fixture
def chain(storage, instance, tmp_path):
    return Chain(storage, instance, tmp_path)


@pytest.fixture
def published(chain):
    """A partition with a good export already published; returns (chain, key, published bytes)."""
    key = chain.register()
    assert chain.materialize(key).success
    return chain, key, tree_bytes(chain.storage.published_dir(key))


def executed_steps(result):
    return {e.step_key for e in result.all_events if e.event_type_value == "STEP_START"}


def _change_each_copied(monkeypatch, suffix, change):
    """Every file copy (``shutil.copyfileobj``) of a file whose name ends with ``suffix`` calls
    ``change(path)`` on its source as the copy ends."""
    copy = shutil.copyfileobj

    def copy_then_change(fin, fout, length=0):
        copy(fin, fout, length)
        if fin.name.endswith(suffix):
            change(fin.name)

    monkeypatch.setattr(shutil, "copyfileobj", copy_then_change)


@pytest.fixture
def writer_appends_during_copies(monkeypatch):
    """Every copy of a run finds one more row appended to it as it ends, as when ``simulate`` is still
    writing the run."""
    def append_a_row(path):
        with open(path, "ab") as fh:
            fh.write(b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n')

    _change_each_copied(monkeypatch, ".jsonl", append_a_row)


@pytest.fixture
def sidecar_rewritten_during_copies(monkeypatch):
    """Every copy of a sidecar finds it rewritten with another system prompt as it ends."""
    def rewrite(path):
        Path(path).write_bytes(b'{"system_prompt": "a newer prompt, written while the stage copied the old one"}')

    _change_each_copied(monkeypatch, ".meta.json", rewrite)


def materialization(result, asset):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    assert events, f"{asset} was not materialized"
    return events[-1].materialization.metadata


def check_results(result):
    return {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}


def export_config(validate=True, **extra):
    sft = {"validate": validate, **extra}
    dpo = {"validate": validate}
    return {"ops": {"sft_export": {"config": sft}, "dpo_export": {"config": dpo}}}


def tree_bytes(directory):
    """``{relative path: bytes}`` for every file under ``directory``."""
    directory = Path(directory)
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
