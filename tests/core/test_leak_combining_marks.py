"""A combining mark (a Devanagari vowel sign, an Arabic point, the dot case folding leaves on "İ") is part of its
word when the scorer and the leak gate read a repeat, not punctuation: a reply that only shares a reference's
consonants neither recites it nor earns its reward."""

import sys
import unicodedata

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core.scoring import resolve_scorer
from whileai_pipeline.core.text import combining_marks, normalize_answer

REFERENCE = "किताब वापस करो"  # "return the book"


def _row(reply, reference=REFERENCE):
    return {"prompt": "What should I do?", "scenario_id": "s1", "reward": 1.0,
            "steps": [{"text": reply}], "final_text": reply, "privileged": {"reference": reference}}


def test_the_marks_are_every_combining_mark_this_python_knows():
    inside = {c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] == "M"}
    ranges = combining_marks()  # single characters and "a-b" ranges, written as characters
    listed = set()
    i = 0
    while i < len(ranges):
        if i + 2 < len(ranges) and ranges[i + 1] == "-":
            listed.update(range(ord(ranges[i]), ord(ranges[i + 2]) + 1))
            i += 3
        else:
            listed.add(ord(ranges[i]))
            i += 1
    assert listed == inside, (unicodedata.unidata_version, sorted(map(hex, listed ^ inside))[:10])


def test_a_mark_stays_in_its_word():
    assert normalize_answer("किताब, वापस करो!") == "किताब वापस करो"  # the vowel signs are not cut out as spaces
    assert normalize_answer("İİ") == "i\u0307i\u0307"  # one word, as case folding leaves the dots
    assert normalize_answer("كَتَبَ - الوَلَدُ.") == "كَتَبَ الوَلَدُ"


@pytest.mark.parametrize("reply", ["कोतीब वोपस करे", "कुछ कोतीब वोपस करे अभी"])
def test_the_same_consonants_are_no_recital(reply, tmp_path):
    row = _row(reply)
    assert resolve_scorer("reference_match").score_row(row)["reward"] == 0.0
    assert wai.leak_report([row])["n_leaked"] == 0
    report = wai.export_dataset([row], tmp_path / "sft.jsonl", system_prompt="S")
    assert report["n"] == 1 and report["privileged_leaks"]["n_leaked"] == 0


def test_a_dotted_capital_i_run_is_one_word():
    row = {"prompt": "p", "privileged": {"reference": "İ" * 12}, "final_text": "İ" * 6}
    assert wai.leak_report([row])["n_leaked"] == 0  # six dotted i's are no twelve, even read twice


@pytest.mark.parametrize("reply", ["हाँ: किताब, वापस -- करो!", "Please: किताब... वापस करो."])
def test_a_recital_with_other_punctuation_is_still_a_leak(reply, tmp_path):
    row = _row(reply)
    assert resolve_scorer("reference_match").score_row(row)["reward"] == 1.0  # the scorer pays: a recital
    assert wai.leak_report([row])["n_leaked"] == 1
    with pytest.raises(wai.PrivilegedLeakError, match="^privileged_leak"):
        wai.export_dataset([row], tmp_path / "sft.jsonl", system_prompt="S")
