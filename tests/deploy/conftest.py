"""Deploy tests: real servers on 127.0.0.1, every process they start stopped again, pass or fail.

* PostgreSQL: the one named by DAGSTER_PG_* when those are set (``.ci/run`` starts it with
  ``scripts/services.sh``), else a private server started here with the same script and stopped at the
  end of the session. Each test gets a fresh database, dropped afterwards.
* Redis (the Celery broker): always a private server started by the test that needs it.
* Code server, daemon, Celery workers: subprocesses in their own process groups (``Procs``), each
  group terminated (then killed) when the test ends.

Only the ``deploy`` extra is needed on top of the test extra. Without it these tests skip, except
under CI (``CI`` set), where a missing extra or server is an error.
"""

import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SERVICES_SH = REPO / "scripts" / "services.sh"
PG_VARS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD")
# Variables a test's child processes must not inherit from the developer's shell.
SCRUBBED = ("DAGSTER_HOME", "WHILEAI_PIPELINE_HOME", "DAGSTER_PG_DB", "DAGSTER_CELERY_BROKER_URL",
            "DAGSTER_CELERY_BACKEND_URL", "WHILEAI_CODE_SERVER_HOST", "WHILEAI_CODE_SERVER_PORT")


def _unavailable(message):
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


def need(module):
    """Import ``module`` or skip the test module (fail under CI): it comes with the deploy extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        _unavailable(f"{module} is not installed: pip install -e '.[deploy]'")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------ servers via script

def services(state_dir, *args):
    """Run ``scripts/services.sh`` with its own state folder; returns the variables it exported."""
    env = {**os.environ, "WHILEAI_SERVICES_DIR": str(state_dir)}
    proc = subprocess.run(["bash", str(SERVICES_SH), *args], env=env, capture_output=True, text=True,
                          timeout=900, stdin=subprocess.DEVNULL)
    if proc.returncode:
        raise RuntimeError(f"services.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export "):].split("=", 1)
            out[name] = value
    return out


@contextmanager
def private_services(*names):
    """Start ``names`` with services.sh in a fresh state folder; stop them on exit, whatever happens."""
    # Under /tmp itself (mode 1777): the servers run as unprivileged users and must reach this folder.
    state = Path(tempfile.mkdtemp(prefix="whileai-services-"))
    try:
        try:
            env = services(state, "start", *names)
        except RuntimeError as exc:
            _unavailable(str(exc))
        yield env
    finally:
        try:
            services(state, "stop")
        finally:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server():
    """Connection variables of a running PostgreSQL (the CI's, or a private one)."""
    need("dagster_postgres")
    if all(os.environ.get(v) for v in PG_VARS):
        yield {v: os.environ[v] for v in PG_VARS}
        return
    with private_services("postgres") as env:
        yield {v: env[v] for v in PG_VARS}


def _pg_connect(server, dbname):
    import psycopg2

    return psycopg2.connect(host=server["DAGSTER_PG_HOST"], port=int(server["DAGSTER_PG_PORT"]),
                            user=server["DAGSTER_PG_USERNAME"], password=server["DAGSTER_PG_PASSWORD"],
                            dbname=dbname, connect_timeout=10)


@pytest.fixture
def pg_env(pg_server, monkeypatch):
    """A fresh, empty database; its DAGSTER_PG_* variables are set in this process for the test."""
    name = f"whileai_test_{uuid.uuid4().hex[:12]}"
    admin = _pg_connect(pg_server, "postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    env = {**pg_server, "DAGSTER_PG_DB": name}
    for var in SCRUBBED:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    try:
        yield env
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@contextmanager
def pg_query(env):
    """A psycopg2 cursor on the test's database: read what Dagster wrote, straight from the tables."""
    conn = _pg_connect(env, env["DAGSTER_PG_DB"])
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


@pytest.fixture
def redis_broker():
    """A private Redis on a free loopback port, started for this test: ``redis://127.0.0.1:PORT``."""
    with private_services("redis") as env:
        yield env["WHILEAI_REDIS_URL"].rsplit("/", 1)[0]


# ------------------------------------------------------------------------------ Dagster instances

@contextmanager
def instance_from(variant, home):
    """A DagsterInstance built from ``deploy/<variant>/dagster.yaml`` copied into ``home``.

    The file's ``env:`` entries are resolved from this process's environment (``pg_env``)."""
    import dagster as dg

    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DEPLOY / variant / "dagster.yaml", home / "dagster.yaml")
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        yield instance
    finally:
        instance.dispose()


# ------------------------------------------------------------------------------ subprocesses

class Procs:
    """Subprocesses of one test, each the leader of its own process group (so a server's children,
    e.g. a code server's run workers or a Celery worker's pool, are stopped with it)."""

    def __init__(self, log_dir):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.started = []

    def child_env(self, **extra):
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start(self, name, args, env, cwd=None):
        log = open(self.log_dir / f"{name}.log", "wb")
        proc = subprocess.Popen([str(a) for a in args], env=env, cwd=str(cwd or self.log_dir), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.started.append((name, proc, log))
        return proc

    def log(self, name, tail=4000):
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def logs(self):
        return "\n".join(f"--- {name}.log\n{self.log(name)}" for name, _, _ in self.started)

    @staticmethod
    def _signal_group(proc, sig):
        try:
            os.killpg(proc.pid, sig)  # the group this test created (start_new_session): its id is proc.pid
        except ProcessLookupError:
            pass

    def stop(self, name=None, timeout=20):
        """SIGTERM every selected process group at once, wait, then SIGKILL what is left."""
        entries = [e for e in reversed(self.started) if name is None or e[0] == name]
        for _, proc, _ in entries:
            self._signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for _, proc, _ in entries:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        # A leader may be gone while members of its group are not (e.g. a worker's pool child).
        grace = time.monotonic() + 3
        while time.monotonic() < grace and any(_group_alive(p.pid) for _, p, _ in entries):
            time.sleep(0.1)
        for entry in entries:
            _, proc, log = entry
            self._signal_group(proc, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(10)
            log.close()
            self.started.remove(entry)


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path / "logs")
    try:
        yield p
    finally:
        p.stop()


def start_code_server(procs, env, port, timeout):
    """``dagster code-server start`` of this code location on 127.0.0.1:``port``, as the workspace file
    (deploy/workspace.code-server.yaml) expects it, once it answers SERVING. It starts the run workers."""
    from dagster._grpc.client import DagsterGrpcClient  # noqa: PLC0415 (the deploy extra's dagster)

    proc = procs.start("code-server", [
        sys.executable, "-m", "dagster", "code-server", "start", "-h", "127.0.0.1", "-p", port,
        "--location-name", "whileai_pipeline", "-m", "whileai_pipeline.definitions"], env)
    client = DagsterGrpcClient(port=port, host="127.0.0.1")

    def serving():
        assert proc.poll() is None, procs.logs()
        try:
            return client.health_check_query() == "SERVING"
        except Exception:  # not up yet
            return False

    wait_for(serving, timeout, "the code server", procs)
    return proc


# A scorer that blocks mid-step, for the tests that kill what runs a step. Where $WHILEAI_TEST_SCORER_GATE
# is set (the processes that run steps), the 5th row a process scores, while <gate>/release does not exist,
# writes "<pid> <parent pid>" to <gate>/started and waits for <gate>/release; elsewhere (the test's own
# process) it only keeps rewards. ``write_blocking_scorer`` puts it where those processes import it.
BLOCKING_SCORER = '''
import os, time
from pathlib import Path

def score(row):
    gate = os.environ.get("WHILEAI_TEST_SCORER_GATE")
    if gate:
        gate = Path(gate)
        calls = gate / f"calls.{os.getpid()}"
        with open(calls, "a") as fh:
            fh.write("x")
        if calls.stat().st_size == 5 and not (gate / "release").exists():
            (gate / "started.tmp").write_text(f"{os.getpid()} {os.getppid()}")
            os.replace(gate / "started.tmp", gate / "started")
            while not (gate / "release").exists():
                time.sleep(0.05)
    return row.get("reward")
'''
BLOCKING_SCORER_SPEC = "whileai_test_blocking_scorer:score"
BLOCKING_SCORED = {"ops": {"scored_simulation_data": {"config": {"scorer": BLOCKING_SCORER_SPEC}}}}


def write_blocking_scorer(mods):
    """Write ``BLOCKING_SCORER`` as an importable module into the folder ``mods`` (put it on PYTHONPATH)."""
    Path(mods).mkdir(parents=True, exist_ok=True)
    (Path(mods) / f"{BLOCKING_SCORER_SPEC.split(':')[0]}.py").write_text(BLOCKING_SCORER)


class JobThread:
    """``execute_job`` in a daemon thread (this process is the run worker; the steps run in Celery workers),
    so a lost worker fails a test instead of hanging it. ``collect(result)`` returns what to keep of the
    result while it is open (the run id is always kept)."""

    def __init__(self, recon, instance, run_config, key, collect=None):
        import dagster as dg  # here: this conftest is also loaded where Dagster's extras are not installed

        self.out = {}

        def target():
            try:
                with dg.execute_job(recon, instance=instance, run_config=run_config,
                                    tags={"dagster/partition": key}, raise_on_error=False) as result:
                    self.out["run_id"] = result.run_id
                    self.out.update(collect(result) if collect else {})
            except BaseException as exc:  # re-raised in the test's thread, by finish
                self.out["error"] = exc

        self.thread = threading.Thread(target=target, name=f"celery-run-{key}", daemon=True)
        self.thread.start()

    def finish(self, timeout, what, procs) -> dict:
        """Wait up to ``timeout`` seconds for the run to end; what ``collect`` kept, and ``run_id``."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{what}: the run did not end within {timeout}s\n{procs.logs()}"
        if "error" in self.out:
            raise self.out["error"]
        return self.out


def wait_for(predicate, timeout, what, procs=None, interval=0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{procs.logs() if procs else ''}")


def pytest_configure(config):
    # Also declared in pyproject.toml; repeated here so these files work under --strict-markers alone.
    config.addinivalue_line("markers", "postgres: against a real PostgreSQL on 127.0.0.1 (deploy extra)")
    config.addinivalue_line("markers", "distributed: steps as Celery tasks, Redis broker on 127.0.0.1 (deploy extra)")
