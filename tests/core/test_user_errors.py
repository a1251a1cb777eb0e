"""Mistakes a Python user of the library makes with its arguments get an error that says what was wrong
and what to pass, before any work, instead of a bare TypeError from deep inside, a false all-clear or a
file of nonsense."""

import pytest

import whileai_pipeline.simulations as wai

ROW = {"prompt": "Where is order 7?", "steps": [{"tool": "lookup", "arguments": {"id": 7}, "result": "shipped"}],
       "final_text": "It shipped.", "reward": 1}
PAIR = {"prompt": "Where is order 7?", "chosen": ROW, "rejected": dict(ROW, final_text="No idea.", reward=0)}


@pytest.mark.parametrize("progress", [5, "log", True])
@pytest.mark.parametrize("call", ["export_dataset", "export_datasets", "export_preference", "export_preferences"])
def test_a_progress_that_cannot_be_called_is_refused_before_any_work(tmp_path, progress, call):
    # it used to fail as "'int' object is not callable" after every row was read and converted
    run = tmp_path / "run.jsonl"
    wai.write_jsonl(run, [PAIR] if "preference" in call else [ROW])
    out = tmp_path / "out.jsonl"
    fn = getattr(wai, call)
    target = {"openai": out} if call.endswith("s") else out
    with pytest.raises(TypeError, match=rf"^progress must be a callable of the number of rows done .*, got "
                                        rf"{type(progress).__name__} {progress!r}"):
        fn(run, target, progress=progress)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
    seen = []
    fn(run, target, progress=seen.append)  # a callable still goes, and hears the final count
    assert seen and seen[-1] == 1


def test_build_pairs_file_refuses_a_progress_that_cannot_be_called(tmp_path):
    from whileai_pipeline.core.pairs import build_pairs_file

    run = tmp_path / "scored.jsonl"
    wai.write_jsonl(run, [ROW, dict(ROW, final_text="No idea.", reward=0)])
    with pytest.raises(TypeError, match=r"^progress must be a callable of the number of rows done"):
        build_pairs_file(run, tmp_path / "pairs.jsonl", progress=3)
    assert not (tmp_path / "pairs.jsonl").exists()


@pytest.mark.parametrize("row, reason", [
    ({"messages": 5}, r"messages must be a list of message objects, got int 5"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": 7}]},
     r"messages\[1\]\.tool_calls must be a list of call objects, got int 7"),
    ({"prompt": [{"role": "user", "content": "q"}], "completion": 3},
     r"completion must be a list of message objects, got int 3"),
])
@pytest.mark.parametrize("fmt", ["openai", "trl"])
def test_tool_call_roundtrip_names_the_row_whose_messages_or_calls_are_a_number(row, reason, fmt):
    # it used to fail with a bare "'int' object is not iterable", naming no row (to_trl names it)
    rows = [{"messages": [{"role": "user", "content": "q"}]}, row]
    with pytest.raises(wai.BadRowError, match=rf"^bad_row: index 1 of the rows given: {reason}"):
        wai.tool_call_roundtrip(rows, format=fmt)


LEAKY = dict(ROW, privileged={"reference": "the order shipped on the fourth of May"},
             final_text="It shipped: the order shipped on the fourth of May.")


@pytest.mark.parametrize("given", ["path", "str", "bytes", "one row", "None", "number"])
def test_leak_report_refuses_what_is_not_rows_instead_of_a_false_all_clear(tmp_path, given):
    # a path's characters, or one row's keys, are no rows: it reported "checked 0 of 0 rows" for a run
    # whose reply quotes its privileged reference (None or a number: "'NoneType' object is not iterable")
    run = tmp_path / "run.jsonl"
    wai.write_jsonl(run, [LEAKY])
    assert wai.leak_report(wai.read_jsonl(run))["n_leaked"] == 1
    value = {"path": run, "str": str(run), "bytes": bytes(run), "one row": LEAKY, "None": None, "number": 3}[given]
    with pytest.raises(TypeError, match=r"^leak_report takes rows, got "):
        wai.leak_report(value)
    assert wai.leak_report(wai.load_run(run))["n_leaked"] == 1  # a run object still goes


@pytest.mark.parametrize("rows, said", [
    (ROW, r"got dict \(one row\?\): pass a list of rows"),  # wrote one line per key: "prompt", "steps", ...
    ("abc", r"got str 'abc'"),  # wrote one line per character
    (None, r"got NoneType None"),  # "'NoneType' object is not iterable"
])
def test_write_jsonl_refuses_rows_that_are_not_rows_and_writes_nothing(tmp_path, rows, said):
    out = tmp_path / "rows.jsonl"
    with pytest.raises(TypeError, match=rf"^write_jsonl\(dest, rows\) takes rows, {said}"):
        wai.write_jsonl(out, rows)
    assert not out.exists()


@pytest.mark.parametrize("dest", [[ROW], None, 3])
def test_write_jsonl_says_the_path_comes_first(tmp_path, dest):
    # write_jsonl(rows, path) failed as pathlib's "expected str, bytes or os.PathLike object, not list"
    with pytest.raises(TypeError, match=rf"^write_jsonl\(dest, rows\) takes the file to write first \(str or "
                                        rf"os\.PathLike\), got {type(dest).__name__}"):
        wai.write_jsonl(dest, tmp_path / "rows.jsonl")
    assert list(tmp_path.iterdir()) == []
    assert wai.write_jsonl(str(tmp_path / "rows.jsonl"), iter([ROW])) == 1  # a str path and an iterator go


def _scored_rows():
    return [ROW, dict(ROW, final_text="No idea.", reward=0)]


