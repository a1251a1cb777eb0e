"""Pair building and the preference export on inputs that hand-made mutants of ``core/pairs.py`` and
``core/preference.py`` showed no other test reached. Expected values are written out from EXPORT_SPEC.md
(7.3, 7.4, 8.2) and DECISIONS.md (8, 12), not computed by the library."""
from __future__ import annotations

import json

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.pairs import build_pairs_file

REFERENCE = "the customer already got a refund last week"


def _row(prompt, reward, text, **extra):
    return {"prompt": prompt, "steps": [{"text": text}], "final_text": text, "reward": reward, **extra}


def _side(text, privileged=None):
    side = {"prompt": "Refund A", "steps": [{"text": text}], "final_text": text}
    if privileged:
        side["privileged"] = {"reference": privileged}
    return side


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ------------------------------------------------------------ build_preference_pairs (spec 8.2)


def test_spec_8_2_worked_example():
    """Spec 8.2's example: prompts group after lowercasing and collapsing whitespace; the 0.5 row is no
    contrast for 1.0 at min_margin 1.0; "No." (3 chars) is closer to the 20-char reply than the 52-char
    refusal."""
    refusal = "I am sorry, but I cannot help with refunds right now"
    assert len(refusal) == 52
    chosen = {"prompt": "Refund  order A", "model_version": "m1", "reward": 1, "final_text": "Refunded your order.",
              "steps": [{"tool": "refund", "arguments": {"id": "A"}, "result": {"ok": True}}]}
    no = _row("refund order a", 0, "No.", model_version="m1", failure_class="refusal")
    long_no = _row("Refund order A", 0, refusal, model_version="m1", failure_class="refusal")
    maybe = _row("Refund order A", 0.5, "Maybe", model_version="m1")
    pairs, report = wai.build_preference_pairs([chosen, no, long_no, maybe])
    assert len(pairs) == 1
    (pair,) = pairs
    assert pair["chosen"] is chosen and pair["rejected"] is no
    assert (pair["prompt"], pair["margin"], pair["length_delta"], pair["same_policy"]) == ("Refund  order A", 1.0, 17, True)
    assert pair["rejected_failure_class"] == "refusal"
    assert (report["prompts_seen"], report["prompts_with_contrast"], report["pairs"]) == (1, 1, 1)


def test_margins_round_to_six_places_and_their_mean_to_four():
    """Spec 8.2: ``margin = round(chosen_score - rejected_score, 6)``; ``mean_margin`` round 4; a pair
    whose either score is not exactly 0.0 or 1.0 is a partial-score pair."""
    rows = [_row("p", 0.87654321, "good"), _row("p", 0.1, "bad"),
            _row("q", 1.0, "good"), _row("q", 0.25, "bad")]
    pairs, report = wai.build_preference_pairs(rows, min_margin=0.5)
    assert [p["margin"] for p in pairs] == [0.776543, 0.75]
    assert report["mean_margin"] == 0.7633  # (0.776543 + 0.75) / 2 = 0.7632715
    assert report["partial_score_pairs"] == 2  # "q": 1.0 is exact, 0.25 is not


def test_median_delta_is_the_upper_median():
    """Spec 8.2: ``median_delta`` = sorted deltas at index n // 2 (the upper median)."""
    rows = [_row("p", 1, "abcdef"), _row("p", 0, "abcde"),  # delta 1
            _row("q", 1, "abcdefghij"), _row("q", 0, "abcde")]  # delta 5
    pairs, report = wai.build_preference_pairs(rows)
    assert [p["length_delta"] for p in pairs] == [1, 5]
    assert report["length"] == {"median_delta": 5, "chosen_longer": 2, "chosen_longer_frac": 1.0}


def test_a_structured_reason_loses_its_privileged_keys_before_it_becomes_text():
    """DECISIONS 8 over spec 8.2's ``chosen_reason = text(reason or "")``: the scrub comes first, so the
    text (Python's str of a dict) holds no privileged key or value."""
    reason = {"note": "ok", "privileged": {"reference": REFERENCE}}
    pairs, _ = wai.build_preference_pairs([_row("p", 1, "yes", reason=reason), _row("p", 0, "no", reason=reason)])
    assert (pairs[0]["chosen_reason"], pairs[0]["rejected_reason"]) == ("{'note': 'ok'}", "{'note': 'ok'}")


