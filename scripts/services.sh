#!/usr/bin/env bash
# Local services for the deploy tests: Debian's PostgreSQL (and, on request, Redis) on 127.0.0.1.
#
#   scripts/services.sh install [postgres] [redis] install Debian's packages if missing (root)
#   scripts/services.sh start [postgres] [redis]   install if missing, start, print `export` lines
#   scripts/services.sh env                        print the `export` lines of what is running
#   scripts/services.sh status                     say what is running (exit 1 if nothing)
#   scripts/services.sh stop                       stop everything this script started, remove its data
#
# With no service name, PostgreSQL only (what .ci/run keeps running for the tests). Redis is the
# Celery broker: the distributed test starts its own with this script, in its own state folder.
#
# Idempotent: `start` reuses a server it already started (same state folder) and only prints its
# variables again; `stop` on nothing is not an error. Everything lives under one state folder,
# $WHILEAI_SERVICES_DIR (default: ${TMPDIR:-/tmp}/whileai-services): data directories, logs, sockets,
# and the `env` file. The servers listen on 127.0.0.1 only, on free ports picked at start, and run
# as an unprivileged user (Debian's `postgres` / `redis` users when this script runs as root, else
# the calling user). Nothing touches the Debian default cluster or system service.
#
# Typical use (what .ci/run does):
#   eval "$(bash scripts/services.sh start)"
#   trap 'bash scripts/services.sh stop' EXIT
#
# The PostgreSQL server is tuned for throwaway test data (fsync=off, synchronous_commit=off):
# never point it at anything you want to keep.
set -euo pipefail

STATE="${WHILEAI_SERVICES_DIR:-${TMPDIR:-/tmp}/whileai-services}"
PG_USER_NAME="whileai"
PG_DB_NAME="whileai"
APT_UPDATED=0

