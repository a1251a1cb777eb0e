"""The raw stage's ``fingerprint`` names the content it staged, not what the inbox holds once the read ends.

Found by a review: the sidecar is snapshotted before the run is read, but the fingerprint was taken of the
inbox sidecar afterwards. A sidecar changed while a big run was read was recorded as read, so the inbox
sensor skipped that version (``_already_materialized``) and the stage kept the old system prompt and tools.
"""

import hashlib
import json

import pytest

from whileai_pipeline.defs import assets
from whileai_pipeline.defs.automation import _already_materialized
from whileai_pipeline.defs.resources import fingerprint

from .conftest import materialization

pytestmark = pytest.mark.pipeline

RAW = "raw_simulation_data"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_sidecar_changed_while_the_run_is_read_is_not_recorded_as_read(chain, monkeypatch):
    key = chain.register()
    run = chain.storage.run_path(key)
    meta = chain.storage.run_meta_path(key)
    old_meta, run_bytes = meta.read_bytes(), run.read_bytes()
    new_meta = json.dumps({"system_prompt": "a new prompt", "tools": []}).encode()
    read = assets.raw_facts

    def sidecar_rewritten_meanwhile(*args, **kwargs):
        meta.write_bytes(new_meta)  # after the sidecar's snapshot, while the run is read
        yield from read(*args, **kwargs)

    monkeypatch.setattr(assets, "raw_facts", sidecar_rewritten_meanwhile)
    result = chain.materialize(key, selection=[RAW])
    assert result.success
    staged = chain.storage.stage_path(key, "raw").with_name("raw.meta.json").read_bytes()
    assert staged == old_meta  # what was staged: the sidecar as it was snapshotted
    recorded = materialization(result, RAW)["fingerprint"].value
    # the documented fingerprint: SHA-256 of "<run sha>:<sidecar sha>", of what was staged
    assert recorded == _sha(f"{_sha(run_bytes)}:{_sha(old_meta)}".encode())
    # so the inbox's new version is not taken as already read
    assert not _already_materialized(chain.instance, key, fingerprint(run))


def test_a_sidecar_added_while_the_run_is_read_is_not_recorded_as_read(chain, monkeypatch):
    key = chain.register(meta=False)
    run = chain.storage.run_path(key)
    meta = chain.storage.run_meta_path(key)
    run_bytes = run.read_bytes()
    read = assets.raw_facts

    def sidecar_added_meanwhile(*args, **kwargs):
        meta.write_bytes(b'{"system_prompt": "late"}')
        yield from read(*args, **kwargs)

    monkeypatch.setattr(assets, "raw_facts", sidecar_added_meanwhile)
    result = chain.materialize(key, selection=[RAW])
    assert result.success
    assert not chain.storage.stage_path(key, "raw").with_name("raw.meta.json").exists()
    md = materialization(result, RAW)
    assert md["fingerprint"].value == _sha(run_bytes)  # a run without a sidecar: its own SHA-256
    assert md["sidecar"].value == "(none)"
    assert not _already_materialized(chain.instance, key, fingerprint(run))
