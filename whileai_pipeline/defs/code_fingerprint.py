"""A fingerprint of the code that writes the export files, recorded with each export.

The nightly schedule skips a run whose exports would come out byte for byte the same; the code is one
of the things they depend on. The published bytes depend on this package's Python files, on Python's
minor version (``unicodedata``, float formatting) and on orjson's version (every line is its output),
and on nothing else installed: the library imports only the standard library and orjson. Dagster's
version changes no exported byte, so it is left out.
"""

import functools
import hashlib
import sys
from pathlib import Path

import orjson

import whileai_pipeline


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 over the installed package's ``.py`` files (relative path and bytes, sorted by path), Python's
    ``major.minor`` and orjson's version. Computed once per process: the code server asks at every schedule
    tick and each run worker once per export; the package is some 500 KB to read."""
    root = Path(whileai_pipeline.__file__).resolve().parent
    digest = hashlib.sha256()
    digest.update(f"python {sys.version_info[0]}.{sys.version_info[1]}\0orjson {orjson.__version__}\0".encode())
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        if "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        # the length first, so no file's bytes can pass for the next one's name
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()
