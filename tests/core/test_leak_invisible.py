"""Invisible characters (zero-width spaces and joiners, word joiner, soft hyphen, byte-order mark) put inside
a recited reference do not hide it from the leak gate: a reader sees the same words, the model learns them."""

import sys
import unicodedata

import pytest

import whileai_pipeline.simulations as wai
from whileai_pipeline.core import gates
from whileai_pipeline.core.scoring import resolve_scorer

REFERENCE = "ALPHA-7731-ZEBRA-RIVER"
HIDDEN = ["ZE\u200bBRA", "ZE\u200dBRA", "ZE\u2060BRA", "ZE\u00adBRA", "ZE\ufeffBRA", "ZE\u200eBRA", "ZE\U000e0041BRA"]


def _row(reply, reference=REFERENCE):
    return {"prompt": "Where is my refund?", "scenario_id": "s1", "reward": 1.0,
            "steps": [{"text": reply}], "final_text": reply, "privileged": {"reference": reference}}


def test_every_format_character_this_python_knows_is_invisible_to_the_gate():
    """The class is written out (building it from unicodedata at import costs 0.2 s); a Python whose Unicode
    data has format characters it lacks fails here: add them to ``gates._INVISIBLE``. Those a later Unicode
    made format characters are unassigned in this Python's data."""
    matched = {c for c in range(sys.maxunicode + 1) if gates._INVISIBLE.match(chr(c))}
    cf = {c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"}
    assert cf <= matched, (unicodedata.unidata_version, sorted(map(hex, cf - matched)))
    assert all(unicodedata.category(chr(c)) == "Cn" for c in matched - cf), sorted(map(hex, matched - cf))


def test_the_format_characters_of_later_unicode_versions_are_invisible_to_the_gate():
    """pyproject allows Python 3.12 and later, whose Unicode 15 (up to 18 in the newest Pythons) adds the
    Egyptian hieroglyph format controls U+13439-U+1343F to category Cf; with a Unicode 14 table the test above
    failed on those Pythons and the gate read those characters as they are."""
    assert all(gates._INVISIBLE.match(chr(c)) for c in range(0x13439, 0x13440))


@pytest.mark.parametrize("word", HIDDEN)
@pytest.mark.parametrize("around", ["Your code is {}.", "Ihr Code lautet {} – schön.", "😀 code: {}"],
                         ids=["ascii", "latin-1", "other"])
def test_a_reference_with_an_invisible_character_inside_a_word_is_a_leak(word, around):
    reply = around.format(REFERENCE.replace("ZEBRA", word))
    report = wai.leak_report([_row(reply)])
    assert report["n_leaked"] == 1, reply


def test_a_reference_holding_an_invisible_character_is_found_without_it():
    report = wai.leak_report([_row("Your code is alpha 7731 zebra river.", reference="ALPHA-7731-ZE\u200bBRA-RIVER")])
    assert report["n_leaked"] == 1


def test_invisible_characters_join_no_words_that_were_not_said():
    # a zero-width space between two words is no space: "zeb" + "ra" is not said where the reply has "zeb\u200b ra"
    assert wai.leak_report([_row("Your code is ALPHA-7731-ZEB\u200b RA-RIVER.")])["n_leaked"] == 0
    assert wai.leak_report([_row("Your code is ALPHA-7731-ZEBRA\u200bS-RIVER.")])["n_leaked"] == 0


def test_the_exports_refuse_a_hidden_recital(tmp_path):
    hidden = f"Your code is {REFERENCE.replace('ZEBRA', 'ZE' + chr(0x200B) + 'BRA')}."
    with pytest.raises(wai.PrivilegedLeakError, match="^privileged_leak"):
        wai.export_dataset([_row(hidden)], tmp_path / "sft.jsonl", system_prompt="S")
    assert not (tmp_path / "sft.jsonl").exists()
    pair = {"prompt": "Where is my refund?", "chosen": _row(hidden), "rejected": _row("I cannot say."), "margin": 1.0}
    with pytest.raises(wai.PrivilegedLeakError, match="^privileged_leak"):
        wai.export_preference([pair], tmp_path / "dpo.jsonl", system_prompt="S")


# A zero-width space with no other space beside it is a word break to the scorer (reference_match reads it as
# punctuation): Thai text breaks its words so, and a reply can put one between a word and the reference.
SAID_WITH_A_BREAK = [
    ("Your code is\u200bALPHA 7731 ZEBRA RIVER.", REFERENCE),
    ("ALPHA 7731 ZEBRA RIVER\u200bis your code", REFERENCE),
    ("คำตอบคือ\u200bรหัสลับ, มะม่วงสุกหวาน", "รหัสลับ มะม่วงสุกหวาน"),  # Thai, its words broken by U+200B
    ("รหัสลับ มะม่วงสุกหวาน ครับ", "รหัสลับ\u200bมะม่วงสุกหวาน"),  # the reference's own break is a space here
]


@pytest.mark.parametrize("reply, reference", SAID_WITH_A_BREAK, ids=["before", "after", "thai", "thai-reference"])
def test_a_recital_the_scorer_pays_for_stays_a_leak_where_an_invisible_character_breaks_words(
        tmp_path, reply, reference):
    """Reading text only without its invisible characters joined the words beside a zero-width space, so the
    gate passed a recital that reference_match pays for and the gate caught before."""
    row = _row(reply, reference)
    assert resolve_scorer("reference_match").score_row(row)["reward"] == 1.0  # the scorer pays: a recital
    assert wai.leak_report([row])["n_leaked"] == 1, reply
    with pytest.raises(wai.PrivilegedLeakError, match="^privileged_leak"):
        wai.export_dataset([row], tmp_path / "sft.jsonl", system_prompt="S")


# Thai and Chinese run their words on without spaces: a recital inside a sentence is no run of whole words, and
# spec 6.2's search finds it; zero-width spaces put inside it (a Thai text may break its words so) hid it.
RUN_ON = [
    ("ผม\u200bสวัสดี\u200bครับ\u200bยินดี\u200bต้อนรับ\u200bสู่\u200bร้าน\u200bค่ะ", "สวัสดีครับยินดีต้อนรับสู่ร้าน"),
    ("好的您的密\u200b码是青龙七七三一号码。", "您的密码是青龙七七三一号码"),
]


@pytest.mark.parametrize("reply, reference", RUN_ON, ids=["thai", "chinese"])
def test_a_recital_run_on_into_its_sentence_with_zero_width_spaces_inside_is_a_leak(tmp_path, reply, reference):
    row = _row(reply, reference)
    assert wai.leak_report([_row(reply.replace("\u200b", ""), reference)])["n_leaked"] == 1  # as a reader sees it
    assert wai.leak_report([row])["n_leaked"] == 1, reply
    with pytest.raises(wai.PrivilegedLeakError, match="^privileged_leak"):
        wai.export_dataset([row], tmp_path / "sft.jsonl", system_prompt="S")
    pair = {"prompt": "Where is my refund?", "chosen": row, "rejected": _row("I cannot say."), "margin": 1.0}
    with pytest.raises(wai.PrivilegedLeakError, match="^privileged_leak"):
        wai.export_preference([pair], tmp_path / "dpo.jsonl", system_prompt="S")


def test_a_reference_of_invisible_characters_alone_quotes_nothing():
    # taken out, it is shorter than a quote: an empty needle would be found in every reply
    assert wai.leak_report([_row("I cannot say.", "\u200b" * 12)])["n_checked"] == 1
    assert wai.leak_report([_row("I cannot say.", "\u200b" * 12)])["n_leaked"] == 0
    assert wai.leak_report([_row("I can\u200bnot say.", "\u200b" * 12)])["n_leaked"] == 0
