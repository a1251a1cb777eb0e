"""Issue 3.7: the README's first set-up command works as written, from a clean copy of the repository.

The README's command line runs verbatim in the copy, with ``python3`` on PATH being this interpreter:
it makes the copy's own ``.venv`` and installs the package and its dependencies there. The second
command, ``bash scripts/test``, is what CI runs from a fresh clone, so CI itself shows it.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _setup_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = _setup_commands()
    assert commands == [
        "python3 -m venv .venv && . .venv/bin/activate && python3 -m pip install -e . && whileai-pipeline demo",
        "bash scripts/test",
    ]
    assert "bash scripts/test" in (REPO / ".ci" / "run").read_text()


@pytest.mark.slow
def test_first_command_from_a_clean_copy(tmp_path):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    copy = tmp_path / "whileai-pipeline"
    for name in filter(None, files.decode().split("\0")):
        src = REPO / name
        if src.is_file():
            dest = copy / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(src.read_bytes())
    bin_dir = tmp_path / "bin"  # ``python3`` is this interpreter; the command makes its own .venv from it
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "WHILEAI_PIPELINE_HOME", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    command = _setup_commands()[0]
    done = subprocess.run(["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "(success)" in done.stdout
    for kind in ("sft", "dpo"):
        for fmt in ("openai", "trl"):
            assert (copy / "whileai_data" / "published" / "support_orders" / f"{kind}.{fmt}.jsonl").is_file()
    assert (copy / "whileai_data" / "dagster_home").is_dir()    # the embedded SQLite instance
    assert (copy / ".venv" / "bin" / "whileai-pipeline").is_file()  # installed in the venv it made
