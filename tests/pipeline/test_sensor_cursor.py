"""The inbox sensor's memory of run files: kept in a state file its cursor names, and what it keeps of
files that leave the inbox.

The memory holds one entry per run file in the inbox (about 139 bytes; 138 KB at 1000 runs), and a file
removed from the inbox keeps only its count of versions seen (a dozen bytes; Dagster keeps its partition
too). Without it, A, then B, then the file removed, then A again (or A, removed, B, removed, A), asked for
A under its first run key, which Dagster never launches twice: the inbox said A while the stages and
exports kept B. Dagster writes the cursor into every tick (one
every 30 s), so the memory lives in ``<root>/sensor/<sha256>.json`` and the cursor only names it.
"""

import hashlib

import orjson
import pytest

from whileai_pipeline.defs import sensor_state
from whileai_pipeline.defs.automation import inbox_sensor

from .conftest import SAMPLE
from .test_automation import _age, _apply, _evaluate

pytestmark = pytest.mark.pipeline

VERSION_B = SAMPLE.read_bytes() + b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n'


def _state(storage, cursor):
    state, lost = sensor_state.load(storage, cursor)
    assert lost is None
    return state


def _tick(instance, storage, cursor):
    result = _evaluate(inbox_sensor, instance, storage, cursor=cursor)
    _apply(instance, result)
    return result


def test_content_that_comes_back_after_the_file_was_removed_gets_a_new_run_key(storage, instance):
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "night.jsonl"
    keys, cursor = [], None
    for content in (SAMPLE.read_bytes(), VERSION_B):
        run.write_bytes(content)
        _age(run)
        result = _tick(instance, storage, cursor)
        cursor = result.cursor
        keys += [r.run_key for r in result.run_requests]
    run.unlink()
    removed = _tick(instance, storage, cursor)
    assert not removed.run_requests
    # its versions and last content, not its file's signature
    assert _state(storage, removed.cursor) == {"night": {"n": 2, "fp": _fingerprint(VERSION_B)}}
    run.write_bytes(SAMPLE.read_bytes())
    _age(run)
    (request,) = _tick(instance, storage, removed.cursor).run_requests
    assert request.run_key not in keys
    assert request.run_key == f"night:{hashlib.sha256(SAMPLE.read_bytes()).hexdigest()[:16]}:v3"


def test_a_run_seen_in_one_version_leaves_only_its_count_and_content_when_removed(storage, instance):
    """Its count and content, not its signature: other content that comes next is version 2 (the run name stays a
    partition of Dagster's too), the same content is the file touched: nothing is requested again."""
    storage.inbox.mkdir(parents=True)
    for name in ("kept", "gone"):
        (storage.inbox / f"{name}.jsonl").write_bytes(SAMPLE.read_bytes())
        _age(storage.inbox / f"{name}.jsonl")
    first = _tick(instance, storage, None)
    (storage.inbox / "gone.jsonl").unlink()
    after = _tick(instance, storage, first.cursor)
    state = _state(storage, after.cursor)
    assert sorted(state) == ["gone", "kept"] and "sig" in state["kept"]
    assert state["gone"] == {"n": 1, "fp": _fingerprint(SAMPLE.read_bytes())}
    (storage.inbox / "gone.jsonl").write_bytes(SAMPLE.read_bytes())  # the same content back: not a second run
    _age(storage.inbox / "gone.jsonl")
    back = _tick(instance, storage, after.cursor)
    assert not back.run_requests and "sig" in _state(storage, back.cursor)["gone"]


def _fingerprint(content):
    """The sensor's fingerprint of a run file with no sidecar: the SHA-256 of its bytes."""
    return hashlib.sha256(content).hexdigest()


def _state_files(storage):
    return sorted(p.name for p in sensor_state.state_dir(storage).iterdir())


