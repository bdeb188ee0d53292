"""The workflow file: a TOML set of nodes, each an agent call of one role.

    name = "fix-issue"
    pool = 4
    token_ceiling = 2000000
    repo = "."                         # optional: the git checkout the calls work in
    head = "main"                      # optional: the commit the calls start from

    [verifier]
    go_root = "/usr/local/go"

    [settings]
    lost_after = 30

    [[node]]
    id = "build"
    role = "executor"
    needs = ["explore"]
    task = "Fix the bug. Start from {explore.files}."
    schema = "schemas/build.json"
    review = { role = "reviewer", rounds = 2, fix_effort = "high" }
    timeout = 3600                     # optional: the call's deadline, in seconds
    qa = "capture"                     # optional: a QA capture call (scratch worktree)

`load_workflow` is pure: it reads the file (and its schema files) and either
returns a `Workflow` or raises one `InputError` line `<file>:<line>: <what>;
<fix>`, before anything else happens. docs/workflow.md lists every refusal.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from crw.engine._tomlsource import Loc, TomlSource, crw_error, one_line, read_toml, validation_error
from crw.engine.repo import named_checkout
from crw.engine.roles import Role, checked_name
from crw.engine.schema_refs import bundle, read_schema_file
from crw.engine.settings_table import KEYS as SETTINGS_KEYS
from crw.engine.settings_table import SettingsTable
from crw.engine.template import SLUG, Placeholder, TemplateError, parse_template
from crw.settings import Settings

_SLUG_FIX = "use 1-64 lowercase letters, digits, '-' and '_', starting with a letter or digit"
_TOP_KEYS = (
    "name",
    "pool",
    "token_ceiling",
    "repo",
    "head",
    "verifier",
    "settings",
    "evidence_cwd",
    "node",
)
_NODE_KEYS = ("id", "role", "task", "schema", "needs", "review", "timeout", "qa")
_REVIEW_KEYS = ("role", "rounds", "fix_effort")
_MISSING = {"node": ("no [[node]] table", "add a [[node]] with id, role, task and schema")}


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
        """An effort as the role store takes one (`crw.engine.roles.checked_name`)."""
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
            raise crw_error(f"id = {json.dumps(value)} is not a slug", _SLUG_FIX)
        return value

    @field_validator("task")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            parse_template(value)
        except TemplateError as err:
            raise crw_error(err.what, err.fix) from None
        return value

    @field_validator("output_schema", mode="before")
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


class _WorkflowFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr
    pool: StrictInt = Field(default=4, ge=1)
    token_ceiling: StrictInt | None = Field(default=None, ge=1)
    repo: StrictStr | None = None
    head: StrictStr | None = None
    verifier: Verifier | None = None
    settings: SettingsTable | None = None
    evidence_cwd: StrictStr | None = None
    nodes: tuple[Node, ...] = Field(alias="node")

    @field_validator("repo")
    @classmethod
    def _checkout(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The root of the git checkout `repo` names, relative to the workflow file."""
        if value is None:
            return None
        file = info.context["file"] if info.context else Path.cwd() / "workflow.toml"
        root = named_checkout(value, file)
        if root is None:
            raise crw_error(
                f"repo = {json.dumps(value)} is not a git checkout",
                "give the path of one, relative to the workflow file, or leave repo out "
                "for the checkout the run is started from",
            )
        return str(root)

    @field_validator("evidence_cwd")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise crw_error("evidence_cwd holds a NUL character", "give a directory's path")
        return value

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if SLUG.fullmatch(value) is None:
            raise crw_error(f"name = {json.dumps(value)} is not a slug", _SLUG_FIX)
        return value

    @field_validator("nodes")
    @classmethod
    def _some(cls, value: tuple[Node, ...]) -> tuple[Node, ...]:
        if not value:
            raise crw_error(_MISSING["node"][0], _MISSING["node"][1])
        return value


