"""``whileai-pipeline`` and ``dagster asset materialize`` from CI against the Postgres-backed instance of
deploy/postgres/dagster.yaml (docs/deploying.md, "From CI"), and what the CLI says when that instance
cannot be opened.

* ``test_ci_registers_and_materializes_into_the_postgres_instance``: the documented CI recipe, as
  subprocesses: ``whileai-pipeline register`` then ``dagster asset materialize -m
  whileai_pipeline.definitions --select '*' --partition <run>``; the partition, the run and the five
  materializations are then read back from the database by a new instance.
* ``test_cli_says_why_it_cannot_open_the_instance_and_runs_nothing``: a ``DAGSTER_HOME`` whose
  dagster.yaml names an unset variable, or a wrong password, is bad usage (exit 2) with one line that
  names the file and the cause (no traceback, no password), before any file is copied or run.
"""

import os
import shutil
import subprocess
import sys

import pytest

from .conftest import DEPLOY, REPO, instance_from, need

need("dagster_postgres")

from pipeline.conftest import SAMPLE, SAMPLE_META  # noqa: E402
from whileai_pipeline.defs.assets import ASSET_NAMES  # noqa: E402
from whileai_pipeline.defs.partitions import PARTITIONS_NAME  # noqa: E402

pytestmark = pytest.mark.postgres


def _env(pg_env, dagster_home, root, **overrides):
    env = {**os.environ, **pg_env, "DAGSTER_HOME": str(dagster_home), "WHILEAI_PIPELINE_HOME": str(root)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _cli(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "whileai_pipeline.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def _run_file(tmp_path, name):
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    shutil.copyfile(SAMPLE, runs / f"{name}.jsonl")
    shutil.copyfile(SAMPLE_META, runs / f"{name}.meta.json")
    return runs / f"{name}.jsonl"


def _dagster_home(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(DEPLOY / "postgres" / "dagster.yaml", home / "dagster.yaml")
    return home


def test_ci_registers_and_materializes_into_the_postgres_instance(tmp_path, pg_env):
    home, root = _dagster_home(tmp_path), tmp_path / "whileai"
    env = _env(pg_env, home, root)
    run = _run_file(tmp_path, "nightly")
    reg = _cli(["register", str(run)], env, tmp_path)
    assert reg.returncode == 0, reg.stdout + reg.stderr
    mat = subprocess.run([sys.executable, "-m", "dagster", "asset", "materialize", "-m", "whileai_pipeline.definitions",
                          "--select", "*", "--partition", "nightly"], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert mat.returncode == 0, mat.stdout[-3000:] + mat.stderr[-3000:]
    assert (root / "published" / "nightly" / "sft.openai.jsonl").is_file()

    import dagster as dg

    with instance_from("postgres", tmp_path / "reader_home") as reader:
        assert reader.get_dynamic_partitions(PARTITIONS_NAME) == ["nightly"]
        (record,) = reader.get_run_records()
        assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS
        assert record.dagster_run.tags["dagster/partition"] == "nightly"
        for name in ASSET_NAMES:
            mats = reader.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), asset_partitions=["nightly"]), limit=5).records
            assert len(mats) == 1, name


@pytest.mark.parametrize("broken", ["unset_variable", "wrong_password"])
def test_cli_says_why_it_cannot_open_the_instance_and_runs_nothing(tmp_path, pg_env, broken):
    home, root = _dagster_home(tmp_path), tmp_path / "whileai"
    wrong = "not-the-password-0123"
    overrides = {"DAGSTER_PG_HOST": None} if broken == "unset_variable" else {"DAGSTER_PG_PASSWORD": wrong}
    env = _env(pg_env, home, root, **overrides)
    run = _run_file(tmp_path, "nightly")
    for args in (["register", str(run)], ["run", str(run)]):
        proc = _cli(args, env, tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        error = [line for line in proc.stderr.splitlines() if line.startswith("whileai-pipeline: error:")]
        assert len(error) == 1 and proc.stderr.splitlines()[-1] == error[0], proc.stderr
        assert f"cannot open the Dagster instance of DAGSTER_HOME={home} ({home / 'dagster.yaml'})" in error[0]
        if broken == "unset_variable":
            assert '"DAGSTER_PG_HOST" which is not set' in error[0]
        else:
            assert 'password authentication failed for user "{}"'.format(pg_env["DAGSTER_PG_USERNAME"]) in error[0]
        assert pg_env["DAGSTER_PG_PASSWORD"] not in proc.stderr + proc.stdout
        assert wrong not in proc.stderr + proc.stdout
        # nothing ran: the run was not copied into the inbox, no stage or export was written
        assert not (root / "inbox" / "nightly.jsonl").exists()
        assert not (root / "stages").exists() and not (root / "published").exists()
