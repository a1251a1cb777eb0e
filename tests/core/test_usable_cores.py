"""How many worker processes a big file gets under a container's CPU limit (a cgroup quota).

Each test builds a cgroup tree in a temp folder, as the kernel shows it (``/proc/self/cgroup``, the
files under ``/sys/fs/cgroup`` or wherever ``/proc/self/mountinfo`` says), and points the reader at it.
"""

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whileai_pipeline.core import parallel
from whileai_pipeline.core.parallel import cpu_quota_cores, workers_for


def _tree(tmp_path, self_cgroup, files, under="cgroup"):
    """A fake cgroup mount at ``tmp_path/under`` and the process's ``/proc/self/cgroup`` text."""
    root = tmp_path / under
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(self_cgroup)
    return root, proc


def test_v2_container_limit_at_the_mount_root(tmp_path):
    # docker run --cpus 1.5: the container sees its own cgroup as "/"
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})
    assert cpu_quota_cores(root, proc) == 2


def test_v2_no_limit(tmp_path):
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert cpu_quota_cores(root, proc) is None


def test_v2_the_tightest_limit_on_the_path_counts(tmp_path):
    # Kubernetes without a cgroup namespace: the pod's limit sits above the container's cgroup
    files = {
        "kubepods/cpu.max": "max 100000\n",
        "kubepods/pod1/cpu.max": "300000 100000\n",
        "kubepods/pod1/ctr/cpu.max": "max 100000\n",
        "kubepods/pod2/cpu.max": "100000 100000\n",  # a sibling's limit is not ours
    }
    root, proc = _tree(tmp_path, "0::/kubepods/pod1/ctr\n", files)
    assert cpu_quota_cores(root, proc) == 3
    (root / "kubepods/pod1/ctr/cpu.max").write_text("50000 100000\n")
    assert cpu_quota_cores(root, proc) == 1


def _v1(folder, quota, period=100000):
    """A v1 CFS quota in ``folder`` of the fake mount."""
    return {f"{folder}/cpu.cfs_quota_us": f"{quota}\n", f"{folder}/cpu.cfs_period_us": f"{period}\n"}


@pytest.mark.parametrize(("self_cgroup", "files", "expected"), [
    pytest.param("5:cpu,cpuacct:/\n4:memory:/x\n", _v1("cpu,cpuacct", 250000), 3, id="combined-hierarchy"),
    # the combined mount reached through the "cpu" link systemd and docker make beside it
    pytest.param("4:cpu,cpuacct:/\n", _v1("cpu", 100000), 1, id="through-the-cpu-link"),
    pytest.param("1:cpu:/\n", _v1("cpu", -1), None, id="unlimited"),
    pytest.param("1:cpu:/\n", _v1("cpu", 100000, 40000), 3, id="other-period-2.5-rounded-up"),
    # systemd's hybrid layout: a v2 line without a cpu.max (cpu is on v1) and the v1 cpu controller
    pytest.param("9:name=systemd:/\n1:cpu:/\n0::/\n", _v1("cpu", 200000), 2, id="hybrid"),
    pytest.param("3:cpuset:/other\n1:cpu:/\n", _v1("cpu/other", 100000), None, id="cpuset-is-not-cpu"),
])
def test_v1_cfs_quota(tmp_path, self_cgroup, files, expected):
    root, proc = _tree(tmp_path, self_cgroup, files)
    assert cpu_quota_cores(root, proc) == expected


@pytest.mark.parametrize("content", ["", "garbage\n", "max\n", "0 100000\n", "100000 0\n", "-5 100000\n", "1 2 3\n",
                                     b"\xff\xfe".decode("latin-1")])
def test_unreadable_or_odd_cpu_max_means_no_limit(tmp_path, content):
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": content})
    assert cpu_quota_cores(root, proc) is None


def test_no_cgroup_information(tmp_path):
    assert cpu_quota_cores(tmp_path / "nowhere", tmp_path / "no-proc-file") is None
    root, proc = _tree(tmp_path, "", {"cpu.max": "100000 100000\n"})
    assert cpu_quota_cores(root, proc) is None  # no line names a hierarchy: no cgroup of ours to read


