"""docs/consumers.md is the README's "Proven in its consumers" section, word for word: one is read on
GitHub's front page, the other linked from the docs, and an edit to one alone leaves the other wrong."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(text, title):
    start = text.index(f"\n## {title}\n") + 1
    end = text.find("\n## ", start)
    return text[start:end + 1 if end >= 0 else len(text)]


def test_consumers_doc_is_the_readme_section():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    doc = (ROOT / "docs" / "consumers.md").read_text(encoding="utf-8")
    assert _section(readme, "Proven in its consumers").rstrip("\n") == doc.rstrip("\n")
