"""docs/deploying.md, "Permissions": the processes that run steps may be "users of one group with umask
0002 on a setgid root". Every file under the root then has to get the mode the umask gives, the run's
lock file included: each step opens ``locks/<run>.lock`` for writing, so a lock file made without
group write by one user fails every step of that run for the next user (write_failed ... Permission
denied), whoever made it first.
"""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from whileai_pipeline.defs.resources import PipelineStorage

REPO = Path(__file__).resolve().parents[2]

TAKE_LOCK = """
import os, sys
os.umask(0o002)
from whileai_pipeline.defs.resources import PipelineStorage
with PipelineStorage(root=sys.argv[1]).partition_lock("nightly", timeout=5):
    print("locked")
"""


def test_the_run_lock_file_gets_the_mode_the_umask_gives(tmp_path):
    old = os.umask(0o002)
    try:
        storage = PipelineStorage(root=str(tmp_path / "root"))
        with storage.partition_lock("nightly", timeout=5) as path:
            mode = stat.S_IMODE(os.stat(path).st_mode)
    finally:
        os.umask(old)
    assert oct(mode) == oct(0o664)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to act as two users"
)
def test_two_users_of_one_group_take_turns_on_a_run_lock(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    gid = 47321  # a group no file here belongs to: only its members' group bits give access
    os.chown(root, -1, gid)
    os.chmod(root, 0o2775)
    outputs = []
    for uid in (47001, 47002):  # two users of the group, without root's right to write anywhere
        # dac_read_search only lets them read the interpreter and this checkout, and reach the root, wherever
        # they are; writing still takes each file's own permissions
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=+dac_read_search",
               "--ambient-caps=+dac_read_search", sys.executable, "-c", TAKE_LOCK, str(root)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        outputs.append((proc.returncode, proc.stdout.strip(), proc.stderr.strip()[-400:]))
    assert [(code, out) for code, out, _ in outputs] == [(0, "locked"), (0, "locked")], outputs
