"""Every export loads with `datasets.load_dataset("json", ...)` and comes back as written."""

import pytest

from .conftest import EXPORTS, MISSING, SKIP_REASON, read_rows

if MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

from . import hf  # noqa: E402

pytestmark = [
    pytest.mark.consumers,
    # transformers 5.23 deprecates names that trl 1.16 still calls; not ours to fix.
    pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning"),
]

CONVERSATIONAL = ("messages", "prompt", "completion", "chosen", "rejected", "tools")


@pytest.mark.parametrize("name", list(EXPORTS))
def test_load_dataset_reads_every_export(exports, hf_cache, name):
    export = exports[name]
    rows = read_rows(export["path"])
    ds = hf.load_jsonl(export["path"], hf_cache)
    assert ds.num_rows == len(rows) > 0
    assert set(rows[0]) <= set(ds.column_names)
    for i, row in enumerate(rows):
        loaded = ds[i]
        for key in CONVERSATIONAL:
            if key in row:
                # The conversation and the tools come back exactly: no key added, none dropped, arguments
                # still objects (trl) or strings (openai), no value turned into another type.
                assert loaded[key] == row[key], f"{name} row {i} key {key!r} changed on load"
