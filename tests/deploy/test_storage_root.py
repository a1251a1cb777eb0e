"""A process that runs steps without a storage root set (a Celery worker started without
WHILEAI_PIPELINE_HOME, docs/deploying.md step 2) looks under ./whileai_data of its own working
directory. Its step then fails on a missing stage file; the message must say that this process uses the
default root and which variable to set, not only "materialize the upstream asset first" (which a
deployer would do in vain: the stages are there, under the shared root).

Real in-process runs of the ``reexport`` job (the schedule's job) on an ephemeral instance; no server.
"""

import dagster as dg
import pytest

from whileai_pipeline.definitions import defs
from whileai_pipeline.defs.partitions import PARTITIONS_NAME
from whileai_pipeline.defs.resources import ENV_HOME, PipelineStorage

HINT = "This process has no storage root set ($WHILEAI_PIPELINE_HOME, resources.storage.config.root)"


def _failures(result):
    return {e.step_key: e.step_failure_data.user_failure_data.description
            for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE}


def _reexport(resources=None):
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, ["nightly"])
        job = defs.resolve_job_def("reexport")
        kwargs = {"resources": resources} if resources else {}
        return job.execute_in_process(instance=instance, partition_key="nightly", raise_on_error=False, **kwargs)


@pytest.fixture
def worker_cwd(tmp_path, monkeypatch):
    """The working directory of a worker started without a storage root."""
    cwd = tmp_path / "worker_cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv(ENV_HOME, raising=False)
    return cwd


@pytest.mark.parametrize("set_root", ["none", "env", "config"])
def test_missing_stage_says_when_this_process_uses_the_default_root(tmp_path, monkeypatch, set_root, worker_cwd):
    resources = None
    if set_root == "env":
        monkeypatch.setenv(ENV_HOME, str(tmp_path / "shared"))
    elif set_root == "config":
        resources = {"storage": PipelineStorage(root=str(tmp_path / "shared"))}
    result = _reexport(resources)
    assert not result.success
    failures = _failures(result)
    assert set(failures) == {"sft_export", "dpo_export"}, failures
    root = worker_cwd / "whileai_data" if set_root == "none" else tmp_path / "shared"
    for step, need in (("sft_export", "scored"), ("dpo_export", "pairs")):
        message = failures[step]
        assert message.startswith(f"missing stage file {root / 'stages' / 'nightly' / need}.jsonl: "), message
        if set_root == "none":
            assert HINT in message
            assert f"looks under ./whileai_data of its working directory, {worker_cwd / 'whileai_data'}" in message
            assert "set $WHILEAI_PIPELINE_HOME to the same shared folder in every process that runs steps" in message
        else:
            assert HINT not in message


@pytest.mark.parametrize("set_root", ["env", "config"])
def test_missing_stage_says_when_the_storage_root_is_a_relative_path(monkeypatch, set_root, worker_cwd):
    """A relative root (``WHILEAI_PIPELINE_HOME=whileai_data``, ``root: data``) is resolved against each process's
    own working directory: a Celery worker or a CI job started elsewhere than the code server looks in another
    folder. The message must say the root is relative and where this process took it, not only that the stage
    is missing (it is there, under the code server's working directory)."""
    resources = None
    if set_root == "env":
        monkeypatch.setenv(ENV_HOME, "whileai_data")
    else:
        resources = {"storage": PipelineStorage(root="whileai_data")}
    failures = _failures(_reexport(resources))
    assert set(failures) == {"sft_export", "dpo_export"}, failures
    message = failures["sft_export"]
    assert message.startswith(f"missing stage file {worker_cwd / 'whileai_data' / 'stages' / 'nightly'}"), message
    assert HINT not in message
    assert "is the relative path 'whileai_data'" in message, message
    assert f"this process's working directory, {worker_cwd}" in message, message
    assert "the same absolute path" in message, message
