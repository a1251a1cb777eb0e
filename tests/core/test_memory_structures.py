"""Per-row and per-group state stays compact (the memory audit): structure checks, not RSS thresholds.

Each test fails if the state that grows with a run goes back to Python objects per row or per group:
pair selection's summaries (``pairs.SummaryTable``), the scored stage's per-group tallies
(``ScoreStats``) and the raw stage's distinct prompts and groups (``RawStats``). The planner itself is
checked against the one it replaced (one ``RowSummary`` per row in per-prompt lists).
"""

import array
import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai_pipeline.core.pairs as pairs_mod
from whileai_pipeline.core.groups import KeyIndex
from whileai_pipeline.core.jsonl import dumps
from whileai_pipeline.core.pairs import PromptGroups, RowSummary, SummaryTable, build_pairs_file
from whileai_pipeline.core.pairs import summary_fields as row_fields
from whileai_pipeline.core.scoring import SHOWN_GROUPS, ScoreStats
from whileai_pipeline.defs.summaries import RawStats

COMPACT = (array.array, bytearray, KeyIndex, PromptGroups)


def _rows(n, prompts):
    return [{"prompt": f"task {i % prompts}", "reward": (i * 7 % 11) / 10, "final_text": "x" * (i % 40),
             "model_version": f"m{i % 2}", "steps": [{"tool": "t", "arguments": {"n": i % 3}, "result": "ok"}]}
            for i in range(n)]


def test_pair_selection_keeps_typed_arrays_and_no_object_per_row(tmp_path, monkeypatch):
    """``build_pairs_file`` keeps its per-row summaries in typed arrays, and makes a ``RowSummary`` only
    for the rows of a pair (pass 2 and the report), never one per row: 600 rows in 6 prompts make at
    most 6 pairs, so at most 24 summaries."""
    tables, made = [], []

    class Table(SummaryTable):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            tables.append(self)

    class Counted(RowSummary):
        __slots__ = ()

        def __init__(self, *args):
            made.append(1)
            super().__init__(*args)

    made_at_line = []  # summaries made when pass 2 wrote each line: the plan is read lazily, a pair at a time
    pair_lines = pairs_mod._pair_lines

    def lines(source, jobs, *crossed):
        for line in pair_lines(source, jobs, *crossed):
            made_at_line.append(len(made))
            yield line

    monkeypatch.setattr(pairs_mod, "SummaryTable", Table)
    monkeypatch.setattr(pairs_mod, "RowSummary", Counted)
    monkeypatch.setattr(pairs_mod, "_pair_lines", lines)
    src = tmp_path / "scored.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in _rows(600, 6)))
    report = build_pairs_file(src, tmp_path / "pairs.jsonl", workers=1)
    assert report["pairs"] == 6 and report["prompts_seen"] == 6
    (table,) = tables
    per_row = {name: value for name, value in vars(table).items()
               if name not in ("models", "_model_ids") and value is not None}
    assert table.index is None and len(table.offset) == len(table.span) == 600  # where rows are, not their index
    assert all(isinstance(value, COMPACT) for value in per_row.values()), {k: type(v) for k, v in per_row.items()}
    assert len(table) == len(table.score) == len(table.eval_sourced) == 600
    assert table.models == ["m0", "m1"]  # model names interned, not one string per row
    assert len(made) == 4 * report["pairs"]  # chosen and rejected, for pass 2 and for the report
    assert made_at_line == [2, 4, 6, 8, 10, 12]


def _summarize(index, row):
    fields = row_fields(row)
    return RowSummary(index, *fields) if fields is not None else None


def plan_pairs(summaries, *, max_pairs_per_prompt=1, min_margin=1.0, length_match=True):
    """The array planner fed RowSummary objects, answering as the object planner did."""
    table = SummaryTable()
    for s in summaries:
        if s is not None:
            table.add(s.index, (s.key, s.score, s.length, s.first_turn, s.model, s.eval_sourced))
    plan = table.plan(max_pairs_per_prompt=max_pairs_per_prompt, min_margin=min_margin, length_match=length_match)
    return list(plan.pairs()), plan.prompts_seen, plan.with_contrast


def _old_plan(summaries, max_pairs_per_prompt, min_margin, length_match):
    """The planner before the memory audit, verbatim: RowSummary objects in per-prompt lists."""
    groups = {}
    for summary in summaries:
        if summary is not None:
            groups.setdefault(summary.key, []).append(summary)
    plan = []
    with_contrast = 0
    for members in groups.values():
        ranked = sorted(members, key=lambda s: -s.score)
        used = set()
        made = 0
        for c in ranked:
            if made >= max_pairs_per_prompt:
                break
            if c.index in used:
                continue
            candidates = [r for r in ranked if r.index not in used and r is not c and c.score - r.score >= min_margin]
            if not candidates:
                continue
            r = min(candidates, key=lambda s: abs(s.length - c.length)) if length_match else candidates[0]
            used.update((c.index, r.index))
            plan.append((c, r))
            made += 1
        with_contrast += made > 0
    return plan, len(groups), with_contrast


