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


def _backticked(text):
    return set(re.findall(r"`([^`]+)`", text))


def test_every_metadata_key_is_named_in_the_assets_section(demo_final):
    import dagster as dg

    assets = README.read_text(encoding="utf-8").split("### Assets", 1)[1].split("The report stored beside", 1)[0]
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[3] for line in assets.splitlines()
            if line.startswith("| `")}
    exports = assets.split("Export metadata", 1)[1]
    named_for_exports = {name.replace("<f>", fmt) for name in _backticked(exports) for fmt in ("openai", "trl")}
    instance = dg.DagsterInstance.from_config(str(demo_final.parents[1] / "dagster_home"))
    try:
        keys = {}
        for asset in rows:
            event = instance.get_latest_materialization_event(dg.AssetKey(asset))
            keys[asset] = set(event.asset_materialization.metadata)
    finally:
        instance.dispose()
    for asset, cell in rows.items():
        named = named_for_exports if asset in ("sft_export", "dpo_export") else _backticked(cell) | {"config"}
        assert keys[asset] <= named, f"{asset}: metadata the README does not name: {sorted(keys[asset] - named)}"
    per_format = {name for name in named_for_exports if name.startswith(("openai/", "trl/"))}
    always = per_format - {"openai/rejected_path", "trl/rejected_path"}
    assert always <= keys["sft_export"] | keys["dpo_export"], sorted(always - keys["sft_export"] - keys["dpo_export"])