def test_a_path_outside_the_namespace_reads_no_quota(tmp_path):
    # A process left outside its cgroup namespace (nsenter without moving it, or moved out by the host)
    # sees its cgroup as "/../sibling": the mount's root is the namespace's cgroup, a sibling, not ours.
    root, proc = _tree(tmp_path, "0::/../outside\n", {})
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "cpu.max").write_text("100000 100000\n")
    assert cpu_quota_cores(root, proc) is None  # the path does not escape the mount
    root, proc = _tree(tmp_path, "0::/../outside\n", {"cpu.max": "200000 100000\n"})
    assert cpu_quota_cores(root, proc) is None  # nor is the namespace root's limit taken for ours
    root, proc = _tree(tmp_path, "1:cpu:/../outside\n0::/\n", {"cpu.max": "300000 100000\n"})
    assert cpu_quota_cores(root, proc) == 3  # the other hierarchy still counts


def test_nothing_above_the_mount_is_read(tmp_path):
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # beside the mount, in the folder above it
    root, proc = _tree(tmp_path, "0::/a/b\n", {"a/b/cpu.max": "max 100000\n"})
    assert cpu_quota_cores(root, proc) is None


def test_v1_container_without_a_cgroup_namespace_reads_its_mount_root_not_a_child(tmp_path):
    # docker on cgroup v1 (moby/moby#34584): /proc/self/cgroup shows the host's path, and the container's own
    # cgroup is mounted as the root. A child of it whose name matches the path's first part (docker-in-docker
    # makes "docker") is not an ancestor of ours.
    files = _v1("cpu,cpuacct", 300000) | _v1("cpu,cpuacct/docker", 50000)
    root, proc = _tree(tmp_path, "4:cpu,cpuacct:/docker/0123abcd\n", files)
    assert cpu_quota_cores(root, proc) == 3


@settings(deadline=None, max_examples=60)
@given(st.lists(st.one_of(st.none(), st.tuples(st.integers(1, 10**7), st.integers(1, 10**6))), min_size=1,
                max_size=5))
def test_quota_is_the_least_of_the_path_rounded_up(tmp_path_factory, limits):
    """Any nesting of limits and unlimited levels: the tightest, in whole CPUs rounded up."""
    tmp_path = tmp_path_factory.mktemp("tree")
    names = [f"level{i}" for i in range(len(limits))]
    files = {}
    for depth, limit in enumerate(limits):
        folder = "/".join(names[: depth + 1])
        files[f"{folder}/cpu.max"] = "max 100000\n" if limit is None else f"{limit[0]} {limit[1]}\n"
    root, proc = _tree(tmp_path, "0::/" + "/".join(names) + "\n", files)
    real = [math.ceil(q / p) for q, p in (limit for limit in limits if limit is not None)]
    assert cpu_quota_cores(root, proc) == (min(real) if real else None)


def _mount(point, top="/", fstype="cgroup2", options="rw,nsdelegate", dev="0:29"):
    """A ``/proc/self/mountinfo`` line: ``point`` shows cgroup ``top``; the kernel escapes a space, tab,
    newline or backslash in a path as an octal ``\\040``."""
    point, top = ("".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in str(p)) for p in (point, top))
    return f"30 25 {dev} {top} {point} rw,nosuid,nodev,noexec,relatime shared:9 - {fstype} {fstype} {options}"


def _mountinfo(tmp_path, *lines):
    """A fake ``/proc/self/mountinfo``: the root filesystem, then ``lines``."""
    path = tmp_path / "proc-self-mountinfo"
    lines = ["25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw", *lines]
    path.write_bytes(os.fsencode("".join(f"{line}\n" for line in lines)))  # bytes: a path need not be UTF-8
    return path


