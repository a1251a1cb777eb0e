"""The deploy/ files agree with each other and with the code location (no server needed).

The two dagster.yaml variants, the Helm values and the workspace files repeat the same few facts (the
Postgres driver, the per-run queue limit, the module and location name); these tests keep them from
drifting apart. The one that loads deploy/distributed/definitions.py needs the deploy extra.
"""

from pathlib import Path

import pytest
import yaml

from .conftest import DEPLOY, REPO

QUEUE_LIMIT = [{"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}]


def _yaml(path):
    return yaml.safe_load(Path(path).read_text())


@pytest.mark.parametrize("variant", ["postgres", "distributed"])
def test_dagster_yaml_postgres_storage_with_explicit_driver_and_the_queue_limit(variant):
    cfg = _yaml(DEPLOY / variant / "dagster.yaml")
    db = cfg["storage"]["postgres"]["postgres_db"]
    assert db["scheme"] == "postgresql+psycopg2"
    assert {k: db[k] for k in ("hostname", "port", "username", "password", "db_name")} == {
        "hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USERNAME"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"}}
    coordinator = cfg["run_coordinator"]
    assert coordinator["class"] == "QueuedRunCoordinator"
    assert coordinator["config"]["tag_concurrency_limits"] == QUEUE_LIMIT
    assert cfg["run_launcher"]["class"] == "DefaultRunLauncher"


def test_both_variants_share_storage_and_queue():
    a, b = (_yaml(DEPLOY / v / "dagster.yaml") for v in ("postgres", "distributed"))
    assert a["storage"] == b["storage"]
    assert a["run_coordinator"] == b["run_coordinator"]
    assert a["run_monitoring"] == b["run_monitoring"]
    assert a["run_retries"] == b["run_retries"]


# The retry daemon on; a run is retried only as its job's tags say (defs/automation.py RETRY_TAGS):
# runs without them (assets materialized from the UI) not at all, and never after a step failure.
RUN_RETRIES = {"enabled": True, "max_retries": 0, "retry_on_asset_or_op_failure": False}


def test_run_retries_are_on_in_every_variant():
    for variant in ("postgres", "distributed"):
        cfg = _yaml(DEPLOY / variant / "dagster.yaml")
        assert cfg["run_retries"] == RUN_RETRIES, variant
        assert cfg["run_monitoring"]["enabled"] is True, variant
    daemon = _yaml(DEPLOY / "helm" / "values.yaml")["dagsterDaemon"]
    assert daemon["runRetries"] == {"enabled": True, "maxRetries": 0, "retryOnAssetOrOpFailure": False}
    # a dead run pod fails its run (then retried as a new run), not resumed in place
    assert daemon["runMonitoring"]["enabled"] is True and daemon["runMonitoring"]["maxResumeRunAttempts"] == 0


def test_helm_values_repeat_the_same_queue_limit_driver_and_module():
    values = _yaml(DEPLOY / "helm" / "values.yaml")
    queued = values["dagsterDaemon"]["runCoordinator"]
    assert queued["type"] == "QueuedRunCoordinator"
    assert queued["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"] == QUEUE_LIMIT
    assert values["postgresql"]["postgresqlScheme"] == "postgresql+psycopg2"
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    top = _yaml(REPO / "workspace.yaml")["load_from"][0]["python_module"]
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", top["module_name"]]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    mount = {m["name"]: m["mountPath"] for m in deployment["volumeMounts"]}
    assert env["WHILEAI_PIPELINE_HOME"] == mount["whileai-data"]


def test_code_server_workspace_keeps_the_location_name():
    (entry,) = _yaml(DEPLOY / "workspace.code-server.yaml")["load_from"]
    top = _yaml(REPO / "workspace.yaml")["load_from"][0]["python_module"]
    assert entry["grpc_server"]["location_name"] == top["location_name"]
    assert entry["grpc_server"]["host"] == {"env": "WHILEAI_CODE_SERVER_HOST"}


@pytest.mark.distributed
def test_distributed_code_location_is_the_pipeline_with_the_celery_executor():
    pytest.importorskip("dagster_celery")
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster_celery.executor import CELERY_CONFIG

    from whileai_pipeline.definitions import defs as base

    from dagster._core.workspace.autodiscovery import loadable_targets_from_python_file

    path = str(DEPLOY / "distributed" / "definitions.py")
    # `-f deploy/distributed/definitions.py` with no attribute: exactly one Definitions to find
    assert [t.attribute for t in loadable_targets_from_python_file(path)] == ["defs"]
    distributed = ReconstructableRepository.for_file(path, "defs").get_definition()
    in_process = base.get_repository_def()
    assert distributed.name == in_process.name
    assert {j.name for j in distributed.get_all_jobs()} == {j.name for j in in_process.get_all_jobs()}
    assert {s.name for s in distributed.schedule_defs} == {s.name for s in in_process.schedule_defs}
    assert {s.name for s in distributed.sensor_defs} == {s.name for s in in_process.sensor_defs}
    assert set(distributed.asset_graph.get_all_asset_keys()) == set(in_process.asset_graph.get_all_asset_keys())
    assert set(distributed.asset_graph.asset_check_keys) == set(in_process.asset_graph.asset_check_keys)
    chain = distributed.get_job("simulation_chain")
    assert chain.executor_def.name == "celery_steps"
    assert base.resolve_job_def("simulation_chain").executor_def.name == "in_process"

    # the worker config file is valid executor config
    cfg = _yaml(DEPLOY / "distributed" / "celery.yaml")["execution"]["config"]
    assert set(cfg) <= set(CELERY_CONFIG)
    assert cfg["broker"] == {"env": "DAGSTER_CELERY_BROKER_URL"}
