"""Scorers (core/scoring.py), config mapping and storage naming: fast, no Dagster runs except one
custom-scorer chain."""

import copy
import logging

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from whileai_pipeline.core.scoring import ScorerError, ScoreStats, normalize_answer, resolve_scorer, verdict
from whileai_pipeline.defs.config import ConfigFileError, flat_to_run_config
from whileai_pipeline.defs.resources import (checked_key, fingerprint, meta_path_for, partition_key_for,
                                              partition_key_for_name)

from .conftest import materialization, read_rows

pytestmark = pytest.mark.pipeline


def test_verdict_rule_matches_the_export_report():
    assert [verdict(v) for v in (1, 0.5, 0.49, 0, None, True, "0.7", "x", float("nan"))] == [
        "pass", "pass", "fail", "fail", "ungraded", "ungraded", "pass", "ungraded", "ungraded"]


def test_a_reward_too_big_for_a_float_is_ungraded_as_in_the_export(tmp_path):
    """A 400-digit integer (read exactly from a run) is not float()-able (spec 3.11): the export counts
    it as ungraded, and the scoring step once failed the run with a bare OverflowError."""
    import whileai_pipeline.simulations as wai

    huge = 10 ** 400
    assert verdict(huge) == "ungraded"
    stats = ScoreStats()
    for reward in (huge, 1):
        stats.add({"reward": reward, "scenario_id": "a"})
    assert stats.counts == {"pass": 1, "fail": 0, "ungraded": 1} and stats.mean_reward == 1.0
    report = wai.export_dataset([{"prompt": "p", "final_text": "x", "reward": huge}], tmp_path / "out.jsonl")
    assert report["rewards"] == {"n_pass": 0, "n_fail": 0, "n_ungraded": 1}
    rows = [{"prompt": "p", "final_text": "x" * n, "reward": r} for n, r in ((1, huge), (2, 1), (3, 0))]
    pairs, _ = wai.build_preference_pairs(rows)  # the huge reward is not a score in [0, 1]: not paired
    assert [(p["chosen"]["reward"], p["rejected"]["reward"]) for p in pairs] == [(1, 0)]


def test_existing_keeps_reward_and_stamps_who_scored():
    scorer = resolve_scorer("existing")
    row = {"prompt": "p", "reward": 0, "reason": "r", "label_source": "judge"}
    out = scorer.score_row(row)
    assert out == {**row, "scorer": "existing"}
    assert scorer.score_row({"reward": 1})["label_source"] == "existing"
    assert row == {"prompt": "p", "reward": 0, "reason": "r", "label_source": "judge"}  # input untouched


def test_reference_match_normalizes():
    scorer = resolve_scorer("reference_match")
    row = {"privileged": {"reference": "Paris"}, "final_text": "The capital is  PARIS!"}
    assert scorer.score_row(row)["reward"] == 1.0
    assert scorer.score_row({**row, "final_text": "Lyon"})["reward"] == 0.0
    assert scorer.score_row({**row, "final_text": "Parisian food"})["reward"] == 0.0  # whole words only
    assert scorer.score_row({"final_text": "x"})["reward"] is None
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "paris."}]
    assert scorer.score_row({"privileged": {"reference": "Paris"}, "messages": messages})["reward"] == 1.0
    assert normalize_answer("  Ｐａｒｉｓ,\nFrance ") == "paris france"
    assert scorer.score_row(row)["label_source"] == "reference_match"


def test_reference_match_takes_a_reference_that_is_a_json_number():
    """Found by a review: `{"reference": 42}` (a number in the run's JSON, as math and order-total tasks write
    it) left every row ungraded, so a run whose answers were right half the time published nothing, with
    only the pairing's advice to raise rollouts_per_request."""
    scorer = resolve_scorer("reference_match")
    assert scorer.score_row({"privileged": {"reference": 42}, "final_text": "The total is 42."})["reward"] == 1.0
    assert scorer.score_row({"privileged": {"reference": 42}, "final_text": "The total is 41."})["reward"] == 0.0
    assert scorer.score_row({"privileged": {"reference": 2.5}, "final_text": "2.5 hours"})["reward"] == 1.0
    for not_a_reference in (True, float("nan"), float("inf"), None, ["42"], {"value": 42}):
        assert scorer.score_row({"privileged": {"reference": not_a_reference}, "final_text": "42"})["reward"] is None


@pytest.mark.parametrize("reference, answer, reward", [
    (2.50, "The total is $2.50.", 1.0),  # the run's JSON wrote 2.50: the number is 2.5, whose text is "2.5"
    (3.0, "It takes 3 days.", 1.0),
    (1e3, "It is 1000 units.", 1.0),
    (1000, "It costs 1,000 dollars.", 1.0),
    (42, "The total is 41.42.", 0.0),  # "41 42" once normalized: the word 42 was a pass
    (42, "The balance is -42.", 0.0),
    (5, "It takes 2.5 hours.", 0.0),
    (2.5, "2.5 hours", 1.0),
    (42, "The total is 42.", 1.0),
    (42, "Orders 40-42 shipped.", 1.0),
])
def test_reference_match_compares_a_number_reference_with_the_numbers_of_the_answer(reference, answer, reward):
    """Found by a review: a number reference was matched as its Python text, normalized, so 2.50 (a price, as
    the run's JSON writes it) failed the answer "$2.50" and 3.0 failed "3", while 42 passed "41.42" and "-42"
    (punctuation becomes a space, leaving the word 42): wrong grades, published as passes."""
    row = {"privileged": {"reference": reference}, "final_text": answer}
    assert resolve_scorer("reference_match").score_row(row)["reward"] == reward


