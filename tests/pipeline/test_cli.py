"""What must be shown, point 6: ``whileai-pipeline run`` and ``demo`` as subprocesses, exit codes 0/1/2."""

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import whileai_pipeline.simulations as wai

from .conftest import SAMPLE, SAMPLE_META, leaking_rows, read_rows, sample_rows, tree_bytes, write_rows

pytestmark = pytest.mark.pipeline
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = shutil.which("whileai-pipeline")


def cli(args, home, cwd, extra_env=None):
    """Run the console script when installed (else the module) with a private storage root, importing this
    checkout: an installed console script would import the checkout it was installed from, and a relative
    ``PYTHONPATH=.`` means the test's own working directory."""
    env = {**os.environ, "WHILEAI_PIPELINE_HOME": str(home), **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("DAGSTER_HOME", None)
    if "DAGSTER_HOME" in (extra_env or {}):
        env["DAGSTER_HOME"] = extra_env["DAGSTER_HOME"]
    command = [SCRIPT] if SCRIPT else [sys.executable, "-m", "whileai_pipeline.cli"]
    return subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def test_demo_exits_0_and_prints_where_exports_went(home, tmp_path):
    proc = cli(["demo"], home, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for kind in ("sft", "dpo"):
        for fmt in ("openai", "trl"):
            path = home / "published" / "support_orders" / f"{kind}.{fmt}.jsonl"
            assert path.is_file()
            assert str(path) in proc.stdout
    # no server, no DAGSTER_HOME: an embedded SQLite instance under the storage root keeps history
    assert (home / "dagster_home").is_dir()
    assert list((home / "dagster_home").rglob("*.db"))


def test_run_then_leak_exits_1_and_keeps_published(home, tmp_path):
    src = tmp_path / "incoming" / "my_run.jsonl"
    src.parent.mkdir()
    shutil.copyfile(SAMPLE, src)
    shutil.copyfile(SAMPLE_META, src.with_name("my_run.meta.json"))
    config = tmp_path / "opts.yaml"
    config.write_text("formats: [openai]\nmask_mode: assistant\n")
    ok = cli(["run", str(src), "--config", str(config)], home, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "published" in ok.stdout and "sft.openai.jsonl" in ok.stdout
    published = tree_bytes(home / "published" / "my_run")
    assert sorted(published) == ["dpo.openai.jsonl", "dpo.openai.report.json", "sft.openai.jsonl",
                                 "sft.openai.report.json"]

    rows, _ = leaking_rows()
    write_rows(src, rows)
    blocked = cli(["run", str(src), "--config", str(config)], home, tmp_path)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "REJECTED" in blocked.stdout and "privileged_leak FAILED" in blocked.stdout
    assert "a gate blocked sft_export and dpo_export: their published files were left untouched" in blocked.stdout
    assert tree_bytes(home / "published" / "my_run") == published
    assert (home / "rejected" / "my_run").is_dir()


def test_a_first_export_refused_says_nothing_was_published(home, tmp_path):
    """The refusal line said the run's "published files were left untouched" when the gates refused its
    first export, and there were none: nothing a trainer could download."""
    src = tmp_path / "incoming" / "my_run.jsonl"
    src.parent.mkdir()
    rows, _ = leaking_rows()
    write_rows(src, rows)
    shutil.copyfile(SAMPLE_META, src.with_name("my_run.meta.json"))
    blocked = cli(["run", str(src)], home, tmp_path)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert ("a gate blocked sft_export and dpo_export: nothing was published (no earlier export of this run "
            "to keep)") in blocked.stdout, blocked.stdout
    assert not (home / "published" / "my_run").exists() or not any((home / "published" / "my_run").iterdir())


def test_bad_usage_exits_2(home, tmp_path):
    assert cli(["run", str(tmp_path / "missing.jsonl")], home, tmp_path).returncode == 2
    bad_option = tmp_path / "bad.json"
    bad_option.write_text('{"nope": 1}')
    proc = cli(["run", str(SAMPLE), "--config", str(bad_option)], home, tmp_path)
    assert proc.returncode == 2 and "unknown option" in proc.stderr
    bad_value = tmp_path / "bad.yaml"
    bad_value.write_text("mask_mode: everything\n")
    assert cli(["demo", "--config", str(bad_value)], home, tmp_path).returncode == 2
    unparseable = tmp_path / "broken.yaml"
    unparseable.write_text("formats: [openai\n")
    assert cli(["demo", "--config", str(unparseable)], home, tmp_path).returncode == 2
    assert cli(["demo", "--config", str(tmp_path / "absent.yaml")], home, tmp_path).returncode == 2
    assert cli(["frobnicate"], home, tmp_path).returncode == 2
    assert not (home / "published").exists()


def test_run_with_dagster_home_uses_that_instance(home, tmp_path):
    dagster_home = tmp_path / "dh"
    dagster_home.mkdir()
    proc = cli(["demo"], home, tmp_path, extra_env={"DAGSTER_HOME": str(dagster_home)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (home / "dagster_home").exists()
    assert list(dagster_home.rglob("*.db"))


def test_plain_dagster_cli_materialize_exits_nonzero_on_a_gate(home, tmp_path):
    """CI without our CLI: register, then `dagster asset materialize` (in-process executor)."""
    dagster_home = tmp_path / "dh"
    env = {"DAGSTER_HOME": str(dagster_home)}
    src = tmp_path / "ci_run.jsonl"
    shutil.copyfile(SAMPLE, src)
    shutil.copyfile(SAMPLE_META, tmp_path / "ci_run.meta.json")
    assert cli(["register", str(src)], home, tmp_path, extra_env=env).returncode == 0

    def materialize():
        full_env = {**os.environ, "WHILEAI_PIPELINE_HOME": str(home), **env}
        return subprocess.run(
            [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "whileai_pipeline.definitions",
             "--select", "*", "--partition", "ci_run"],
            cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=300,
        )

    ok = materialize()
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "Finished steps in process" in ok.stderr  # the code location's default executor is in-process
    published = tree_bytes(home / "published" / "ci_run")
    rows, _ = leaking_rows()
    write_rows(home / "inbox" / "ci_run.jsonl", rows)
    blocked = materialize()
    assert blocked.returncode != 0
    assert "sft_export_privileged_leak" in blocked.stderr
    assert tree_bytes(home / "published" / "ci_run") == published


def test_validate_subcommand_exit_codes(home, tmp_path):
    import whileai_pipeline.simulations as wai

    good = tmp_path / "sft.openai.jsonl"
    wai.export_dataset(SAMPLE, good)
    ok = cli(["validate", str(good), "--format", "openai"], home, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": '
                   '"function", "function": {"name": "t", "arguments": "{not json"}}]}]}\n')
    refused = cli(["validate", str(bad), "--format", "openai"], home, tmp_path)
    assert refused.returncode == 1, refused.stdout
    assert "arguments" in refused.stdout
    trl_on_openai = cli(["validate", str(good), "--format", "trl"], home, tmp_path)
    assert trl_on_openai.returncode == 1      # string arguments are not what TRL renders
    missing = cli(["validate", str(tmp_path / "nope.jsonl"), "--format", "openai"], home, tmp_path)
    assert missing.returncode == 2
    unknown = cli(["validate", str(good), "--format", "fireworks"], home, tmp_path)
    assert unknown.returncode == 2


def test_a_missing_path_and_a_directory_get_their_own_messages(home, tmp_path, monkeypatch, capsys):
    """In process: the three commands that take a file say which of the two is wrong, and exit 2."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    folder = tmp_path / "runs"
    folder.mkdir()
    for command, what, extra in (("run", "run file", []), ("register", "run file", []),
                                 ("validate", "file", ["--format", "openai"])):
        assert cli_module.main([command, str(tmp_path / "nope.jsonl"), *extra]) == 2
        err = capsys.readouterr().err
        assert f"whileai-pipeline: error: no such {what}: {tmp_path / 'nope.jsonl'} (pass " in err, err
        assert cli_module.main([command, str(folder), *extra]) == 2
        err = capsys.readouterr().err
        assert (f"whileai-pipeline: error: {folder} is a directory, not a {what}: pass a .jsonl file in it, "
                f"e.g. {folder / '<name>.jsonl'}") in err, err
    assert not (home / "inbox").exists() or list((home / "inbox").iterdir()) == []
    assert not (home / "published").exists()


def test_a_run_file_still_being_written_is_refused_before_anything_runs(home, tmp_path, monkeypatch, capsys,
                                                                       request):
    """``run`` and ``register`` copy the file into the inbox; a writer appending meanwhile would leave a
    prefix of the run there, exported as the whole. In process, to append while the copy runs."""
    from whileai_pipeline import cli as cli_module

    src = tmp_path / "growing.jsonl"
    shutil.copyfile(SAMPLE, src)
    request.getfixturevalue("writer_appends_during_copies")
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for command in ("run", "register"):
        assert cli_module.main([command, str(src)]) == 2
        err = capsys.readouterr().err
        assert (f"whileai-pipeline: error: source_changed: {src} changed while it was being copied (is it still "
                "being written?); nothing was copied. Run the same command again once it is complete.") in err, err
    inbox = home / "inbox"
    assert not inbox.exists() or list(inbox.iterdir()) == []
    assert not (home / "published").exists()


@pytest.mark.parametrize("failure", ["sqlite", "ENOSPC"])
def test_a_full_disk_under_the_storage_root_is_said_plainly(home, tmp_path, monkeypatch, capsys, failure):
    """With the storage root on a full disk, Dagster's own SQLite storage fails first (seen on a 1.2 MB
    tmpfs: "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database or disk is full" and a
    traceback). The run is stopped by that error here, as it is there."""
    import errno
    import sqlite3

    import dagster as dg
    import sqlalchemy

    from whileai_pipeline import cli as cli_module

    def full(*_args, **_kwargs):
        if failure == "sqlite":
            raise sqlalchemy.exc.OperationalError("INSERT INTO event_logs", {},
                                                  sqlite3.OperationalError("database or disk is full"))
        raise RuntimeError("step failed") from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dg.JobDefinition, "execute_in_process", full)
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert cli_module.main(["demo"]) == 1
    err = capsys.readouterr().err
    reason = "database or disk is full" if failure == "sqlite" else "No space left on device"
    assert err.startswith(f"whileai-pipeline: error: the disk holding {home.resolve()} is full ({reason}); the run "
                          "stopped."), err
    assert "Traceback" not in err

    def other(*_args, **_kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(dg.JobDefinition, "execute_in_process", other)
    with pytest.raises(RuntimeError, match="something else"):  # anything else is not hidden
        cli_module.main(["demo"])


def test_the_cli_says_which_exports_kept_earlier_files(home, tmp_path, monkeypatch):
    """In process: a new version of a run with no passing row publishes nothing and the output says
    that the files under published/ come from the earlier run."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    write_rows(src, sample_rows())
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    write_rows(src, [{**row, "reward": 0.0} for row in sample_rows()])
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    text = out.getvalue()
    for kind, asset in (("sft", "sft_export"), ("dpo", "dpo_export")):
        kept = ", ".join(str(home / "published" / "night" / f"{kind}.{fmt}.jsonl") for fmt in ("openai", "trl"))
        assert (f"  {asset}: WARNING nothing new to publish; the files there are from an earlier materialization: "
                f"{kept}\n") in text, text


def test_names_with_dots_register_distinct_runs(home, tmp_path, monkeypatch, capsys):
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for name in ("nightly.2026-01-01", "nightly.2026-01-02", "v1.5"):
        assert cli_module.main(["register", str(SAMPLE), "--name", name]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (home / "inbox").glob("*.jsonl")) == [
        "nightly.2026-01-01.jsonl", "nightly.2026-01-02.jsonl", "v1.5.jsonl"]


def test_a_name_that_makes_no_run_name_is_bad_usage_that_says_why(home, tmp_path, monkeypatch, capsys):
    """Found by a review: ``--name ""`` was ignored without a word (the file's name was used instead), and
    ``--name ...`` was refused with "use letters, digits, _ . -", dots being among those."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for command in ("run", "register"):
        for name in ("", "  "):
            assert cli_module.main([command, str(SAMPLE), "--name", name]) == 2
            assert f"--name is empty ({name!r}): give the run a name, or leave --name out" in capsys.readouterr().err
        for name in ("...", "-_-", "???"):
            assert cli_module.main([command, str(SAMPLE), f"--name={name}"]) == 2
            err = capsys.readouterr().err
            assert (f"cannot make a run name of {name!r}: it needs a letter or digit (letters, digits, _ . - are "
                    "kept, anything else becomes _, and . _ - are trimmed from both ends)") in err, err
    assert not (home / "inbox").exists() or list((home / "inbox").iterdir()) == []


def test_a_run_of_the_same_name_from_another_folder_says_which_run_it_replaces(home, tmp_path, monkeypatch, capsys):
    """Runs are named by their file: ``exp1/run.jsonl`` and ``exp2/run.jsonl`` are one partition, and the
    second replaced the first's published exports without a word."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    first, second = tmp_path / "exp1" / "night.jsonl", tmp_path / "exp2" / "night.jsonl"
    for path, rows in ((first, b'{"prompt": "one"}\n'), (second, b'{"prompt": "two"}\n')):
        path.parent.mkdir()
        path.write_bytes(rows)

    def register(path, *name):
        assert cli_module.main(["register", str(path), *name]) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    assert "note" not in register(first)
    first.write_bytes(b'{"prompt": "one, again"}\n')
    assert "note" not in register(first)  # a new version of the same run: what a re-export is for
    said = register(second)
    assert said.splitlines()[1:] == [
        f"  note: run 'night' was registered from {first.resolve()} before; this file replaces it, and this "
        "run's exports replace that one's. Pass --name to keep both."]
    assert "note" not in register(second)
    assert "note" not in register(first, "--name", "night_exp1")  # another run: it replaces nothing
    (home / "inbox" / "night.jsonl").write_bytes(b'{"prompt": "dropped in"}\n')  # not through register:
    assert "note" not in register(first)  # where that one came from is not known
    assert (home / "inbox" / "night.jsonl").read_bytes() == first.read_bytes()


def test_registering_the_inbox_copy_itself_replaces_no_run(home, tmp_path, monkeypatch, capsys):
    """``inbox/night.jsonl`` is the copy of the file registered before: given as the run, it is that run
    again, not another file replacing it."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    first = tmp_path / "exp1" / "night.jsonl"
    first.parent.mkdir()
    first.write_bytes(b'{"prompt": "one"}\n')
    for path in (first, home / "inbox" / "night.jsonl"):
        assert cli_module.main(["register", str(path)]) == 0, capsys.readouterr().err
        assert "note" not in capsys.readouterr().out


def test_a_storage_root_that_cannot_be_a_folder_is_bad_usage(home, tmp_path, monkeypatch, capsys):
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    a_file = tmp_path / "not_a_dir"
    a_file.write_text("hi")
    for args in (["run", str(SAMPLE), "--home", str(a_file)], ["register", str(SAMPLE), "--home", str(a_file)]):
        assert cli_module.main(args) == 2
        assert (f"whileai-pipeline: error: cannot keep the pipeline's files under {a_file} (a file is there, not "
                "a folder): pass --home DIR, or set $WHILEAI_PIPELINE_HOME, naming a folder you can write") \
            in capsys.readouterr().err
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(a_file / "below"))
    assert cli_module.main(["register", str(SAMPLE)]) == 2
    assert f"under {a_file / 'below'} (Not a directory)" in capsys.readouterr().err
    # a root the config file names is to be changed there: --home and $WHILEAI_PIPELINE_HOME do not override it
    config = tmp_path / "ops_root.yaml"
    config.write_text(f"ops: {{}}\nresources:\n  storage:\n    config:\n      root: {a_file}\n")
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config)]) == 2
    assert (f"whileai-pipeline: error: cannot keep the pipeline's files under {a_file} (a file is there, not a "
            f"folder): change resources.storage.config.root in the config file {config} (or take it out and pass "
            "--home DIR), naming a folder you can write") in capsys.readouterr().err
    # ... or, where the file reads it from a variable ({env: NAME}), that variable is to be set
    config.write_text("ops: {}\nresources:\n  storage:\n    config:\n      root: {env: MY_ROOT}\n")
    monkeypatch.setenv("MY_ROOT", str(a_file))
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config)]) == 2
    assert (f"under {a_file} (a file is there, not a folder): set $MY_ROOT, which resources.storage.config.root in "
            f"the config file {config} reads, naming a folder you can write") in capsys.readouterr().err


def test_a_step_that_raises_is_reported_with_its_own_error(home, tmp_path, monkeypatch):
    """Not Dagster's 'Error occurred while executing op': the error the step raised."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "down_scorer.py").write_text("def score(row):\n    raise RuntimeError('the scorer service is down')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "opts.yaml"
    config.write_text("scorer: down_scorer:score\n")
    out = io.StringIO()
    assert run_chain(SAMPLE, config_file=config, home=home, out=out) == 1
    assert (f"  step scored_simulation_data failed: scorer down_scorer:score failed on {SAMPLE}:1: "
            f"RuntimeError: the scorer service is down (raised at {tmp_path / 'down_scorer.py'}:2 in score). Fix "
            "the scorer (or set another one in the run config) and "
            "materialize again; the scored stage is unchanged.\n") in out.getvalue()


def test_a_run_no_row_of_which_is_graded_says_why_in_the_summary(home, tmp_path, monkeypatch):
    """Found by a review: `reference_match` on rows with no reference graded nothing; the run exited 0 with
    `nothing written (0 rows; nothing to publish)` for every format and no word on why."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    src.write_text('{"prompt": "p", "final_text": "a"}\n{"prompt": "p", "final_text": "bb"}\n')
    config = tmp_path / "opts.yaml"
    config.write_text("scorer: reference_match\n")
    out = io.StringIO()
    assert run_chain(src, config_file=config, home=home, out=out) == 0
    assert ("  scored_simulation_data: WARNING scorer reference_match graded none of the 2 rows: no row has a "
            "privileged.reference (text or a number) to compare its answer with. No row passes, so the SFT export "
            "(sft_rows: pass) and the preference pairs will be empty.\n") in out.getvalue(), out.getvalue()


def test_a_scorer_failure_after_lines_were_quarantined_names_a_line_that_holds(home, tmp_path, monkeypatch):
    """Found by a review: the raw stage was renamed to the user's file in every message, but with lines
    quarantined it is not that file byte for byte: a scorer failing on line 4 of the run was reported on
    line 3 of it (line 3 of the raw stage), a row the scorer had scored without trouble."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "picky.py").write_text(
        "def score(row):\n"
        "    if row['final_text'] == 'boom':\n"
        "        raise KeyError('answer')\n"
        "    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    src = tmp_path / "night.jsonl"
    src.write_text('{"prompt": "p", "final_text": "fine"}\nnot json\n{"prompt": "p", "final_text": "ok"}\n'
                   '{"prompt": "p", "final_text": "boom"}\n')
    config = tmp_path / "opts.yaml"
    config.write_text("on_bad_line: quarantine\nscorer: picky:score\n")
    out = io.StringIO()
    assert run_chain(src, config_file=config, home=home, out=out) == 1
    raw = home / "stages" / "night" / "raw.jsonl"
    assert raw.read_text().splitlines()[2] == '{"prompt": "p", "final_text": "boom"}'
    assert f"  step scored_simulation_data failed: scorer picky:score failed on {raw}:3: KeyError" in out.getvalue(), \
        out.getvalue()


def test_errors_name_the_files_the_user_gave_not_their_inbox_copies(home, tmp_path, monkeypatch):
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    src.write_bytes(b"".join(lines[:2] + [b'{"prompt": \n'] + lines[2:]))
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 1
    assert f"  step raw_simulation_data failed: bad_jsonl: {src}:3: " in out.getvalue(), out.getvalue()
    assert str(home / "inbox") not in out.getvalue().split("dagster run")[1]


@pytest.mark.parametrize("sidecar,said", [('{"system_prompt": ', "not valid JSON ("),
                                          ("[1, 2]", "expected a JSON object"),
                                          ('{"tools": "lookup"}', "'tools' must be a list of tool schemas")])
def test_a_bad_sidecar_is_refused_before_the_run_is_copied_into_the_inbox(home, tmp_path, monkeypatch, capsys,
                                                                          sidecar, said):
    """Exit 2, nothing ran, as for a sidecar that is a folder. It was copied into the inbox with the run, where the
    sensor watches, and the raw stage then failed on it (exit 1), leaving both there."""
    from whileai_pipeline.cli import main

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    src.write_bytes(SAMPLE.read_bytes())
    meta = src.with_name("night.meta.json")
    meta.write_text(sidecar)
    for command in ("run", "register"):
        assert main([command, str(src), "--home", str(home)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"whileai-pipeline: error: bad_sidecar: {meta}: {said}") and err.count("\n") == 1, err
        assert not (home / "inbox").exists() or os.listdir(home / "inbox") == []


def test_the_cli_says_how_many_lines_were_quarantined(home, tmp_path, monkeypatch):
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    src.write_bytes(b"".join(lines[:2] + [b"not json\n"] + lines[2:]))
    config = tmp_path / "opts.yaml"
    config.write_text("on_bad_line: quarantine\n")
    out = io.StringIO()
    assert run_chain(src, config_file=config, home=home, out=out) == 0
    assert (f"  raw_simulation_data: WARNING 1 unreadable line(s) left out, recorded in "
            f"{home / 'stages' / 'night' / 'quarantine.jsonl'}\n") in out.getvalue(), out.getvalue()


def test_a_scorer_or_judge_that_cannot_be_imported_is_bad_usage_before_anything_runs(home, tmp_path, monkeypatch,
                                                                                       capsys):
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for option, said in (("scorer: nosuchmod:score", "scorer 'nosuchmod:score': cannot import 'nosuchmod'"),
                         ("judge: json:no_such_judge", "judge 'json:no_such_judge': 'json' has no attribute")):
        config = tmp_path / "opts.yaml"
        config.write_text(option + "\n")
        assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 2
        assert f"whileai-pipeline: error: {said}" in capsys.readouterr().err
    assert not home.exists()


def test_a_scorer_or_judge_module_that_fails_as_it_is_imported_is_bad_usage(home, tmp_path, monkeypatch, capsys):
    """Found by a review: a module that raised anything but ImportError as it was imported (a RuntimeError
    for a missing API key, a SyntaxError) ended `run` with a traceback and exit 1, and failed the step with
    a bare traceback; the README promises exit 2 for a scorer or judge that cannot be imported."""
    from whileai_pipeline import cli as cli_module
    from whileai_pipeline.core.scoring import ScorerError, load_callable, resolve_scorer

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "needs_key.py").write_text("raise RuntimeError('set OPENAI_API_KEY first')\n")
    (tmp_path / "typo_scorer.py").write_text("def score(row) return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScorerError, match=r"^scorer 'needs_key:score': cannot import 'needs_key': RuntimeError: "
                                          r"set OPENAI_API_KEY first"):
        resolve_scorer("needs_key:score")
    with pytest.raises(ScorerError, match=r"^judge 'typo_scorer:score': cannot import 'typo_scorer': SyntaxError"):
        load_callable("typo_scorer:score", "judge")
    for option, said in (("scorer: needs_key:score", "scorer 'needs_key:score': cannot import 'needs_key': "
                                                     "RuntimeError: set OPENAI_API_KEY first"),
                         ("judge: typo_scorer:score", "judge 'typo_scorer:score': cannot import 'typo_scorer': "
                                                      "SyntaxError")):
        config = tmp_path / "opts.yaml"
        config.write_text(option + "\n")
        assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 2
        assert f"whileai-pipeline: error: {said}" in capsys.readouterr().err
    assert not home.exists()


def test_a_scorer_module_beside_the_user_that_cannot_be_found_says_to_put_it_on_pythonpath(home, tmp_path):
    """Found by a review: the console script does not search the working directory, so `my_scorers.py` next
    to the user was "No module named 'my_scorers'" with no word on what to do."""
    (tmp_path / "my_scorers.py").write_text("def score(row):\n    return 1\n")
    (tmp_path / "opts.yaml").write_text("scorer: my_scorers:score\n")
    # no inherited PYTHONPATH: a relative entry in it (PYTHONPATH=., as the README suggests for scorers) is the
    # test's working directory here, which would find my_scorers.py and the run would exit 0
    proc = cli(["run", str(SAMPLE), "--config", "opts.yaml"], home, tmp_path, {"PYTHONPATH": ""})
    assert proc.returncode == 2, proc.stderr
    assert ("scorer 'my_scorers:score': cannot import 'my_scorers': No module named 'my_scorers'; put the folder "
            "that holds it on PYTHONPATH (PYTHONPATH=. for the working directory)") in proc.stderr, proc.stderr
    (tmp_path / "uses_missing.py").write_text("import no_such_dependency_xyz\ndef score(row):\n    return 1\n")
    (tmp_path / "opts.yaml").write_text("scorer: uses_missing:score\n")
    proc = cli(["run", str(SAMPLE), "--config", "opts.yaml"], home, tmp_path, {"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert ("scorer 'uses_missing:score': cannot import 'uses_missing': No module named 'no_such_dependency_xyz' "
            "(in config file opts.yaml)" in proc.stderr), proc.stderr


@pytest.mark.parametrize("text, said", [
    ("ops:\n  sft_export:\n    config:\n      mask_modes: final\n",
     "unknown option 'mask_modes' under ops: sft_export: config: (did you mean 'mask_mode'?); sft_export's options: "),
    ("ops:\n  totally_other:\n    config: {}\n",  # like no asset's name: Dagster's own error
     'invalid config: Error in config for job simulation_chain\n    Error 1: Received unexpected config entry '
     '"totally_other" at path root:ops.'),
])
def test_an_unknown_key_in_an_ops_config_is_bad_usage_before_the_run_is_registered(home, tmp_path, monkeypatch,
                                                                                    capsys, text, said):
    """A typo in Dagster's ``ops:`` form exits 2 like one in the flat form, with nothing copied to the
    inbox and no partition added (a running sensor would have exported that copy with other options)."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    config = tmp_path / "typo.yaml"
    config.write_text(text)
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"whileai-pipeline: error: {said}")
    assert not (home / "inbox").exists() or not any((home / "inbox").iterdir())
    assert not (home / "dagster_home").exists() or not _partitions(home)


def _partitions(home):
    import dagster as dg

    from whileai_pipeline.defs.partitions import PARTITIONS_NAME

    with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        return instance.get_dynamic_partitions(PARTITIONS_NAME)


def test_an_execution_block_in_an_ops_config_still_runs(home, tmp_path, monkeypatch):
    """execute_in_process takes any ``execution:`` block (it runs on its own executor): the check
    before registering must not refuse what the run itself accepts."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    config = tmp_path / "exec.yaml"
    config.write_text("ops: {}\nexecution:\n  config:\n    multiprocess:\n      max_concurrent: 1\n")
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 0


@pytest.mark.parametrize("text", ["ops: [1]\n", "ops: hello\n", "ops:\n  scored_simulation_data:\n    config: [1]\n"])
def test_an_ops_config_of_the_wrong_shape_is_bad_usage(home, tmp_path, monkeypatch, capsys, text):
    """It crashed with an AttributeError traceback (exit 1) before Dagster could say what was wrong."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    config = tmp_path / "shape.yaml"
    config.write_text(text)
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 2
    assert capsys.readouterr().err.startswith("whileai-pipeline: error: ")
    assert not (home / "inbox").exists() or not any((home / "inbox").iterdir())


def test_a_storage_root_in_an_ops_config_is_where_the_run_is_registered(home, tmp_path, monkeypatch, capsys):
    """deploying.md names ``resources.storage.config.root`` as one way to set the root. The CLI copied the
    run into ``--home``/``$WHILEAI_PIPELINE_HOME`` while the steps read that root's inbox: they exported
    another, older file found there and the command said it published the one given (exit 0)."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    other = tmp_path / "other"
    write_rows(other / "inbox" / "support_orders.jsonl", sample_rows()[:6])  # an older run of that name
    config = tmp_path / "run_config.yaml"
    config.write_text(f"ops: {{}}\nresources:\n  storage:\n    config:\n      root: {other}\n")
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config)]) == 0
    published = other / "published" / "support_orders" / "sft.openai.jsonl"
    assert len(published.read_bytes().splitlines()) == sum(1 for r in sample_rows() if r["reward"] >= 0.5)
    assert (other / "inbox" / "support_orders.jsonl").read_bytes() == SAMPLE.read_bytes()
    capsys.readouterr()

    assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("whileai-pipeline: error: the config file sets resources.storage.config.root"), err


def test_values_an_ops_config_reads_from_the_environment_are_used_by_the_cli(home, tmp_path, monkeypatch, capsys):
    """Dagster's ``{env: NAME}`` in an ``ops:`` file (a text, integer or boolean option, the storage root): the
    CLI refused a scorer or a cap given so (``Input should be a valid string``, exit 2), and registered the run
    under its own root while the steps read the one the variable names."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    other = tmp_path / "other"
    monkeypatch.setenv("WAI_TEST_ROOT", str(other))
    monkeypatch.setenv("WAI_TEST_SCORER", "existing")
    monkeypatch.setenv("WAI_TEST_CAP", "200")
    config = tmp_path / "run_config.yaml"
    config.write_text("ops:\n  scored_simulation_data:\n    config:\n      scorer: {env: WAI_TEST_SCORER}\n"
                      "  sft_export:\n    config:\n      max_tool_output_chars: {env: WAI_TEST_CAP}\n"
                      "resources:\n  storage:\n    config:\n      root: {env: WAI_TEST_ROOT}\n")
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config)]) == 0, capsys.readouterr()
    assert (other / "published" / "support_orders" / "sft.openai.jsonl").is_file()
    assert not (home / "inbox").exists()
    capsys.readouterr()

    monkeypatch.setenv("WAI_TEST_SCORER", "no_such_module_here:score")  # checked as the value it reads
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("whileai-pipeline: error:") and "no_such_module_here" in err and "Traceback" not in err, err
    monkeypatch.delenv("WAI_TEST_CAP")
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "max_tool_output_chars is read from the environment variable WAI_TEST_CAP, which is not set" in err, err


def test_a_bad_cron_variable_is_bad_usage_naming_the_variable(home, tmp_path):
    """It stopped every command with Dagster's traceback, which names the schedule, not the variable."""
    proc = cli(["demo"], home, tmp_path, extra_env={"WHILEAI_PIPELINE_CRON": "every day"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("whileai-pipeline: error: $WHILEAI_PIPELINE_CRON must be a cron expression"), \
        proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_workers_variable_is_bad_usage_before_anything_runs(home, tmp_path):
    """It failed the run's first step after registering the run (exit 1), the message behind a class path."""
    proc = cli(["demo"], home, tmp_path, extra_env={"WHILEAI_PIPELINE_WORKERS": "two"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("whileai-pipeline: error: $WHILEAI_PIPELINE_WORKERS must be a whole number of "
                                  "worker processes"), proc.stderr
    assert proc.stdout == "" and not (home / "inbox").exists()


@pytest.mark.parametrize("variable,value", [("WHILEAI_PIPELINE_PROGRESS_SECONDS", "ten"),
                                            ("WHILEAI_PIPELINE_PROGRESS_SECONDS", "-1"),
                                            ("WHILEAI_PIPELINE_PROGRESS_SECONDS", "nan"),
                                            ("WHILEAI_PIPELINE_LOCK_TIMEOUT", "10m")])
def test_a_bad_seconds_variable_is_bad_usage_before_anything_runs(home, tmp_path, variable, value):
    """Each was read with a bare float() inside the first step: the run was registered, then failed with
    "could not convert string to float", which names neither the variable nor what it wants."""
    proc = cli(["demo"], home, tmp_path, extra_env={variable: value})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"whileai-pipeline: error: ${variable} must be a number of seconds"), proc.stderr
    assert proc.stdout == "" and not (home / "inbox").exists()


def test_the_cli_prints_the_warnings_a_published_export_carries(home, tmp_path, monkeypatch):
    """In process: rows saved through the SDK's export (no privileged block) and no sidecar publish with
    exit 0, and the output says what the reports warn about: no tool schemas and no system prompt for
    the trainer, and a leak gate that had nothing to read. The sample with its sidecar prints only the TRL
    DPO export's note that its sides hold tool results."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "saved.jsonl"  # no saved.meta.json beside it
    write_rows(src, [{k: v for k, v in row.items() if k != "privileged"} for row in sample_rows()])
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    text = out.getvalue()
    for asset in ("sft_export", "dpo_export"):
        assert f"  {asset}: WARNING " in text and "without tool schemas" in text, text
        assert f"  check {asset}.privileged_leak WARNING: NOTHING TO READ: " in text, text
    assert text.count("without a system prompt") == 2, text  # once per export, not once per format

    out = io.StringIO()
    assert run_chain(SAMPLE, home=home, out=out) == 0
    # the one warning left: its TRL DPO sides hold tool results, which DPOTrainer scores as the model's words
    warned = [line for line in out.getvalue().splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].startswith("  dpo_export: WARNING (trl) 7 of 8 pairs have a tool result "
                                                     "inside chosen or rejected"), out.getvalue()


def test_the_warnings_of_a_run_without_a_sidecar_name_its_sidecar_not_a_stage_file(home, tmp_path, monkeypatch):
    """Without a sidecar, the DPO export's warnings said to pass tools= and system_prompt= or to keep a
    <name>.meta.json "beside the pairs file": a CLI user passes a run file, has neither argument and never
    sees the pairs file the chain builds. They name the sidecar beside the run file given, which the next
    run takes along (and then nothing is said)."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "saved.jsonl"  # no saved.meta.json beside it
    write_rows(src, sample_rows())
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    said = [line for line in out.getvalue().splitlines() if "make tool calls but were exported without" in line]
    assert sorted(line.split(":")[0].strip() for line in said) == ["dpo_export"] * 2 + ["sft_export"] * 2, said
    sidecar = src.resolve().with_name("saved.meta.json")
    for line in said:
        assert line.endswith(f"Put system_prompt and tools in the run's sidecar {sidecar} (a JSON object beside "
                             "saved.jsonl) and run it again."), line
        assert "pairs file" not in line and "=," not in line, line
    published = home / "published" / "saved" / "dpo.openai.report.json"
    assert all("pairs file" not in w for w in orjson.loads(published.read_bytes())["warnings"])

    shutil.copyfile(SAMPLE_META, sidecar)
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    assert "make tool calls" not in out.getvalue(), out.getvalue()


def _cli_lines(rows, name, home, tmp_path) -> list:
    """The CLI's output lines for the chain over ``rows`` written as run ``name``, with the sample's sidecar."""
    from whileai_pipeline.cli import run_chain

    src = tmp_path / f"{name}.jsonl"
    write_rows(src, rows)
    shutil.copyfile(SAMPLE_META, tmp_path / f"{name}.meta.json")
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    return out.getvalue().splitlines()


def _both_exports_warn(rows, name, phrase, home, tmp_path) -> list:
    """The ``_cli_lines`` that hold ``phrase``, checked to come from both the SFT and the DPO export."""
    lines = _cli_lines(rows, name, home, tmp_path)
    said = [line for line in lines if phrase in line]
    assert sorted({line.split(":")[0].strip() for line in said}) == ["dpo_export", "sft_export"], lines
    return said


def test_the_two_system_turns_warnings_say_what_to_change_in_the_run_not_an_argument(home, tmp_path, monkeypatch):
    """Rows carrying their own system message, given the run's system prompt too: the SFT and DPO exports'
    warnings said to pass system_prompt="", an argument a pipeline or CLI user does not have. They name the
    run's sidecar, where the prompt comes from."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    rows = sample_rows()
    for row in rows:
        row["messages"] = [{"role": "system", "content": "Rules of this rollout."},
                           {"role": "user", "content": row["prompt"]},
                           {"role": "assistant", "content": row["final_text"]}]
    said = _both_exports_warn(rows, "own", "two system turns", home, tmp_path)
    for line in said:
        assert 'system_prompt=""' not in line, line
        assert line.endswith(f'Take the system message out of the rows, or set "system_prompt" to "" in the run\'s '
                             f"sidecar {tmp_path.resolve() / 'own.meta.json'} to keep only the rows' own (rows "
                             "without one then have none), and run it again."), line
    for kind in ("sft", "dpo"):
        published = home / "published" / "own" / f"{kind}.openai.report.json"
        assert all('system_prompt=""' not in w for w in orjson.loads(published.read_bytes())["warnings"])


def test_the_undeclared_tool_warnings_say_to_declare_it_in_the_run_sidecar(home, tmp_path, monkeypatch):
    """Rows that call a tool the run's sidecar does not declare: the SFT and DPO exports' warnings said to add
    the schema to "the tools" (the library's tools=) or pointed to the library's validate. A pipeline or CLI
    user's tools come from the run's sidecar only: the warnings name that file."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    rows = sample_rows()
    renamed = 0
    for row in rows:  # the rows hold their messages too, which the exports read first
        for message in row["messages"]:
            for call in message.get("tool_calls") or ():
                if call["name"] == "lookup_order":
                    call["name"] = "refund_order"
                    renamed += 1
    assert renamed
    said = _both_exports_warn(rows, "calls", "do not declare", home, tmp_path)
    sidecar = tmp_path.resolve() / "calls.meta.json"
    for line in said:
        assert "refund_order" in line and "validate names" not in line, line
        assert line.endswith(f'Add the tool\'s schema to "tools" in the run\'s sidecar {sidecar}, or take those '
                             "rows out of the run, and run it again."), line
    for kind in ("sft", "dpo"):
        published = home / "published" / "calls" / f"{kind}.openai.report.json"
        warnings = orjson.loads(published.read_bytes())["warnings"]
        assert [w for w in warnings if "do not declare" in w and str(sidecar) in w], warnings


def test_a_run_where_every_row_failed_exits_0_and_its_leak_checks_do_not_blame_the_rows(home, tmp_path,
                                                                                       monkeypatch):
    """Every reward 0 and ``sft_rows: pass``: nothing to publish, and each leak check says no row was exported
    (it said to export raw trajectories instead of saved rows, and these rows do carry privileged context)."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    rows = sample_rows()
    assert all(row.get("privileged") for row in rows)
    src = tmp_path / "all_failed.jsonl"
    write_rows(src, [dict(row, reward=0.0) for row in rows])
    shutil.copy(SAMPLE_META, tmp_path / "all_failed.meta.json")
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    text = out.getvalue()
    assert "  sft_export [openai]: nothing written (0 rows; nothing to publish)" in text, text
    for asset in ("sft_export", "dpo_export"):
        assert (f"  check {asset}.privileged_leak WARNING: NOTHING TO READ: no row was exported, so no reply was "
                "written that could quote anything; the gate reads the rows of the next export that has some.\n"
                in text), text
        assert "none carried privileged context" not in text, text  # its rows carry it: the sample's do
    assert "raw trajectories" not in text, text


def test_a_format_listed_twice_is_said_once(home, tmp_path, monkeypatch, capsys):
    """The value was quoted twice: "formats lists a format twice: ['trl', 'trl'] (got ['trl', 'trl'])"."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    config = tmp_path / "opts.yaml"
    config.write_text("formats: [trl, trl]\n")
    assert cli_module.main(["run", str(SAMPLE), "--config", str(config), "--home", str(home)]) == 2
    assert capsys.readouterr().err == ("whileai-pipeline: error: bad value for sft_export: formats lists a format "
                                       f"twice, got ['trl', 'trl'] (in config file {config})\n")
    assert not home.exists()


def test_a_library_error_in_a_step_is_shown_from_its_token(home, tmp_path, monkeypatch):
    """A step that failed on one of the library's errors was shown with its class path first:
    "step raw_simulation_data failed: whileai_pipeline.core.errors.WriteFailedError: write_failed: ...",
    and a write the storage root refused gave the library's advice for an output the caller chose."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    shutil.copyfile(SAMPLE, src)
    (home / "stages").mkdir(parents=True)
    (home / "stages" / "night").write_bytes(b"")  # a file where the run's stage folder goes
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 1
    assert f"  step raw_simulation_data failed: write_failed: {home / 'stages' / 'night'}/" in out.getvalue(), \
        out.getvalue()
    assert "whileai_pipeline.core.errors" not in out.getvalue()
    # the advice is the pipeline's: the library's "choose an output directory ... then export again" is for
    # a library call, whose output the caller names
    assert (f": File exists; this step replaced no stage and no published file. Move out of the way what is "
            f"under {home} where the pipeline's folders or files go, then materialize again.") in out.getvalue()
    assert "output directory" not in out.getvalue()


def test_a_run_simulate_is_still_writing_is_refused_before_anything_runs(home, tmp_path, monkeypatch, capsys):
    """simulate writes rows as its rollouts finish and its sidecar last: a run whose progress file is not at
    "stopped" would be exported (or put in the inbox) as a part of itself. Once nothing changed for an hour
    (a simulate that was killed), or simulate says "stopped", the run goes through."""
    from whileai_pipeline import cli as cli_module

    src = tmp_path / "live.jsonl"
    shutil.copyfile(SAMPLE, src)
    progress = tmp_path / "live.jsonl.progress.json"
    progress.write_text('{"stage": "rollout", "rows": 12}')
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for command in ("run", "register"):
        assert cli_module.main([command, str(src)]) == 2
        err = capsys.readouterr().err
        assert (f"whileai-pipeline: error: {src}: simulate is still writing this run (live.jsonl.progress.json says "
                f"stage 'rollout', not 'stopped'); run this again once simulate has finished, or delete {progress} "
                "if no simulate is writing the run any more") in err, err
    assert not (home / "inbox").exists() or list((home / "inbox").iterdir()) == []
    assert not (home / "published").exists()
    then = os.stat(src).st_mtime_ns - 3700 * 10**9  # an hour without a change: a simulate killed mid-run
    for path in (src, progress):
        os.utime(path, ns=(then, then))
    assert cli_module.main(["register", str(src)]) == 0
    progress.write_text('{"stage": "stopped", "rows": 48}')
    assert cli_module.main(["register", str(src)]) == 0
    assert (home / "inbox" / "live.jsonl").read_bytes() == SAMPLE.read_bytes()


def test_a_progress_file_caught_half_rewritten_still_holds_the_run_back(home, tmp_path, monkeypatch, capsys):
    """simulate (0.105) rewrites its progress file in place: read while simulate ran, about one read in 80
    saw it cut short (not JSON). Such a read counted as "no progress file", and the half-written run went
    through; the file is read again, as simulate's next write completes it."""
    from pathlib import Path

    from whileai_pipeline import cli as cli_module

    src = tmp_path / "live.jsonl"
    shutil.copyfile(SAMPLE, src)
    progress = tmp_path / "live.jsonl.progress.json"
    progress.write_text('{"stage": "rollout", "rows": 12}')
    read_bytes, torn = Path.read_bytes, []

    def caught_mid_rewrite(self):
        data = read_bytes(self)
        if self == progress and not torn:
            torn.append(self)
            return data[:len(data) // 2]
        return data

    monkeypatch.setattr(Path, "read_bytes", caught_mid_rewrite)
    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert cli_module.main(["register", str(src)]) == 2
    assert torn
    err = capsys.readouterr().err
    assert f"{src}: simulate is still writing this run (live.jsonl.progress.json says stage 'rollout'" in err, err
    assert not (home / "inbox").exists() or list((home / "inbox").iterdir()) == []


@pytest.mark.parametrize("given, said", [
    ("x.meta.json", "x.meta.json is the sidecar of a run (its system prompt and tools), read with the run, not a "
                    "run: pass the run's .jsonl file (x.jsonl)"),
    ("x.jsonl.progress.json", "x.jsonl.progress.json is simulate's progress file of a run, not a run: pass the "
                              "run's .jsonl file (x.jsonl)"),
])
def test_a_sidecar_or_progress_file_given_as_the_run_is_bad_usage(home, tmp_path, monkeypatch, capsys, given, said):
    """It was registered as a run named ``x.meta`` and failed its raw step with ``bad_jsonl`` (exit 1)."""
    from whileai_pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_bytes(SAMPLE.read_bytes())
    (tmp_path / given).write_bytes(SAMPLE_META.read_bytes() if given.endswith("meta.json") else b'{"stage": "stopped"}')
    for command in ("run", "register"):
        assert main([command, given, "--home", str(home)]) == 2
        assert capsys.readouterr().err == f"whileai-pipeline: error: {said}\n"
    assert not (home / "inbox").exists() or os.listdir(home / "inbox") == []


def test_an_export_given_as_the_run_is_bad_usage(home, tmp_path, monkeypatch, capsys):
    """A published training file given back as a run was exported again, as conversations with their
    ``weight`` dropped (SFT) or as 0 rows (DPO), exit 0, with only a leak check's "nothing to read"."""
    from whileai_pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", str(SAMPLE), "--home", str(home)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    published = home / "published" / "support_orders"
    before = tree_bytes(home / "inbox")
    for kind in ("sft.openai", "dpo.trl"):
        given = published / f"{kind}.jsonl"
        for command in ("run", "register"):
            assert main([command, str(given), "--home", str(home)]) == 2
            assert capsys.readouterr().err == (
                f"whileai-pipeline: error: {given} is a training file this pipeline exported ({kind}.report.json "
                "beside it is its report), not a simulation run: pass the run file it was made from\n")
        report = published / f"{kind}.report.json"
        assert main(["run", str(report), "--home", str(home)]) == 2
        assert capsys.readouterr().err == (
            f"whileai-pipeline: error: {report} is the report of an export, not a run: pass the run file it was "
            "made from\n")
    assert tree_bytes(home / "inbox") == before
    # a run that happens to have a JSON file of that name beside it that is no export's report still runs
    run = tmp_path / "mine.jsonl"
    run.write_bytes(SAMPLE.read_bytes())
    (tmp_path / "mine.report.json").write_text('{"notes": "graded by hand"}')
    assert main(["register", str(run), "--home", str(home)]) == 0, capsys.readouterr().err


def test_a_config_file_given_with_a_tilde_after_equals_is_found(home, tmp_path, monkeypatch):
    """``--config=~/opts.yaml``: the shell expands no ``~`` after ``=``, and the file was "no such config file"."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "opts.yaml").write_text("formats: [openai]\n")
    out = io.StringIO()
    assert run_chain(SAMPLE, config_file="~/opts.yaml", home=home, out=out) == 0
    assert "sft_export [openai]: published" in out.getvalue() and "[trl]" not in out.getvalue(), out.getvalue()


def test_a_file_where_the_locks_folder_goes_is_said_not_a_traceback(home, tmp_path, monkeypatch, capsys):
    """``locks`` a file (or another user's folder): the command failed with FileExistsError's traceback from
    taking its lock, and a step with the same traceback from the run's partition lock."""
    from whileai_pipeline import cli as cli_module
    from whileai_pipeline.core.errors import WriteFailedError
    from whileai_pipeline.defs.resources import PipelineStorage

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home.mkdir()
    (home / "locks").write_bytes(b"")
    assert cli_module.main(["demo", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"whileai-pipeline: error: cannot take the lock {home / 'locks'}/"), err
    assert "(File exists): move away what is in the way there, or pass --home DIR" in err, err
    assert not (home / "published").exists()
    with pytest.raises(WriteFailedError, match=rf"^write_failed: {home / 'locks' / 'night.lock'}: File exists"):
        with PipelineStorage(root=str(home)).partition_lock("night"):
            pass


def test_a_pipe_or_device_is_not_called_missing(home, tmp_path, monkeypatch, capsys):
    """``run <(zcat run.jsonl.gz)`` or ``/dev/null``: the path exists, so "no such run file" would send the
    user looking for a typo; the message says it is not a regular file, and nothing runs (exit 2)."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    fifo = tmp_path / "piped.jsonl"
    os.mkfifo(fifo)
    for command, extra in (("run", []), ("register", []), ("validate", ["--format", "openai"])):
        for path in (fifo, Path(os.devnull)):
            assert cli_module.main([command, str(path), *extra]) == 2
            err = capsys.readouterr().err
            assert "no such" not in err, err
            assert f"{path} is not a regular file" in err, err
    assert not (home / "inbox").exists() or list((home / "inbox").iterdir()) == []


def test_a_reader_that_leaves_early_does_not_turn_a_refused_export_into_exit_0(home, tmp_path):
    """``whileai-pipeline run leaky.jsonl | head -1`` under ``set -o pipefail``: the reader leaves after the
    first line, the lines printed after the run then meet a closed pipe; the exit code is still the run's
    (1: a gate blocked the export), not 0, and no traceback is printed."""
    rows, _ = leaking_rows()
    src = write_rows(tmp_path / "incoming" / "leaky.jsonl", rows)
    env = {**os.environ, "WHILEAI_PIPELINE_HOME": str(home)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("DAGSTER_HOME", None)
    command = [SCRIPT] if SCRIPT else [sys.executable, "-m", "whileai_pipeline.cli"]
    proc = subprocess.Popen(command + ["run", str(src)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1, (first, err)
    assert b"run 'leaky'" in first
    assert "Traceback" not in err, err
    assert not (home / "published" / "leaky").exists()


def test_a_compressed_run_is_bad_usage_that_says_to_decompress_it(home, tmp_path, monkeypatch, capsys):
    """``run night.jsonl.gz``: read as text, its first line is "invalid UTF-8 ... Fix or remove that line",
    which sends the user to edit bytes of a gzip stream, after the compressed file was copied into the inbox
    as a run. It is refused before anything is copied, saying what it is and what to do."""
    import gzip

    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    packed = tmp_path / "night.jsonl.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    for command in ("run", "register"):
        assert cli_module.main([command, str(packed)]) == 2
        err = capsys.readouterr().err
        assert f"{packed} is gzip-compressed" in err and "decompress" in err, err
        assert "Fix or remove that line" not in err, err
    assert not (home / "inbox").exists() or list((home / "inbox").iterdir()) == []


def test_an_unset_env_variable_in_an_ops_config_is_one_clear_line_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """``root: {env: NAME}`` with NAME unset: Dagster's error carries a "Stack Trace:" of its config code; the
    CLI says which variable is unset without it, and makes no storage root (./whileai_data) on the way."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("WHILEAI_PIPELINE_HOME", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("NOT_SET_FOR_THIS_TEST", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "ops.yaml"
    config.write_text("ops: {}\nresources:\n  storage:\n    config:\n      root: {env: NOT_SET_FOR_THIS_TEST}\n")
    src = tmp_path / "my_run.jsonl"
    shutil.copyfile(SAMPLE, src)
    assert cli_module.main(["run", str(src), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "NOT_SET_FOR_THIS_TEST" in err and "is not set" in err, err
    assert "Stack Trace" not in err and 'File "' not in err, err
    assert not (tmp_path / "whileai_data").exists()


@pytest.mark.parametrize("on_bad_line", ["fail", "quarantine"])
def test_a_run_written_as_one_json_array_says_so(home, tmp_path, monkeypatch, capsys, on_bad_line):
    """``json.dump(rows, f)``: the whole run is one line holding a JSON array of rows. "expected a JSON object,
    got list. Fix or remove that line" would have the user delete the only line; the step says it is the
    whole run as one array and how to write JSONL (the library's export says as much in its warning)."""
    from whileai_pipeline import cli as cli_module

    monkeypatch.setenv("WHILEAI_PIPELINE_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "dumped.json"
    src.write_bytes(orjson_dumps(sample_rows()))
    config = tmp_path / "opts.yaml"
    config.write_text(f"on_bad_line: {on_bad_line}\n")
    assert cli_module.main(["run", str(src), "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "one JSON array" in out and "write_jsonl" in out, out


def orjson_dumps(value):
    import orjson

    return orjson.dumps(value) + b"\n"


def test_a_step_failure_after_a_good_export_says_the_earlier_exports_are_still_published(home, tmp_path,
                                                                                          monkeypatch):
    """A gate refusal says the published files were left untouched; a step that fails before the exports
    (here the raw stage, on a bad line) said only "not materialized", which leaves the user to guess
    whether the run's published files are gone, stale or half-written."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "night.jsonl"
    write_rows(src, sample_rows())
    assert run_chain(src, home=home, out=io.StringIO()) == 0
    published = tree_bytes(home / "published")
    src.write_bytes(SAMPLE.read_bytes().replace(b"\n", b"\n{not json\n", 1))
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 1
    text = out.getvalue()
    assert tree_bytes(home / "published") == published
    for kind, asset in (("sft", "sft_export"), ("dpo", "dpo_export")):
        live = ", ".join(str(home / "published" / "night" / f"{kind}.{fmt}.jsonl") for fmt in ("openai", "trl"))
        assert f"  {asset}: not materialized; the earlier export is still published: {live}\n" in text, text
    # a run's first materialization that fails has nothing published to speak of
    first = tmp_path / "first.jsonl"
    first.write_bytes(src.read_bytes())
    out = io.StringIO()
    assert run_chain(first, home=home, out=out) == 1
    assert "  sft_export: not materialized\n" in out.getvalue(), out.getvalue()
    assert "  dpo_export: not materialized\n" in out.getvalue(), out.getvalue()


def test_an_export_that_writes_nothing_says_why(home, tmp_path, monkeypatch):
    """Found by a review: a judge that called every pair a tie, or a run where every row failed, printed
    ``nothing written (0 pairs; nothing to publish)`` and no word on why; the counts were in the metadata."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "even_judge.py").write_text("def judge(a, b):\n    return {'winner': 'tie'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "opts.yaml"
    config.write_text("judge: even_judge:judge\n")
    src = tmp_path / "night.jsonl"
    write_rows(src, sample_rows())
    out = io.StringIO()
    assert run_chain(src, config_file=config, home=home, out=out) == 0
    text = out.getvalue()
    pairs = len(read_rows(home / "stages" / "night" / "pairs.jsonl"))
    assert pairs > 0
    for fmt in ("openai", "trl"):
        assert (f"  dpo_export [{fmt}]: nothing written (0 pairs; nothing to publish): the judge called all "
                f"{pairs} pairs ties, which the export drops (drop_ties)\n") in text, text

    failed = tmp_path / "all_failed.jsonl"
    write_rows(failed, [dict(row, reward=0.0) for row in sample_rows()])
    out = io.StringIO()
    assert run_chain(failed, home=home, out=out) == 0
    text = out.getvalue()
    for fmt in ("openai", "trl"):
        assert (f"  sft_export [{fmt}]: nothing written (0 rows; nothing to publish): none of the "
                f"{len(sample_rows())} rows passed ({len(sample_rows())} failed), and sft_rows: pass exports "
                "passing rows only\n") in text, text
        assert (f"  dpo_export [{fmt}]: nothing written (0 pairs; nothing to publish): preference_pairs built no "
                "pairs: 0 of ") in text, text
        assert " prompts have rollouts whose rewards differ by at least min_margin\n" in text, text

    # no row graded (reference_match with no reference to compare): it said nothing of why for SFT, and
    # "0 of 0 prompts have rollouts ..." for DPO although every row has a prompt
    ungraded = tmp_path / "ungraded.jsonl"
    write_rows(ungraded, [{"prompt": "p", "scenario_id": "s", "rollout_index": i, "reward": r, "final_text": "x" * i}
                          for i, r in enumerate([1, 0, 1, 0])])
    config = tmp_path / "match.yaml"
    config.write_text("scorer: reference_match\n")
    out = io.StringIO()
    assert run_chain(ungraded, config_file=config, home=home, out=out) == 0
    text = out.getvalue()
    for fmt in ("openai", "trl"):
        assert (f"  sft_export [{fmt}]: nothing written (0 rows; nothing to publish): none of the 4 rows passed "
                "(4 ungraded), and sft_rows: pass exports passing rows only\n") in text, text
        assert (f"  dpo_export [{fmt}]: nothing written (0 pairs; nothing to publish): preference_pairs built no "
                "pairs: none of the 4 rows has a reward to pair on (4 ungraded)\n") in text, text


def test_a_dpo_export_given_as_the_run_is_not_told_to_fix_a_line(home, tmp_path, monkeypatch):
    """The whole file is the wrong one: the advice was also the one for a broken line ("Fix or remove that line
    (each line must be one JSON object, UTF-8 encoded)"), which no line of it needs."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    rows = [{"prompt": "Where is order 5?", "scenario_id": "s", "rollout_index": i, "reward": r, "final_text": text}
            for i, (r, text) in enumerate([(1, "It shipped on Monday."), (0, "No idea.")])]
    pairs, _ = wai.build_preference_pairs(rows)
    dpo = tmp_path / "dpo.jsonl"
    wai.export_preference(pairs, dpo)
    out = io.StringIO()
    assert run_chain(dpo, home=home, out=out) == 1
    failed = [line for line in out.getvalue().splitlines() if "step raw_simulation_data failed" in line]
    assert failed == [f"  step raw_simulation_data failed: bad_jsonl: {dpo}:1: a preference pair ('chosen' and "
                      "'rejected'), not a trajectory: this file looks like a DPO export or a pairs file; pass the "
                      "simulation run the pairs were made from."], out.getvalue()


def test_one_row_and_one_pair_are_said_in_the_singular(home, tmp_path, monkeypatch):
    """'published 1 pairs -> ...' read as a typo in the one line a CI log shows of an export."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "one.jsonl"
    write_rows(src, [{"prompt": "Where is order 5?", "scenario_id": "s", "rollout_index": i, "reward": r,
                      "final_text": text} for i, (r, text) in enumerate([(1, "It shipped on Monday."),
                                                                          (0, "No idea.")])])
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    text = out.getvalue()
    for fmt in ("openai", "trl"):
        assert f"  sft_export [{fmt}]: published 1 row -> " in text, text
        assert f"  dpo_export [{fmt}]: published 1 pair -> " in text, text


def test_rows_whose_privileged_block_is_text_are_said_in_the_cli_output(home, tmp_path, monkeypatch):
    """A row whose privileged block is JSON text, not an object: the leak gates cannot read it, so a reply
    quoting it is published with the gate green (other rows were checked). The raw step warned only in its log,
    which the CLI does not print: the output and the step's metadata say it."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    rows = sample_rows()
    rows[0]["privileged"] = orjson.dumps(rows[0]["privileged"]).decode()
    said = _cli_lines(rows, "textual", home, tmp_path)
    warned = [line for line in said
              if line.startswith("  raw_simulation_data: WARNING 1 row(s) carry privileged as text")]
    assert len(warned) == 1, said
    assert warned[0].endswith("Write privileged as a JSON object (json.loads the text) and register the run "
                              "again"), said

    said = _cli_lines(sample_rows(), "objects", home, tmp_path)
    assert not [line for line in said if "privileged as text" in line], said


@pytest.mark.parametrize("argv, hint", [
    (["run", "x.jsonl", "--mask-mode", "final"], "(mask_mode is an option of the exports: put 'mask_mode: ...' in a "
     "YAML file and pass it as --config FILE; docs/pipeline.md, Options, lists them)"),
    (["demo", "--strip_think=false"], "(strip_think is an option of the exports"),
    (["register", "x.jsonl", "--min-margin", "0.5"], "(register runs nothing, so it takes no option of the exports: "
     "give min_margin to run's --config FILE)"),
    (["run", "a.jsonl", "b.jsonl"], "unrecognized arguments: b.jsonl (run takes one run file: run each one on its "
     "own)"),
    (["register", "a.jsonl", "b.jsonl", "c.jsonl"], "(register takes one run file"),
    (["register", "a.jsonl", "--config", "c.yaml"], "unrecognized arguments: --config c.yaml (register runs nothing, "
     "so it takes neither --config nor --verbose: give them to run)"),
])
def test_arguments_a_command_does_not_take_are_named_with_what_to_do(argv, hint, capsys):
    """An export option given as a flag, or a shell glob that matched two runs: argparse's usage error (exit 2),
    and what to do instead."""
    from whileai_pipeline import cli as cli_module

    with pytest.raises(SystemExit) as exited:
        cli_module.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "whileai-pipeline: error: unrecognized arguments: " in err and hint in err, err


@pytest.mark.parametrize("extra", [["--frobnicate"], ["--workers", "2"]])
def test_an_unknown_flag_of_no_known_option_gets_argparse_words_alone(capsys, extra):
    """Not even "run takes one run file": the word after an option is its value, not a second run."""
    from whileai_pipeline import cli as cli_module

    with pytest.raises(SystemExit):
        cli_module.main(["run", "x.jsonl", *extra])
    assert capsys.readouterr().err.splitlines()[-1] == ("whileai-pipeline: error: unrecognized arguments: "
                                                        + " ".join(extra))


def test_a_sidecar_with_misspelled_keys_is_said_to_have_them(home, tmp_path, monkeypatch):
    """A sidecar written with 'system' and 'tool' was read as having neither, and the warnings said to put them
    in the very file the user had written: they now name the keys that look like the two the export reads."""
    from whileai_pipeline.cli import run_chain

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    src = tmp_path / "typo.jsonl"
    write_rows(src, sample_rows())
    (tmp_path / "typo.meta.json").write_bytes(orjson.dumps({"system": "You help.", "tool": [], "model": "m1"}))
    out = io.StringIO()
    assert run_chain(src, home=home, out=out) == 0
    said = [line for line in out.getvalue().splitlines() if "make tool calls but were exported without" in line]
    assert said, out.getvalue()
    for line in said:
        assert line.endswith("The sidecar has 'system' (did you mean 'system_prompt'?), 'tool' (did you mean "
                             "'tools'?): the export reads only these two names."), line
        assert "'model'" not in line


def test_a_file_name_that_gives_no_run_name_points_to_name(tmp_path, capsys, monkeypatch):
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    nameless = tmp_path / ".jsonl"
    shutil.copyfile(SAMPLE, nameless)
    assert cli_module.main(["register", str(nameless), "--home", str(tmp_path / "root")]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "rename the file (letters, digits, _ . -) or give the run a name with --name")
    assert cli_module.main(["register", str(nameless), "--home", str(tmp_path / "root"), "--name", "night"]) == 0


@pytest.mark.parametrize("sidecar, said", [
    ({"system": "S", "tool": [], "model": "m"}, "'system' (did you mean 'system_prompt'?), 'tool' (did you mean "
     "'tools'?)"),
    ({"systemPrompt": "S", "Tools": []}, "'systemPrompt' (did you mean 'system_prompt'?), 'Tools' (did you mean "
     "'tools'?)"),
    ({"system_prompt": "S", "prompt": "p", "roles": [], "tool": []}, "'tool' (did you mean 'tools'?)"),
    ({"system_prompt": "S", "system_prompt_v2": "T", "tools": [], "tool": []}, None),  # both names there
    ({"prompt": "p", "roles": [], "model": "m"}, None),  # nothing that stands for either
])
def test_only_keys_that_stand_for_a_missing_name_are_called_misspelled(tmp_path, sidecar, said):
    from whileai_pipeline.defs.assets import _misspelled_sidecar_keys

    meta = tmp_path / "run.meta.json"
    meta.write_bytes(orjson.dumps(sidecar))
    expected = f" The sidecar has {said}: the export reads only these two names." if said else ""
    assert _misspelled_sidecar_keys(meta) == expected
