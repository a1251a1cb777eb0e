"""A full disk while a refused export is kept under ``rejected/`` (its reports, its ``gates.json``) fails the
step saying the gates refused it, as a refused rename there does.

The step said only "write_failed: .../.<time>-<id>-sft.partial/gates.json: No space left on device; this
step replaced no stage and no published file": nothing on the gates' refusal, because the reports are
written through the library's atomic files, whose error is WriteFailedError, not the OSError the step
described with the refusal."""

import errno
import os

import pytest

from whileai_pipeline.core import atomic

from .conftest import leaking_rows, tree_bytes
from .test_publish_paths import SFT_CHAIN

pytestmark = pytest.mark.pipeline


def test_no_room_to_keep_a_refused_export_says_the_gates_refused_it(published, monkeypatch):
    chain, key, before = published
    rows, _ = leaking_rows()
    chain.register(rows)
    real = atomic.tempfile.mkstemp

    def no_room_under_rejected(*args, **kwargs):
        if f"{os.sep}rejected{os.sep}" in str(kwargs.get("dir")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", no_room_under_rejected)
    result = chain.materialize(key, selection=SFT_CHAIN)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key == "sft_export")
    message = failure.event_specific_data.error.message
    root = chain.storage.rejected_root(key)
    assert f"write_failed: sft export for '{key}': " in message, message
    assert ("No space left on device; the gates refused this export ({'openai': ['privileged_leak'], 'trl': "
            f"['privileged_leak']}}) and its candidate could not be kept under {root}; the published files are "
            "unchanged.") in message, message
    assert f"Free space on the disk holding {root}" in message, message
    assert tree_bytes(chain.storage.published_dir(key)) == before
    assert not root.exists() or list(root.iterdir()) == []
