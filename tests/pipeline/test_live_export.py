"""Which files a trainer downloads, said by every export materialization and by its gate checks.

A refused re-export is a materialization too (status ``rejected``), and its ``<f>/sha256`` is the refused
candidate's, under the key a published export uses for the published file's: a CI step or a person that read
the latest materialization to learn which dataset is live got the hash of a file that was never published,
and nothing in the metadata named the files that stayed published. ``live`` names them.
"""

import hashlib

import pytest

from .conftest import check_results, leaking_rows, materialization, sample_rows, tree_bytes

pytestmark = pytest.mark.pipeline
FORMATS = ("openai", "trl")


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _live_on_disk(chain, key, kind):
    return {fmt: {"path": str(path), "sha256": _sha256(path)} for fmt in FORMATS
            if (path := chain.storage.published_path(key, kind, fmt)).is_file()}


def test_a_refused_re_export_names_the_files_that_stay_published(published):
    chain, key, before = published
    first = {asset: materialization_of(chain, key, asset) for asset in ("sft_export", "dpo_export")}
    rows, _ = leaking_rows()
    chain.register(rows)
    result = chain.materialize(key)
    assert not result.success
    assert tree_bytes(chain.storage.published_dir(key)) == before
    checks = check_results(result)
    for asset, kind in (("sft_export", "sft"), ("dpo_export", "dpo")):
        md = materialization(result, asset)
        assert md["status"].value == "rejected"
        live = md["live"].value
        assert live == _live_on_disk(chain, key, kind), asset
        for fmt in FORMATS:
            # the files that stay published are the first export's, not the refused candidate's
            assert live[fmt]["sha256"] == first[asset][f"{fmt}/sha256"].value
            assert live[fmt]["sha256"] != md[f"{fmt}/sha256"].value
        # the refused gate's result says it too, where the UI shows the failure
        leak = checks[(asset, "privileged_leak")]
        assert not leak.passed
        assert leak.metadata["live"].value == live


def test_a_published_or_unchanged_export_names_its_own_files(published):
    chain, key, _ = published
    for _ in range(2):  # published, then unchanged
        result = chain.materialize(key, selection=["sft_export", "dpo_export"])
        assert result.success
        for asset, kind in (("sft_export", "sft"), ("dpo_export", "dpo")):
            md = materialization(result, asset)
            assert md["live"].value == _live_on_disk(chain, key, kind)
            assert {fmt: v["sha256"] for fmt, v in md["live"].value.items()} == {
                fmt: md[f"{fmt}/sha256"].value for fmt in FORMATS}
    assert md["status"].value == "unchanged"


def test_nothing_to_publish_names_the_earlier_files_that_stay(published):
    chain, key, _ = published
    chain.register([{**row, "reward": 0.0} for row in sample_rows()])
    result = chain.materialize(key)
    assert result.success
    for asset, kind in (("sft_export", "sft"), ("dpo_export", "dpo")):
        md = materialization(result, asset)
        assert md["status"].value == "nothing to publish"
        assert md["live"].value == _live_on_disk(chain, key, kind) and len(md["live"].value) == 2


def test_a_first_export_refused_has_nothing_live(chain):
    key = chain.register(leaking_rows()[0])
    result = chain.materialize(key)
    assert not result.success
    assert materialization(result, "sft_export")["live"].value == {}


def materialization_of(chain, key, asset):
    import dagster as dg

    records = chain.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=1).records
    return records[0].asset_materialization.metadata
