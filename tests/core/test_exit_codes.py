"""The commands' exit codes are defined once, in the core library (which imports neither the CLI nor Dagster)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "whileai_pipeline"


def _assigned_exit_names(path):
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and name.id.startswith("EXIT_"):
                    names.append(name.id)
    return names


def test_exit_codes_are_defined_in_one_module():
    defined = {path.relative_to(PACKAGE).as_posix(): _assigned_exit_names(path) for path in PACKAGE.rglob("*.py")}
    defined = {path: names for path, names in defined.items() if names}
    assert defined == {"core/exit_codes.py": ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED"]}


def test_the_cli_and_validate_use_the_same_codes(tmp_path):
    import io

    from whileai_pipeline import cli
    from whileai_pipeline.core import exit_codes, openai_format

    for name in ("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED"):
        assert getattr(cli, name) == getattr(exit_codes, name)
    assert (exit_codes.EXIT_OK, exit_codes.EXIT_FAILED, exit_codes.EXIT_USAGE, exit_codes.EXIT_INTERRUPTED) == (
        0, 1, 2, 130)
    out, err = io.StringIO(), io.StringIO()
    assert openai_format.run_validate(tmp_path / "missing.jsonl", "openai", out=out, err=err) == exit_codes.EXIT_USAGE
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    assert openai_format.run_validate(bad, "openai", out=out, err=err) == exit_codes.EXIT_FAILED


def test_the_core_library_imports_no_cli():
    for path in (PACKAGE / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = ("." * node.level) + (node.module or "")
                assert "cli" not in module.split(".") and not module.startswith("dagster"), (path.name, module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] != "dagster" and not alias.name.endswith(".cli"), (
                        path.name, alias.name)
