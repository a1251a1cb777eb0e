#!/bin/bash
# The inbox sensor under Dagster's sensor timeout, with the real daemon: six hard links of one big run
# dropped into an inbox at once, the sensor's timeout cut to 4 s, and a run queue that never starts a
# run (max_concurrent_runs: 0), so only the sensor works. After about 140 s it prints how many runs
# were requested and each tick's status. Without a hashing budget every tick times out and keeps its
# old cursor, so none is ever requested.
#
#   bash bench/sensor_budget.sh bench/out/run-100000-20kb-s0.jsonl [BUDGET_SECONDS, default 2]
#
# The code under test is the one Python imports (set PYTHONPATH to try another checkout).
set -eu
RUN=$(realpath "$1"); BUDGET=${2:-2}
BASE=$(mktemp -d "$(dirname "$RUN")/sensor-budget-XXXXXX")  # beside the run: hard links need one file system
trap 'rm -rf "$BASE"' EXIT
mkdir -p "$BASE/root/inbox" "$BASE/home"
for i in 1 2 3 4 5 6; do ln "$RUN" "$BASE/root/inbox/big$i.jsonl"; done
cat > "$BASE/home/dagster.yaml" <<YAML
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 0
telemetry:
  enabled: false
YAML
export DAGSTER_HOME=$BASE/home WHILEAI_PIPELINE_HOME=$BASE/root WHILEAI_PIPELINE_SETTLE_SECONDS=0
export WHILEAI_PIPELINE_SENSOR_BUDGET_SECONDS=$BUDGET DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS=4
(cd "$BASE" && exec timeout 150 dagster-daemon run -m whileai_pipeline.definitions > daemon.log 2>&1) &
sleep 140
kill $! 2>/dev/null || true
wait || true
python - <<'PY'
from dagster import DagsterInstance

instance = DagsterInstance.get()
runs = instance.get_runs()
print("runs requested:", len(runs), sorted(r.tags.get("dagster/partition") for r in runs))
for state in instance.all_instigator_state():
    if state.instigator_name == "inbox_sensor":
        ticks = reversed(instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=50))
        print("sensor ticks (status, runs):", [(t.status.value, len(t.run_ids)) for t in ticks])
PY
grep -h "wait for the next tick\|timed out" "$BASE/daemon.log" | cut -c1-220 | head -4 || true
