"""An answer checked against its schema in bounded time, retrieving nothing.

A check may take without end: `uniqueItems` compares every pair of items (an
array of 6,000 objects takes minutes), and jsonschema matches `pattern` with the
standard library's `re`, which backtracks without end on `^(a|a)*$` against 30
characters. So the whole check runs under a budget of CHECK_SECONDS of its
thread's CPU time (crw.engine.answers.cpu_budget stops it when spent), and every pattern
is matched by the `regex` package with a timeout of what is left of it (regex
stops itself: the budget's stop cannot land inside a C call). A check that runs
out, or recurses without end (a `$ref` to itself), raises `SchemaCheckTimedOut`
and the call ends null_model (`schema_check_timed_out`). The run's actors check
in a worker thread: the event loop answers meanwhile. Refs resolve in the schema
alone (crw.engine.config.schema_refs bundled the files it names at load); the registry
refuses to retrieve anything.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema._utils  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from crw.engine.answers import cpu_budget
from crw.engine.config.schema_refs import refusing_registry
from crw.host.compact import compact_encoder

CHECK_SECONDS = 1.0
"""The CPU time one check of an answer may take, every keyword and pattern together."""


_KEY = compact_encoder(ensure_ascii=False, sort_keys=True)
"""The schema's JSON text that keys its validator, by an encoder kept (`json.dumps`
builds one each check)."""


class SchemaCheckTimedOut(Exception):
    """The check of an answer could not finish within its budget."""


class _PatternOverBudget(Exception):
    """Matching `pattern` took what was left of the check's budget."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


def search(pattern: str, text: str) -> Any:
    """`re.search(pattern, text)` with the `regex` package, bounded by what is left
    of the budget of the check under way (none outside a check): regex counts the
    process's CPU time, never less than the check's thread spent. `regex` is
    imported by the first pattern matched: a schema without one never needs it."""
    import regex  # type: ignore[import-untyped]

    left = cpu_budget.remaining()
    if left is None:
        return regex.search(pattern, text)
    try:
        return regex.search(pattern, text, timeout=left)
    except TimeoutError:
        raise _PatternOverBudget(pattern) from None


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


_PLAIN_TOP = frozenset({"type", "required", "properties", "additionalProperties"})
_NOTES = frozenset({"title", "description"})
"""Keywords that annotate and assert nothing."""
_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "string": (str,),
    "null": (type(None),),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
}
"""A property's type and the Python types of a parsed JSON value that surely are
of it (`type(value) in ...`: a bool is no integer, and an integral float, which
Draft 2020-12 counts as an integer, is left to the full check)."""


@dataclass(frozen=True)
class _Plain:
    """A schema that asserts only an object's required members, its members'
    types and, maybe, that it has no others: most workflows' output schemas."""

    required: tuple[str, ...]
    types: dict[str, tuple[type, ...] | None]
    """Each property's surely-valid Python types; None: any value."""
    closed: bool
    """additionalProperties is false."""

    def passes(self, result: Any) -> bool:
        """Whether `result` surely passes (False: maybe not; the full check says)."""
        if type(result) is not dict:
            return False
        for name in self.required:
            if name not in result:
                return False
        types = self.types
        for name, value in result.items():
            if name in types:
                allowed = types[name]
                if allowed is not None and type(value) not in allowed:
                    return False
            elif self.closed:
                return False
        return True


@functools.lru_cache(maxsize=64)
def _plain(schema: str) -> _Plain | None:
    """The schema whose JSON text is `schema` as a `_Plain`, when it is one."""
    parsed = json.loads(schema)
    if not isinstance(parsed, dict) or parsed.get("type") != "object":
        return None
    if not set(parsed) <= _PLAIN_TOP | _NOTES:
        return None
    required, properties = parsed.get("required", []), parsed.get("properties", {})
    closed = parsed.get("additionalProperties", True)
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        return None
    if not isinstance(properties, dict) or not isinstance(closed, bool):
        return None
    types: dict[str, tuple[type, ...] | None] = {}
    for name, sub in properties.items():
        if not isinstance(sub, dict) or not set(sub) <= {"type"} | _NOTES:
            return None
        kind = sub.get("type")
        if kind is not None and (not isinstance(kind, str) or kind not in _PLAIN_TYPES):
            return None
        types[name] = None if kind is None else _PLAIN_TYPES[kind]
    return _Plain(tuple(required), types, not closed)


def check(result: Any, schema: Mapping[str, Any], seconds: float = CHECK_SECONDS) -> list[str]:
    """Every way `result` fails the JSON Schema `schema` (Draft 2020-12), one line
    each, `<JSON path>: <message>`, sorted. Empty when it passes.

    An answer that surely passes a plain schema (`_Plain`: required members and
    their types only) is passed by a look at its members, without jsonschema nor
    the budget: the look is one pass over the answer's top-level members, and
    jsonschema's walk of the same schema costs ten times more (a call's largest
    single piece of Python on the run's loop). Anything else, and every answer
    that may fail, takes the full check, which words the failures.

    Raises:
        SchemaCheckTimedOut: the check took longer than `seconds` of CPU (by
            default CHECK_SECONDS), or recursed without end.
    """
    key = _KEY(schema)
    plain = _plain(key)
    if plain is not None and plain.passes(result):
        return []
    try:
        return cpu_budget.run(functools.partial(_errors, result, key), seconds)
    except _PatternOverBudget as over:
        raise SchemaCheckTimedOut(
            f"matching the pattern {over.pattern!r} took longer than {seconds:g} s"
        ) from None
    except cpu_budget.BudgetSpent:
        raise SchemaCheckTimedOut(
            f"checking the answer against its schema took longer than {seconds:g} s"
        ) from None
    except RecursionError:
        raise SchemaCheckTimedOut(
            "checking the answer against its schema recursed without end"
            " (a $ref that refers to itself, or an answer nested too deep)"
        ) from None


def _errors(result: Any, schema: str) -> list[str]:
    validator = _validator(schema)
    return sorted(
        f"{error.json_path}: {' '.join(str(error.message).splitlines())}"
        for error in validator.iter_errors(result)
    )
