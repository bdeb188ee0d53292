"""An answer checked against its schema in bounded time, retrieving nothing.

jsonschema matches `pattern` and `patternProperties` with the standard library's
`re`, which backtracks without end on a pattern like `^(a|a)*$`: one answer of 30
characters would hold the run's event loop (and its lock) for hours. Here every
pattern is matched by the `regex` package with a timeout, all the matches of one
check sharing CHECK_SECONDS; a check that runs out raises `SchemaCheckTimedOut`
and the call ends null_model (`schema_check_timed_out`). Refs resolve in the
schema alone (crw.engine.schema_refs bundled the files it names at load); the
registry refuses to retrieve anything.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import jsonschema._utils  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from crw.engine.schema_refs import refusing_registry

CHECK_SECONDS = 1.0
"""The time all pattern matches of one check may take together."""

_DEADLINE: ContextVar[float | None] = ContextVar("schema_check_deadline", default=None)


class SchemaCheckTimedOut(Exception):
    """The check of an answer did not finish within CHECK_SECONDS."""


def search(pattern: str, text: str) -> Any:
    """`re.search(pattern, text)` with the `regex` package, bounded by the deadline
    of the check under way (none outside a check). `regex` is imported by the first
    pattern matched: a schema without one never needs it."""
    import regex  # type: ignore[import-untyped]

    deadline = _DEADLINE.get()
    if deadline is None:
        return regex.search(pattern, text)
    try:
        return regex.search(pattern, text, timeout=max(deadline - time.monotonic(), 0.0))
    except TimeoutError:
        raise SchemaCheckTimedOut(
            f"matching the pattern {pattern!r} took longer than {CHECK_SECONDS:g} s"
        ) from None


class _BoundedRe:
    """The `re` that jsonschema's helpers see: additionalProperties and
    unevaluatedProperties match patternProperties through `jsonschema._utils.re`
    directly, past any keyword a validator overrides."""

    search = staticmethod(search)


jsonschema._utils.re = _BoundedRe()


def _pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, str(instance)):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    assert isinstance(instance, Mapping)
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_Validator = validators.extend(
    Draft202012Validator, {"pattern": _pattern, "patternProperties": _pattern_properties}
)


@functools.lru_cache(maxsize=64)
def _validator(schema: str) -> Any:
    """The validator of the schema whose JSON text is `schema`, made once for the
    calls of every node that has it (its making costs more than most checks)."""
    return _Validator(json.loads(schema), registry=refusing_registry())


def check(result: Any, schema: Mapping[str, Any]) -> list[str]:
    """Every way `result` fails the JSON Schema `schema` (Draft 2020-12), one line
    each, `<JSON path>: <message>`, sorted. Empty when it passes.

    Raises:
        SchemaCheckTimedOut: the patterns took longer than CHECK_SECONDS.
    """
    token = _DEADLINE.set(time.monotonic() + CHECK_SECONDS)
    try:
        validator = _validator(json.dumps(schema))
        return sorted(
            f"{error.json_path}: {' '.join(str(error.message).splitlines())}"
            for error in validator.iter_errors(result)
        )
    finally:
        _DEADLINE.reset(token)
