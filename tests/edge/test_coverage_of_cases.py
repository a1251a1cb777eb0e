"""Every spec section 9 edge case E1..E76 has at least one test named test_eNN_... here."""
from __future__ import annotations

import ast
import re
from pathlib import Path

HERE = Path(__file__).parent
NAME = re.compile(r"^test_e(\d{2})_\w+$")


def _test_names():
    names = []
    for path in sorted(HERE.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.append(node.name)
    return names


def test_every_edge_case_e1_to_e76_has_a_test():
    names = _test_names()
    numbers = {int(m.group(1)) for n in names if (m := NAME.match(n))}
    missing = sorted(set(range(1, 77)) - numbers)
    assert missing == [], f"edge cases without a test: {missing}"
    assert numbers <= set(range(1, 77)), f"unknown case numbers: {sorted(numbers - set(range(1, 77)))}"


def test_every_test_in_the_directory_names_its_case():
    stray = [n for n in _test_names() if not NAME.match(n)]
    assert stray == [], f"tests not named test_eNN_...: {stray}"
