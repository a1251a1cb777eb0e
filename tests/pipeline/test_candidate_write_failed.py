"""A write the storage root refuses while an export writes its candidates (the biggest write of a run: a
full disk, a quota, a read-only mount), or while preference_pairs writes the pairs stage, fails the step
with the pipeline's advice, as every other write of a step does.

It was shown as the library's error for a caller who chose the output: "export_dataset: write_failed:
.../candidates/<run id>/sft.openai.jsonl: Permission denied; ... Choose an output directory you can write,
then export again", but a pipeline user chooses no output directory and exports nothing by hand: the
storage root is what to fix, then the step is materialized again.
"""

import errno
import os

import dagster as dg
import pytest

from whileai_pipeline.core import atomic

from .conftest import tree_bytes
from .test_publish_paths import SFT_CHAIN, _new_version

pytestmark = pytest.mark.pipeline

DPO_CHAIN = dg.AssetSelection.assets("raw_simulation_data", "scored_simulation_data", "preference_pairs", "dpo_export")


@pytest.mark.parametrize("code, advice", [
    (errno.ENOSPC, "Free space on the disk holding {base}"),
    (errno.EACCES, "Make {base} writable for the user running the pipeline"),
])
@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_a_candidate_the_disk_refuses_fails_the_step_with_the_pipeline_s_advice(published, monkeypatch, kind,
                                                                                code, advice):
    chain, key, before = published
    chain.register(_new_version())
    real = atomic.tempfile.mkstemp

    def refuse_candidates(*args, **kwargs):
        if "/candidates/" in str(kwargs.get("dir")):
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", refuse_candidates)
    result = chain.materialize(key, selection=SFT_CHAIN if kind == "sft" else DPO_CHAIN)
    assert not result.success
    step = f"{kind}_export"
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key == step)
    message = failure.event_specific_data.error.message
    base = chain.storage.base
    assert "write_failed: " in message, message
    assert advice.format(base=base) in message, message
    assert message.rstrip().endswith("then materialize again."), message
    assert "output directory" not in message and "export again" not in message, message
    assert tree_bytes(chain.storage.published_dir(key)) == before


def test_a_pairs_stage_the_disk_refuses_fails_the_step_with_the_pipeline_s_advice(published, monkeypatch):
    """The same for the pairs stage, which build_pairs_file writes: the library's advice was shown there too."""
    chain, key, before = published
    pairs = chain.storage.stage_path(key, "pairs")
    previous = pairs.read_bytes()
    chain.register(_new_version())
    real = atomic.tempfile.mkstemp

    def refuse_pairs(*args, **kwargs):
        if kwargs.get("prefix", "").startswith("..pairs.jsonl.incoming."):  # its temp file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", refuse_pairs)
    result = chain.materialize(key, selection=DPO_CHAIN)
    assert not result.success
    failure = next(e for e in result.all_events
                   if e.event_type_value == "STEP_FAILURE" and e.step_key == "preference_pairs")
    message = failure.event_specific_data.error.message
    assert "build_preference_pairs: write_failed: " in message, message
    assert f"No space left on device; the previous pairs are unchanged. Free space on the disk holding " \
           f"{chain.storage.base}" in message, message
    assert message.rstrip().endswith("then materialize again."), message
    assert "output directory" not in message and "export again" not in message, message
    assert pairs.read_bytes() == previous
    assert tree_bytes(chain.storage.published_dir(key)) == before
