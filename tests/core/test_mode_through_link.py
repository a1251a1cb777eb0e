"""A file written over a symbolic link replaces the link: it keeps the link's place, not the mode of
whatever the link points to (a 0600 file elsewhere would hide a published export from its trainer,
a 0666 one would make it writable by every account)."""

import os

from whileai_pipeline.core import atomic
from whileai_pipeline.core.atomic import atomic_file


def test_a_link_replaced_gives_the_umask_mode_not_its_targets(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_UMASK", 0o022)
    for target_mode in (0o600, 0o666):
        target = tmp_path / f"elsewhere-{target_mode:o}.jsonl"
        target.write_bytes(b"not ours\n")
        os.chmod(target, target_mode)
        dest = tmp_path / f"published-{target_mode:o}.jsonl"
        os.symlink(target, dest)
        with atomic_file(dest) as fh:
            fh.write(b"{}\n")
        assert not dest.is_symlink()
        assert os.stat(dest).st_mode & 0o777 == 0o644
        assert target.read_bytes() == b"not ours\n" and os.stat(target).st_mode & 0o777 == target_mode
