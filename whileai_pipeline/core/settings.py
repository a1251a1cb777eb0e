"""Settings read from the environment: a bad value is refused naming the variable and what it takes.

A bare ``float()`` of a variable fails deep inside a step with "could not convert string to float",
which names neither the variable nor what it wants.
"""

import os


def seconds_from_env(name, default, hint) -> float:
    """``$name`` as a number of seconds (0 or more), ``default`` when unset or empty; ``hint`` says what
    a value does, in the message that refuses a bad one."""
    value = os.environ.get(name)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise ValueError(f"${name} must be a number of seconds ({hint}), got {value!r}")
    return seconds
