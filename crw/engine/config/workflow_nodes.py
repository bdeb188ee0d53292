"""A workflow file's `[[node]]` tables: `Node` (with its `review` and the file's
`[verifier]`), each value checked as it is read, a node's schema read, checked as
a JSON Schema and bundled once a load. It knows one node at a time: the needs
between nodes are `crw.engine.config.workflow_graph`'s, the file around them
`crw.engine.config.workflow`'s. Refusals are `crw_error`s that `load_workflow` words as
one line naming the file, the line and the fix.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from crw.engine.config._tomlsource import crw_error
from crw.engine.config.inputs import INPUTS
from crw.engine.config.roles import Role, checked_name
from crw.engine.config.schema_refs import bundle, read_schema_file
from crw.engine.config.template import SLUG, Placeholder, TemplateError, parse_template

SLUG_FIX = "use 1-64 lowercase letters, digits, '-' and '_', starting with a letter or digit"
"""How to fix a name or id that is not a slug."""


class Verifier(BaseModel):
    """`[verifier]`: the repository tools a packet names (spec, CRW-1488)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    go_root: StrictStr

    @field_validator("go_root")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not Path(value).is_absolute():
            raise crw_error(f"go_root = {json.dumps(value)} is not absolute", "give its full path")
        return value


class Review(BaseModel):
    """`review = { role, rounds, fix_effort }`: reviewer calls after the node, each
    fix round a continuation of the node's call; `fix_effort`, the effort each fix
    call's spawn asks for (None: the role's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["reviewer", "critic"] = "reviewer"
    rounds: StrictInt = Field(default=1, ge=1)
    fix_effort: StrictStr | None = None

    @field_validator("fix_effort")
    @classmethod
    def _effort(cls, value: str | None) -> str | None:
        """An effort as the role store takes one (`crw.engine.config.roles.checked_name`)."""
        return checked_name("fix_effort", value)


class Node(BaseModel):
    """One `[[node]]`: its schema is always the resolved JSON Schema object."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: StrictStr
    role: Role
    task: StrictStr
    output_schema: dict[str, Any] = Field(alias="schema")
    needs: tuple[StrictStr, ...] = ()
    review: Review | None = None
    timeout: float | None = None
    """The call's deadline in seconds: when it runs out the call is interrupted
    and held (reason deadline)."""
    qa: Literal["capture"] | None = None
    """"capture": a QA capture call, whose directory P is a scratch worktree."""

    @field_validator("timeout", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not isinstance(value, int | float) or not number or not 0 < value < math.inf:
            raise crw_error(
                f"timeout = {json.dumps(value, default=str)} is not a number of seconds above 0",
                "give the call's deadline in seconds, e.g. timeout = 3600",
            )
        return value

    @field_validator("id")
    @classmethod
    def _slug(cls, value: str) -> str:
        if SLUG.fullmatch(value) is None:
            raise crw_error(f"id = {json.dumps(value)} is not a slug", SLUG_FIX)
        if value == INPUTS:
            raise crw_error(
                f'id = "{INPUTS}" is reserved: a task names the run\'s inputs as {{inputs.NAME}}',
                "give the node another id",
            )
        return value

    @field_validator("task")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            parse_template(value)
        except TemplateError as err:
            raise crw_error(err.what, err.fix) from None
        return value

    @field_validator("output_schema", mode="wrap")
    @classmethod
    def _shared_schema(
        cls, value: object, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> object:
        """The schema as loaded and checked, the same object for every node that
        names it: the field's type check makes a copy of the dict, which a node
        would otherwise keep (some 200 bytes a node, 100,000 nodes 20 MB)."""
        loaded = cls._load_schema(value, info)
        checked = handler(loaded)
        return loaded if isinstance(loaded, dict) else checked

    @classmethod
    def _load_schema(cls, value: object, info: ValidationInfo) -> object:
        workflow_file = (info.context or {}).get("file")
        document = workflow_file if isinstance(workflow_file, Path) else None
        files = (info.context or {}).get("schema_files")
        files = files if isinstance(files, dict) else {}
        name: str | None = None
        if isinstance(value, str):
            if document is None:
                raise crw_error("a schema path outside a workflow file", "give the schema inline")
            if value in files:  # a file many nodes name is read and checked once
                return files[value]
            name, document = value, document.parent / value
            value = read_schema_file(document, value)
        if not isinstance(value, dict):
            return value
        directory = workflow_file.parent if isinstance(workflow_file, Path) else None
        seen = (info.context or {}).get("schemas")
        key = _schema_key(value, document)
        if isinstance(seen, dict) and key in seen:
            checked = seen[key]
        else:
            checked = bundle(_checked_schema(value), document, directory)
            if isinstance(seen, dict) and key is not None:
                seen[key] = checked
        if name is not None:
            files[name] = checked
        return checked

    def placeholders(self) -> list[Placeholder]:
        """The `{node.field}` placeholders of the task, in order."""
        return [part for part in parse_template(self.task) if isinstance(part, Placeholder)]


def _schema_key(value: dict[str, Any], document: Path | None) -> tuple[str, str] | None:
    """What a schema is checked and bundled by: its JSON text, key order kept, and
    the document its refs resolve against. Nodes that share a schema (the same file,
    or the same inline table) are checked once per load. None: not JSON, so the
    check refuses it."""
    try:
        return json.dumps(value), str(document)
    except (TypeError, ValueError):
        return None


def _checked_schema(value: dict[str, Any]) -> dict[str, Any]:
    """`value` when it is JSON and a valid JSON Schema (Draft 2020-12)."""
    try:
        json.dumps(value)
    except TypeError:
        raise crw_error(
            "schema holds a TOML date or time, which JSON has no form for",
            "write it as a string",
        ) from None
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as err:
        message = str(err.message).splitlines()[0]
        at = "" if err.json_path == "$" else f" at {err.json_path}"
        raise crw_error(
            f"schema is not a valid JSON Schema{at}: {message}", "fix the schema"
        ) from None
    return value


def share_equal_parts(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """`nodes`, each holding one shared copy of what many of them hold equal: its
    task text and the set of the fields its table set (pydantic keeps a set a
    model; neither is ever changed: a node is frozen, and `model_copy` copies the
    set before it adds to it). A 100,000-node workflow of one task text keeps
    some 270 bytes a node less."""
    texts: dict[str, str] = {}
    field_sets: dict[frozenset[str], set[str]] = {}
    for node in nodes:
        fields = node.__pydantic_fields_set__
        shared = field_sets.setdefault(frozenset(fields), fields)
        object.__setattr__(node, "__pydantic_fields_set__", shared)
        node.__dict__["task"] = texts.setdefault(node.task, node.task)
    return nodes
