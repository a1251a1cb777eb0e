"""Differential conformance suite against the reference implementation (whileai 0.105).

Run: ``python3 -m pytest tests/conformance -q`` (needs ``pip install -e ".[conformance]"``).
Every test module skips itself, with a visible reason, when whileai is not installed.
"""

import sys
from pathlib import Path

# The helper modules (conformance_harness, conformance_strategies) live beside the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))
