"""``leak_report``'s summary when nothing could be checked (spec 6.3): rows that came through the export
(they keep a ``scenario_id`` key, but the scrub took ``privileged``) get a sentence saying why and what
to pass instead; rows that never had a scenario do not."""

import whileai_pipeline.simulations as wai

NOTHING = "checked 0 of 2 rows: none carried privileged context, so this says nothing about leaks"
EXPORTED = (". These came through the export (rows(), save(), push()), which scrubs privileged at any depth "
            "-- pass data.trajectories, which keeps it")


def _rows(**extra):
    return [{"prompt": "p", "final_text": f"answer {i}", **extra} for i in range(2)]


def test_scrubbed_rows_are_told_to_pass_the_trajectories():
    report = wai.leak_report(_rows(scenario_id=None))
    assert (report["checked"], report["n_checked"]) == (False, 0)
    assert report["summary"] == NOTHING + EXPORTED


def test_rows_without_a_scenario_key_get_the_plain_sentence():
    assert wai.leak_report(_rows())["summary"] == NOTHING


def test_one_checked_row_drops_the_sentence():
    rows = _rows(scenario_id="s")
    rows[0]["privileged"] = {"reference": "the hidden reference answer"}
    assert wai.leak_report(rows)["summary"] == "checked 1 of 2 rows: no reply quoted its privileged context"
