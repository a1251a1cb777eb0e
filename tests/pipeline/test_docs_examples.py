"""The README's (and docs/consumers.md's) `whileai-pipeline validate` examples are what the command prints
for the sample exported with ``mask_mode: final``, and the consumers section's Python snippet runs as
written from where the demo was run."""

import re
from pathlib import Path

import pytest

from whileai_pipeline.cli import main

pytestmark = pytest.mark.pipeline
README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "### Checking a file before you upload or train"


def _section():
    return README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]


def _output_examples():
    """Each plain fenced block of the section that shows validate's output: its lines."""
    blocks = re.findall(r"(?m)^```(\w*)\n(.*?)^```$", _section(), flags=re.S)
    return [block.splitlines() for lang, block in blocks if not lang and block.startswith(("OK: ", "INVALID: "))]


@pytest.fixture
def demo_final(tmp_path, monkeypatch, capsys):
    """``whileai-pipeline demo`` with ``mask_mode: final``, run from ``tmp_path``: its storage root is there."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("WHILEAI_PIPELINE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "final.yaml").write_text("mask_mode: final\n")
    assert main(["demo", "--config", "final.yaml"]) == 0
    capsys.readouterr()
    return tmp_path / "whileai_data" / "published" / "support_orders"


def test_the_validate_output_examples_are_what_it_prints(demo_final, monkeypatch, capsys):
    examples = _output_examples()
    assert len(examples) >= 2
    monkeypatch.chdir(demo_final)
    for expected in examples:
        name, fmt = re.match(r"^(?:OK|INVALID): (\S+) as (\w+):", expected[0]).groups()
        code = main(["validate", name, "--format", fmt])
        assert code == (0 if expected[0].startswith("OK") else 1)
        printed = capsys.readouterr().out.splitlines()
        assert len(printed) >= len(expected)
        for want, got in zip(expected, printed):
            if want.endswith(", ..."):  # the example cuts a long line
                assert got.startswith(want[:-len("...")]), (want, got)
            else:
                assert got == want


def test_the_python_check_runs_as_written(demo_final, monkeypatch, capsys):
    monkeypatch.chdir(demo_final.parents[2])  # where the demo was run
    block = re.findall(r"(?m)^```python\n(.*?)^```$", _section(), flags=re.S)[0]
    exec(compile(block, str(README), "exec"), {})
    assert capsys.readouterr().out.startswith("OK: whileai_data/published/support_orders/sft.openai.jsonl as openai:")