log() { printf 'services.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

is_root() { [ "$(id -u)" = "0" ]; }

free_port() {
    python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# Run a command as `user` when we are root (servers refuse or should not run as root).
as_user() {
    local user="$1"; shift
    if is_root; then
        runuser -u "$user" -- "$@"
    else
        "$@"
    fi
}

apt_install() {
    is_root || die "$* is not installed and this is not root: install it (apt-get install $*) and retry"
    log "installing $* (Debian packages)"
    # As scripts/install_chromium.sh: on a freshly booted machine unattended-upgrades holds the dpkg
    # lock for a while, and apt-get would fail at once ("Could not get lock"): wait for it instead.
    local apt=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
    if [ "$APT_UPDATED" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get "${apt[@]}" update -qq >&2
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get "${apt[@]}" install -y -qq --no-install-recommends "$@" >&2
}

# ------------------------------------------------------------------------------------ PostgreSQL

pg_bindir() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && printf '%s\n' "$dir"
}

pg_running() {
    local bin
    bin="$(pg_bindir)" || return 1
    [ -f "$STATE/pg/data/PG_VERSION" ] && as_user "$(pg_owner)" "$bin/pg_ctl" status -D "$STATE/pg/data" >/dev/null 2>&1
}

pg_owner() { if is_root; then echo postgres; else id -un; fi; }

install_postgres() {
    pg_bindir >/dev/null && return 0
    apt_install postgresql
    pg_bindir >/dev/null || die "postgresql installed but no /usr/lib/postgresql/*/bin/initdb"
    if command -v pg_lsclusters >/dev/null; then
        # Debian's postinst may have created and started the default cluster; we do not use it.
        pg_lsclusters --no-header 2>/dev/null | while read -r ver name _port status _rest; do
            if [ "$status" = "online" ]; then
                log "stopping the Debian default cluster $ver/$name that the install started"
                pg_ctlcluster "$ver" "$name" stop || true
            fi
        done
    fi
}

start_postgres() {
    if pg_running && [ -f "$STATE/pg/env" ]; then
        log "PostgreSQL already running ($(grep DAGSTER_PG_PORT "$STATE/pg/env" | cut -d= -f2))"
        return 0
    fi
    install_postgres
    local bin owner port password
    bin="$(pg_bindir)"
    owner="$(pg_owner)"
    rm -rf "$STATE/pg"
    mkdir -p "$STATE/pg/data" "$STATE/pg/run"
    chmod 755 "$STATE"
    password="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
    printf '%s\n' "$password" > "$STATE/pg/pwfile"
    chmod 600 "$STATE/pg/pwfile"
    if is_root; then chown -R "$owner" "$STATE/pg"; fi
    as_user "$owner" "$bin/initdb" -D "$STATE/pg/data" -U "$PG_USER_NAME" --pwfile="$STATE/pg/pwfile" \
        --auth-host=scram-sha-256 --auth-local=trust -E UTF8 --no-locale >"$STATE/pg/initdb.log" 2>&1 \
        || { cat "$STATE/pg/initdb.log" >&2; die "initdb failed"; }
    rm -f "$STATE/pg/pwfile"
    port="$(free_port)"
    as_user "$owner" "$bin/pg_ctl" start -D "$STATE/pg/data" -l "$STATE/pg/server.log" -w -t 60 -o \
        "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$STATE/pg/run \
         -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >&2 \
        || { tail -n 30 "$STATE/pg/server.log" >&2 || true; die "PostgreSQL did not start"; }
    PGPASSWORD="$password" "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$PG_USER_NAME" "$PG_DB_NAME" \
        </dev/null >&2
    cat > "$STATE/pg/env" <<EOF
DAGSTER_PG_HOST=127.0.0.1
DAGSTER_PG_PORT=$port
DAGSTER_PG_USERNAME=$PG_USER_NAME
DAGSTER_PG_PASSWORD=$password
DAGSTER_PG_DB=$PG_DB_NAME
WHILEAI_PG_BINDIR=$bin
EOF
    chmod 600 "$STATE/pg/env"
    log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data $STATE/pg/data)"
}

stop_postgres() {
    local bin
    if [ -f "$STATE/pg/data/PG_VERSION" ] && bin="$(pg_bindir)"; then
        if pg_running; then
            as_user "$(pg_owner)" "$bin/pg_ctl" stop -D "$STATE/pg/data" -m fast -w -t 60 >&2 || true
            log "PostgreSQL stopped"
        fi
    fi
    rm -rf "$STATE/pg"
}

# ------------------------------------------------------------------------------------ Redis

redis_running() {
    [ -f "$STATE/redis/redis.pid" ] && kill -0 "$(cat "$STATE/redis/redis.pid")" 2>/dev/null
}

install_redis() {
    command -v redis-server >/dev/null && return 0
    apt_install redis-server
    if command -v service >/dev/null; then
        # Debian's postinst may start the system redis on 6379; we do not use it.
        service redis-server status >/dev/null 2>&1 && { service redis-server stop >&2 || true; }
    fi
    return 0
}

redis_owner() { if is_root && id redis >/dev/null 2>&1; then echo redis; elif is_root; then echo nobody; else id -un; fi; }

start_redis() {
    if redis_running && [ -f "$STATE/redis/env" ]; then
        log "Redis already running"
        return 0
    fi
    install_redis
    local owner port
    owner="$(redis_owner)"
    rm -rf "$STATE/redis"
    mkdir -p "$STATE/redis"
    chmod 755 "$STATE"
    if is_root; then chown -R "$owner" "$STATE/redis"; fi
    port="$(free_port)"
    as_user "$owner" redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes \
        --daemonize yes --pidfile "$STATE/redis/redis.pid" --logfile "$STATE/redis/server.log" \
        --dir "$STATE/redis" --save '' --appendonly no >&2
    for _ in $(seq 50); do
        redis_running && redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis_running || die "Redis did not start (see $STATE/redis/server.log)"
    printf 'WHILEAI_REDIS_URL=redis://127.0.0.1:%s/0\n' "$port" > "$STATE/redis/env"
    log "Redis on 127.0.0.1:$port"
}

stop_redis() {
    if redis_running; then
        local pid
        pid="$(cat "$STATE/redis/redis.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        log "Redis stopped"
    fi
    rm -rf "$STATE/redis"
}

# ------------------------------------------------------------------------------------ main

print_env() {
    local f found=0
    for f in "$STATE/pg/env" "$STATE/redis/env"; do
        [ -f "$f" ] || continue
        found=1
        while IFS= read -r line; do printf 'export %s\n' "$line"; done < "$f"
    done
    printf 'export WHILEAI_SERVICES_DIR=%q\n' "$STATE"
    [ "$found" = 1 ]
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    start)
        [ $# -eq 0 ] && set -- postgres
        mkdir -p "$STATE"
        for svc in "$@"; do
            case "$svc" in
                postgres|postgresql) start_postgres ;;
                redis) start_redis ;;
                *) die "unknown service: $svc (postgres, redis)" ;;
            esac
        done
        print_env
        ;;
    install)
        [ $# -eq 0 ] && set -- postgres
        for svc in "$@"; do
            case "$svc" in
                postgres|postgresql) install_postgres ;;
                redis) install_redis ;;
                *) die "unknown service: $svc (postgres, redis)" ;;
            esac
        done
        ;;
    env) print_env || die "nothing running under $STATE" ;;
    status)
        ok=1
        pg_running && { log "PostgreSQL running"; ok=0; }
        redis_running && { log "Redis running"; ok=0; }
        exit "$ok"
        ;;
    stop)
        stop_postgres
        stop_redis
        rmdir "$STATE" 2>/dev/null || true
        ;;
    *)
        sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