KEYS = [bytes([k]) * 20 for k in range(4)] + [b"\x07" * 8 + bytes([k]) * 12 for k in range(3)]  # 3 share 64 bits
summary_fields = st.tuples(
    st.sampled_from(KEYS),
    st.sampled_from([0.0, 0.25, 0.5, 1.0, 0.75]),
    st.integers(0, 6),
    st.sampled_from([b"\x00" * 8, b"\x01" * 8]),
    st.sampled_from([None, "m1", "m2"]),
    st.booleans(),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(fields=st.lists(summary_fields, max_size=40), max_pairs=st.integers(1, 3),
       margin=st.sampled_from([0.25, 0.5, 1.0]), length_match=st.booleans())
def test_array_planner_chooses_what_the_object_planner_chose(fields, max_pairs, margin, length_match):
    summaries = [RowSummary(i, *f) for i, f in enumerate(fields)]
    expected = _old_plan(summaries, max_pairs, margin, length_match)
    got = plan_pairs(iter(summaries), max_pairs_per_prompt=max_pairs, min_margin=margin, length_match=length_match)
    assert got == expected
    report = pairs_mod.pairs_report(iter(got[0]), got[1], got[2], margin)
    assert report == pairs_mod.pairs_report(list(expected[0]), expected[1], expected[2], margin)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(digests=st.lists(st.sampled_from(KEYS), max_size=60))
def test_prompt_groups_are_dense_and_exact_when_64_bits_collide(digests):
    groups, expected = PromptGroups(), {}
    for digest in digests:
        assert groups.group(digest) == expected.setdefault(digest, len(expected))
        assert groups.digest(expected[digest]) == digest
    assert len(groups) == len(expected)


def _old_groups_markdown(rows, limit=50):
    """What ``ScoreStats.groups_markdown`` showed when it kept every group in a dict."""
    from whileai_pipeline.core.scoring import score_facts, verdict

    groups = {}
    for row in rows:
        reward, key = score_facts(row)
        groups.setdefault(key, {"pass": 0, "fail": 0, "ungraded": 0})[verdict(reward)] += 1
    lines = ["| group | rollouts | pass | fail | ungraded | pass rate |", "|---|---:|---:|---:|---:|---:|"]
    for key, g in list(groups.items())[:limit]:
        graded = g["pass"] + g["fail"]
        rate = f"{g['pass'] / graded:.0%}" if graded else "-"
        label = ((key[:60] + "...") if len(key) > 60 else key).replace("|", "\\|").replace("\n", " ") or "(no key)"
        lines.append(f"| {label} | {sum(g.values())} | {g['pass']} | {g['fail']} | {g['ungraded']} | {rate} |")
    if len(groups) > limit:
        lines.append(f"| ... {len(groups) - limit} more groups | | | | | |")
    return "\n".join(lines), len(groups), sum(1 for key in groups if key)


def test_score_stats_keep_the_shown_groups_and_count_the_others_in_typed_arrays():
    """5,000 groups (the keyless one among them, after the shown ones): the same markdown and counts
    as a dict of every group, with at most SHOWN_GROUPS groups held as Python objects."""
    rows = [{"scenario_id": f"s{i % 5000}", "reward": [0, 1, None, 0.5][i % 4]} for i in range(12000)]
    rows[7000] = {"reward": 1}  # no task key
    stats = ScoreStats()
    for row in rows:
        stats.add(row)
    markdown, n_groups, keyed = _old_groups_markdown(rows)
    assert stats.groups_markdown() == markdown
    assert (stats.n_groups, stats.keyed_groups) == (n_groups, keyed) == (5001, 5000)
    for name, value in vars(stats).items():
        assert isinstance(value, COMPACT) or not hasattr(value, "__len__") or len(value) <= SHOWN_GROUPS, name
    # a keyless row among the shown groups is one of them, and not a keyed group
    small = ScoreStats()
    for row in ({"reward": 1}, {"scenario_id": "a", "reward": 0}):
        small.add(row)
    assert (small.n_groups, small.keyed_groups) == (2, 1)
    assert small.groups_markdown() == _old_groups_markdown([{"reward": 1}, {"scenario_id": "a", "reward": 0}])[0]


def test_raw_stats_count_distinct_prompts_and_groups_in_typed_arrays():
    stats = RawStats()
    for i in range(3000):
        stats.add({"prompt": f"p{i % 1000}", "scenario_id": f"s{i % 700}", "steps": [], "final_text": "x"})
    assert (stats.rows, stats.prompts, stats.groups) == (3000, 1000, 700)
    assert isinstance(stats._prompts, KeyIndex) and isinstance(stats._groups, KeyIndex)


def test_pairs_file_report_and_bytes_unchanged_by_the_compact_planner(tmp_path):
    """The file and report ``build_pairs_file`` writes equal the list API's, which the object planner
    made (tests/core/test_pairs_file.py checks the list API against the file over many inputs)."""
    import whileai_pipeline.simulations as wai

    rows = _rows(300, 23)
    src = tmp_path / "scored.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    report = build_pairs_file(src, tmp_path / "pairs.jsonl", max_pairs_per_prompt=2, min_margin=0.3)
    expected_pairs, expected = wai.build_preference_pairs(rows, max_pairs_per_prompt=2, min_margin=0.3)
    summaries = [_summarize(i, r) for i, r in enumerate(rows)]
    old, seen, contrast = _old_plan(summaries, 2, 0.3, True)
    assert [(c.index, r.index) for c, r in old] == [
        (rows.index(p["chosen"]), rows.index(p["rejected"])) for p in expected_pairs]
    assert expected == pairs_mod.pairs_report(old, seen, contrast, 0.3)
    assert {k: v for k, v in report.items() if k not in ("path", "n_written", "sha256")} == expected
    written = [orjson.loads(line) for line in (tmp_path / "pairs.jsonl").read_bytes().splitlines()]
    assert written == [orjson.loads(dumps(p)) for p in expected_pairs]
    assert not math.isnan(report["mean_margin"])


def test_formats_of_one_export_share_one_group_table(tmp_path, monkeypatch):
    """``export_datasets`` in two formats without a pre-scan (a one-shot iterator here; a big file over
    workers too) keeps one ``GroupStats`` for both, and writes what ``export_dataset`` writes per format."""
    import whileai_pipeline.core.sft as sft
    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.groups import GroupStats

    made = []

    class Counted(GroupStats):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(sft, "GroupStats", Counted)
    rows = _rows(200, 9)
    outputs = {fmt: tmp_path / f"both.{fmt}.jsonl" for fmt in ("openai", "trl")}
    reports = wai.export_datasets(iter(rows), outputs, validate=False)
    assert made == [{"spill": True}]
    for fmt, path in outputs.items():
        made.clear()
        report = wai.export_dataset(iter(rows), tmp_path / f"one.{fmt}.jsonl", format=fmt, validate=False)
        assert path.read_bytes() == (tmp_path / f"one.{fmt}.jsonl").read_bytes()
        assert reports[fmt]["groups"] == report["groups"] == 9


def _per_row_bytes(stats, n_rows):
    """Bytes a row of the typed arrays a ``GroupStats`` holds with one entry per row."""
    return sum(value.itemsize for value in vars(stats).values()
               if isinstance(value, array.array) and len(value) == n_rows)


def test_prescan_keeps_each_rows_group_but_not_its_reward_while_rows_are_written(tmp_path):
    """A one-process export's pre-scan (``_Prescan``) needs each row's reward only to compute the group
    statistics; while the rows are written it reads each row's group (4 bytes a row), so the rewards
    (8 bytes a row: 8 MB a million rows) are not kept beside them."""
    import hashlib

    from whileai_pipeline.core.sft import _Prescan

    rows = _rows(300, 7)
    src = tmp_path / "rows.jsonl"
    src.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    scan = _Prescan.of_file(src, hashlib.sha256())
    assert scan.groups.active and scan.groups.n_groups == 7
    assert [scan.groups.row_group(i) for i in range(300)] == [i % 7 for i in range(300)]
    assert list(scan.groups.iter_row_groups()) == [i % 7 for i in range(300)]
    assert _per_row_bytes(scan.groups, 300) == 4


def test_an_export_without_group_fields_keeps_no_byte_per_row(tmp_path, monkeypatch):
    """Unrolled rows carry no group fields (spec 3.11), so nothing is spliced: the tally's flag a training
    row (whether it was written) grew with the rows all the same, a byte each, read by nobody."""
    import whileai_pipeline.core.sft as sft
    import whileai_pipeline.simulations as wai

    tallies = []

    class Kept(sft._SftTally):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            tallies.append(self)

    monkeypatch.setattr(sft, "_SftTally", Kept)
    rows = _rows(120, 5)
    unrolled = wai.export_dataset(iter(rows), tmp_path / "unrolled.jsonl", unroll=True, validate=False)
    assert unrolled["n"] >= 120 and tallies[-1].groups is None and len(tallies[-1].entry_written) == 0
    grouped = wai.export_dataset(iter(rows), tmp_path / "grouped.jsonl", validate=False)
    assert len(tallies[-1].entry_written) == grouped["n"] == 120 and grouped["groups"] == 5
