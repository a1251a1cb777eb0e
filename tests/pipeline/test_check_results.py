"""The blocking gate checks' verdicts, from materialization metadata shaped as the export asset writes it
(``formats``, ``validate``, ``<format>/report``), for cases a real run reaches only rarely: two formats
whose reports disagree. A failed gate under validate=True must not pass, whichever format failed."""

import json

import dagster as dg
import pytest

from whileai_pipeline.core.gates import SCRUBBED_BY_THE_EXPORT
from whileai_pipeline.defs.checks import _leak_result, _roundtrip_result

pytestmark = pytest.mark.pipeline

ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN

CLEAN = {"checked": True, "n_checked": 1, "n_leaked": 0, "rejected_quoting": 0,
         "summary": "checked 1 of 1 rows: no reply quoted its privileged context"}
LEAKED = {"checked": True, "n_checked": 2, "n_leaked": 1, "rejected_quoting": 0,
          "summary": "checked 2 of 2 rows: 1 quoted privileged context (50%)"}
NOTHING = {"checked": False, "n_checked": 0, "n_leaked": 0, "rejected_quoting": 0,
           "summary": "checked 0 of 1 rows: none carried privileged context, so this says nothing about leaks"}


def _metadata(reports, validate=True):
    metadata = {"formats": dg.MetadataValue.json(list(reports)), "validate": dg.MetadataValue.bool(validate),
                "status": dg.MetadataValue.text("rejected" if validate else "published")}
    for fmt, report in reports.items():
        metadata[f"{fmt}/report"] = dg.MetadataValue.json(report)
    return metadata


@pytest.mark.parametrize("order", [("openai", "trl"), ("trl", "openai")])
def test_a_leak_in_either_format_fails_the_leak_check(order):
    """A TRL preference export can drop a pair the openai one keeps (no completion), so the formats' leak
    counts may differ; the leak found in one of them refuses the export however the formats are ordered."""
    reports = {fmt: {"privileged_leaks": LEAKED if fmt == "openai" else CLEAN} for fmt in order}
    result = _leak_result(_metadata(reports), "run")
    assert (result.passed, result.severity) == (False, ERROR)
    assert ". Export refused: the published files are unchanged" in result.description


def test_a_refusal_says_when_the_published_file_already_holds_the_refused_rows():
    """An export published with validate: false, then the same rows refused with the gate on: "the published
    files are unchanged" alone read as "what a trainer downloads is safe", and it holds the same leak."""
    reports = {"openai": {"privileged_leaks": LEAKED, "sha256": "a" * 64},
               "trl": {"privileged_leaks": LEAKED, "sha256": "b" * 64}}
    metadata = _metadata(reports)
    metadata["live"] = dg.MetadataValue.json({"openai": {"path": "p", "sha256": "a" * 64},
                                              "trl": {"path": "q", "sha256": "c" * 64}})
    result = _leak_result(metadata, "run")
    assert (result.passed, result.severity) == (False, ERROR)
    assert (". Export refused: the published files are unchanged; published/ holds these same rows already in "
            "openai: what a trainer downloads now is what this gate refused, and the candidate") in result.description
    metadata["live"] = dg.MetadataValue.json({"openai": {"path": "p", "sha256": "c" * 64}})
    assert ". Export refused: the published files are unchanged, and the candidate" in _leak_result(
        metadata, "run").description


@pytest.mark.parametrize("order", [("openai", "trl"), ("trl", "openai")])
def test_one_format_that_read_privileged_context_makes_the_leak_check_a_real_one(order):
    """DECISIONS 13: the WARN "nothing to read" pass is only for a check that read nothing in any format."""
    reports = {fmt: {"privileged_leaks": CLEAN if fmt == "openai" else NOTHING} for fmt in order}
    result = _leak_result(_metadata(reports), "run")
    assert (result.passed, result.severity) == (True, ERROR)
    assert not result.description.startswith("NOTHING TO READ")


def test_a_quoting_chosen_side_fails_even_beside_quoting_rejected_sides():
    """DECISIONS 12: rejected sides that quote are a WARN note, but a quoting chosen side still refuses."""
    both = dict(LEAKED, rejected_quoting=2)
    result = _leak_result(_metadata({"openai": {"privileged_leaks": both}}), "run")
    assert (result.passed, result.severity) == (False, ERROR)
    assert "2 rejected side(s) quote their privileged context" in result.description
    assert result.metadata["rejected_quoting"].value == 2


def test_only_quoting_rejected_sides_pass_with_warn():
    only_rejected = dict(CLEAN, rejected_quoting=1)
    result = _leak_result(_metadata({"openai": {"privileged_leaks": only_rejected}}), "run")
    assert (result.passed, result.severity) == (True, WARN)


def test_a_leak_check_that_read_nothing_passes_with_warn():
    result = _leak_result(_metadata({"openai": {"privileged_leaks": NOTHING}}), "run")
    assert (result.passed, result.severity) == (True, WARN)
    assert result.description.startswith("NOTHING TO READ: ")


