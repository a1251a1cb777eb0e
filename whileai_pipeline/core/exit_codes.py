"""The exit codes of every ``whileai-pipeline`` command, in one place.

Here in the core library (no Dagster, no CLI import) so that ``openai_format.run_validate``, the body of
``whileai-pipeline validate``, and ``cli.py`` read the same numbers.
"""

EXIT_OK = 0           # success; for ``validate``: the file has no errors (warnings allowed)
EXIT_FAILED = 1       # the run failed (a gate, a step, a full disk); for ``validate``: the file has errors
EXIT_USAGE = 2        # bad usage: missing file, bad option or config; nothing ran
EXIT_INTERRUPTED = 130  # interrupted (Ctrl-C, 128 + SIGINT)
