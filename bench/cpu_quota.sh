#!/usr/bin/env bash
# Run a command under a CPU quota, as a container's CPU limit sets one (docker run --cpus, a Kubernetes
# limits.cpu), to see how many worker processes the exports start there and what that costs.
#
#   sudo bash bench/cpu_quota.sh 1 python -m bench.run --data bench/out/run-100000-20kb-s0.jsonl \
#       --cases ours_sft_openai --repeat 1 --skip-reference
#
# CPUS may be a fraction (1.5). Needs root and the cpu controller (cgroup v2's cpu.max, else v1's
# cpu.cfs_quota_us); the cgroup is made for the command and removed after it. sudo resets PATH: name the
# virtual environment's python (.venv/bin/python) if `python` there is another one. The cgroup is made
# directly under the root (cgroup v2 allows no processes beside child cgroups that have a controller on,
# except in the root), so the command runs outside the caller's own cgroup and its limits. On cgroup v2
# /sys/fs/cgroup must be the real root, not a container's cgroup namespace.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: bash bench/cpu_quota.sh CPUS COMMAND [ARGS...]" >&2
    exit 2
fi
cpus=$1
shift
period=100000
quota=$(python3 -c "import sys; print(max(1000, round(float(sys.argv[1]) * $period)))" "$cpus")
name="whileai-bench-quota-$$"
group=
cleanup() {
    [ -n "$group" ] && [ -d "$group" ] || return 0
    # the command has ended: move this shell out, then the empty cgroup can go
    echo $$ > "$(dirname "$group")/cgroup.procs" 2>/dev/null || true
    if ! rmdir "$group" 2>/dev/null; then
        echo "bench/cpu_quota.sh: $group is left behind: processes the command started still run in it" \
            "($(tr '\n' ' ' < "$group/cgroup.procs"))" >&2
    fi
}
trap cleanup EXIT
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # v2
    if [ -e /sys/fs/cgroup/cgroup.type ]; then  # only a non-root cgroup has it
        echo "bench/cpu_quota.sh: /sys/fs/cgroup is not the root cgroup (a container's cgroup namespace)" >&2
        exit 1
    fi
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
    mkdir "/sys/fs/cgroup/$name"
    group=/sys/fs/cgroup/$name  # set once made: cleanup removes only a cgroup this script made
    echo "$quota $period" > "$group/cpu.max"
elif [ -d /sys/fs/cgroup/cpu ]; then  # v1
    mkdir "/sys/fs/cgroup/cpu/$name"
    group=/sys/fs/cgroup/cpu/$name
    echo "$period" > "$group/cpu.cfs_period_us"
    echo "$quota" > "$group/cpu.cfs_quota_us"
else
    echo "bench/cpu_quota.sh: no cgroup cpu controller under /sys/fs/cgroup" >&2
    exit 1
fi
echo $$ > "$group/cgroup.procs"
echo "cpu_quota.sh: $cpus CPUs ($quota/$period us) in $group" >&2
"$@"
