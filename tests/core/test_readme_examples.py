"""The README's library examples run as written."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "README.md"


def _library_blocks():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Library use", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_library_examples_run(capsys):
    blocks = _library_blocks()
    assert len(blocks) >= 4
    namespace = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "'field': 'reference'" in out          # the leak example printed what the gate caught
    assert namespace["report"]["n_written"] == 4