def test_a_judge_reason_object_loses_its_privileged_keys_before_it_becomes_text(tmp_path):
    """Found by a review: as for ``chosen_reason`` (DECISIONS 8 over spec 8.5's ``text(reason)``), the judge's
    reason objects are scrubbed before they become the text of ``pairwise.reasons``; they were not, so a judge
    that explained itself with the row's privileged block published the reference in every DPO row."""
    def judge(a, b):
        return {"winner": "A" if a["reward"] > b["reward"] else "B",
                "reason": {"note": "closer to the reference", "privileged": a["privileged"]}}

    rows = [_row("p", 1, "yes", privileged={"reference": REFERENCE}),
            _row("p", 0, "no", privileged={"reference": REFERENCE})]
    pairs, _ = wai.build_preference_pairs(rows)
    judged, report = wai.judge_pairs(pairs, judge, concurrency=1)
    assert report["n_judged"] == 1
    assert judged[0]["pairwise"]["reasons"] == ["{'note': 'closer to the reference'}"] * 2
    wai.export_preference(judged, tmp_path / "dpo.jsonl")
    assert REFERENCE not in (tmp_path / "dpo.jsonl").read_text()


# ------------------------------------------------------------ length-confound rule (spec 7.4)


@pytest.mark.parametrize("longer,n,warns", [(3, 3, True), (2, 2, False), (6, 8, True), (5, 8, False),
                                            (5, 7, False), (7, 9, True)])
def test_length_confound_rule_spec_7_4(longer, n, warns):
    pairs = [{"prompt": f"p{i}", "chosen": _side("Refunded."), "rejected": _side("No."),
              "length_delta": 6 if i < longer else -1} for i in range(n)]
    report = wai.export_preference(pairs)
    assert report["chosen_longer_frac"] == round(longer / n, 3)
    note = (f"chosen is the longer reply in {longer}/{n} pairs; a preference trainer learns length before "
            "behavior (Lambert 2025, chapter Direct Alignment)")
    assert report.get("warnings", []) == ([note] if warns else [])


# ------------------------------------------------------------ preference leak gate (DECISIONS 12)


def test_a_chosen_side_that_quotes_its_reference_is_refused(tmp_path):
    """DECISIONS 12: a chosen side quoting its privileged block is a leak, refused under validate=True."""
    pair = {"prompt": "Refund A", "chosen": _side(f"Sure: {REFERENCE}.", REFERENCE),
            "rejected": _side("No.", REFERENCE)}
    out = tmp_path / "dpo.jsonl"
    with pytest.raises(wai.PrivilegedLeakError) as caught:
        wai.export_preference([pair], out)
    assert str(caught.value).startswith("privileged_leak: 1 of 1 chosen replies")
    leaks = caught.value.report["privileged_leaks"]
    assert (leaks["n_checked"], leaks["n_leaked"], leaks["rejected_quoting"]) == (1, 1, 0)
    assert not out.exists()


def test_a_rejected_side_that_quotes_its_reference_is_counted_and_kept(tmp_path):
    """DECISIONS 12: a rejected side quoting it is a useful negative: counted in ``rejected_quoting``,
    named in a warning, not refused."""
    pair = {"prompt": "Refund A", "chosen": _side("Let me check that for you.", REFERENCE),
            "rejected": _side(f"Well, {REFERENCE}.", REFERENCE)}
    out = tmp_path / "dpo.jsonl"
    report = wai.export_preference([pair], out)
    leaks = report["privileged_leaks"]
    assert (leaks["n_checked"], leaks["n_leaked"], leaks["rejected_quoting"]) == (1, 0, 1)
    assert ("1 rejected replies quote their own privileged context; they are kept as negatives (DPO pushes them "
            "down), but a grader that rewards such replies needs a look.") in report["warnings"]
    (row,) = _lines(out)
    assert row["rejected"][-1] == {"role": "assistant", "content": f"Well, {REFERENCE}."}


