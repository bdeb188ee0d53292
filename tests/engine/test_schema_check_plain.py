"""A plain output schema (an object's required members and their types) passes an
answer that surely fits it by a look at its members, without jsonschema or the
CPU budget; every other answer and schema takes the full check, so the errors
and the verdict are jsonschema's, whichever path judged."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from crw.engine.answers import cpu_budget, schema_check
from crw.engine.answers.schema_check import check
from tests.engine.json_values import json_values

TYPES = ["null", "boolean", "object", "array", "number", "string", "integer"]
NAMES = ["ok", "n", "why", "a b", ""]

values = json_values(text=6, items=3, leaves=6)
answers = st.one_of(
    values,
    st.dictionaries(st.sampled_from([*NAMES, "other"]), values, max_size=5),
)
properties = st.dictionaries(
    st.sampled_from(NAMES),
    st.one_of(
        st.sampled_from(TYPES).map(lambda t: {"type": t}),
        st.just({}),
        st.sampled_from(TYPES).map(lambda t: {"type": t, "description": "d"}),
        st.just({"type": "string", "minLength": 2}),  # not plain: the full check
        st.just({"type": ["string", "null"]}),  # not plain: the full check
    ),
    max_size=4,
)


@st.composite
def schemas(draw: Any) -> dict[str, Any]:
    props = draw(properties)
    schema: dict[str, Any] = {"type": draw(st.sampled_from(["object", "object", "array"]))}
    if props or draw(st.booleans()):
        schema["properties"] = props
    required = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    if required or draw(st.booleans()):
        schema["required"] = required
    closed = draw(st.sampled_from([None, True, False, {"type": "string"}]))
    if closed is not None:
        schema["additionalProperties"] = closed
    if draw(st.booleans()):
        schema["title"] = "t"
    return schema


def full(result: Any, schema: dict[str, Any]) -> list[str]:
    return sorted(
        f"{error.json_path}: {' '.join(str(error.message).splitlines())}"
        for error in Draft202012Validator(schema).iter_errors(result)
    )


@settings(max_examples=400, deadline=None)
@given(schemas(), answers)
def test_the_check_says_what_jsonschema_says_whichever_path_judged(
    schema: dict[str, Any], result: Any
) -> None:
    """spec: HARV-6 (each answer checked against its schema: a plain schema's quick
    look passes only what jsonschema passes)"""
    assert check(result, schema) == full(result, schema)


def test_an_answer_that_plainly_passes_is_checked_without_jsonschema_or_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec: HARV-6 (the answer checked against its schema; a call's check of the
    common schema costs a look at its members, not jsonschema's walk)"""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the full check ran")

    monkeypatch.setattr(schema_check, "_validator", refused)
    monkeypatch.setattr(cpu_budget, "run", refused)
    schema = {
        "type": "object",
        "required": ["ok", "why"],
        "properties": {"ok": {"type": "boolean"}, "why": {"type": "string"}, "n": {}},
        "additionalProperties": False,
    }
    assert check({"ok": True, "why": "done", "n": [1]}, schema) == []
    with pytest.raises(AssertionError, match="the full check ran"):
        check({"ok": True, "why": "done", "extra": 1}, schema)  # may fail: the full check