def test_a_leak_check_that_read_nothing_says_why_the_rows_had_no_privileged_context():
    """Rows without privileged context: the advice is to export raw trajectories, which keep it, and names the
    other causes: a privileged object without the fields the gate reads, and a privileged block written as JSON
    text, with where the raw stage counts such rows. The SDK's own guess (rows saved through its export), which
    the library's summary gives for rows with a scenario_id, is left out: one cause of three, said below."""
    sdk_guess = dict(NOTHING, summary=NOTHING["summary"] + SCRUBBED_BY_THE_EXPORT)
    result = _leak_result(_metadata({"openai": {"privileged_leaks": sdk_guess, "rows_read": 1}}), "run")
    assert result.description.startswith(f"NOTHING TO READ: {NOTHING['summary']}. This pass proves nothing")
    assert "These came through" not in result.description
    assert ("the gate reads the texts (12 characters or more) under a privileged object's reference, principle and "
            "hidden_state only, so one holding other keys alone (an answer, notes) gives it nothing to read; "
            in result.description)
    assert result.description.endswith("export raw trajectories (which keep their privileged blocks), not rows "
                                       "saved through the export; a privileged block written as JSON text is not "
                                       "read either (raw_simulation_data's rows_with_privileged_text counts them).")


@pytest.mark.parametrize("formats", [("openai",), ("openai", "trl")])
def test_a_leak_check_of_an_export_without_rows_does_not_blame_the_rows(formats):
    """No row exported (every reward 0 with ``sft_rows: pass``): none can have carried privileged context,
    and the advice about raw trajectories would send the user after a problem they do not have."""
    empty = dict(NOTHING, summary="checked 0 of 0 rows: none carried privileged context, so this says nothing "
                                  "about leaks")
    result = _leak_result(_metadata({fmt: {"privileged_leaks": empty, "rows_read": 0} for fmt in formats}), "run")
    assert (result.passed, result.severity) == (True, WARN)
    assert result.description == ("NOTHING TO READ: no row was exported, so no reply was written that could quote "
                                  "anything; the gate reads the rows of the next export that has some.")


def test_a_leak_let_through_by_validate_false_passes_with_warn():
    result = _leak_result(_metadata({"openai": {"privileged_leaks": LEAKED}}, validate=False), "run")
    assert (result.passed, result.severity) == (True, WARN)
    assert result.description.endswith(". Exported anyway (validate: false).")


@pytest.mark.parametrize("order", [("openai", "trl"), ("trl", "openai")])
def test_an_invalid_call_in_either_format_fails_the_roundtrip_check(order):
    rt = {"openai": {"checked": 3, "invalid": 0, "rows": []}, "trl": {"checked": 3, "invalid": 1, "rows": [4]}}
    reports = {fmt: {"tool_call_roundtrip": rt[fmt]} for fmt in order}
    result = _roundtrip_result(_metadata(reports), "run")
    assert (result.passed, result.severity) == (False, ERROR)
    assert "trl: 1 of 3 (rows [4])" in result.description
    assert result.metadata["trl/invalid"].value == 1


def test_a_failed_roundtrip_check_names_the_rows_so_they_can_be_found_in_the_run(tmp_path):
    """The report's row indices count the exported rows, not the run's lines: the description names the
    candidate file's line, the row's scenario and its prompt (a preference row's last user turn)."""
    sft = tmp_path / "sft.trl.jsonl"
    sft.write_text("".join(json.dumps({"scenario_id": f"s{i}", "prompt_text": f"ask {i}"}) + "\n" for i in range(5)))
    dpo = tmp_path / "dpo.trl.jsonl"
    dpo.write_text(json.dumps({"prompt": [{"role": "system", "content": "sys"},
                                          {"role": "user", "content": "Where is order 7?"}]}) + "\n")
    for path, rows, named in ((sft, [4], "line 5 of sft.trl.jsonl, scenario s4, 'ask 4'"),
                              (dpo, [0], "line 1 of dpo.trl.jsonl, 'Where is order 7?'")):
        metadata = _metadata({"trl": {"tool_call_roundtrip": {"checked": 3, "invalid": 1, "rows": rows}}})
        metadata["trl/rejected_path"] = dg.MetadataValue.path(str(path))
        result = _roundtrip_result(metadata, "run")
        assert f"trl: 1 of 3 (rows {rows}: {named})" in result.description, result.description


def test_a_leak_check_of_a_preference_export_whose_pairs_were_all_dropped_does_not_blame_the_rows(tmp_path):
    """Every pair a tie (the judge could not separate them) and ``drop_ties``: the pairs were read (``rows_read``
    8) but none was exported, and they do carry privileged context; the check said to export raw trajectories."""
    import orjson

    import whileai_pipeline.simulations as wai
    from whileai_pipeline.core.pairs import build_pairs_file

    from .conftest import SAMPLE

    pairs, tied = tmp_path / "pairs.jsonl", tmp_path / "tied.jsonl"
    build_pairs_file(str(SAMPLE), str(pairs))
    rows = [orjson.loads(line) for line in pairs.read_bytes().splitlines()]
    assert rows and all(row["chosen"].get("privileged") for row in rows)  # the sides keep their privileged blocks
    tied.write_bytes(b"".join(orjson.dumps(dict(row, tie=True)) + b"\n" for row in rows))
    reports = wai.export_preferences(str(tied), {"openai": str(tmp_path / "dpo.openai.jsonl")}, validate=False)
    assert (reports["openai"]["rows_read"], reports["openai"]["pairs"]) == (len(rows), 0)
    result = _leak_result(_metadata(reports), "run")
    assert (result.passed, result.severity) == (True, WARN)
    assert result.description == ("NOTHING TO READ: no row was exported, so no reply was written that could quote "
                                  "anything; the gate reads the rows of the next export that has some.")
