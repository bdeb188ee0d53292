"""Task templates: placeholders, escaped braces, malformed templates, rendering."""

from __future__ import annotations

import pytest

from crw.engine.template import Placeholder, TemplateError, parse_template, render_task


def test_template_parses_placeholders_and_escaped_braces() -> None:
    assert parse_template("Use {a.x} in {{json}}.") == [
        "Use ",
        Placeholder("a", ("x",)),
        " in {json}.",
    ]


@pytest.mark.parametrize("text", ["{a}", "{a.}", "{.x}", "{A.x}", "{a.x", "a}", "{}", "{a.x y}"])
def test_malformed_template_is_refused(text: str) -> None:
    with pytest.raises(TemplateError):
        parse_template(text)


def test_render_inserts_strings_as_is_and_other_values_as_json() -> None:
    results = {"a": {"files": ["x.py"], "name": "n", "deep": {"k": 1}}}
    assert render_task("{a.name} {a.files} {a.deep.k} {a.none} {{}}", results) == (
        'n ["x.py"] 1 null {}'
    )
