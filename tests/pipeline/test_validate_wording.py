"""The gates speak of ``validate`` as a pipeline user sets it: ``validate: false`` in the options file, or
``ops.<export>.config.validate`` in Dagster's run config. A pipeline user calls no Python function, so
``validate=False`` (the library's keyword argument) told them of an option they have no way to pass."""

import pytest

from whileai_pipeline.defs.checks import CHECKS

from .conftest import check_results, export_config, leaking_rows, materialization

pytestmark = pytest.mark.pipeline

GATES = ("tool_call_roundtrip", "privileged_leak")


def test_a_refusal_says_where_validate_is_set(chain):
    rows, _ = leaking_rows()
    key = chain.register(rows)
    result = chain.materialize(key)
    assert not result.success
    checks = check_results(result)
    for asset in ("sft_export", "dpo_export"):
        refused = checks[(asset, "privileged_leak")]
        assert not refused.passed
        assert "validate=" not in refused.description, refused.description
        assert f"ops.{asset}.config.validate" in refused.description, refused.description
        assert "validate: false" in refused.description, refused.description


def test_gates_let_through_say_validate_as_configured(chain):
    rows, _ = leaking_rows()
    key = chain.register(rows)
    result = chain.materialize(key, export_config(validate=False))
    assert result.success
    checks = check_results(result)
    for asset in ("sft_export", "dpo_export"):
        heading = materialization(result, asset)["summary"].value.splitlines()[0]
        assert heading.endswith("(validate: false)"), heading
        for gate in GATES:
            description = checks[(asset, gate)].description
            assert "validate=" not in description, description
            assert "validate: false" in description, description


def test_the_gates_descriptions_name_the_option_as_configured():
    for check in CHECKS:
        for spec in check.check_specs:
            assert "validate=" not in (spec.description or ""), spec.description