@pytest.mark.parametrize("reference, answer, reward", [
    ("42", "The total is 41.42.", 0.0),
    ("42", "The balance is -42.", 0.0),
    ("5", "It takes 2.5 hours.", 0.0),
    ("2.5", "The total is $2.50.", 1.0),
    ("1,000", "It is 1000 units.", 1.0),
    (" 42 ", "The total is 42.", 1.0),
    ("-3", "It fell by -3 degrees.", 1.0),
    ("-3", "It rose by 3 degrees.", 0.0),
    ("007", "Agent 007 reported.", 1.0),  # a leading zero: an identifier, matched as words
    ("007", "Agent 7 reported.", 0.0),
    ("42 apples", "I bought 42 apples.", 1.0),  # not only a number: words
])
def test_reference_match_compares_a_reference_text_that_is_a_number_by_value(reference, answer, reward):
    """A reference that the run stores as text but that is a number ("42", as most datasets keep answers)
    was matched as words: "41.42" and "-42" passed "42" (punctuation becomes a space, leaving the word
    42) and "$2.50" failed "2.5". It is now compared by value, as a JSON number reference is."""
    row = {"privileged": {"reference": reference}, "final_text": answer}
    assert resolve_scorer("reference_match").score_row(row)["reward"] == reward


@pytest.mark.parametrize("reference, answer, reward", [
    ("5 apples", "I ate 2.5 apples.", 0.0),  # "2 5 apples" once a decimal point became a space
    ("2.5 apples", "I ate 2.5 apples.", 1.0),
    ("000 people", "About 1,000 people came.", 0.0),
    ("Paris, France", "It is Paris, France.", 1.0),  # a comma not between digits is still punctuation
])
def test_reference_match_keeps_a_decimal_point_between_digits(reference, answer, reward):
    row = {"privileged": {"reference": reference}, "final_text": answer}
    assert resolve_scorer("reference_match").score_row(row)["reward"] == reward


def test_reference_match_grades_the_answer_not_the_reasoning_before_it():
    """Found by a review: the final answer was matched with its ``<think>`` block, so a reply that thought
    of the reference and then answered something else ("<think>42? no.</think>41") was graded a pass,
    and the exports (strip_think on by default) published "41" as a correct answer."""
    scorer = resolve_scorer("reference_match")
    ref = {"privileged": {"reference": "42"}}
    assert scorer.score_row({**ref, "final_text": "<think>Is it 42? No.</think>The answer is 41."})["reward"] == 0.0
    assert scorer.score_row({**ref, "final_text": "<THINK>41?</THINK>\n The answer is 42."})["reward"] == 1.0
    # a final_text that is only reasoning is no answer: the last assistant turn's is taken, as for an empty one
    messages = [{"role": "assistant", "content": "<think>maybe 42</think>It is 41."}]
    assert scorer.score_row({**ref, "final_text": "<think>42</think>", "messages": messages})["reward"] == 0.0
    assert scorer.score_row({**ref, "final_text": "<think>42</think>"})["reward"] == 0.0


def test_a_new_scorer_replaces_the_old_graders_verdict_not_only_its_reward(tmp_path, monkeypatch):
    """Re-scoring once kept the old grader's ``grader_reason`` (which the export prefers to ``reason``),
    its ``reason`` when the scorer gave none, and its ``judge_status``/``judge_name``/``judge_meta``: a
    row re-scored 0.0 was exported with "passed the policy check", and a row the old grader timed out
    on stayed out of every pair although the new scorer graded it."""
    import whileai_pipeline.simulations as wai

    (tmp_path / "bare_scorers.py").write_text("def zero(row):\n    return 0.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graded = {"prompt": "p", "final_text": "Lyon", "privileged": {"reference": "Paris"}, "reward": 1,
              "reason": "old reason", "grader_reason": "passed the policy check", "judge_status": "timeout",
              "judge_name": "old-grader", "judge_meta": {"latency_s": 30}, "label_source": "old-grader"}
    out = resolve_scorer("reference_match").score_row(graded)
    assert out["reward"] == 0.0
    assert out["reason"] == "reference_match: the final answer does not contain the reference"
    assert "grader_reason" not in out and "judge_meta" not in out
    assert (out["judge_status"], out["judge_name"]) == ("ok", "reference_match")
    bare = resolve_scorer("bare_scorers:zero").score_row(graded)
    assert bare["reward"] == 0.0 and "reason" not in bare and "grader_reason" not in bare
    assert (bare["judge_status"], bare["judge_name"]) == ("ok", "bare_scorers:zero")
    ungraded = resolve_scorer("reference_match").score_row({**graded, "privileged": {}})
    assert ungraded["reward"] is None and ungraded["judge_status"] == "missing_reward"
    # what the export makes of it: the new scorer's verdict, nothing of the old grader's
    row = wai.training_rows([bare])[0]
    assert row["reward"] == 0.0 and "reason" not in row and row["judge_name"] == "bare_scorers:zero"
    assert "passed the policy check" not in str(row) and "old reason" not in str(row)
    # existing keeps the row's own verdict, all of it
    kept = resolve_scorer("existing").score_row(graded)
    assert {k: kept[k] for k in graded} == graded


