"""A ``DAGSTER_HOME`` that cannot be a folder (a file is there, or above it) is bad usage, as the CLI's other
instance errors are (docs/deploying.md, "From CI"): exit 2 with one line naming it, no traceback, nothing
copied. No server needed.
"""

import pytest

from whileai_pipeline import cli as cli_module
from whileai_pipeline.core.exit_codes import EXIT_USAGE


@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
@pytest.mark.parametrize("command", ["register", "run"])
def test_a_dagster_home_that_cannot_be_a_folder_is_bad_usage(tmp_path, monkeypatch, capsys, where, command):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    home = blocker if where == "a_file" else blocker / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    root = tmp_path / "whileai"
    code = cli_module.main([command, str(cli_module.SAMPLE_RUN), "--home", str(root)])
    out = capsys.readouterr()
    assert code == EXIT_USAGE, out.err
    assert "Traceback" not in out.err
    (line,) = out.err.splitlines()
    assert line.startswith(f"whileai-pipeline: error: cannot open the Dagster instance of DAGSTER_HOME={home}")
    assert not (root / "inbox").exists() or not any((root / "inbox").iterdir())
