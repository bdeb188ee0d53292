"""Any schema and any answer: the check answers the answer's errors, or says it
could not be checked (`SchemaCheckTimedOut`), nothing else, and within its CPU
budget. Schemas are drawn from every keyword that loops over an answer, nests or
matches, including patterns that backtrack and refs to themselves."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

from crw.engine.answers.schema_check import SchemaCheckTimedOut, check
from tests.engine.json_values import json_values

BUDGET = 0.05
"""The test's budget: small, so that each example that runs it out is quick."""
SLACK = 0.3
"""CPU seconds past the budget a stopped check may still spend."""

values = json_values(text=40, items=6, leaves=30)
many = st.integers(0, 3000).map(lambda n: [{"i": i, "s": "x" * (i % 5)} for i in range(n)])
backtracked = st.integers(20, 60).map(lambda n: "a" * n + "!")
answers = st.one_of(
    values,
    many,
    backtracked.map(lambda s: [s, {s: s}]),
    st.dictionaries(st.sampled_from(["a", "b", "aaaa"]), values | many | backtracked),
)

patterns = st.sampled_from(
    ["", ".*", "^a+$", "^(a|a)*$", "(x+x+)+y", "^[a-z]{2,}$", "\\d"]
) | st.text(max_size=8)
leaves = st.one_of(
    st.booleans(),
    st.builds(dict),
    st.sampled_from(["null", "boolean", "object", "array", "number", "string", "integer"]).map(
        lambda t: {"type": t}
    ),
    patterns.map(lambda p: {"pattern": p}),
    st.booleans().map(lambda b: {"uniqueItems": b}),
    st.lists(values, max_size=4).map(lambda e: {"enum": e}),
    values.map(lambda c: {"const": c}),
    st.integers(0, 50).map(lambda n: {"minLength": n}),
    st.integers(0, 50).map(lambda n: {"maxItems": n}),
    st.floats(1e-300, 1e300).map(lambda m: {"multipleOf": m}),
    st.integers(-(10**20), 10**20).map(lambda m: {"minimum": m}),
    st.just({"$ref": "#"}),
    st.just({"format": "email"}),
)


def _composites(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyed = st.dictionaries(st.sampled_from(["a", "b", "aaaa"]), inner, max_size=3)
    listed = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        inner.map(lambda s: {"items": s}),
        inner.map(lambda s: {"contains": s}),
        inner.map(lambda s: {"not": s}),
        inner.map(lambda s: {"additionalProperties": s}),
        inner.map(lambda s: {"unevaluatedProperties": s}),
        inner.map(lambda s: {"unevaluatedItems": s}),
        inner.map(lambda s: {"propertyNames": s}),
        keyed.map(lambda d: {"properties": d}),
        keyed.map(lambda d: {"dependentSchemas": d}),
        st.dictionaries(patterns, inner, max_size=2).map(lambda d: {"patternProperties": d}),
        listed.map(lambda xs: {"anyOf": xs}),
        listed.map(lambda xs: {"allOf": xs}),
        listed.map(lambda xs: {"oneOf": xs}),
        listed.map(lambda xs: {"prefixItems": xs}),
        st.tuples(inner, inner, inner).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
        st.lists(inner.filter(lambda s: isinstance(s, dict)), max_size=3).map(_merged),
    )


def _merged(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for schema in schemas:
        merged |= schema
    return merged


EVIL = "^(a|a)*$"
schemas = st.recursive(leaves, _composites, max_leaves=12)
costly = st.one_of(
    many.map(lambda a: ({"uniqueItems": True}, a)),
    backtracked.map(lambda s: ({"items": {"pattern": EVIL}}, [s])),
    backtracked.map(
        lambda s: ({"patternProperties": {EVIL: True}, "unevaluatedProperties": False}, {s: 1})
    ),
    values.map(lambda v: ({"allOf": [{"$ref": "#"}]}, v)),
)
"""Schemas with answers that take them long, or without end, to check."""
pairs = (
    st.tuples(schemas, answers)
    | costly
    | costly.flatmap(lambda pair: st.tuples(_composites(st.just(pair[0])), st.just(pair[1])))
)


@contextmanager
def no_python_hooks() -> Iterator[None]:
    """Without hypothesis's garbage-collector callback (it times collections in
    each example) and pytest's hook for exceptions that cannot be raised: the
    budget's stop may land in a callback or a generator closed by the collector,
    which drops it (the watchdog stops the check again) and hands it to the
    hook, in Python, where the next stop lands. Python's own hook prints it."""
    kept, hook = list(gc.callbacks), sys.unraisablehook
    gc.callbacks.clear()
    sys.unraisablehook = sys.__unraisablehook__
    try:
        yield
    finally:
        gc.callbacks[:] = kept
        sys.unraisablehook = hook


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(pair=pairs)
def test_any_schema_and_answer_give_errors_or_unchecked_within_the_budget(
    pair: tuple[Any, Any],
) -> None:
    """spec: HARV-6 (each answer checked against its schema, in bounded time)"""
    schema, result = pair
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        assume(False)  # a workflow with it is refused at load
    outcome: list[Any] = []

    def checking() -> None:
        cpu = time.thread_time()
        try:
            outcome.append(check(result, schema, BUDGET))
        except Exception as raised:
            outcome.append(raised)
        outcome.append(time.thread_time() - cpu)

    # In a thread of its own, as the run checks, away from hypothesis's tracer.
    with no_python_hooks():
        worker = threading.Thread(target=checking)
        worker.start()
        worker.join()
    found, spent = outcome
    if isinstance(found, SchemaCheckTimedOut):
        event(str(found).split(" ")[0])
    else:
        event("checked")
        assert isinstance(found, list), f"the check raised {found!r}"
        assert all(isinstance(e, str) for e in found)
    assert spent < BUDGET + SLACK