@dataclass(frozen=True)
class Graph:
    """The needs of a workflow's nodes, each computed once: `index` is a node's
    place in the file, `position` its place in `order`, `dependents` the ids of
    the nodes that need it, in file order."""

    order: tuple[Node, ...]
    index: dict[str, int]
    position: dict[str, int]
    dependents: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, nodes: tuple[Node, ...]) -> Graph:
        """Kahn's algorithm with the ready nodes kept by file index: O(E log N).

        Raises:
            ValueError: the needs name an unknown node or form a cycle
                (`load_workflow` refuses both first).
        """
        index = {node.id: i for i, node in enumerate(nodes)}
        dependents: dict[str, list[str]] = {node.id: [] for node in nodes}
        missing = [len(node.needs) for node in nodes]
        for node in nodes:
            for need in node.needs:
                dependents[need].append(node.id)
        ready = [i for i, count in enumerate(missing) if count == 0]
        order: list[Node] = []
        while ready:
            placed = nodes[heapq.heappop(ready)]
            order.append(placed)
            for dependent in dependents[placed.id]:
                missing[index[dependent]] -= 1
                if missing[index[dependent]] == 0:
                    heapq.heappush(ready, index[dependent])
        if len(order) < len(nodes):
            raise ValueError("the needs of the workflow's nodes form a cycle")
        return cls(
            order=tuple(order),
            index=index,
            position={node.id: i for i, node in enumerate(order)},
            dependents={node: tuple(ids) for node, ids in dependents.items()},
        )


class Workflow(BaseModel):
    """A loaded workflow. `nodes` are in file order; `digest` is "sha256:" + the
    hex sha256 of the file's bytes; `path` is absolute. `token_ceiling`: the run
    admits no call once it counted that many tokens (None: no ceiling)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pool: int
    verifier: Verifier | None
    nodes: tuple[Node, ...]
    path: Path
    digest: str
    token_ceiling: int | None = None
    settings: Settings = Settings()
    """The run's timers and limits: the defaults, with what `[settings]` sets."""
    repo: Path | None = None
    """The root of the git checkout `repo` names (None: the one the run starts from)."""
    head: str | None = None
    """`head`: the ref the calls start from (None: the repository's HEAD)."""
    evidence_cwd: str | None = None
    """The run's evidence cwd (`evidence_cwd = "PATH"`, absolute, symlinks resolved;
    `crw.engine.evidence_cwd` confines it when the run starts): a gated executor
    role's steps have a flow evidence record (`crw.workspace.evidence`); None: none."""

    _graph: Graph | None = PrivateAttr(default=None)

    def graph(self) -> Graph:
        """The needs graph, computed once (at load, by `load_workflow`)."""
        if self._graph is None:
            self._graph = Graph.of(self.nodes)
        return self._graph

    def node(self, node_id: str) -> Node:
        """The node with id `node_id` (KeyError when there is none)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def order(self) -> tuple[Node, ...]:
        """The nodes in a topological order of needs: each after every node it
        needs, and otherwise in file order (the first node in file order whose
        needs are all placed comes next)."""
        return self.graph().order


def load_workflow(path: Path) -> Workflow:
    """Read and check the workflow file at `path`, and the schema files it names.

    Raises:
        InputError: one line `<file>:<line>: <what>; <fix>` for the first problem:
            TOML syntax, unknown keys, wrong types, a bad slug, an unknown role,
            a malformed template, a schema that is missing, not JSON or not a JSON
            Schema, duplicate ids, an unknown need, a cycle in needs, a template
            that refers to a node outside its needs. Nothing is written.
    """
    data, text, table = read_toml(path, "workflow")
    file = str(path)
    absolute = path.resolve()
    try:
        parsed = _WorkflowFile.model_validate(
            table, context={"file": absolute, "schemas": {}, "schema_files": {}}
        )
    except ValidationError as err:
        raise validation_error(
            file, TomlSource(text), err, lambda loc: _context(table, loc), missing=_MISSING
        ) from None
    graph = _check_graph(file, text, parsed.nodes)
    workflow = Workflow(
        name=parsed.name,
        pool=parsed.pool,
        token_ceiling=parsed.token_ceiling,
        repo=Path(parsed.repo) if parsed.repo is not None else None,
        head=parsed.head,
        verifier=parsed.verifier,
        settings=parsed.settings.settings() if parsed.settings else Settings(),
        nodes=parsed.nodes,
        evidence_cwd=(
            os.path.realpath(absolute.parent / parsed.evidence_cwd) if parsed.evidence_cwd else None
        ),
        path=absolute,
        digest="sha256:" + hashlib.sha256(data).hexdigest(),
    )
    workflow._graph = graph
    return workflow


def _context(table: dict[str, Any], loc: Loc) -> tuple[str, tuple[str, ...]]:
    """Who holds the key at `loc` (for the message) and the keys it knows."""
    if len(loc) < 2:
        return "", _TOP_KEYS
    if loc[0] == "verifier":
        return "[verifier]", ("go_root",)
    if loc[0] == "settings":
        return "[settings]", SETTINGS_KEYS
    if loc[0] != "node" or not isinstance(loc[1], int) or len(loc) < 3:
        return "", _TOP_KEYS
    label = _node_label(table, loc[1])
    if len(loc) >= 4 and loc[2] == "review":
        return f"{label} review", _REVIEW_KEYS
    return label, _NODE_KEYS


def _node_label(table: dict[str, Any], index: int) -> str:
    nodes = table.get("node")
    raw = nodes[index] if isinstance(nodes, list) and index < len(nodes) else None
    node_id = raw.get("id") if isinstance(raw, dict) else None
    if not isinstance(node_id, str):
        return f"[[node]] #{index + 1}"
    # An id is told as written, its control characters escaped: the error stays one line.
    return f"node '{json.dumps(node_id, ensure_ascii=False)[1:-1]}'"


def _check_graph(file: str, text: str, nodes: tuple[Node, ...]) -> Graph:
    """Ids unique, needs known and acyclic, templates within each node's needs;
    returns the graph. Each need and placeholder is looked at a bounded number of
    times; the file's lines are mapped (`TomlSource`) only to tell a refusal."""

    def refuse(index: int, key: str, what: str, fix: str) -> NoReturn:
        source = TomlSource(text)
        raise one_line(
            file, source.line_of(("node", index, key)), f"node '{nodes[index].id}': {what}", fix
        )

    first_at: dict[str, int] = {}
    for index, node in enumerate(nodes):
        if node.id in first_at:
            line = TomlSource(text).line_of(("node", first_at[node.id]))
            refuse(
                index, "id", f"id used twice (first at line {line})", "give each node its own id"
            )
        first_at[node.id] = index
    for index, node in enumerate(nodes):
        counts = Counter(node.needs)
        for need in node.needs:
            if need not in first_at:
                known = ", ".join(first_at)
                refuse(
                    index,
                    "needs",
                    f"needs '{need}', but there is no node '{need}'",
                    f"use one of: {known}",
                )
            if counts[need] > 1:
                refuse(index, "needs", f"needs '{need}' twice", "list it once")
    cycle = _find_cycle(nodes)
    if cycle:
        start = first_at[cycle[0]]
        refuse(
            start, "needs", f"needs form a cycle: {' -> '.join(cycle)}", "remove one of these needs"
        )
    graph = Graph.of(nodes)
    within = _Ancestors(nodes, graph)
    for index, node in enumerate(nodes):
        direct = set(node.needs)
        for placeholder in node.placeholders():
            if placeholder.node == node.id:
                what, fix = (
                    f"task {placeholder} refers to its own result",
                    "refer to a node it needs",
                )
            elif placeholder.node not in first_at:
                what, fix = (
                    f"task {placeholder} refers to no node",
                    f"use one of: {', '.join(first_at)}",
                )
            elif placeholder.node not in direct and not within.has(node, placeholder.node):
                what = f"task {placeholder} refers to '{placeholder.node}', which it does not need"
                fix = f"add '{placeholder.node}' to needs"
            else:
                continue
            refuse(index, "task", what, fix)
    return graph


