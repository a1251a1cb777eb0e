"""The benchmark runner's bookkeeping (no timings here): what a case records and what the summary claims."""

import json

import pytest

from bench import run
from bench.generate import generate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "run.jsonl"
    generate(12, path, seed=3, row_kb=2)  # far below the library's pool threshold: one process
    return path


def test_pooled_check_is_not_claimed_when_the_pooled_case_ran_in_one_process(tiny, tmp_path, monkeypatch):
    monkeypatch.delenv("WHILEAI_PIPELINE_WORKERS", raising=False)
    results = []
    for case in ("ours_sft_openai", "ours_sft_openai_serial"):
        if case.endswith("_serial"):
            monkeypatch.setenv("WHILEAI_PIPELINE_WORKERS", "1")
        result_path = tmp_path / f"{case}.result.json"
        run.child_main(case, str(tiny), str(tmp_path / f"{case}.out.jsonl"), str(result_path), {})
        results.append({"case": case, **json.loads(result_path.read_text())})
    assert [r["workers"] for r in results] == [1, 1]
    assert results[0]["sha256"] == results[1]["sha256"]
    # the same bytes, but from the same one-process path twice: nothing pooled was compared
    assert run.pooled_equals_serial(results) is None


def test_pooled_check_compares_a_pooled_output_with_the_one_process_output():
    pooled = {"case": "ours_sft_openai", "sha256": "a" * 64, "workers": 2}
    serial = {"case": "ours_sft_openai_serial", "sha256": "a" * 64, "workers": 1}
    assert run.pooled_equals_serial([pooled, serial]) is True
    assert run.pooled_equals_serial([pooled, {**serial, "sha256": "b" * 64}]) is False
    assert run.pooled_equals_serial([pooled]) is None


def test_report_reprints_the_run_header(tmp_path, capsys):
    result = {"case": "floor", "rows": 3000, "seconds": 0.5, "rows_per_s": 6000.0, "mb_per_s": 110.3,
              "input_bytes": 57_857_245, "out_bytes": 57_857_245, "peak_rss_mb": 22.1, "rss_tree_sampled_mb": 22.4,
              "wall_seconds": 0.7, "env": {}}
    doc = {"input": "/somewhere/run-3000-20kb-s0.jsonl", "input_bytes": 57_857_245, "results": [result]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    run.main(["--report", str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "## run-3000-20kb-s0.jsonl: 3000 rows, 55 MB"  # what the run itself printed
    assert lines[2:] == run.table([result]).splitlines()


def test_a_case_records_the_cpu_time_of_its_processes(tiny, tmp_path):
    opts = {"settle_page_cache": False}
    result = run._derive(run.run_case("floor", tiny, tmp_path, opts))
    assert result["exit_code"] == 0, result.get("log_tail")
    # an interpreter that starts, imports and copies the rows uses some CPU, and never more than two cores'
    # worth of the wall time it ran (the floor is one process)
    cpu = result["cpu_user_seconds"] + result["cpu_sys_seconds"]
    assert 0 < cpu <= 2 * result["wall_seconds"]
    note = f"CPU {cpu:.1f} s ({result['cpu_sys_seconds']:.1f} system), {cpu / result['wall_seconds']:.1f} cores"
    assert note in run.table([result])