def test_a_scorer_giving_nan_or_inf_marks_the_row_missing_reward_as_its_stage_line_says(tmp_path, monkeypatch):
    """A NaN or infinite reward is written as null (DECISIONS 1) and counted ungraded, so the row's
    judge_status must not say "ok" (a graded row) beside ``"reward": null``."""
    from whileai_pipeline.core.jsonl import read_jsonl
    from whileai_pipeline.core.scoring import score_file

    (tmp_path / "non_finite_scorers.py").write_text(
        "def nan(row):\n    return float('nan')\n"
        "def inf(row):\n    return {'reward': float('inf'), 'reason': 'overflowed'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    src = tmp_path / "s.jsonl"
    src.write_text('{"prompt": "p", "reward": 1.0, "judge_status": "ok", "judge_name": "old"}\n')
    for spec in ("non_finite_scorers:nan", "non_finite_scorers:inf"):
        out, stats = tmp_path / f"{spec.split(':')[1]}.jsonl", ScoreStats()
        with open(out, "wb") as fh:
            score_file(str(src), fh, resolve_scorer(spec), stats)
        (row,) = read_jsonl(out)
        assert row["reward"] is None and stats.counts["ungraded"] == 1
        assert (row["judge_status"], row["judge_name"]) == ("missing_reward", spec)


def test_callable_scorer(tmp_path, monkeypatch):
    (tmp_path / "my_scorers.py").write_text(
        "def half(row):\n    return 0.5\n"
        "def with_reason(row):\n    return {'reward': 1 if 'ok' in row.get('final_text', '') else 0, 'reason': 'kw'}\n"
        "def bad(row):\n    return 'high'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_scorer("my_scorers:half").score_row({})["reward"] == 0.5
    out = resolve_scorer("my_scorers:with_reason").score_row({"final_text": "ok"})
    assert (out["reward"], out["reason"], out["scorer"], out["label_source"]) == (1, "kw", "my_scorers:with_reason",
                                                                                   "my_scorers:with_reason")
    with pytest.raises(ScorerError, match="returned str"):
        resolve_scorer("my_scorers:bad").score_row({})
    for spec in ("nope", "my_scorers:missing", "no_such_module_xyz:f", "a:b:c"):
        with pytest.raises(ScorerError):
            resolve_scorer(spec)


def test_score_stats():
    stats = ScoreStats()
    for reward, sid in [(1, "a"), (0, "a"), (None, "b"), (0.5, "b")]:
        stats.add({"reward": reward, "scenario_id": sid})
    assert stats.counts == {"pass": 2, "fail": 1, "ungraded": 1}
    assert stats.mean_reward == 0.5
    assert "| a | 2 | 1 | 1 | 0 | 50% |" in stats.groups_markdown()


def test_flat_config_maps_to_each_asset():
    rc = flat_to_run_config({"validate": False, "formats": "trl", "scorer": "reference_match",
                             "min_margin": 0.5, "on_bad_line": "quarantine", "sft_rows": "all"})
    assert rc["ops"]["sft_export"]["config"] == {"validate": False, "formats": ["trl"], "sft_rows": "all"}
    assert rc["ops"]["dpo_export"]["config"] == {"validate": False, "formats": ["trl"]}
    assert rc["ops"]["scored_simulation_data"]["config"] == {"scorer": "reference_match"}
    assert rc["ops"]["preference_pairs"]["config"] == {"min_margin": 0.5}
    assert rc["ops"]["raw_simulation_data"]["config"] == {"on_bad_line": "quarantine"}
    assert flat_to_run_config({}) == {}
    passthrough = {"ops": {"sft_export": {"config": {"unroll": True}}}}
    assert flat_to_run_config(passthrough) is passthrough
    assert flat_to_run_config({"judge_concurrency": 8}) == {"ops": {"preference_pairs": {"config": {
        "judge_concurrency": 8}}}}
    for bad in ({"nope": 1}, {"mask_mode": "all"}, {"formats": ["csv"]}, {"min_margin": 0},
                {"scorer": "magic"}, {"judge": "nocolon"}, {"sft_rows": "some"}, {"judge_concurrency": 0},
                {"max_tool_output_chars": -5}, {"min_margin": float("inf")}, {"judge_timeout": 0},
                {"judge_timeout": -1}, [1]):
        with pytest.raises(ConfigFileError):
            flat_to_run_config(bad)
    # Dagster's own form gets the same value checks (Dagster alone checks types, not values)
    for op, values in (("preference_pairs", {"min_margin": -1}), ("sft_export", {"mask_mode": "all"}),
                       ("sft_export", {"formats": ["csv"]})):
        with pytest.raises(ConfigFileError, match=f"^bad value for {op}: |mask_mode must be one of"):
            flat_to_run_config({"ops": {op: {"config": values}}})
    good = {"ops": {"preference_pairs": {"config": {"min_margin": 0.5}}}}
    assert flat_to_run_config(good) == good


@pytest.mark.parametrize("options, said", [
    ({"ops": {"sft_exprt": {"config": {"mask_mode": "final"}}}},
     "unknown asset 'sft_exprt' under ops: (did you mean 'sft_export'?); the assets that take options: "
     "raw_simulation_data, scored_simulation_data, preference_pairs, sft_export, dpo_export"),
    ({"ops": {"sft_export": {"config": {"mask_mod": "final"}}}},
     "unknown option 'mask_mod' under ops: sft_export: config: (did you mean 'mask_mode'?); sft_export's options: "
     "formats, mask_mode, unroll, strip_think, max_tool_output_chars, validate, sft_rows"),
    ({"ops": {"dpo_export": {"config": {"validate_gates": False}}}},  # the field's name, not its run config key
     "unknown option 'validate_gates' under ops: dpo_export: config: (did you mean 'validate'?)"),
    ({"ops": {"preference_pairs": {"config": {"zzz": 1}}}}, "unknown option 'zzz' under ops: preference_pairs: "
     "config:; preference_pairs's options: max_pairs_per_prompt, "),
    ({"opps": {"sft_export": {"config": {}}}}, "unknown option(s) ['opps'] (did you mean 'ops' for 'opps'?)"),
])
def test_a_misspelled_name_in_an_ops_file_is_named_with_the_likely_one(options, said):
    """Dagster's own error for these printed the whole job's config schema on one line."""
    with pytest.raises(ConfigFileError) as raised:
        flat_to_run_config(options)
    assert str(raised.value).startswith(said)


def test_names_in_an_ops_file_that_are_ops_of_the_job_or_close_to_no_asset_are_left_to_dagster():
    """The gates' checks are ops of the job too; a name like no asset's gets Dagster's own error."""
    import dagster as dg

    from whileai_pipeline.definitions import defs

    job = defs.resolve_job_def("simulation_chain")
    checks = {"ops": {"sft_export_privileged_leak": {}, "dpo_export_consumer_format": {"config": {}}}}
    assert flat_to_run_config(checks) is checks
    assert dg.validate_run_config(job, checks)
    elsewhere = {"ops": {"totally_other": {"config": {}}}}
    assert flat_to_run_config(elsewhere) is elsewhere
    with pytest.raises(dg.DagsterInvalidConfigError, match="totally_other"):
        dg.validate_run_config(job, elsewhere)


def test_partition_keys_and_sidecars(tmp_path):
    assert partition_key_for("runs/My Run (v2).jsonl") == "My_Run_v2"
    assert partition_key_for("a.b.jsonl") == "a.b"
    assert partition_key_for("x.json") == "x"
    assert meta_path_for(tmp_path / "r.jsonl") == tmp_path / "r.meta.json"
    run = tmp_path / "r.jsonl"
    run.write_bytes(b'{"a": 1}\n')
    import hashlib

    assert fingerprint(run) == hashlib.sha256(b'{"a": 1}\n').hexdigest()
    (tmp_path / "r.meta.json").write_text("{}")
    assert fingerprint(run) != hashlib.sha256(b'{"a": 1}\n').hexdigest()
    with pytest.raises(ValueError):
        partition_key_for("....jsonl")



def test_names_given_by_the_user_keep_their_dots():
    """``--name nightly.2026-01-01`` and ``--name nightly.2026-01-02`` were both cut to ``nightly``."""
    assert partition_key_for_name("nightly.2026-01-01") == "nightly.2026-01-01"
    assert partition_key_for_name("v1.5") == "v1.5"
    assert partition_key_for_name("night.jsonl") == "night"
    assert partition_key_for_name("My Run (v2)") == "My_Run_v2"
    with pytest.raises(ValueError, match="cannot make a run name of '日本'"):
        partition_key_for_name("日本")


@settings(deadline=None)  # a pure function: Hypothesis' 200 ms deadline would only measure the machine's load
@given(st.text(min_size=1, max_size=260))
@example("a" * 199 + " tail")  # cut at 200 right after the "_" that stands for the space
@example("b" * 199 + ".c")
def test_a_key_is_a_safe_folder_name_and_its_inbox_file_gives_it_back(name):
    """The inbox sensor derives the key of ``inbox/<key>.jsonl``: it must be the key again (a 200-character
    cut ending in ``_`` used to give a second partition)."""
    for derive in (partition_key_for_name, lambda n: partition_key_for(n + ".jsonl")):
        try:
            key = derive(name)
        except ValueError:
            continue
        assert checked_key(key) == key
        assert partition_key_for(f"{key}.jsonl") == key == partition_key_for_name(key)


@pytest.mark.parametrize("key", ["../escape", "a/b", ".hidden", "x-", "", "x" * 201, "a b"])
def test_keys_that_are_not_safe_folder_names_are_refused_by_every_path(storage, key):
    """A partition added by hand in the UI or the API must not put files outside their folders."""
    for path_of in (storage.stage_dir, storage.published_dir, storage.rejected_root, storage.run_path,
                    storage.run_meta_path):
        with pytest.raises(ValueError, match=r"is not a run name this pipeline can store .* add runs with "
                                             r"`whileai-pipeline register FILE` or through the inbox"):
            path_of(key)


def test_register_replaces_a_stale_sidecar(storage, tmp_path):
    src = tmp_path / "r.jsonl"
    src.write_bytes(b'{"a": 1}\n')
    (tmp_path / "r.meta.json").write_text('{"system_prompt": "S"}')
    key = storage.register(src)
    assert storage.run_meta_path(key).is_file()
    (tmp_path / "r.meta.json").unlink()
    storage.register(src)
    assert not storage.run_meta_path(key).exists()


def test_chain_with_reference_match_and_custom_scorer(chain, tmp_path, monkeypatch):
    (tmp_path / "sample_scorers.py").write_text(
        "def looked_up(row):\n"
        "    calls = [s.get('tool') for s in row.get('steps') or [] if s.get('tool')]\n"
        "    return {'reward': 1.0 if calls[:1] == ['lookup_order'] else 0.0, 'reason': 'lookup first'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    key = chain.register()
    result = chain.materialize(
        key,
        run_config={"ops": {"scored_simulation_data": {"config": {"scorer": "sample_scorers:looked_up"}}}},
        selection=["raw_simulation_data", "scored_simulation_data"],
    )
    assert result.success
    md = materialization(result, "scored_simulation_data")
    assert md["scorer"].value == "sample_scorers:looked_up"
    rows = read_rows(chain.storage.stage_path(key, "scored"))
    assert {r["label_source"] for r in rows} == {"sample_scorers:looked_up"}
    assert md["passes"].value == sum(1 for r in rows if r["reward"] == 1.0)

    ref = chain.materialize(
        key, run_config={"ops": {"scored_simulation_data": {"config": {"scorer": "reference_match"}}}},
        selection=["scored_simulation_data"],
    )
    assert ref.success
    # the sample's references are policy sentences, never the literal reply: everything fails
    assert materialization(ref, "scored_simulation_data")["passes"].value == 0


def test_pairwise_judge_and_ties(chain, tmp_path, monkeypatch):
    (tmp_path / "sample_judges.py").write_text(
        "def tool_user(a, b):\n"
        "    used = lambda r: any(s.get('tool') == 'lookup_order' for s in r.get('steps') or [])\n"
        "    return {'winner': 'A' if used(a) >= used(b) else 'B', 'reason': 'looked it up'}\n"
        "def always_a(a, b):\n"
        "    return {'winner': 'A', 'reason': 'first one'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    key = chain.register()
    consistent = chain.materialize(key, run_config={"ops": {"preference_pairs": {"config": {"judge": "sample_judges:tool_user"}}}})
    assert consistent.success
    md = materialization(consistent, "preference_pairs")
    assert md["judge_report"].value["n_judged"] == md["pairs"].value == 8
    # the one prompt with no order number has no tool call on either side: the judge cannot separate
    # them, answers "A" both ways, and that position flip makes the pair a tie
    assert md["ties"].value == 1
    dpo = materialization(consistent, "dpo_export")
    assert (dpo["openai/pairs"].value, dpo["openai/ties_dropped"].value) == (7, 1)
    judged_pairs = chain.storage.stage_path(key, "pairs").read_bytes()
    threaded = chain.materialize(key, run_config={"ops": {"preference_pairs": {"config": {
        "judge": "sample_judges:tool_user", "judge_concurrency": 4}}}}, selection=["preference_pairs"])
    assert threaded.success  # four pairs asked at once: the same pairs file, in the same order
    assert chain.storage.stage_path(key, "pairs").read_bytes() == judged_pairs

    # a judge that always answers "A" flips under the swap: every pair is a tie and is dropped
    biased = chain.materialize(key, run_config={"ops": {"preference_pairs": {"config": {"judge": "sample_judges:always_a"}}}})
    assert biased.success
    assert materialization(biased, "preference_pairs")["ties"].value == 8
    dpo = materialization(biased, "dpo_export")
    assert dpo["openai/ties_dropped"].value == 8 and dpo["openai/pairs"].value == 0
    assert dpo["status"].value == "nothing to publish"
    # the earlier published DPO file is left as it was (nothing new to publish)
    assert chain.storage.published_path(key, "dpo", "openai").is_file()


def test_a_judge_that_never_answers_fails_the_pairs_step_and_one_that_sometimes_fails_warns(chain, tmp_path,
                                                                                            monkeypatch):
    (tmp_path / "flaky_judges.py").write_text(
        "calls = []\n"
        "def broken(a, b):\n"
        "    raise RuntimeError('OPENAI_API_KEY is not set')\n"
        "def flaky(a, b):\n"
        "    calls.append(1)\n"
        "    if len(calls) <= 2:\n"
        "        raise TimeoutError('judge timed out')\n"
        "    return {'winner': 'A', 'reason': 'ok'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    key = chain.register()
    assert chain.materialize(key).success
    pairs = chain.storage.stage_path(key, "pairs")
    before = pairs.read_bytes()

    def judge(spec):
        return {"ops": {"preference_pairs": {"config": {"judge": spec}}}}

    broken = chain.materialize(key, run_config=judge("flaky_judges:broken"))
    assert not broken.success
    assert pairs.read_bytes() == before  # a re-export must not publish the unjudged pairs of the failed step
    assert [p.name for p in pairs.parent.iterdir() if p.name.startswith(".")] == []
    failure = next(e for e in broken.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "preference_pairs"
    assert ("judge_failed: the judge flaky_judges:broken could not judge 8 of 8 pairs (first: RuntimeError: "
            "OPENAI_API_KEY is not set). Fix the judge") in failure.event_specific_data.error.message
    assert "dpo_export" not in {e.step_key for e in broken.all_events if e.event_type_value == "STEP_START"}
    flaky = chain.materialize(key, run_config=judge("flaky_judges:flaky"), selection=["preference_pairs"])
    assert flaky.success
    assert materialization(flaky, "preference_pairs")["judge_report"].value["failed"] == 1
    warnings = [e.message for e in chain.instance.all_logs(flaky.run_id) if "could not judge" in (e.message or "")]
    assert any("the judge flaky_judges:flaky could not judge 1 of 8 pairs (first: TimeoutError: judge timed out)"
               in w for w in warnings), warnings


def test_the_scored_stage_counts_what_it_writes_and_names_a_scorer_failure(chain, tmp_path, monkeypatch):
    """Found by a review: an infinite reward was counted as a pass but written as null (DECISIONS 1), rows
    with no task key were counted as one more group, a scorer returning a numpy number was refused, and
    a scorer that raised failed the step without saying which scorer, file or line."""
    from whileai_pipeline.core.scoring import score_file, score_stats_of_file

    (tmp_path / "odd_scorers.py").write_text(
        "import numpy\n"
        "def numpy_reward(row):\n"
        "    return numpy.float32(1.0) if row.get('final_text') == 'b' else numpy.int64(0)\n"
        "def crashing(row):\n"
        "    return 1 / 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [{"prompt": "p", "final_text": "a", "reward": float("inf")},
            {"prompt": "p", "final_text": "b", "reward": 1},
            {"final_text": "no task key", "reward": 0}]
    run = tmp_path / "run.jsonl"
    run.write_bytes(b'{"prompt": "p", "final_text": "a", "reward": Infinity}\n'
                    b'{"prompt": "p", "final_text": "b", "reward": 1}\n'
                    b'{"final_text": "no task key", "reward": 0}\n[1, 2]\n')
    stats = ScoreStats()
    with open(tmp_path / "scored.jsonl", "wb") as out:
        score_file(run, out, resolve_scorer("existing"), stats)
    assert stats.counts == score_stats_of_file(tmp_path / "scored.jsonl").counts == {
        "pass": 1, "fail": 1, "ungraded": 1}
    with pytest.raises(ScorerError, match=r"^scorer odd_scorers:crashing failed on .*run\.jsonl:1: "
                                          r"ZeroDivisionError: division by zero \(raised at .*odd_scorers\.py:5 "
                                          r"in crashing\)$"), \
            open(tmp_path / "crashed.jsonl", "wb") as out:
        score_file(run, out, resolve_scorer("odd_scorers:crashing"), ScoreStats())

    key = chain.register(rows)
    result = chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data"])
    assert result.success
    md = materialization(result, "scored_simulation_data")
    assert (md["passes"].value, md["fails"].value, md["ungraded"].value, md["groups"].value) == (1, 1, 1, 1)
    numpy_run = chain.materialize(
        key, run_config={"ops": {"scored_simulation_data": {"config": {"scorer": "odd_scorers:numpy_reward"}}}},
        selection=["scored_simulation_data"])
    assert numpy_run.success
    assert [r["reward"] for r in read_rows(chain.storage.stage_path(key, "scored"))] == [0, 1.0, 0]


def test_a_scorer_reason_object_keeps_the_privileged_reference_out_of_the_exports(chain, tmp_path, monkeypatch):
    """Found by a review: a scorer's reason object was turned into its Python repr as the row was scored, so a
    reference it held was text the exports could no longer scrub (DECISIONS 8): it was published in every
    SFT row's `reason` and every pair's `chosen_reason` / `rejected_reason`. It is scrubbed, then made text
    (one type in the column, as datasets wants it)."""
    (tmp_path / "explaining_scorers.py").write_text(
        "def with_reference(row):\n"
        "    ok = row.get('reward') == 1\n"
        "    return {'reward': 1.0 if ok else 0.0,\n"
        "            'reason': {'verdict': 'ok' if ok else 'bad', 'reference': row['privileged']['reference']}}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    key = chain.register()
    result = chain.materialize(key, run_config={"ops": {"scored_simulation_data": {"config": {
        "scorer": "explaining_scorers:with_reference"}}}})
    assert result.success
    references = {r["privileged"]["reference"] for r in read_rows(chain.storage.stage_path(key, "raw"))}
    published = sorted(chain.storage.published_dir(key).glob("*.jsonl"))
    assert [p.name for p in published] == ["dpo.openai.jsonl", "dpo.trl.jsonl", "sft.openai.jsonl", "sft.trl.jsonl"]
    for path in published:
        body = path.read_text()
        assert not [ref for ref in references if ref in body], path.name
    sft = read_rows(chain.storage.published_path(key, "sft", "openai"))
    assert {r["reason"] for r in sft} == {"{'verdict': 'ok'}"}
    dpo = read_rows(chain.storage.published_path(key, "dpo", "openai"))
    assert {(p["chosen_reason"], p["rejected_reason"]) for p in dpo} == {("{'verdict': 'ok'}", "{'verdict': 'bad'}")}


def test_a_scorer_that_changes_the_row_it_is_given_changes_nothing_that_is_written(chain, tmp_path, monkeypatch):
    """Found by a review: "the row passed in is a copy" was a shallow copy, so a scorer that tidied the row
    it was given (cleared `privileged` so as not to read it, appended a message) changed the scored stage:
    every row lost its privileged block and the leak gates of both exports had nothing to read."""
    (tmp_path / "tidy_scorers.py").write_text(
        "def tidy(row):\n"
        "    row['privileged'].clear()\n"
        "    row['messages'].append({'role': 'assistant', 'content': 'scratch'})\n"
        "    row['lineage']['seen_by'] = 'tidy'\n"
        "    return row.get('reward')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from whileai_pipeline.core.scoring import resolve_scorer

    given = {"reward": 1, "privileged": {"reference": "R"}, "messages": [], "lineage": {}}
    row = copy.deepcopy(given)
    assert resolve_scorer("tidy_scorers:tidy").score_row(row) == {
        **given, "label_source": "tidy_scorers:tidy", "scorer": "tidy_scorers:tidy", "judge_status": "ok",
        "judge_name": "tidy_scorers:tidy"}
    assert row == given
    key = chain.register()
    result = chain.materialize(key, run_config={"ops": {"scored_simulation_data": {"config": {
        "scorer": "tidy_scorers:tidy"}}}})
    assert result.success
    raw = read_rows(chain.storage.stage_path(key, "raw"))
    scored = read_rows(chain.storage.stage_path(key, "scored"))
    drop = ("scorer", "label_source", "judge_status", "judge_name", "reason", "grader_reason", "judge_meta")
    assert [{k: v for k, v in r.items() if k not in drop} for r in scored] == [
        {k: v for k, v in r.items() if k not in drop} for r in raw]
    for asset in ("sft_export", "dpo_export"):
        assert materialization(result, asset)["openai/rows_checked"].value > 0, asset


def _pairs_staged(chain):
    """The sample run registered and taken up to its unjudged pairs stage; returns its key."""
    key = chain.register()
    assert chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data",
                                             "preference_pairs"]).success
    return key


def test_a_judge_that_never_answers_fails_the_step_after_judge_timeout(chain, tmp_path, monkeypatch):
    """A stalled connection to a judge model held the preference_pairs step (and the run's lock) for good. Now
    each call waits judge_timeout seconds, and five unanswered calls in a row end the step."""
    (tmp_path / "stalled_judges.py").write_text(
        "import time\n"
        "def stalled(a, b):\n"
        "    time.sleep(5)\n"
        "    return {'winner': 'A'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    key = _pairs_staged(chain)
    unjudged = chain.storage.stage_path(key, "pairs").read_bytes()
    result = chain.materialize(key, run_config={"ops": {"preference_pairs": {"config": {
        "judge": "stalled_judges:stalled", "judge_timeout": 0.1}}}}, selection=["preference_pairs"])
    assert not result.success
    (failure,) = [e.step_failure_data.user_failure_data.description for e in result.all_events
                  if e.event_type_value == "STEP_FAILURE"]
    assert failure == ("judge_stalled: the judge stalled answered none of 5 calls in a row within 0.1 s each; judging "
                       "stopped there. Check that the judge's model or endpoint is up, or raise the timeout "
                       "(judge_timeout) if it is that slow. The previous pairs are unchanged."), failure
    assert chain.storage.stage_path(key, "pairs").read_bytes() == unjudged


def test_a_judge_that_changes_the_rows_it_is_given_changes_no_pair(chain, tmp_path, monkeypatch):
    """Found by a review: the judge was handed the pair's own rows, so one that kept the privileged block from
    the model it asks (``a.pop('privileged')``) removed it from the pairs stage: the DPO leak gate then had
    nothing to read and passed with NOTHING TO READ."""
    (tmp_path / "careful_judges.py").write_text(
        "def careful(a, b):\n"
        "    a.pop('privileged', None)\n"
        "    b.pop('privileged', None)\n"
        "    a['steps'].clear()\n"
        "    return {'winner': 'A' if a['reward'] > b['reward'] else 'B', 'reason': 'higher'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    key = _pairs_staged(chain)
    unjudged = read_rows(chain.storage.stage_path(key, "pairs"))
    result = chain.materialize(key, run_config={"ops": {"preference_pairs": {"config": {
        "judge": "careful_judges:careful", "judge_concurrency": 4}}}},
        selection=["preference_pairs", "dpo_export"])
    assert result.success
    judged = read_rows(chain.storage.stage_path(key, "pairs"))
    assert [{k: v for k, v in p.items() if k not in ("pairwise", "tie")} for p in judged] == unjudged
    assert all(p["chosen"]["privileged"] and p["chosen"]["steps"] for p in judged)
    assert materialization(result, "dpo_export")["openai/rows_checked"].value == len(judged) > 0


def test_a_module_function_scorer_reports_progress_after_every_row(tmp_path, monkeypatch):
    """Found by a review: a user's scorer (often a call to a rate-limited model, seconds a row) reported
    progress every 500 rows, as the built-in ones do, so the first progress line of a slow scorer came
    minutes into the step."""
    from whileai_pipeline.core.scoring import score_file

    (tmp_path / "slow_scorers.py").write_text("def one(row):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run.jsonl"
    run.write_bytes(b'{"prompt": "p", "final_text": "a"}\n[1]\n{"prompt": "p", "final_text": "b"}\n')
    done = []
    with open(tmp_path / "scored.jsonl", "wb") as out:
        score_file(run, out, resolve_scorer("slow_scorers:one"), ScoreStats(), progress=done.append)
    assert done == [1, 2]


def test_a_scorer_failing_on_a_row_fails_the_step_saying_what_to_do(chain, tmp_path, monkeypatch):
    """Found by a review: the failure named the scorer, file and line but not what to do, nor that the
    scored stage (what the exports read) was left as it was."""
    (tmp_path / "picky_scorers.py").write_text(
        "def picky(row):\n"
        "    if row['final_text'] == 'boom':\n"
        "        raise KeyError('answer')\n"
        "    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [{"prompt": "p", "final_text": "fine", "reward": 1}, {"prompt": "p", "final_text": "boom", "reward": 0}]
    key = chain.register(rows, meta=False)
    assert chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data"]).success
    scored = chain.storage.stage_path(key, "scored")
    before = scored.read_bytes()
    result = chain.materialize(key, run_config={"ops": {"scored_simulation_data": {"config": {
        "scorer": "picky_scorers:picky"}}}}, selection=["scored_simulation_data"])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    raw = chain.storage.stage_path(key, "raw")
    assert (f"scorer picky_scorers:picky failed on {raw}:2: KeyError: 'answer' (raised at "
            f"{tmp_path / 'picky_scorers.py'}:3 in picky). Fix the scorer (or set another "
            "one in the run config) and materialize again; the scored stage is unchanged."
            ) in failure.event_specific_data.error.message
    assert scored.read_bytes() == before


def test_a_scorer_that_raises_is_named_with_where_in_its_code_it_failed(tmp_path, monkeypatch):
    """Found by a review: the step's failure said `KeyError: 'answer'` and the line of the run, but not where in
    the scorer: its traceback was dropped (the failure's stack shows only the pipeline's frames), so a scorer
    of a few hundred lines had to be debugged by guessing."""
    from whileai_pipeline.core.scoring import score_file

    (tmp_path / "deep_scorers.py").write_text(
        "import json\n"
        "def helper(row):\n"
        "    return row['privileged']['answer']\n"
        "def deep(row):\n"
        "    return helper(row)\n"
        "def parses(row):\n"
        "    return json.loads(row['final_text'])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run.jsonl"
    run.write_bytes(b'{"prompt": "p", "final_text": "not json", "privileged": {}}\n')
    where = tmp_path / "deep_scorers.py"
    for spec, said in (("deep_scorers:deep", f"KeyError: 'answer' (raised at {where}:3 in helper)"),
                       # raised in a library it calls: where, and the scorer's own line that called it
                       ("deep_scorers:parses", f"(raised at {json_decoder()}:")):
        with pytest.raises(ScorerError) as failed, open(tmp_path / "scored.jsonl", "wb") as out:
            score_file(run, out, resolve_scorer(spec), ScoreStats())
        assert said in str(failed.value), str(failed.value)
    assert str(failed.value).endswith(f", called from {where}:7 in parses)"), str(failed.value)


def json_decoder():
    import json.decoder

    return json.decoder.__file__


@pytest.mark.parametrize("module", ["my_scorers.py", "./my_scorers.py", "scorers/my_scorers.py", ".my_scorers"])
def test_a_scorer_or_judge_named_by_its_file_says_to_name_its_module(tmp_path, monkeypatch, module):
    """Found by a review: `scorer: my_scorers.py:score`, the first thing many write, failed with `No module named
    'my_scorers.py'; 'my_scorers' is not a package` (no advice), and `./my_scorers.py:score` with Python's
    `the 'package' argument is required to perform a relative import`."""
    from whileai_pipeline.core.scoring import load_callable

    (tmp_path / "my_scorers.py").write_text("def score(row):\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    for call in (lambda: resolve_scorer(f"{module}:score"), lambda: load_callable(f"{module}:score", "judge")):
        with pytest.raises(ScorerError) as refused:
            call()
        assert (f"{module!r} is not a module name: name the module, 'my_scorers:score', and put the folder that "
                "holds my_scorers.py on PYTHONPATH (PYTHONPATH=. for the working directory)") in str(refused.value)


def test_a_scorer_that_grades_no_row_says_so_in_the_scored_step(chain, tmp_path, monkeypatch):
    """Found by a review: a scorer that left every row ungraded (reference_match on rows with no reference, a
    user's scorer returning None, rows with no reward under `existing`) let the run succeed with nothing
    published, and the one advice in the log was the pairing's "raise rollouts_per_request"."""
    (tmp_path / "silent_scorers.py").write_text("def silent(row):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [{"prompt": "p", "final_text": t} for t in ("a", "bb", "ccc")]
    key = chain.register(rows, meta=False)
    for scorer, advice in (
            ("existing", "the rows carry no numeric reward: set a scorer (reference_match or module:function)"),
            ("reference_match", "no row has a privileged.reference (text or a number) to compare its answer with"),
            ("silent_scorers:silent", "it returned None (or NaN) for every row")):
        result = chain.materialize(key, run_config={"ops": {"scored_simulation_data": {"config": {"scorer": scorer}}}},
                                   selection=["raw_simulation_data", "scored_simulation_data"])
        assert result.success
        warnings = [e.message for e in chain.instance.all_logs(result.run_id)
                    if e.level == logging.WARNING and e.step_key == "scored_simulation_data"]
        assert warnings == [f"scorer {scorer} graded none of the 3 rows: {advice}. No row passes, so the SFT "
                            "export (sft_rows: pass) and the preference pairs will be empty."], warnings
        assert materialization(result, "scored_simulation_data")["warning"].value == warnings[0]
    rows[0]["reward"] = 1
    key = chain.register(rows, meta=False)
    result = chain.materialize(key, selection=["raw_simulation_data", "scored_simulation_data"])
    assert not [e for e in chain.instance.all_logs(result.run_id)
                if e.level == logging.WARNING and e.step_key == "scored_simulation_data"]
    assert "warning" not in materialization(result, "scored_simulation_data")


def test_a_nan_in_tool_arguments_fails_the_round_trip_gate_as_the_library_does_on_the_run(chain, tmp_path):
    """The scored stage wrote the row with orjson, which makes NaN null (DECISIONS 1): the exports then read
    {"order_id": null}, passed the round-trip gate and published a call the agent never made, where the
    library, reading the run itself, refuses it (DECISIONS 3)."""
    import json

    import whileai_pipeline.simulations as wai
    from whileai_pipeline.defs.partitions import PARTITIONS_NAME

    from .conftest import _passing_tool_row, check_results, sample_rows

    rows = copy.deepcopy(sample_rows())
    i = _passing_tool_row(rows)
    for message in rows[i]["messages"]:
        for call in message.get("tool_calls") or []:
            call["arguments"] = {"order_id": float("nan"), "limits": [1, float("inf")]}
    run = tmp_path / "incoming" / "nan_args.jsonl"
    run.parent.mkdir()
    run.write_text("".join(json.dumps(row) + "\n" for row in rows))  # NaN / Infinity tokens, as json writes them
    with pytest.raises(wai.RoundtripInvalidError):
        wai.export_datasets(run, {"openai": tmp_path / "lib.openai.jsonl", "trl": tmp_path / "lib.trl.jsonl"})
    key = chain.storage.register(run)
    chain.instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
    result = chain.materialize(key)
    assert not result.success
    checks = check_results(result)
    assert not checks[("sft_export", "tool_call_roundtrip")].passed
    assert not (chain.storage.published_dir(key) / "sft.openai.jsonl").exists()
    scored = read_rows(chain.storage.stage_path(key, "scored"))
    texts = [call["arguments"] for m in scored[i]["messages"] for call in m.get("tool_calls") or []]
    assert texts and all(t == '{"order_id": NaN, "limits": [1, Infinity]}' for t in texts)  # kept, as text
    # the same bytes as the library writes from the run itself (validate=False), the scorer's keys aside
    lib = wai.export_dataset(run, tmp_path / "lib.jsonl", validate=False)
    staged = wai.export_dataset(chain.storage.stage_path(key, "scored"), tmp_path / "staged.jsonl", validate=False)
    assert staged["tool_call_roundtrip"] == lib["tool_call_roundtrip"] and lib["tool_call_roundtrip"]["invalid"]
    calls = [[m.get("tool_calls") for m in row["messages"]] for row in read_rows(tmp_path / "lib.jsonl")]
    assert [[m.get("tool_calls") for m in row["messages"]] for row in read_rows(tmp_path / "staged.jsonl")] == calls
