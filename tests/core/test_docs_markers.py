"""docs/pipeline.md: ``python3 -m pytest -m pipeline`` runs "only the real Dagster runs: those in
``tests/pipeline`` and the pipeline cases of ``tests/reliability``". A test module there without the
marker is silently left out of that command."""

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
DOC = TESTS.parent / "docs" / "pipeline.md"

MARKED = re.compile(r"(?m)^pytestmark\s*=.*\bpytest\.mark\.pipeline\b")
# what a module that runs Dagster uses: the ``chain`` fixture (a real instance), the CLI, or the definitions
RUNS_DAGSTER = re.compile(r"\bchain\b\.materialize|from whileai_pipeline\.cli import|"
                          r"from whileai_pipeline\.defs\b.* import|\bdef test_\w+\([^)]*\bchain\b")


def test_the_doc_still_says_what_the_marker_selects():
    text = DOC.read_text(encoding="utf-8")
    assert "`python3 -m pytest -m pipeline` (only the real Dagster runs:" in text
    assert "those in `tests/pipeline` and the pipeline cases of `tests/reliability`" in text


@pytest.mark.parametrize("module", sorted(p.name for p in (TESTS / "pipeline").glob("test_*.py")))
def test_every_module_in_tests_pipeline_is_marked_pipeline(module):
    assert MARKED.search((TESTS / "pipeline" / module).read_text(encoding="utf-8")), (
        f"tests/pipeline/{module} has no `pytestmark = pytest.mark.pipeline`: `pytest -m pipeline` skips it")


@pytest.mark.parametrize("module", sorted(p.name for p in (TESTS / "reliability").glob("test_*.py")))
def test_every_reliability_module_that_runs_dagster_is_marked_pipeline(module):
    text = (TESTS / "reliability" / module).read_text(encoding="utf-8")
    if RUNS_DAGSTER.search(text):
        assert MARKED.search(text), (
            f"tests/reliability/{module} runs Dagster but has no `pytestmark = pytest.mark.pipeline`")
