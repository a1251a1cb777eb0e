"""The errors a new user meets first say what was wrong, where, and what to do (fresh-machine review).

Each case here printed less before: a config error without the file it came from, pydantic's raw dump
(class names, ``[type=...]``, a pydantic.dev link), a config path that is a folder called "no such
config file", ``--version`` answered with "the following arguments are required: command", and
``register --help`` with no word on its arguments.
"""

import pytest

from .conftest import SAMPLE

pytestmark = pytest.mark.pipeline


def _run(cli_module, capsys, *args):
    code = cli_module.main(list(args))
    return code, capsys.readouterr()


@pytest.mark.parametrize("text, said", [
    ("mask_mod: final\n", "unknown option(s) ['mask_mod'] (did you mean 'mask_mode' for 'mask_mod'?)"),
    ("parallel_judges: 8\n", "unknown option(s) ['parallel_judges']; known:"),  # no option is near it
    ("max_pairs_per_prompt: 0\n", "max_pairs_per_prompt must be at least 1"),
    ("min_margin: abc\n", "min_margin: Input should be a valid number"),
    ("ops:\n  sft_export:\n    config:\n      mask_modes: final\n",
     "unknown option 'mask_modes' under ops: sft_export: config: (did you mean 'mask_mode'?)"),
    # Dagster's form without its ops: section was "unknown option(s) ['resources']" and the flat options' list
    ("resources:\n  storage:\n    config:\n      root: elsewhere\n",
     "no 'ops:' section, so the file is read as flat options, but 'resources' is a key of Dagster's run config: "
     "with a top-level 'ops:' it is taken as Dagster's run config, each asset's options under ops: <asset>: "
     "config: (ops: {} when no asset option is set); or, for flat options, leave 'resources' out (--home DIR "
     "gives the storage root)"),
    ("sft_export:\n  config:\n    mask_mode: final\n",
     "no 'ops:' section, so the file is read as flat options, but 'sft_export' is an asset: with a top-level "
     "'ops:' it is taken as Dagster's run config, each asset's options under ops: <asset>: config: (here: "
     "ops.sft_export.config.mask_mode); or, for flat options, lift the options out of 'sft_export' to the top level"),
    ('{"dpo_export": {"strip_think": false}, "mask_mode": "final", "loggers": {}}',
     "but 'dpo_export' is an asset, 'loggers' is a key of Dagster's run config: with a top-level 'ops:' it is "
     "taken as Dagster's run config, each asset's options under ops: <asset>: config: (here: "
     "ops.dpo_export.config.strip_think, ops.sft_export.config.mask_mode)"),
])
def test_a_config_error_names_the_config_file(tmp_path, monkeypatch, capsys, text, said):
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    config = tmp_path / "opts.yaml"
    config.write_text(text)
    code, out = _run(cli_module, capsys, "run", str(SAMPLE), "--config", str(config), "--home", str(tmp_path / "h"))
    assert code == 2
    assert out.err.startswith("whileai-pipeline: error: ")
    assert said in out.err
    assert f"config file {config}" in out.err           # where
    assert "errors.pydantic.dev" not in out.err and "[type=" not in out.err
    assert len(out.err.splitlines()) <= 3, out.err    # one short message, not a validation dump


def test_a_config_path_that_is_a_folder_is_called_a_folder(tmp_path, monkeypatch, capsys):
    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    code, out = _run(cli_module, capsys, "run", str(SAMPLE), "--config", str(tmp_path), "--home", str(tmp_path / "h"))
    assert code == 2
    assert "is a directory, not a config file" in out.err
    assert "no such config file" not in out.err


def test_version_is_answered(capsys):
    from whileai_pipeline import __version__
    from whileai_pipeline import cli as cli_module

    with pytest.raises(SystemExit) as exit_info:
        cli_module.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"whileai-pipeline {__version__}"


def test_every_argument_of_every_subcommand_has_help():
    import argparse

    from whileai_pipeline.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help, f"whileai-pipeline {name}: {action.dest} has no help text"


def test_verbose_is_offered_only_where_it_does_something(capsys):
    """``-v`` shows Dagster's own logs of a run; ``register`` runs no job, and took ``-v`` and ignored it."""
    from whileai_pipeline.cli import build_parser

    parser = build_parser()
    for command in (["run", "x.jsonl"], ["demo"]):
        assert parser.parse_args([*command, "-v"]).verbose is True
        assert parser.parse_args(command).verbose is False
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["register", "x.jsonl", "-v"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: -v" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["register", "--help"])
    assert "--verbose" not in capsys.readouterr().out


def test_a_run_or_file_path_given_with_a_literal_tilde_is_under_the_home_folder(tmp_path, monkeypatch, capsys):
    # --config=~/x and --home=~/x were expanded (the shell expands no ~ after "=", nor in quotes), the
    # paths of run, register and validate were not: "no such run file: ~/runs/support_orders.jsonl".
    import shutil

    from whileai_pipeline import cli as cli_module

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "runs").mkdir()
    shutil.copy(SAMPLE, tmp_path / "runs" / SAMPLE.name)
    code, out = _run(cli_module, capsys, "register", f"~/runs/{SAMPLE.name}", "--home", str(tmp_path / "h"))
    assert code == 0, out.err
    assert (tmp_path / "h" / "inbox" / SAMPLE.name).read_bytes() == SAMPLE.read_bytes()
    code, out = _run(cli_module, capsys, "validate", f"~/runs/{SAMPLE.name}", "--format", "openai")
    assert code == 1 and "looks like a simulation run" in out.out, out.err   # read and checked, not "no such file"