@pytest.mark.parametrize("call", ["export_preference", "export_preferences"])
def test_export_preference_given_what_build_preference_pairs_returns_says_to_take_the_pairs(tmp_path, call):
    # build_preference_pairs returns (pairs, report); the error told the user to do exactly that:
    # "Build the pairs first: export_preference(build_preference_pairs(rows), ...)"
    built = wai.build_preference_pairs(_scored_rows())
    out = tmp_path / "pairs.jsonl"
    target = {"openai": out} if call.endswith("s") else out
    # the message names the function called (API_CONTRACT: "<name> takes chosen/rejected pairs"), and its advice
    # calls that same function: export_preferences was told to call export_preference(pairs, ...)
    with pytest.raises(ValueError, match=rf"^{call} takes chosen/rejected pairs, and got the \(pairs, "
                                         r"report\) tuple that build_preference_pairs returns: pass its first item: "
                                         rf"pairs, report = build_preference_pairs\(rows\); {call}\(pairs, \.\.\.\)"):
        getattr(wai, call)(built, target)
    assert not out.exists()
    pairs, _report = built
    assert getattr(wai, call)(pairs, target)  # as the message says


@pytest.mark.parametrize("call", ["export_preference", "export_preferences"])
def test_export_preference_advice_for_entries_that_are_no_pairs_can_be_followed(tmp_path, call):
    out = tmp_path / "pairs.jsonl"
    target = {"openai": out} if call.endswith("s") else out
    with pytest.raises(ValueError, match=rf"^{call} takes chosen/rejected pairs, and 2 of 2 entries have "
                                         r"no chosen/rejected side\. Build the pairs first: pairs, report = "
                                         rf"build_preference_pairs\(rows\); {call}\(pairs, \.\.\.\)"):
        getattr(wai, call)(_scored_rows(), target)


def judge(a, b):
    return {"winner": "A"}


def test_judge_pairs_given_what_build_preference_pairs_returns_says_to_take_the_pairs():
    built = wai.build_preference_pairs(_scored_rows())
    with pytest.raises(ValueError, match=r"^judge_pairs takes chosen/rejected pairs, and got the \(pairs, report\) "
                                         r"tuple that build_preference_pairs returns: pass its first item"):
        wai.judge_pairs(built, judge)
    assert wai.judge_pairs(built[0], judge)[1]["n"] == 1


def test_judge_pairs_names_the_index_of_the_pairs_given():
    # it counted only the dicts: [None, "x", ROW] said "first at 0", where None is
    with pytest.raises(ValueError, match=r"^1 entries are not pairs \(need chosen/rejected rows\); first at 2 "
                                         r"\(index of the pairs given\)"):
        wai.judge_pairs([None, "x", ROW, PAIR], judge)


@pytest.mark.parametrize("given", ["path", "one pair", "None"])
def test_judge_pairs_refuses_what_is_not_pairs(tmp_path, given):
    # a path's characters or one pair's keys were judged as no pairs at all ([], n 0); None: a bare TypeError
    value = {"path": str(tmp_path / "pairs.jsonl"), "one pair": PAIR, "None": None}[given]
    with pytest.raises(TypeError, match=r"^judge_pairs takes pairs, got "):
        wai.judge_pairs(value, judge)


@pytest.mark.parametrize("given, said", [
    ("row", r"got dict \(a whole row\?\): pass row\['messages'\]"),  # was [0, 0, 0, 0]: one 0 per key
    ("text", r"got str 'hello'"),  # was one 0 per character
    ("None", r"got NoneType None"),  # "'NoneType' object is not iterable"
    ("number", r"got int 3"),
])
def test_loss_mask_refuses_what_is_not_a_message_list(given, said):
    row = wai.training_rows([ROW])[0]
    value = {"row": row, "text": "hello", "None": None, "number": 3}[given]
    with pytest.raises(TypeError, match=rf"^loss_mask takes a list of messages, {said}"):
        wai.loss_mask(value)
    assert wai.loss_mask(row["messages"]) == row["loss_mask"]
    assert wai.loss_mask(iter(row["messages"]), mode="final") == [0, 0, 0, 1]


@pytest.mark.parametrize("value", [None, [ROW], 3])
def test_load_run_and_read_jsonl_say_they_take_a_path(value):
    # pathlib's "expected str, bytes or os.PathLike object, not list" named neither the function nor the argument
    with pytest.raises(TypeError, match=rf"^load_run takes the path of a \.jsonl run \(str or os\.PathLike\), got "
                                        rf"{type(value).__name__}"):
        wai.load_run(value)
    with pytest.raises(TypeError, match=rf"^read_jsonl takes the path of a \.jsonl file \(str or os\.PathLike\), "
                                        rf"got {type(value).__name__}"):
        wai.read_jsonl(value)  # at the call, not at the first next(): a generator said nothing until then


def test_load_run_takes_a_bytes_path_as_read_jsonl_does(tmp_path):
    run = tmp_path / "run.jsonl"
    wai.write_jsonl(run, [ROW])
    assert list(wai.read_jsonl(bytes(run))) == [ROW]
    assert list(wai.load_run(bytes(run)).trajectories) == [ROW]  # was pathlib's "argument should be a str ..."


@pytest.mark.parametrize("value", [None, [ROW], "Where is order 7?"])
def test_conversation_says_it_takes_one_row(value):
    # "'NoneType' object has no attribute 'get'"
    with pytest.raises(TypeError, match=rf"^conversation takes one row \(a dict\), got {type(value).__name__}"):
        wai.conversation(value)
