"""Code location for the distributed deployment: the pipeline's own definitions, steps on Celery.

``whileai_pipeline.definitions`` runs every step inside the run worker (the in-process executor: the
fastest choice on one machine). This module re-exports the very same assets, checks, jobs, schedule,
sensor and resources and only swaps the executor for ``dagster_celery``'s, so each step (asset or
check) of a run becomes a Celery task that any worker listening on the broker may pick up.

Serve it as the code location (see deploy/workspace.code-server.yaml):

    dagster code-server start -h 127.0.0.1 -p 4266 --location-name whileai_pipeline \\
        -f "$PWD/deploy/distributed/definitions.py"

The path must be absolute: the code server records it in every run, and each Celery worker loads this
file from that path (a relative one only resolves for workers started in a checkout's root), so the
checkout or image must sit at the same path on every worker machine.

Start workers with the same broker (deploy/distributed/celery.yaml):

    dagster-celery worker start -A dagster_celery.app -y deploy/distributed/celery.yaml

Every process involved (code server, run workers, Celery workers) needs: this project installed
with the ``deploy`` extra, DAGSTER_HOME holding deploy/distributed/dagster.yaml and the DAGSTER_PG_*
variables (each step opens the Postgres-backed instance itself), DAGSTER_CELERY_BROKER_URL and
DAGSTER_CELERY_BACKEND_URL, and WHILEAI_PIPELINE_HOME naming the same shared folder (the steps pass
JSONL files to each other through it, not Python objects).
"""

import os

import dagster as dg
from dagster_celery import celery_executor

# The module, not its `defs`: a code location file must hold exactly one Definitions at module scope.
import whileai_pipeline.definitions as _pipeline

ENV_BROKER = "DAGSTER_CELERY_BROKER_URL"
ENV_BACKEND = "DAGSTER_CELERY_BACKEND_URL"


@dg.configured(
    celery_executor,
    config_schema={
        "broker": dg.Field(
            dg.Noneable(dg.StringSource),
            is_required=False,
            description=f"Celery broker URL. Unset: ${ENV_BROKER} of the run worker.",
        ),
        "backend": dg.Field(
            dg.Noneable(dg.StringSource),
            is_required=False,
            description=f"Celery result backend URL. Unset: ${ENV_BACKEND}, else the broker URL.",
        ),
        # Accepted so that deploy/distributed/celery.yaml stays valid run config; the settings in it
        # (late acks, visibility timeout) act in the workers, which read them from their own -y file.
        "config_source": dg.Field(
            dg.Noneable(dg.Permissive()),
            is_required=False,
            description="Additional Celery settings, as celery_executor's config_source.",
        ),
    },
)
def celery_steps(config):
    """``celery_executor`` with its broker and result backend read from the environment by default.

    Runs requested by the schedule and the sensor carry no executor config, so the URLs must come
    from somewhere else: the same variables the Helm chart and the workers use. Dagster evaluates
    this in every process that plans the run (the run worker and each Celery worker); only the run
    worker connects with it, the workers use their own -y file.
    """
    broker = config.get("broker") or os.environ.get(ENV_BROKER)
    backend = config.get("backend") or os.environ.get(ENV_BACKEND) or broker
    out = {}
    if broker:
        out["broker"] = broker
    if backend:
        out["backend"] = backend
    if config.get("config_source"):
        out["config_source"] = config["config_source"]
    return out


defs = dg.Definitions(
    assets=_pipeline.defs.assets,
    asset_checks=_pipeline.defs.asset_checks,
    jobs=_pipeline.defs.jobs,
    schedules=_pipeline.defs.schedules,
    sensors=_pipeline.defs.sensors,
    resources=_pipeline.defs.resources,
    executor=celery_steps,
)
