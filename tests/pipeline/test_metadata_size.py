"""Metadata that is stored in the event log at every materialization stays small whatever the run holds.

``finish_reasons`` had one entry per distinct value: a simulator that writes its error text as the
finish reason stored one entry per row (133 KB for 4,800 rows).
"""

import copy

import pytest
from dagster_shared.serdes import serialize_value

from .conftest import materialization, sample_rows

pytestmark = pytest.mark.pipeline


def _rows_with_a_finish_reason_each(copies):
    rows = []
    for k in range(copies):
        for row in copy.deepcopy(sample_rows()):
            row["finish_reason"] = f"error: tool timed out after {len(rows)} turns"
            rows.append(row)
    return rows


def test_finish_reasons_name_the_first_values_and_count_the_rest(chain):
    from whileai_pipeline.defs.summaries import FINISH_REASONS_SHOWN, OTHER_FINISH_REASONS

    rows = _rows_with_a_finish_reason_each(2)
    key = chain.register(rows)
    result = chain.materialize(key, selection=["raw_simulation_data"])
    assert result.success
    reasons = materialization(result, "raw_simulation_data")["finish_reasons"].value
    assert len(reasons) == FINISH_REASONS_SHOWN + 1
    assert reasons[OTHER_FINISH_REASONS] == len(rows) - FINISH_REASONS_SHOWN
    assert sum(reasons.values()) == len(rows)
    assert "error: tool timed out after 0 turns" in reasons  # the first values keep their names


def test_the_raw_metadata_does_not_grow_with_distinct_finish_reasons(chain):
    sizes = []
    for copies in (1, 10):
        key = chain.register(_rows_with_a_finish_reason_each(copies), name=f"run_{copies}")
        result = chain.materialize(key, selection=["raw_simulation_data"])
        assert result.success
        metadata = materialization(result, "raw_simulation_data")
        sizes.append(len(serialize_value(metadata["finish_reasons"])))
    assert sizes[1] <= sizes[0] + 16  # ten times the rows: a larger "other" count, nothing more
