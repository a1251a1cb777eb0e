"""Hypothesis strategies for small trajectory rows, shared by the core export properties."""

from hypothesis import strategies as st

words = st.text(alphabet="abcdé xyz<>/think", min_size=0, max_size=20)
arguments = st.one_of(st.none(), st.just({"id": 7}), st.just('{"a": 1}'), st.just("{a: 1}"), st.just('"x"'))
steps = st.lists(st.one_of(
    st.builds(lambda t: {"text": t}, words),
    st.builds(lambda u: {"user": u}, words),
    st.builds(lambda n, a, r: {"tool": n, "arguments": a, "result": r},
              st.sampled_from(["lookup", "refund"]), arguments, st.one_of(words, st.just({"ok": True}))),
), max_size=5)
row = st.fixed_dictionaries(
    {"prompt": st.sampled_from(["p1", "p2", "p3", ""]), "steps": steps, "final_text": words},
    optional={"reward": st.sampled_from([0, 1, 0.5, None, True, float("nan"), "0.7"]),
              "scenario_id": st.sampled_from(["s1", "s2"]),
              "lineage": st.just({"source": "grade", "privileged": {"reference": "secret"}}),
              "opener": words},
)
rows = st.lists(row, max_size=8)