def test_a_chosen_side_is_searched_in_its_own_rebuilt_conversation(tmp_path):
    """Spec 6.2 per side: the chosen row's haystack is its final_text and *its* assistant turns. Here the
    quote is in a chosen step (the final is dropped by spec 1.4 step 9 but still searched) and both sides
    are rebuilt from steps: the gate must search the chosen side's turns, not the rejected side's."""
    chosen = {"prompt": "Refund A", "steps": [{"text": f"Sure: {REFERENCE}."}], "final_text": "Done.",
              "privileged": {"reference": REFERENCE}}
    rejected = {"prompt": "Refund A", "steps": [{"text": "No."}], "final_text": "No.",
                "privileged": {"reference": REFERENCE}}
    with pytest.raises(wai.PrivilegedLeakError):
        wai.export_preference([{"prompt": "Refund A", "chosen": chosen, "rejected": rejected}], tmp_path / "dpo.jsonl")
    report = wai.export_preference([{"prompt": "Refund A", "chosen": chosen, "rejected": rejected}], validate=False)
    assert (report["privileged_leaks"]["n_leaked"], report["privileged_leaks"]["rejected_quoting"]) == (1, 0)


def test_validate_false_exports_a_quoting_chosen_side_with_a_warning(tmp_path):
    """DECISIONS 12 + spec 5.6 (warning 1, the SFT counterpart): let through under validate=False, a
    quoting chosen side is counted and named in a warning."""
    pair = {"prompt": "Refund A", "chosen": _side(f"Sure: {REFERENCE}.", REFERENCE), "rejected": _side("No.")}
    out = tmp_path / "dpo.jsonl"
    report = wai.export_preference([pair], out, validate=False)
    assert report["privileged_leaks"]["n_leaked"] == 1
    warned = [w for w in report.get("warnings", []) if "quote their own privileged context" in w]
    assert len(warned) == 1 and warned[0].startswith("1 of 1 chosen replies") and "validate=False" in warned[0]
    assert len(_lines(out)) == 1


def test_a_zero_length_delta_is_not_chosen_longer():
    """Spec 7.3 step 8: ``chosen_longer_frac = round(#(delta > 0) / #deltas, 3)``: 0 is not longer."""
    pairs = [{"prompt": f"p{i}", "chosen": _side("Refunded."), "rejected": _side("No."), "length_delta": delta}
             for i, delta in enumerate([0, 5, 0])]
    assert wai.export_preference(pairs)["chosen_longer_frac"] == 0.333


# ------------------------------------------------------------ pair selection cost


class _CountedScores(list):
    """The table's score column, counting how often pair selection reads it."""

    reads = 0

    def __getitem__(self, i):
        type(self).reads += 1
        return super().__getitem__(i)


def test_a_group_without_contrast_is_given_up_in_one_pass_over_its_rows():
    """A prompt whose rollouts all scored alike (an all-pass group, the common case) has no pair. Ranked
    best first, once the best unused row finds no rejected row far enough below it, no later (lower or
    equal) row can: the group must cost a pass over its rows, not a pass per row (3,000 rollouts of one
    prompt read 4.5 million scores; a 100k-rollout benchmark prompt took minutes)."""
    from whileai_pipeline.core.pairs import SummaryTable, summary_fields

    n = 3000
    table = SummaryTable()
    for i in range(n):
        table.add(i, summary_fields({"prompt": "Same task", "reward": 1.0, "final_text": "done"}))
    table.add(n, summary_fields({"prompt": "Other task", "reward": 1.0, "final_text": "done"}))
    table.add(n + 1, summary_fields({"prompt": "Other task", "reward": 0.0, "final_text": "no"}))
    table.score = _CountedScores(table.score)
    _CountedScores.reads = 0
    plan = table.plan()
    assert [(c.index, r.index) for c, r in plan.pairs()] == [(n, n + 1)]
    assert _CountedScores.reads < 10 * n


