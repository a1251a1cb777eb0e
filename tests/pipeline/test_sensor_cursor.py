"""The inbox sensor's cursor when run files leave the inbox: it forgets them, but not their versions.

The cursor holds one entry per run file in the inbox (about 139 bytes; 138 KB at 1000 runs, stored with
every tick), and a file removed from the inbox loses its entry. With it went the count of versions
seen, so A, then B, then the file removed, then A again, asked for A under its first run key, which
Dagster never launches twice: the inbox said A while the stages and exports kept B.
"""

import hashlib

import orjson
import pytest

from whileai_pipeline.defs.automation import inbox_sensor

from .conftest import SAMPLE
from .test_automation import _age, _apply, _evaluate

pytestmark = pytest.mark.pipeline

VERSION_B = SAMPLE.read_bytes() + b'{"prompt": "one more", "final_text": "ok", "reward": 1}\n'


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
    assert orjson.loads(removed.cursor) == {"night": {"n": 2}}  # its versions, not its file's signature
    run.write_bytes(SAMPLE.read_bytes())
    _age(run)
    (request,) = _tick(instance, storage, removed.cursor).run_requests
    assert request.run_key not in keys
    assert request.run_key == f"night:{hashlib.sha256(SAMPLE.read_bytes()).hexdigest()[:16]}:v3"


def test_a_run_seen_in_one_version_leaves_no_entry_when_removed(storage, instance):
    storage.inbox.mkdir(parents=True)
    for name in ("kept", "gone"):
        (storage.inbox / f"{name}.jsonl").write_bytes(SAMPLE.read_bytes())
        _age(storage.inbox / f"{name}.jsonl")
    first = _tick(instance, storage, None)
    (storage.inbox / "gone.jsonl").unlink()
    after = _tick(instance, storage, first.cursor)
    assert sorted(orjson.loads(after.cursor)) == ["kept"]
