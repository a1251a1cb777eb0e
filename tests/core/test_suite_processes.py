"""How many processes ``scripts/test`` (``pytest -n auto``) starts: tests/conftest.py's xdist hook."""

import os

import pytest

from whileai_pipeline.core import parallel


@pytest.fixture(autouse=True)
def _xdist(pytestconfig):
    if not pytestconfig.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not loaded")


def _auto_workers(config):
    """What ``-n auto`` resolves to, asked through the plugin manager as xdist asks it."""
    return config.pluginmanager.hook.pytest_xdist_auto_num_workers(config=config)


def test_auto_counts_every_cpu_this_process_may_use(pytestconfig, monkeypatch, tmp_path):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/\n")
    (tmp_path / "cpu.max").write_text("max 100000\n")
    monkeypatch.setattr(parallel, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(parallel, "SELF_CGROUP", str(proc))
    monkeypatch.setattr(parallel, "SELF_MOUNTINFO", str(tmp_path / "no-mountinfo"))  # not this machine's mounts
    assert _auto_workers(pytestconfig) == len(os.sched_getaffinity(0))  # logical CPUs, not physical cores
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})  # the same on any machine
    assert _auto_workers(pytestconfig) == 3
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert _auto_workers(pytestconfig) == 1  # a one-CPU container: one test process


def test_the_xdist_variable_still_decides(pytestconfig, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "7")
    assert _auto_workers(pytestconfig) == 7