# ------------------------------------------------------------ where an empty side is


def test_an_empty_side_in_a_pairs_file_is_named_by_its_line(tmp_path):
    """Spec 7.3 step 6 numbers the bad pair among the rows kept (after ties are dropped): in a pairs file
    that is not where it is. The error also names the file and line, as export_dataset's does."""
    pairs = [{"prompt": "Refund A", "chosen": _side("Yes."), "rejected": _side("No."), "tie": True},
             {"prompt": "Refund A", "chosen": _side("Yes."), "rejected": _side("No.")},
             {"prompt": "Refund A", "chosen": {}, "rejected": _side("No.")}]
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    with pytest.raises(ValueError) as err:
        wai.export_preference(str(src), tmp_path / "out.jsonl", validate=False)
    message = str(err.value)
    assert message.startswith("schema_invalid in export_preference: 1:chosen_missing")
    assert f"{src}:3" in message
    assert "pair" in message.split(". ", 1)[1]  # the advice is about pairs, not training rows
    assert not (tmp_path / "out.jsonl").exists()


def test_an_empty_side_in_a_list_is_named_by_its_index(tmp_path):
    pairs = [{"prompt": "Refund A", "chosen": _side("Yes."), "rejected": _side("No."), "tie": True},
             {"prompt": "Refund A", "chosen": _side("Yes."), "rejected": {}}]
    with pytest.raises(ValueError) as err:
        wai.export_preference(pairs, tmp_path / "out.jsonl")
    message = str(err.value)
    assert message.startswith("schema_invalid in export_preference: 0:rejected_missing")
    assert "index 1 of the pairs given" in message


# ------------------------------------------------------------ output is the source (DECISIONS 4)


def test_export_preference_onto_its_pairs_file_gives_advice_that_holds(tmp_path):
    """With no output, export_preference writes nothing (it derives no name: spec 7.3 step 10), so the
    error must not offer <name>.train<suffix>; the pairs file is untouched."""
    src = tmp_path / "pairs.jsonl"
    body = json.dumps({"prompt": "Refund A", "chosen": _side("Yes."), "rejected": _side("No.")}) + "\n"
    src.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        wai.export_preference(str(src), str(src))
    assert str(err.value).startswith("output_is_source:")
    assert ".train" not in str(err.value)
    assert src.read_text(encoding="utf-8") == body


def test_build_pairs_file_onto_its_run_gives_advice_that_holds(tmp_path):
    """build_pairs_file has no default output: the error must not offer one."""
    from whileai_pipeline.core.pairs import build_pairs_file

    src = tmp_path / "run.jsonl"
    body = "".join(json.dumps(_row("Refund A", r, t)) + "\n" for r, t in ((1, "Yes."), (0, "No.")))
    src.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        build_pairs_file(str(src), str(src))
    assert str(err.value).startswith("output_is_source:")
    assert ".train" not in str(err.value) and "or none" not in str(err.value)
    assert src.read_text(encoding="utf-8") == body


# ------------------------------------------------------------ why no pairs were left


def test_no_pairs_left_after_ties_says_they_were_ties(tmp_path):
    """Pairs that all had a chosen and a rejected side, all judged ties: the error must not say that
    nothing had two sides or blame all-pass runs; it says the ties were dropped and how to keep them."""
    pairs = [{"prompt": "Refund A", "chosen": _side("Yes."), "rejected": _side("No."), "tie": True}] * 2
    with pytest.raises(ValueError) as err:
        wai.export_preference(pairs, tmp_path / "out.jsonl")
    message = str(err.value)
    assert message.startswith("no_preference_pairs:")
    assert "2 of 2" in message and "tie" in message and "drop_ties=False" in message
    assert not (tmp_path / "out.jsonl").exists()


