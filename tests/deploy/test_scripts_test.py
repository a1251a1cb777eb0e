"""``scripts/test`` stops when PostgreSQL does not start, and stops what it started (no server needed).

The script runs in a copy of ``scripts/`` whose helpers are stubs that record their calls: the Python that
would install and run pytest, the installers, and ``services.sh`` whose ``start`` prints a first line, as
the real one does, then fails.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

RECORD = '#!/usr/bin/env bash\necho "$(basename "$0") $*" >> "$CALLS"\n'


@pytest.mark.parametrize("starts", [False, True])
def test_scripts_test_stops_when_the_database_does_not_start(tmp_path, starts):
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copyfile(REPO / "scripts" / "test", scripts / "test")
    for name in ("install_consumers.sh", "install_chromium.sh"):
        (scripts / name).write_text(RECORD)
    (scripts / "services.sh").write_text(RECORD + 'if [ "$1" = start ]; then echo "export DAGSTER_PG_HOST=127.0.0.1"; '
                                         f'exit {0 if starts else 1}; fi\n')
    python = tmp_path / "python"
    python.write_text(RECORD)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "CALLS": str(calls), "PYTHON": str(python)}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(["bash", str(scripts / "test")], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    lines = Path(calls).read_text().splitlines()
    assert "services.sh start postgres" in lines, lines
    ran_pytest = any(line.startswith("python -m pytest") for line in lines)
    assert (proc.returncode == 0 and ran_pytest) if starts else (proc.returncode != 0 and not ran_pytest), lines
    assert lines[-1] == "services.sh stop", lines
