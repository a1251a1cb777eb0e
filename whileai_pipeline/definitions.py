"""The Dagster code location: every definition assembled in one place.

Load it with ``dagster dev -w workspace.yaml`` (location ``whileai_pipeline``), ``dg check defs``,
or ``dagster asset materialize -m whileai_pipeline.definitions ...``.
"""

import dagster as dg

from whileai_pipeline.defs.assets import ASSETS
from whileai_pipeline.defs.automation import JOBS, SCHEDULES, SENSORS
from whileai_pipeline.defs.checks import CHECKS
from whileai_pipeline.defs.resources import PipelineStorage

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=CHECKS,
    jobs=JOBS,
    schedules=SCHEDULES,
    sensors=SENSORS,
    resources={"storage": PipelineStorage()},
    # The steps are a short chain of file transforms: one process is faster than a process per step.
    executor=dg.in_process_executor,
)
