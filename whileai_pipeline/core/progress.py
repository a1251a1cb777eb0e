"""Progress of long work: rows done and rows/s, reported at a steady interval, never per row.

The exporters take ``progress=``, any callable of the number of rows done so far; they call it every
``EVERY_ROWS`` rows and once at the end. ``Progress`` turns those calls into a line every
``interval`` seconds (for a log) and, when a terminal bar is attached, a live bar.
"""

import time

from .settings import seconds_from_env

EVERY_ROWS = 500
ENV_INTERVAL = "WHILEAI_PIPELINE_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 10.0

_bar_factory = None  # set by the CLI on a terminal: a callable(what) -> a tqdm-like bar


def attach_terminal_bars(factory) -> None:
    """Show a bar per stage through ``factory(what)`` (the CLI does this when stdout is a terminal)."""
    global _bar_factory
    _bar_factory = factory


def env_interval() -> float:
    """``$WHILEAI_PIPELINE_PROGRESS_SECONDS``, or the default; a bad value says what it must be."""
    return seconds_from_env(ENV_INTERVAL, DEFAULT_INTERVAL,
                            f"between progress lines; 0 logs every {EVERY_ROWS} rows; unset: every "
                            f"{DEFAULT_INTERVAL:g} s")


class Progress:
    """``progress(n)`` callable: logs ``what: n rows, r rows/s`` at most every ``interval`` seconds."""

    def __init__(self, what, log=None, interval=None):
        self.what = what
        self.log = log
        self.interval = env_interval() if interval is None else interval
        self.started = self.last = time.monotonic()
        self.done = 0
        self.bar = _bar_factory(what) if _bar_factory is not None else None

    def __call__(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.done)
        self.done = done
        now = time.monotonic()
        if self.log is not None and now - self.last >= self.interval:
            self.last = now
            self.log(self.line(now))

    def line(self, now=None) -> str:
        elapsed = (now or time.monotonic()) - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        return f"{self.what}: {self.done:,} rows done, {rate:,.0f} rows/s, {elapsed:.1f}s"

    def close(self, done=None) -> None:
        """Finish: ``done`` is the final count when the last ``tick`` fell between reports."""
        if done is not None and done != self.done:
            self(done)
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.log is not None:
            self.log(self.line() + " (finished)")


def tick(progress, done):
    """Call ``progress(done)`` every EVERY_ROWS rows (cheap enough for the hot loop)."""
    if progress is not None and done % EVERY_ROWS == 0:
        progress(done)


def check_progress(progress):
    """Refuse a ``progress`` that cannot be called, before any work: the exporters call it only every
    EVERY_ROWS rows and at the end, where it fails as a bare "'int' object is not callable"."""
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable of the number of rows done (e.g. progress=print), or None, "
                        f"got {type(progress).__name__} {progress!r:.60}")
