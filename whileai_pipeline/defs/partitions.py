"""One partition per simulation run; the key is the run file's sanitized name."""

import dagster as dg

PARTITIONS_NAME = "simulation_runs"

simulation_runs = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)
