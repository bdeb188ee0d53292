"""The docs a clone has: every relative link of README.md and docs/ reaches a file
of the repository (the spec is summarised in docs/spec.md, never linked outside
it), and the guide speaks to a user, not to this repository's history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_no_doc_points_outside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    assert "../shared/" not in text, f"{doc.name} names a directory a clone does not have"
    for target in _LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).resolve().is_relative_to(REPO), (doc.name, target)
        assert (doc.parent / target).exists(), f"{doc.name} links {target}, which is missing"


def test_the_spec_page_is_linked_from_the_readme() -> None:
    assert "(docs/spec.md)" in (REPO / "README.md").read_text()
    spec = (REPO / "docs" / "spec.md").read_text()
    for group in ("GEN", "STEP", "DISP", "BIND", "HARV", "ATT", "ROWS", "CMD-NEXT", "HOOK"):
        assert f"| {group} " in spec or f"{group}," in spec


def test_the_guide_marks_no_command_new() -> None:
    guide = (REPO / "docs" / "guide.md").read_text()
    assert "*(new)*" not in guide and "added this" not in guide