def test_the_cursor_names_the_memory_and_stays_short_however_many_runs(storage, instance):
    storage.inbox.mkdir(parents=True)
    for n in range(60):
        (storage.inbox / f"run{n:02d}.jsonl").write_bytes(SAMPLE.read_bytes())
        _age(storage.inbox / f"run{n:02d}.jsonl")
    first = _tick(instance, storage, None)
    assert len(first.run_requests) == 60
    digest = hashlib.sha256((sensor_state.state_dir(storage) / _state_files(storage)[0]).read_bytes()).hexdigest()
    assert first.cursor == f"state:{digest}"  # 70 bytes; the memory itself is 60 entries
    assert sorted(_state(storage, first.cursor)) == [f"run{n:02d}" for n in range(60)]
    path = sensor_state.state_dir(storage) / f"{digest}.json"
    written = path.stat().st_mtime_ns
    quiet = _tick(instance, storage, first.cursor)
    assert quiet.cursor == first.cursor and not quiet.run_requests
    assert _state_files(storage) == [f"{digest}.json"] and path.stat().st_mtime_ns == written  # nothing written


def test_a_cursor_of_an_earlier_version_holding_the_memory_itself_is_read(storage, instance):
    storage.inbox.mkdir(parents=True)
    (storage.inbox / "old.jsonl").write_bytes(SAMPLE.read_bytes())
    _age(storage.inbox / "old.jsonl")
    first = _tick(instance, storage, None)
    inline = orjson.dumps(_state(storage, first.cursor), option=orjson.OPT_SORT_KEYS).decode()
    assert inline.startswith('{"old":{')  # what the cursor itself held before
    again = _tick(instance, storage, inline)
    assert not again.run_requests and again.cursor == first.cursor


def test_a_tick_that_failed_leaves_the_cursor_before_it_readable(storage, instance):
    """Dagster keeps the old cursor when a tick fails: the file it names must still be there, even after
    the state changed more times than the files kept."""
    storage.inbox.mkdir(parents=True)
    run = storage.inbox / "busy.jsonl"
    run.write_bytes(SAMPLE.read_bytes())
    _age(run)
    first = _tick(instance, storage, None)
    cursor = first.cursor
    for n in range(sensor_state.KEEP + 4):
        run.write_bytes(SAMPLE.read_bytes() + b'{"prompt": "p%d", "final_text": "ok", "reward": 1}\n' % n)
        _age(run)
        failed = _tick(instance, storage, cursor)  # its cursor is dropped, as if the tick had failed
        assert len(failed.run_requests) == 1
    assert _state(storage, cursor) == _state(storage, first.cursor)
    assert len(_state_files(storage)) <= sensor_state.KEEP + 2


def test_a_lost_memory_is_said_and_the_sensor_starts_again(storage, instance):
    storage.inbox.mkdir(parents=True)
    (storage.inbox / "a.jsonl").write_bytes(SAMPLE.read_bytes())
    _age(storage.inbox / "a.jsonl")
    first = _tick(instance, storage, None)
    for path in sensor_state.state_dir(storage).iterdir():
        path.unlink()
    said = []
    import dagster as dg
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"storage": storage}) as context:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(context.log, "warning", said.append)
            again = inbox_sensor(context)
    assert said == [f"its memory of the inbox, {sensor_state.state_dir(storage) / first.cursor[6:]}.json, is gone "
                    "(was the storage root moved or cleaned?): every inbox file is hashed again; content "
                    "raw_simulation_data already read is not requested again"]
    assert again.cursor == first.cursor  # the same memory, written again
    assert _state(storage, again.cursor) == _state(storage, first.cursor)


@pytest.mark.parametrize("cursor", ["not json", "[1, 2]", "state:" + "0" * 64, '{"a": 1}', "state:" + "0" * 300,
                                    '{"a": {"n": "x"}}'])
def test_a_cursor_this_sensor_cannot_read_is_said_and_the_sensor_starts_again(storage, instance, cursor):
    """Set by hand (the UI offers it): an object that is not this sensor's memory, or a name no file can have,
    failed every tick (AttributeError, "File name too long") instead of starting again."""
    storage.inbox.mkdir(parents=True)
    sensor_state.state_dir(storage).mkdir(parents=True)  # as after the sensor's first tick
    (storage.inbox / "a.jsonl").write_bytes(SAMPLE.read_bytes())
    _age(storage.inbox / "a.jsonl")
    state, lost = sensor_state.load(storage, cursor)
    assert state == {} and lost
    result = _tick(instance, storage, cursor)
    assert [r.partition_key for r in result.run_requests] == ["a"]
    assert sorted(_state(storage, result.cursor)) == ["a"]
