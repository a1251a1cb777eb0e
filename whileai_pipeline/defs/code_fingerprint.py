"""A fingerprint of the code that writes the export files, recorded with each export.

The nightly schedule skips a run whose exports would come out byte for byte the same; the code is one
of the things they depend on. The published bytes depend on this package's files, on Python's minor
version (``unicodedata``, float formatting) and on orjson's version (every line is its output), and on
nothing else installed: the library imports only the standard library, orjson and numpy, which only
finds newlines and runs of digits in a buffer and changes no exported byte. Neither does Dagster's
version, so both are left out.

Two fingerprints, as a process can run other code than its package directory now holds (a deploy or an
edit after the process started): an export records the code its process imported (``code_fingerprint``,
taken at import), and the schedule compares it with the code a new run worker would import
(``code_fingerprint_on_disk``, read at each tick): a long-lived code server would otherwise keep the
fingerprint of its start and leave every run out after an upgrade, and a run worker would record code it
did not run.
"""

import functools
import hashlib
import secrets
import sys
from pathlib import Path

import orjson

import whileai_pipeline


def code_fingerprint_on_disk() -> str:
    """SHA-256 over every file of the installed package (relative path and bytes, sorted by path; not the
    ``__pycache__`` Python writes at import, but a sourceless ``.pyc`` or a data file, which are code
    too), Python's ``major.minor`` and orjson's version. Read again at each call: some 800 KB, 2 to 3 ms.
    A package with no file to read (imported from a zip) gives a value no other call gives: its runs
    are re-exported at every tick rather than left out on a fingerprint that cannot see a change."""
    root = Path(whileai_pipeline.__file__).resolve().parent
    digest = hashlib.sha256()
    digest.update(f"python {sys.version_info[0]}.{sys.version_info[1]}\0orjson {orjson.__version__}\0".encode())
    files = 0
    for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix()):
        if "__pycache__" in path.relative_to(root).parts or not path.is_file():
            continue
        data = path.read_bytes()
        files += 1
        # the length first, so no file's bytes can pass for the next one's name
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    if not files:
        return f"unreadable:{secrets.token_hex(16)}"
    return digest.hexdigest()


@functools.cache
def code_fingerprint() -> str:
    """``code_fingerprint_on_disk`` as this process imported the package (taken at import, below): what an
    export records, the code that wrote its files even if the package directory changed since."""
    return code_fingerprint_on_disk()


code_fingerprint()
