"""Task templates: placeholders, escaped braces, malformed templates, rendering."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from crw.engine.config.template import Placeholder, TemplateError, parse_template, render_task


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


def lines_run(call: Callable[[], Any]) -> int:
    """How many lines of `parse_template` ran during `call()`."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is parse_template.__code__ else None

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def test_a_template_is_parsed_a_run_of_text_at_a_time() -> None:
    """Every run and resume loads its workflow, each node's task parsed twice, and
    each call renders its task: the text between two braces is taken at once, not a
    character at a time, so a task of 10,000 characters costs what one of ten does."""
    text = "Answer with the files you changed and why. " * 250
    assert lines_run(lambda: parse_template(text)) == lines_run(lambda: parse_template("Answer."))
    with_placeholders = text + "{a.x}" + text + "{{" + text
    assert lines_run(lambda: parse_template(with_placeholders)) < 60
