"""Something by the sidecar's name that is not a file (a folder, a broken link): it was taken as no sidecar,
and the run was exported without its system prompt and tools, with only a warning that it had none."""

import os
import shutil

import dagster as dg
import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.cli import main

from .conftest import SAMPLE, tree_bytes

pytestmark = pytest.mark.pipeline

SAID = {"folder": "a folder", "broken link": "a broken link", "link to itself": "a broken link"}


def _not_a_file(meta, kind):
    if kind == "folder":
        meta.mkdir()
    elif kind == "link to itself":  # stat fails with ELOOP, not ENOENT (the raw stage once crashed on it)
        os.symlink(meta.name, meta)
    else:
        os.symlink(meta.with_name("gone.meta.json"), meta)


@pytest.fixture(params=list(SAID))
def kind(request):
    return request.param


def _message(meta, kind):
    return (f"bad_sidecar: {meta}: {SAID[kind]}, not the run's sidecar file (its system prompt and tools); put the "
            "sidecar JSON file there, or move it away to export the run without one")


@pytest.mark.parametrize("call", ["export_dataset", "training_rows", "load_run", "export_datasets"])
def test_the_library_refuses_it(tmp_path, kind, call):
    src = tmp_path / "run.jsonl"
    shutil.copyfile(SAMPLE, src)
    meta = tmp_path / "run.meta.json"
    _not_a_file(meta, kind)
    args = {"export_datasets": (str(src), {"openai": str(tmp_path / "o.jsonl")})}.get(call, (str(src),))
    with pytest.raises(wai.ExportError) as raised:
        getattr(wai, call)(*args)
    assert str(raised.value) == _message(meta, kind)
    assert sorted(os.listdir(tmp_path)) == ["run.jsonl", "run.meta.json"]


def test_explicit_system_prompt_and_tools_still_need_no_sidecar(tmp_path):
    """DECISIONS 6: with both passed, nothing is read from the sidecar, whatever is there."""
    src = tmp_path / "run.jsonl"
    shutil.copyfile(SAMPLE, src)
    (tmp_path / "run.meta.json").mkdir()
    report = wai.export_dataset(str(src), tmp_path / "o.jsonl", system_prompt="S", tools=[])
    assert report["system_prompt_source"] == "argument"


def test_the_cli_refuses_it_before_registering_the_run(tmp_path, kind, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    shutil.copyfile(SAMPLE, tmp_path / "night.jsonl")
    _not_a_file(tmp_path / "night.meta.json", kind)
    assert main(["run", "night.jsonl", "--home", "home"]) == 2
    assert capsys.readouterr().err == f"whileai-pipeline: error: {_message('night.meta.json', kind)}\n"
    assert not (tmp_path / "home" / "inbox").exists() or os.listdir(tmp_path / "home" / "inbox") == []


def test_the_raw_stage_refuses_it_and_keeps_the_previous_stage(chain, kind):
    """Placed in the inbox by hand (the sensor and the UI do not go through ``register``)."""
    key = chain.register()
    assert chain.materialize(key, selection=dg.AssetSelection.assets("raw_simulation_data")).success
    stages = tree_bytes(chain.storage.stage_dir(key))
    meta = chain.storage.run_meta_path(key)
    meta.unlink()
    _not_a_file(meta, kind)
    result = chain.materialize(key, selection=dg.AssetSelection.assets("raw_simulation_data"))
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.event_specific_data.error.message.startswith(f"dagster._core.definitions.events.Failure: "
                                                                f"{_message(meta, kind)}\n")
    assert tree_bytes(chain.storage.stage_dir(key)) == stages


def test_a_broken_link_left_in_the_inbox_goes_when_the_run_is_registered_without_a_sidecar(chain):
    """``register`` removes the inbox's sidecar when the new run brings none; a broken link by that name was
    left (``exists()`` follows it), and the raw stage then refused the run with ``bad_sidecar``, which the
    CLI names as the sidecar beside the user's file, where there is nothing at all."""
    key = chain.register(meta=False)
    meta = chain.storage.run_meta_path(key)
    _not_a_file(meta, "broken link")
    assert chain.register(meta=False) == key
    assert not os.path.lexists(meta)
    assert chain.materialize(key, selection=dg.AssetSelection.assets("raw_simulation_data")).success


@pytest.mark.parametrize("brings_sidecar", [False, True])
def test_a_folder_by_the_sidecar_name_in_the_inbox_is_bad_sidecar_before_anything_is_copied(chain, brings_sidecar):
    """It can be neither removed nor replaced: ``register`` failed with a bare IsADirectoryError (or, bringing a
    sidecar, a failed copy), after the run file had been copied over the inbox's."""
    key = chain.register(meta=False)
    before = tree_bytes(chain.storage.inbox)
    meta = chain.storage.run_meta_path(key)
    meta.mkdir()
    with pytest.raises(wai.ExportError) as raised:
        chain.register(rows=[{"prompt": "p", "final_text": "x", "reward": 1}], meta=brings_sidecar)
    assert str(raised.value) == (f"bad_sidecar: {meta}: a folder by the name of the run's sidecar in the inbox; "
                                 "move it away, then register the run again")
    assert tree_bytes(chain.storage.inbox) == before and meta.is_dir()


def test_the_inbox_sensor_takes_the_run_again_once_the_non_file_is_moved_away(storage, instance, kind):
    """The sensor took the non-file for no sidecar (signature and fingerprint alike), so the run it requested
    failed with ``bad_sidecar``, and moving the thing away, as that error says to, changed nothing the sensor
    looks at: the run was never requested again."""
    from whileai_pipeline.defs.automation import inbox_sensor

    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "night.jsonl"
    shutil.copyfile(SAMPLE, run)
    then = os.stat(run).st_mtime_ns - 120 * 10**9
    os.utime(run, ns=(then, then))  # settled
    meta = storage.run_meta_path("night")
    _not_a_file(meta, kind)

    def tick(cursor=None):
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": storage}) as context:
            result = inbox_sensor(context)
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        return result

    first = tick()
    assert len(first.run_requests) == 1  # its raw stage fails: bad_sidecar
    assert not tick(first.cursor).run_requests  # nothing changed: nothing requested
    (os.rmdir if kind == "folder" else os.unlink)(meta)
    moved = tick(first.cursor)
    assert len(moved.run_requests) == 1, "the run was not requested again once the non-file was moved away"
    assert moved.run_requests[0].run_key != first.run_requests[0].run_key


def test_a_run_whose_name_leaves_no_room_for_a_sidecar_name_has_no_sidecar(tmp_path, monkeypatch):
    """``x...x.jsonl`` of 255 characters is a file; ``x...x.meta.json`` (259) can be nothing at all, and the
    export failed with a bare "[Errno 36] File name too long" about a sidecar the user never named."""
    monkeypatch.chdir(tmp_path)
    name = "x" * 249 + ".jsonl"
    shutil.copyfile(SAMPLE, name)
    report = wai.export_dataset(name, "o.jsonl")
    assert (report["n_written"], report["system_prompt_source"]) == (48, "none")