def test_v2_mounted_elsewhere_is_found_through_mountinfo(tmp_path):
    point, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "200000 100000\n"}, under="somewhere/cg2")
    usual, _ = _tree(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"})  # not mounted: not a cgroup
    assert cpu_quota_cores(usual, proc, _mountinfo(tmp_path, _mount(point))) == 2


def test_v1_container_without_a_cgroup_namespace_through_mountinfo(tmp_path):
    # mountinfo shows the container's own cgroup (/docker/abc) at the mount point: that folder is the
    # process's cgroup, and the children whose names match the path are not its ancestors
    files = _v1(".", 300000) | _v1("docker", 50000) | _v1("docker/abc", 50000)
    point, proc = _tree(tmp_path, "4:cpu,cpuacct:/docker/abc\n", files, under="cg/cpu,cpuacct")
    line = _mount(point, "/docker/abc", "cgroup", "rw,cpu,cpuacct", "0:31")
    assert cpu_quota_cores(tmp_path / "cg", proc, _mountinfo(tmp_path, line)) == 3


def test_a_host_reads_its_cgroup_and_those_above_it_up_to_the_mount(tmp_path):
    files = {
        "user.slice/x/cpu.max": "max 100000\n",
        "user.slice/cpu.max": "200000 100000\n",
        "user.slice/y/cpu.max": "100000 100000\n",  # a sibling's limit is not ours
    }
    point, proc = _tree(tmp_path, "0::/user.slice/x\n", files, under="host/cg2")
    (tmp_path / "host" / "cpu.max").write_text("100000 100000\n")  # above the mount point: not read
    mountinfo = _mountinfo(tmp_path, _mount(point))
    assert cpu_quota_cores(tmp_path / "nowhere", proc, mountinfo) == 2
    (point / "user.slice/x/cpu.max").write_text("100000 100000\n")
    assert cpu_quota_cores(tmp_path / "nowhere", proc, mountinfo) == 1


@pytest.mark.parametrize("path", ["/docker/other", "/docker/abcd", "/docker", "/", "/docker/abc/../other"])
def test_a_cgroup_not_at_or_below_the_mounts_root_reads_no_quota(tmp_path, path):
    # the mount shows /docker/abc: no folder of it is another cgroup or one above /docker/abc
    point, proc = _tree(tmp_path, f"4:cpu,cpuacct:{path}\n", _v1(".", 100000) | _v1("other", 100000),
                        under="cg/cpu,cpuacct")
    line = _mount(point, "/docker/abc", "cgroup", "rw,cpu,cpuacct", "0:31")
    assert cpu_quota_cores(tmp_path / "cg", proc, _mountinfo(tmp_path, line)) is None


def test_an_escaped_mount_point(tmp_path):
    point, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "300000 100000\n"}, under="cgroup mounts/back\\slash")
    line = _mount(point)
    assert "/cgroup\\040mounts/back\\134slash " in line
    # a mount point that is not UTF-8 elsewhere does not make the file unreadable
    mountinfo = _mountinfo(tmp_path, "40 25 8:2 / /mnt/caf\udce9 rw - ext4 /dev/sdb1 rw", line)
    assert cpu_quota_cores(tmp_path / "nowhere", proc, mountinfo) == 3


def test_a_cgroup_seen_through_two_mounts_is_read_once(tmp_path, monkeypatch):
    files = {"kubepods/pod1/cpu.max": "300000 100000\n", "kubepods/cpu.max": "max 100000\n"}
    point, proc = _tree(tmp_path, "0::/kubepods/pod1\n", files, under="cg2")
    (tmp_path / "bind").symlink_to(point / "kubepods")  # a bind mount of the kubepods subtree: the same folders
    mountinfo = _mountinfo(tmp_path, _mount(tmp_path / "bind", "/kubepods"), _mount(point), _mount(point))
    reads, read = [], parallel._v2_quota
    monkeypatch.setattr(parallel, "_v2_quota", lambda folder: reads.append(folder.resolve()) or read(folder))
    assert cpu_quota_cores(tmp_path / "nowhere", proc, mountinfo) == 3
    assert reads == [(point / rel).resolve() for rel in ("kubepods/pod1", "kubepods", ".")]


def test_a_hybrid_host_reads_the_v1_mount_with_the_cpu_controller(tmp_path):
    # systemd's hybrid layout as mountinfo lists it: cgroup2 without cpu.max, v1 cpu and other controllers
    self_cgroup = "9:name=systemd:/system.slice/app\n3:cpuset:/system.slice/app\n1:cpu:/system.slice/app\n0::/\n"
    files = _v1("cpu/system.slice", 150000) | _v1("cpuset/system.slice/app", 100000)  # cpuset is not cpu
    cg, proc = _tree(tmp_path, self_cgroup, files, under="cg")
    (cg / "unified").mkdir()
    mountinfo = _mountinfo(tmp_path, f"24 1 0:21 / {cg} rw shared:4 - tmpfs tmpfs ro,mode=755",
                           _mount(cg / "unified", dev="0:22"),
                           _mount(cg / "cpu", fstype="cgroup", options="rw,cpu", dev="0:29"),
                           _mount(cg / "cpuset", fstype="cgroup", options="rw,cpuset", dev="0:30"),
                           _mount(cg / "systemd", fstype="cgroup", options="rw,xattr,name=systemd", dev="0:31"))
    assert cpu_quota_cores(tmp_path / "nowhere", proc, mountinfo) == 2


