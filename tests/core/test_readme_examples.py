"""The README's library examples run as written, and the docs that repeat README sections repeat them exactly."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "README.md"


def _library_blocks():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Library use", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_library_examples_run(capsys):
    blocks = _library_blocks()
    assert len(blocks) >= 4
    namespace = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "'field': 'reference'" in out          # the leak example printed what the gate caught
    assert namespace["report"]["n_written"] == 4


# docs/pipeline.md's "The UI" is the short form of the README's (no pictures, no UI test)
SHORT_FORMS = {("pipeline.md", "The UI")}


def _sections(text):
    """{heading: text up to the next heading of any level} of every ##, ### and #### section."""
    parts = re.split(r"(?m)^#{2,4} (.*)$", text)
    return dict(zip(parts[1::2], (body.strip() for body in parts[2::2])))


def test_the_docs_repeat_the_readme_sections_they_share():
    readme_text = DOC.read_text(encoding="utf-8")
    readme = _sections(readme_text)
    for name in ("pipeline.md", "deploying.md", "consumers.md"):
        doc = _sections((DOC.parent / "docs" / name).read_text(encoding="utf-8"))
        shared = [heading for heading in doc if heading in readme and (name, heading) not in SHORT_FORMS]
        assert len(shared) >= 4, name
        for heading in shared:
            assert doc[heading] == readme[heading], f"docs/{name}: section {heading!r} differs from the README's"
    consumers = "## Proven in its consumers" + readme_text.split("## Proven in its consumers", 1)[1].split("\n## ", 1)[0]
    assert (DOC.parent / "docs" / "consumers.md").read_text(encoding="utf-8").strip() == consumers.strip()


# where each short form's shared text starts: from there to its end, it is the README's text word for word
SHORT_FORM_SHARED_FROM = {("pipeline.md", "The UI"): "The sensor `inbox_sensor` and the schedule"}


def test_the_short_forms_end_with_the_readme_paragraphs_they_share():
    readme_text = DOC.read_text(encoding="utf-8")
    assert set(SHORT_FORM_SHARED_FROM) == SHORT_FORMS
    for (name, heading), start in SHORT_FORM_SHARED_FROM.items():
        body = _sections((DOC.parent / "docs" / name).read_text(encoding="utf-8"))[heading]
        shared = body[body.index(start):]
        assert shared.count("\n\n") >= 2, f"docs/{name}: section {heading!r} shares too little to check"
        assert shared in readme_text, f"docs/{name}: section {heading!r} differs from the README's from {start!r} on"
