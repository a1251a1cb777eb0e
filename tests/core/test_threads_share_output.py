"""Two threads of one process writing the same output: each writer's worker part files are its own."""

import threading

from whileai_pipeline.core import pairs, parallel
from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.pairs import build_pairs_file


def _scored(path, seed, n=2000):
    lines = []
    for i in range(n):
        row = {"prompt": f"task {i % 97}", "reward": (i * seed % 11) / 10, "final_text": f"{seed}" * (i % 40),
               "steps": [{"tool": "t", "arguments": {"n": i % 3}, "result": "ok" * (i % 50)}]}
        lines.append(dumps(row) + b"\n")
    path.write_bytes(b"".join(lines))
    return path


def _at_once(*writes):
    """Run each of ``writes`` in its own thread, released together; the exceptions they raised."""
    start, errors = threading.Barrier(len(writes)), []

    def run(write):
        start.wait()
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - returned for the test to show
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(write,)) for write in writes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return errors


def test_two_threads_building_one_pairs_file_leave_one_of_their_outputs_whole(tmp_path, monkeypatch):
    """The part files were named by output, process and number alone: one thread's parts met the other's,
    and whichever finished first deleted the other's. Now the last to publish wins, as with any writer."""
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(pairs, "PAIRS_PER_TASK", 3)
    sources = [_scored(tmp_path / f"scored{seed}.jsonl", seed) for seed in (3, 7)]
    alone = []
    for src in sources:
        build_pairs_file(src, tmp_path / "alone.jsonl", workers=1)
        alone.append((tmp_path / "alone.jsonl").read_bytes())
    assert alone[0] != alone[1]
    out = tmp_path / "pairs.jsonl"
    for _ in range(3):
        assert _at_once(*(lambda src=src: build_pairs_file(src, out, workers=2) for src in sources)) == []
        assert out.read_bytes() in alone
        assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.jsonl", "pairs.jsonl", "scored3.jsonl",
                                                              "scored7.jsonl"]


def test_part_files_of_two_writers_have_different_names_and_are_removed_apart(tmp_path):
    out = tmp_path / "out.jsonl"
    with parallel.PartFiles(out, "pairs") as first:
        with parallel.PartFiles(out, "pairs") as second:
            assert first.name(0) != second.name(0)
            open(first.name(0), "wb").close()
        assert (tmp_path / first.name(0)).exists()  # the second's end leaves the first's parts alone
        open(first.name(12), "wb").close()
    assert list(tmp_path.iterdir()) == []
