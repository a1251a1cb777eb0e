"""What the docs name (options and their defaults, CLI flags, environment variables) is what the code has.

README "Options" shows every flat option with its default, the "Assets" table says which asset takes
which, the CLI's flags are named in "Your own runs" and "Checking a file", and deploy/README.md lists
every variable the code location reads."""

import inspect
import re
from pathlib import Path

import yaml

import whileai_pipeline.simulations as wai
from whileai_pipeline.cli import build_parser
from whileai_pipeline.defs.config import CONFIG_CLASSES, FLAT_OPTIONS, as_run_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(text, heading):
    return text.split(heading, 1)[1].split("\n#", 1)[0]


def test_the_options_block_shows_every_option_with_its_default():
    block = re.search(r"```yaml\n(.*?)```", _section(README, "#### Options"), flags=re.S).group(1)
    shown = yaml.safe_load(block)
    defaults = {}
    for cls in CONFIG_CLASSES.values():
        defaults.update(as_run_config(cls()))
    assert list(shown) == list(FLAT_OPTIONS)
    assert shown == defaults


def test_the_defaults_are_the_librarys_except_judge_concurrency():
    # "shown with the defaults, which are the library's, except judge_concurrency: judge_pairs itself asks 8"
    defaults = {}
    for cls in CONFIG_CLASSES.values():
        defaults.update(as_run_config(cls()))
    library = {}
    for function in (wai.export_dataset, wai.export_preference, wai.build_preference_pairs):
        library.update({name: p.default for name, p in inspect.signature(function).parameters.items()
                        if p.default is not inspect.Parameter.empty})
    for name in ("max_pairs_per_prompt", "min_margin", "length_match", "mask_mode", "unroll", "strip_think",
                 "max_tool_output_chars", "validate", "drop_ties"):
        assert defaults[name] == library[name], name
    assert defaults["judge_concurrency"] == 1
    assert inspect.signature(wai.judge_pairs).parameters["concurrency"].default == 8
    assert defaults["judge_timeout"] is None
    assert inspect.signature(wai.judge_pairs).parameters["timeout"].default is None


def test_the_assets_table_names_the_options_each_asset_takes():
    table = _section(README, "### Assets")
    for asset, cls in CONFIG_CLASSES.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{asset}` |"))
        options_cell = row.split(" | ")[2]
        assert re.findall(r"`(\w+)`", options_cell) == list(as_run_config(cls())), asset


def _flags(command):
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {flag for action in sub._actions for flag in action.option_strings}


def test_every_flag_a_documented_command_line_gives_exists():
    """A command line in the docs (``whileai-pipeline run FILE --name x``) that gives a flag the parser has
    not: the reader's copy of it would stop at "unrecognized arguments"."""
    given = {}
    for path in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"):
        for m in re.finditer(r"whileai-pipeline (run|demo|register|validate)\b([^`\n#|]*)", path.read_text("utf-8")):
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", m.group(2)):
                given.setdefault(m.group(1), set()).add(flag)
    assert given.get("run") and given.get("validate")  # the docs give flags on these command lines
    for command, flags in given.items():
        assert flags <= _flags(command), (command, sorted(flags - _flags(command)))


def test_the_cli_flags_the_docs_name():
    assert {"--config", "--name", "--home", "-v", "--verbose"} <= _flags("run")
    assert {"--config", "--home", "-v", "--verbose"} <= _flags("demo")
    assert "--home" in _flags("register") and "--name" in _flags("register")
    assert not {"-v", "--verbose"} & _flags("register")  # "register runs no Dagster job, so it has no such option"
    assert {"--format", "--json", "--strict-keys"} <= _flags("validate")


def test_deploy_readme_lists_every_variable_the_package_reads():
    read = set()
    for path in (ROOT / "whileai_pipeline").rglob("*.py"):
        read |= set(re.findall(r"\bWHILEAI_PIPELINE_[A-Z_]+\b", path.read_text(encoding="utf-8")))
    table = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8").split("| variable |", 1)[1]
    listed = {name for line in table.splitlines() if line.startswith("| `")
              for name in re.findall(r"`(WHILEAI_PIPELINE_[A-Z_]+)`", line.split(" | ")[0])}
    assert read == listed