def _find_cycle(nodes: tuple[Node, ...]) -> list[str]:
    """A cycle of needs as `[a, b, a]` (a needs b needs a), the first in file order; else []."""
    needs = {node.id: node.needs for node in nodes}
    finished: set[str] = set()
    for root in needs:
        if root in finished:
            continue
        path = [root]
        on_path = {root}
        pending = [iter(needs[root])]
        while pending:
            need = next(pending[-1], None)
            if need is None:
                finished.add(path[-1])
                on_path.discard(path.pop())
                pending.pop()
            elif need in on_path:
                return [*path[path.index(need) :], need]
            elif need not in finished:
                path.append(need)
                on_path.add(need)
                pending.append(iter(needs[need]))
    return []


class _Ancestors:
    """Whether a node needs another through its needs. The first question computes
    every node's ancestors once, as bit sets in topological order (one OR of
    machine words per need); a workflow whose templates name only direct needs
    never asks."""

    def __init__(self, nodes: tuple[Node, ...], graph: Graph) -> None:
        self._nodes, self._graph = nodes, graph
        self._bits: dict[str, int] | None = None

    def has(self, node: Node, other: str) -> bool:
        if self._bits is None:
            self._bits = {}
            for placed in self._graph.order:
                bits = 0
                for need in placed.needs:
                    bits |= self._bits[need] | (1 << self._graph.index[need])
                self._bits[placed.id] = bits
        return bool(self._bits[node.id] >> self._graph.index[other] & 1)