def test_without_mountinfo_the_mounts_are_guessed_under_the_root(tmp_path):
    root, proc = _tree(tmp_path, "4:cpu,cpuacct:/docker/0123abcd\n", _v1("cpu,cpuacct", 200000))
    assert cpu_quota_cores(root, proc, tmp_path / "no-mountinfo") == 2
    assert cpu_quota_cores(root, proc, _mountinfo(tmp_path)) == 2  # read, but no cgroup mounted in it


def test_a_malformed_mountinfo_line_is_skipped(tmp_path):
    point, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "200000 100000\n"}, under="cg2")
    trap, _ = _tree(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"}, under="trap")
    mountinfo = _mountinfo(tmp_path, "garbage", "", f"31 25 0:30 / {trap} rw shared:9 cgroup2 cgroup2 rw",
                           f"31 25 0:30 / {trap} rw shared:9 - cgroup2", "31 25 - cgroup2 cgroup2 rw", _mount(point))
    assert cpu_quota_cores(tmp_path / "nowhere", proc, mountinfo) == 2


def _read_from(monkeypatch, root, proc, mountinfo=None):
    """Point ``usable_cores`` (through ``workers_for``) at a fake tree instead of this machine's cgroups:
    its mountinfo, else none (this machine's would name its real mounts), so the mounts under ``root``."""
    monkeypatch.setattr(parallel, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(parallel, "SELF_CGROUP", str(proc))
    monkeypatch.setattr(parallel, "SELF_MOUNTINFO", str(mountinfo or proc.with_name("no-mountinfo")))


def _big_file(tmp_path):
    path = tmp_path / "run.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(parallel.MIN_PARALLEL_BYTES)  # big enough for workers; its content is never read here
    return path


def test_workers_for_a_big_file_follow_the_quota(tmp_path, monkeypatch):
    monkeypatch.delenv(parallel.ENV_WORKERS, raising=False)
    path = _big_file(tmp_path)
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"})
    _read_from(monkeypatch, root, proc)
    assert workers_for(path) == 1  # one CPU of quota: one process, whatever the machine has
    (root / "cpu.max").write_text("max 100000\n")
    assert workers_for(path) == min(len(os.sched_getaffinity(0)), 4)
    (root / "cpu.max").write_text("5000000 100000\n")  # 50 CPUs of quota: the cores and the cap of 4 still hold
    assert workers_for(path) == min(len(os.sched_getaffinity(0)), 4)


def test_workers_for_on_a_many_core_machine(tmp_path, monkeypatch):
    # README: "a pod limited to 2 CPUs on a 64-core node gets 2"; without a limit, the cap of 4
    monkeypatch.delenv(parallel.ENV_WORKERS, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    path = _big_file(tmp_path)
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "200000 100000\n"})
    _read_from(monkeypatch, root, proc)
    assert workers_for(path) == 2
    (root / "cpu.max").write_text("150000 100000\n")
    assert workers_for(path) == 2  # 1.5 CPUs rounded up
    (root / "cpu.max").write_text("max 100000\n")
    assert workers_for(path) == 4


def test_workers_for_read_this_process_s_mountinfo(tmp_path, monkeypatch):
    monkeypatch.delenv(parallel.ENV_WORKERS, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    point, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"}, under="elsewhere")
    _read_from(monkeypatch, tmp_path / "nowhere", proc, _mountinfo(tmp_path, _mount(point)))
    assert workers_for(_big_file(tmp_path)) == 1


def test_an_explicit_worker_count_is_not_lowered_by_the_quota(tmp_path, monkeypatch):
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "100000 100000\n"})
    _read_from(monkeypatch, root, proc)
    assert workers_for(_big_file(tmp_path), 3) == 3
    monkeypatch.setenv(parallel.ENV_WORKERS, "2")
    assert workers_for(_big_file(tmp_path)) == 2
