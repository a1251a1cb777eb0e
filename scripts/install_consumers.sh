#!/usr/bin/env bash
# Install the `consumers` test extra (tests/consumers: datasets, TRL, transformers on CPU).
#
# Order matters: the CPU build of torch 2.13.0 goes in first, by its exact version, so that no later
# requirement (trl -> accelerate -> torch) can pull the multi-GB CUDA build of a newer torch. The rest
# is then installed with torch held at 2.13.0 by a constraint file. On Linux, PyPI's torch wheel is the
# CUDA build (with several GB of nvidia-* wheels), so the CPU one (2.13.0+cpu) comes from PyTorch's own
# CPU index (TORCH_INDEX_URL to use a mirror; where neither can be reached, PyPI's build, with a warning);
# other systems' PyPI wheels are already CPU builds.
#
#   bash scripts/install_consumers.sh            # into the current python3
#   PYTHON=.venv/bin/python bash scripts/install_consumers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
TORCH="torch==2.13.0"

cpu_index="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
if [ "$(uname -s)" != Linux ]; then
    "$PY" -m pip install -q "$TORCH"
elif ! "$PY" -m pip install -q "$TORCH+cpu" --index-url "$cpu_index"; then
    echo "install_consumers.sh: torch $TORCH+cpu could not be installed from $cpu_index (set TORCH_INDEX_URL" \
         "to a mirror of it); installing $TORCH from the configured index instead, which on Linux is" \
         "PyPI's CUDA build: several GB, and the tests run on the CPU all the same" >&2
    "$PY" -m pip install -q "$TORCH"
fi

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
if torch.version.cuda:
    import sys
    print(f"consumers extra: torch {torch.__version__} is a CUDA build (CUDA {torch.version.cuda}); the tests "
          "run on the CPU all the same. For the CPU build: pip uninstall torch, then run this script again "
          "where PyTorch's CPU index can be reached", file=sys.stderr)
print("consumers extra ready: " + ", ".join(f"{n} {v}" for n, v in wanted.items())
      + f" (torch build: {torch.__version__})")
PYCHECK
