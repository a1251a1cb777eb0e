"""Re-exporting the same run night after night leaves the storage root as it was, refused or not.

Each refused re-export used to keep a new ``rejected/<run>/<time>-<id>-<kind>/`` folder with a full copy
of the candidates: a run left refused for a month held 30 copies of its training files.
"""

import pytest

from .conftest import bad_arguments_rows, leaking_rows, materialization, tree_bytes

pytestmark = pytest.mark.pipeline

EXPORTS = ["sft_export", "dpo_export"]


def _files(root):
    """Every file under the storage root but Dagster's own instance, by path."""
    return {path for path in tree_bytes(root) if not path.startswith("dagster_home")}


def test_repeated_re_exports_of_a_good_run_leave_the_same_files(published):
    chain, key, before = published
    files = _files(chain.storage.base)
    for _ in range(3):
        result = chain.materialize(key, selection=EXPORTS)
        assert result.success and materialization(result, "sft_export")["status"].value == "unchanged"
    assert _files(chain.storage.base) == files
    assert tree_bytes(chain.storage.published_dir(key)) == before


def test_the_same_refusal_night_after_night_is_kept_once(published):
    chain, key, before = published
    rows, _ = leaking_rows()
    chain.register(rows)
    first = chain.materialize(key)
    assert not first.success
    refused = {kind: materialization(first, kind)["rejected_path"].value for kind in EXPORTS}
    files = _files(chain.storage.base)
    kept = tree_bytes(chain.storage.rejected_root(key))
    for _ in range(3):
        again = chain.materialize(key, selection=EXPORTS)
        assert not again.success
        for kind in EXPORTS:  # each refusal names the folder that holds its candidate
            assert materialization(again, kind)["rejected_path"].value == refused[kind]
            assert materialization(again, kind)["status"].value == "rejected"
    assert _files(chain.storage.base) == files
    assert tree_bytes(chain.storage.rejected_root(key)) == kept
    assert tree_bytes(chain.storage.published_dir(key)) == before


def test_a_different_refusal_gets_its_own_folder(published):
    chain, key, _ = published
    rows, _ = leaking_rows()
    chain.register(rows)
    leak = chain.materialize(key)
    chain.register(bad_arguments_rows()[0])
    bad_calls = chain.materialize(key)
    assert not leak.success and not bad_calls.success
    first = materialization(leak, "sft_export")["rejected_path"].value
    second = materialization(bad_calls, "sft_export")["rejected_path"].value
    assert first != second
    assert (chain.storage.base / first / "sft.openai.jsonl").is_file()
    assert b"{order_id: ORD-1001" in (chain.storage.base / second / "sft.openai.jsonl").read_bytes()
