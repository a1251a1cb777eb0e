"""Every export loads with `datasets.load_dataset("json", ...)` and comes back as written."""

import json

import pytest

from .conftest import EXPORTS, MISSING, SKIP_REASON, read_rows

if MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

from . import hf  # noqa: E402

pytestmark = [
    pytest.mark.consumers,
    # transformers 5.23 deprecates names that trl 1.16 still calls; not ours to fix.
    pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning"),
]

CONVERSATIONAL = ("messages", "prompt", "completion", "chosen", "rejected", "tools")


@pytest.mark.parametrize("name", list(EXPORTS))
def test_load_dataset_reads_every_export(exports, hf_cache, name):
    export = exports[name]
    rows = read_rows(export["path"])
    ds = hf.load_jsonl(export["path"], hf_cache)
    assert ds.num_rows == len(rows) > 0
    assert set(rows[0]) <= set(ds.column_names)
    for i, row in enumerate(rows):
        loaded = ds[i]
        for key in CONVERSATIONAL:
            if key in row:
                # The conversation and the tools come back exactly: no key added, none dropped, arguments
                # still objects (trl) or strings (openai), no value turned into another type.
                assert loaded[key] == row[key], f"{name} row {i} key {key!r} changed on load"


def _with_arguments(shape, arguments):
    """A trl row of ``shape`` whose one tool call carries ``arguments``."""
    call = {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": arguments}}]}
    ask = [{"role": "user", "content": "Where is order 7?"}]
    if shape == "messages":  # messages with and without tool_calls: datasets keeps them as JSON text
        return {"messages": ask + [call, {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
                                   {"role": "assistant", "content": "It shipped."}]}
    if shape == "prompt_completion":
        return {"prompt": ask, "completion": [call]}
    return {"prompt": ask, "chosen": [call], "rejected": [call]}


# Pairs of argument values at one path, one per row: the mixes Arrow types one way or another.
MIXES = [(7, 8), (7, 7.5), (7, "null"), (7, "7"), (True, "true"), (2.5, "[1]"), (7, "seven"), (True, 1),
         ([1], [2.5]), ({"a": 1}, {"a": 1.5}), ({"a": 1}, {"b": "2"})]


@pytest.mark.parametrize("shape", ["messages", "prompt_completion", "preference"])
@pytest.mark.parametrize("first,second", MIXES, ids=[repr(m) for m in MIXES])
def test_the_validator_warns_exactly_when_load_dataset_changes_an_argument(tmp_path, hf_cache, shape, first, second):
    from whileai_pipeline.core.openai_format import validate_file

    rows = [_with_arguments(shape, {"v": first}), _with_arguments(shape, {"v": second})]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ds = hf.load_jsonl(path, hf_cache)
    # json.dumps tells 7 from 7.0 and True from 1, which == does not.
    changed = [json.dumps({k: ds[i][k] for k in row}, sort_keys=True) != json.dumps(row, sort_keys=True)
               for i, row in enumerate(rows)]
    report = validate_file(path, "trl")
    warned = {p["line"] for p in report["problems"] if p["code"].startswith("datasets_")}
    assert report["ok"]
    assert warned == {i + 1 for i, c in enumerate(changed) if c}, (
        f"{shape} {first!r}/{second!r}: load_dataset changed rows {changed}, the validator warned on lines {warned}")


# Integers no int64 holds, alone or next to another value at one path (tests/core/test_big_integers.py).
BIG_MIXES = [(2 ** 70,), (10 ** 400,), (2 ** 63,), (-(2 ** 63) - 1,), (2 ** 64,), (7, 2 ** 70), (2 ** 70, 7.5),
             (2 ** 70, None), (2 ** 70, "x"), (2 ** 70, True), (2 ** 70, [1]), (2 ** 63 - 1, 7)]


@pytest.mark.parametrize("shape", ["messages", "prompt_completion", "preference"])
@pytest.mark.parametrize("values", BIG_MIXES, ids=[repr(m)[:30] for m in BIG_MIXES])
def test_the_validator_flags_an_integer_load_dataset_cannot_hold(tmp_path, hf_cache, shape, values):
    """An integer beyond int64 that load_dataset changes (to a float, to inf) is a datasets_big_int
    warning at its path; where load_dataset refuses the file, an error; where it loads exactly, nothing."""
    from whileai_pipeline.core.openai_format import validate_file

    rows = [_with_arguments(shape, {"v": v}) for v in values]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = validate_file(path, "trl", workers=1)
    flagged = {p["severity"] for p in report["problems"] if p["code"] == "datasets_big_int"}
    assert "bad_json" not in report["counts"]
    try:
        ds = hf.load_jsonl(path, hf_cache)
    except Exception as exc:  # noqa: BLE001 (whatever the loader raises, the validator must have said so)
        assert "too big" in str(exc)
        assert flagged == {"error"} and not report["ok"], f"load_dataset raised {exc!r}; validator: {flagged}"
        return
    changed = any(json.dumps({k: ds[i][k] for k in row}, sort_keys=True) != json.dumps(row, sort_keys=True)
                  for i, row in enumerate(rows))
    big = any(not -(2 ** 63) <= v < 2 ** 63 for v in values if type(v) is int)
    if changed and big:
        assert flagged == {"warning"}, f"load_dataset changed {values!r}; validator: {flagged}"
    if not big:
        assert not flagged
    # A uint64 value in a column load_dataset keeps as JSON text comes back exact: the warning says
    # "unless it keeps the column as JSON text", the one case where it warns and nothing changes.
    if not changed:
        assert all(2 ** 63 <= v < 2 ** 64 for v in values if type(v) is int and v >= 2 ** 63) or not big


def test_a_trl_export_with_big_integers_loads_as_the_validator_says(tmp_path, hf_cache):
    """The brief's row: arguments {"n": 10**400, "m": 2**70} written by Python's json into a run."""
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.openai_format import validate_file

    run = {"prompt": "Compute it.", "reward": 1, "steps": [
        {"tool": "calc", "arguments": {"n": 10 ** 400, "m": 2 ** 70}, "result": {"ok": True}, "text": "Computing."},
        {"text": "Done."}]}
    src, out = tmp_path / "run.jsonl", tmp_path / "trl.jsonl"
    src.write_text(json.dumps(run) + "\n", encoding="utf-8")
    wai.export_dataset(str(src), str(out), format="trl")
    report = validate_file(out, "trl", workers=1)
    assert report["ok"]
    warned = {p["where"].rsplit(".", 1)[1]: p["message"] for p in report["problems"] if p["code"] == "datasets_big_int"}
    ds = hf.load_jsonl(out, hf_cache)
    [arguments] = [a for _, a in hf.tool_calls_of(ds[0])]
    assert arguments["n"] == float("inf") and "loads it as inf" in warned["n"]
    assert type(arguments["m"]) is float and repr(arguments["m"]) in warned["m"]


@pytest.mark.parametrize("containers", [62, 63])
def test_a_value_too_deep_for_arrow_in_a_column_trl_does_not_read_is_refused_as_the_validator_says(
        tmp_path, hf_cache, containers):
    """Arrow's limit holds for every column: a lineage nested 63 containers deep (the column's value
    counted) makes load_dataset refuse the file; the validator says so (datasets_too_deep)."""
    import datasets

    from whileai_pipeline.core.openai_format import validate_file

    lineage = 1
    for _ in range(containers):
        lineage = {"a": lineage}
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
           "lineage": lineage}
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    report = validate_file(path, "trl", workers=1)
    if containers == 62:
        assert report["ok"], report["problems"]
        assert hf.load_jsonl(path, hf_cache)[0]["lineage"] == lineage
    else:
        assert report["counts"] == {"datasets_too_deep": 1} and not report["ok"]
        with pytest.raises(datasets.exceptions.DatasetGenerationError) as refused:
            hf.load_jsonl(path, hf_cache)
        assert "Recursion level in ArrowSchema struct exceeded" in repr(refused.value.__cause__)
