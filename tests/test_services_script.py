"""scripts/services.sh installs Debian packages the way scripts/install_chromium.sh does: waiting for
the dpkg lock. On a freshly booted Debian machine unattended-upgrades usually holds it for a few
minutes, and a plain ``apt-get install`` then fails at once ("Could not get lock
/var/lib/dpkg/lock-frontend"), failing ``bash scripts/test`` before any test ran."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="services.sh installs packages only as root")
def test_apt_get_waits_for_the_dpkg_lock(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "apt.log"
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (fake / "apt-get").chmod(0o755)
    for tool in ("id",):  # all the script needs besides bash builtins on this path; no redis-server
        (fake / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                                text=True, check=True).stdout.strip())
    env = {"PATH": str(fake), "WHILEAI_SERVICES_DIR": str(tmp_path / "state")}
    done = subprocess.run(["/bin/bash", str(REPO / "scripts" / "services.sh"), "install", "redis"], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert any(" update" in f" {c}" for c in calls) and any(" install " in f" {c} " for c in calls), calls
    for call in calls:
        assert "DPkg::Lock::Timeout=" in call, call


def test_env_quotes_a_state_folder_with_a_space(tmp_path):
    """``eval "$(services.sh env)"`` (scripts/test, the deploy docs) split a state folder holding a space,
    exporting a cut path and running the rest of it as a command."""
    state = tmp_path / "my services"
    (state / "redis").mkdir(parents=True)
    (state / "redis" / "env").write_text("WHILEAI_REDIS_URL=redis://127.0.0.1:6390/0\n")
    script = REPO / "scripts" / "services.sh"
    done = subprocess.run(["/bin/bash", "-c", f'eval "$(bash "{script}" env)" && printf "%s\\n" '
                           '"$WHILEAI_SERVICES_DIR" "$WHILEAI_REDIS_URL"'],
                          env={**os.environ, "WHILEAI_SERVICES_DIR": str(state)}, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(state), "redis://127.0.0.1:6390/0"]