def test_no_pairs_left_after_trl_drops_says_why(tmp_path):
    """E65: a side that opens with the agent's greeting has its first assistant turn at index 0 without
    a system prompt, so TRL has no prompt for it; when that empties the export, the error says so."""
    side = {"prompt": "Refund A", "opener": "Hello, how can I help?", "final_text": "Done."}
    pairs = [{"prompt": "Refund A", "chosen": side, "rejected": _side("No.")}]
    with pytest.raises(ValueError) as err:
        wai.export_preference(pairs, tmp_path / "out.jsonl", format="trl")
    message = str(err.value)
    assert message.startswith("no_preference_pairs:")
    assert "1 of 1" in message and "system_prompt=" in message
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------ report key order (docs/API_CONTRACT.md)


def test_a_written_preference_report_ends_as_an_export_dataset_report_does(tmp_path):
    """The keys present only when a file was written come last, in export_dataset's order:
    path, n_written, sha256, then elapsed_seconds."""
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"prompt": "Refund A", "chosen": _side("Yes."), "rejected": _side("No.")}) + "\n",
                   encoding="utf-8")
    for report in (wai.export_preference(str(src), tmp_path / "out.jsonl"),
                   wai.export_preferences(str(src), {"openai": tmp_path / "o.jsonl", "trl": tmp_path / "t.jsonl"})["trl"]):
        assert list(report)[-6:] == ["source_path", "source_sha256", "path", "n_written", "sha256", "elapsed_seconds"]


# 14 of the (high, low, margin) of rewards and margins in steps of 0.1 are such a case
@pytest.mark.parametrize("high, low, margin", [(0.7, 0.2, 0.5), (0.3, 0.2, 0.1), (1.0, 0.9, 0.1), (0.6, 0.2, 0.4),
                                               (0.7, 0.4, 0.3)])
def test_rewards_that_differ_by_the_margin_as_written_meet_it(high, low, margin, tmp_path):
    """0.7 - 0.2 is 0.49999999999999994 in binary floating point: the reference pairs nothing at
    min_margin 0.5, and its note says the rollouts' rewards must differ by at least 0.5, which they do.
    A grader's rewards are decimals; a difference as written that equals the margin meets it (ours)."""
    assert high - low < margin  # the case: the float difference falls a rounding error short
    rows = [_row("Refund A", high, "Refunded."), _row("Refund A", low, "No.")]
    pairs, report = wai.build_preference_pairs(rows, min_margin=margin, length_match=False)
    assert [(p["chosen_score"], p["rejected_score"], p["margin"]) for p in pairs] == [(high, low, margin)]
    assert report["pairs"] == 1 and report["prompts_with_contrast"] == 1
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "pairs.jsonl"
    build_pairs_file(run, out, min_margin=margin, length_match=False, workers=1)
    assert [(p["chosen_score"], p["rejected_score"]) for p in _lines(out)] == [(high, low)]


@pytest.mark.parametrize("high, low, margin", [(0.7, 0.2, 0.5000001), (0.7, 0.2, 0.5 + 1e-15),
                                               (0.5, 0.0, 0.5 + 2 ** -40), (0.6, 0.6, 2 ** -50),
                                               (0.6, 0.6, 5e-324)])
def test_rewards_that_differ_by_less_than_the_margin_do_not_meet_it(high, low, margin):
    """Only a rounding error of the subtraction is forgiven: a margin a hair above the written difference
    is not met, and equal rewards never are (min_margin is positive)."""
    rows = [_row("Refund A", high, "Refunded."), _row("Refund A", low, "No.")]
    pairs, report = wai.build_preference_pairs(rows, min_margin=margin, length_match=False)
    assert pairs == [] and report["prompts_with_contrast"] == 0


def test_a_decimal_min_margin_pairs_as_its_float_does():
    """check_min_margin takes a Decimal (its NaN is refused by name); the threshold subtracted a float
    from it and every build failed with a bare TypeError."""
    from decimal import Decimal

    rows = [_row("Refund A", 0.7, "Refunded."), _row("Refund A", 0.2, "No.")]
    pairs, report = wai.build_preference_pairs(rows, min_margin=Decimal("0.5"), length_match=False)
    assert [(p["chosen_score"], p["rejected_score"]) for p in pairs] == [(0.7, 0.2)]
