"""TRL shapes (spec 4.1, DECISIONS 16) on inputs that hand-made mutants of ``core/trl.py`` showed no other
test reached. Expected values are written out from the spec, not computed by the library."""
from __future__ import annotations

import whileai_pipeline.simulations as wai

OPENER_ONLY = {"opener": "Hi, I'm the bot.", "prompt": "I need help", "steps": [], "final_text": "Sure"}  # E4


def test_completion_rows_need_an_assistant_turn_after_index_0():
    """DECISIONS 16: with mask_mode="final" a TRL row whose only assistant turn is message 0 (E4: the opener,
    no system prompt) has no prompt to condition on: dropped and counted."""
    report = wai.export_dataset([OPENER_ONLY, {"prompt": "p", "final_text": "a"}], format="trl", mask_mode="final")
    assert (report["n"], report["no_completion_dropped"]) == (1, 1)


def test_with_a_system_prompt_the_opener_is_a_completion():
    """The same row with a system prompt: the opener is message 1, so the row is kept (contrast E65)."""
    (row,) = wai.to_trl(wai.training_rows([OPENER_ONLY], system_prompt="SYS"), kind="completion")
    assert row["prompt"] == [{"role": "system", "content": "SYS"}]
    assert row["completion"] == [{"role": "assistant", "content": "Hi, I'm the bot."}]
