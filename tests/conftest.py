"""Hooks for the whole suite."""

import os

import pytest


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist (-p no:xdist) pytest would reject it
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (``scripts/test``): one test process per CPU this process may use (``usable_cores``).

    xdist's own count is the physical cores when psutil is installed (the consumers extra brings it):
    one on a 2-vCPU machine whose two vCPUs are threads of one core, where the suite takes about
    17 minutes in one process. Most of the suite waits on the processes it starts, so every CPU it may
    run on counts, and a container's CPU quota lowers the count. ``$PYTEST_XDIST_AUTO_NUM_WORKERS``
    still decides when set (None hands over to xdist, which reads it).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from whileai_pipeline.core.parallel import usable_cores

    return usable_cores()
