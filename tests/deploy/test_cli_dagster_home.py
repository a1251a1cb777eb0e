"""A ``DAGSTER_HOME`` that cannot be a folder (a file is there, or above it) is bad usage, as the CLI's other
instance errors are (docs/deploying.md, "From CI"): exit 2 with one line naming it and the file in the way, no
traceback, nothing copied. One that does not exist yet is made, and said to be new (a mistyped path would start a
history nothing else reads); a dagster.yaml that is not YAML is named as such. No server needed.
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
    where = "is a file" if where == "a_file" else f"is below {blocker}, a file"
    assert line.startswith(f"whileai-pipeline: error: DAGSTER_HOME={home} {where}, not a folder: point it at the "
                           "folder"), line  # not the advice about databases a dagster.yaml names
    assert not (root / "inbox").exists() or not any((root / "inbox").iterdir())


def test_a_new_dagster_home_is_made_and_said_to_be_new(tmp_path, monkeypatch, capsys):
    home = tmp_path / "ci" / "dagster_home"  # a CI job's first command: docs/pipeline.md "CI"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    root = tmp_path / "whileai"
    assert cli_module.main(["register", str(cli_module.SAMPLE_RUN), "--home", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"note: DAGSTER_HOME={home} did not exist: created it, with a new Dagster instance" in out
    assert list(home.rglob("*.db"))
    assert cli_module.main(["register", str(cli_module.SAMPLE_RUN), "--home", str(root)]) == 0
    assert "did not exist" not in capsys.readouterr().out  # the second command opens what the first made


def test_a_dagster_yaml_that_is_not_yaml_is_named(tmp_path, monkeypatch, capsys):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: [oops\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    code = cli_module.main(["register", str(cli_module.SAMPLE_RUN), "--home", str(tmp_path / "whileai")])
    out = capsys.readouterr()
    assert code == EXIT_USAGE, out.err
    (line,) = out.err.splitlines()
    assert line.startswith(f"whileai-pipeline: error: cannot open the Dagster instance of DAGSTER_HOME={home}")
    assert "Fix that file's YAML" in line and "DAGSTER_PG" not in line, line


def test_a_dagster_home_behind_a_folder_that_cannot_be_entered_is_bad_usage(tmp_path, monkeypatch, capsys):
    """Path.exists raises PermissionError (EACCES) on Python 3.11 for a path below a folder this user may not
    enter (root may enter any, so the error is raised here by hand)."""
    import pathlib

    locked = tmp_path / "locked"
    home = locked / "dagster_home"
    exists = pathlib.Path.exists

    def guarded(path, *args, **kwargs):
        if locked in (path, *path.parents) and path != locked:
            raise PermissionError(13, "Permission denied", str(path))
        return exists(path, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "exists", guarded)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    code = cli_module.main(["register", str(cli_module.SAMPLE_RUN), "--home", str(tmp_path / "whileai")])
    out = capsys.readouterr()
    assert code == EXIT_USAGE, out.err
    (line,) = out.err.splitlines()
    assert line.startswith(f"whileai-pipeline: error: cannot reach DAGSTER_HOME={home} (Permission denied): point "
                           "it at a folder you can write"), line
