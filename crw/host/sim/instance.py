"""A valid instance of a JSON Schema: what a simulated subagent answers by default.

Covers the schema forms workflows use (object, array, string, integer, number,
boolean, null, enum, const, anyOf/oneOf/allOf, $ref to $defs, minItems,
minLength, minimum); the result is checked against the schema by the caller's
validator, so a form it does not cover shows up as a validation error, not as a
wrong answer taken for right.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def example_instance(schema: Any, root: Any = None) -> Any:
    """The simplest instance of `schema` that satisfies it."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        return example_instance(_resolve(schema["$ref"], root), root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("oneOf", "anyOf"):
        if schema.get(key):
            return example_instance(schema[key][0], root)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged |= example_instance(part, root) or {}
        return merged
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    build: Callable[[dict[str, Any], Any], Any] = _BY_TYPE.get(str(kind), _object)
    return build(schema, root)


def _resolve(ref: str, root: Any) -> Any:
    node = root
    for part in ref.removeprefix("#/").split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node


def _object(schema: dict[str, Any], root: Any) -> dict[str, Any]:
    props = schema.get("properties", {})
    return {
        name: example_instance(props.get(name, {}), root) for name in schema.get("required", [])
    }


def _array(schema: dict[str, Any], root: Any) -> list[Any]:
    return [
        example_instance(schema.get("items", {}), root) for _ in range(schema.get("minItems", 0))
    ]


def _string(schema: dict[str, Any], root: Any) -> str:
    return "x" * max(1, int(schema.get("minLength", 1)))


def _integer(schema: dict[str, Any], root: Any) -> int:
    return int(schema.get("minimum", 0))


def _number(schema: dict[str, Any], root: Any) -> float:
    return float(schema.get("minimum", 0))


def _boolean(schema: dict[str, Any], root: Any) -> bool:
    return True


def _null(schema: dict[str, Any], root: Any) -> None:
    return None


_BY_TYPE: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": _boolean,
    "null": _null,
}
