#!/usr/bin/env bash
# Install the `consumers` test extra (tests/consumers: datasets, TRL, transformers on CPU).
#
# Order matters: the CPU build of torch 2.13.0 goes in first, by its exact version, so that no later
# requirement (trl -> accelerate -> torch) can pull the multi-GB CUDA build of a newer torch. The rest
# is then installed with torch held at 2.13.0 by a constraint file.
#
#   bash scripts/install_consumers.sh            # into the current python3
#   PYTHON=.venv/bin/python bash scripts/install_consumers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
TORCH="torch==2.13.0"

"$PY" -m pip install -q "$TORCH"

constraint="$(mktemp)"
trap 'rm -f "$constraint"' EXIT
echo "$TORCH" > "$constraint"
"$PY" -m pip install -q -c "$constraint" -e ".[test,consumers]"

# Fail here, not later in a skipped test, when something did not land.
"$PY" - <<'PYCHECK'
import importlib
wanted = {"torch": "2.13.0", "transformers": "5.23.0", "datasets": "5.2.0", "trl": "1.16.0",
          "tokenizers": "0.23.3", "accelerate": "1.15.0"}
bad = []
for name, version in wanted.items():
    try:
        got = importlib.import_module(name).__version__
    except ImportError as exc:
        bad.append(f"{name}: not importable ({exc})")
        continue
    if got.split("+")[0] != version:
        bad.append(f"{name}: {got}, expected {version}")
if bad:
    raise SystemExit("consumers extra incomplete:\n  " + "\n  ".join(bad))
import torch
print("consumers extra ready: " + ", ".join(f"{n} {v}" for n, v in wanted.items())
      + f" (torch build: {torch.__version__})")
PYCHECK
