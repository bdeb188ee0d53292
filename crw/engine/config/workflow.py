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

This module owns the file: its top-level keys, `Workflow` and `load_workflow`,
and the wording of a refusal (which table holds the key). A `[[node]]` and its
checks are `crw.engine.config.workflow_nodes`', the needs between the nodes
`crw.engine.config.workflow_graph`'s, `[settings]` `crw.engine.config.settings_table`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

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

from crw.engine.config._tomlsource import Loc, TomlSource, crw_error, read_toml, validation_error
from crw.engine.config.inputs import INPUT_KEYS, InputDecl
from crw.engine.config.repo import named_checkout
from crw.engine.config.settings_table import KEYS as SETTINGS_KEYS
from crw.engine.config.settings_table import SettingsTable
from crw.engine.config.template import SLUG
from crw.engine.config.workflow_graph import Graph, check_graph
from crw.engine.config.workflow_nodes import SLUG_FIX, Node, Verifier, share_equal_parts
from crw.journal.framing import paused_gc
from crw.settings import Settings

_TOP_KEYS = (
    "name",
    "pool",
    "token_ceiling",
    "repo",
    "head",
    "verifier",
    "settings",
    "evidence_cwd",
    "inputs",
    "node",
)
_NODE_KEYS = ("id", "role", "task", "schema", "needs", "review", "timeout", "qa")
_REVIEW_KEYS = ("role", "rounds", "fix_effort")
_MISSING = {"node": ("no [[node]] table", "add a [[node]] with id, role, task and schema")}


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
    inputs: dict[str, InputDecl] = {}
    nodes: tuple[Node, ...] = Field(alias="node")

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, InputDecl]) -> dict[str, InputDecl]:
        for name in value:
            if SLUG.fullmatch(name) is None:
                raise crw_error(f"[inputs.{json.dumps(name)}] is not a slug", SLUG_FIX)
        return value

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
            raise crw_error(f"name = {json.dumps(value)} is not a slug", SLUG_FIX)
        return value

    @field_validator("nodes")
    @classmethod
    def _some(cls, value: tuple[Node, ...]) -> tuple[Node, ...]:
        if not value:
            raise crw_error(_MISSING["node"][0], _MISSING["node"][1])
        return value


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
    `crw.engine.config.evidence_cwd` confines it when the run starts): a gated executor
    role's steps have a flow evidence record (`crw.workspace.evidence`); None: none."""
    inputs: dict[str, InputDecl] = {}
    """The run inputs `[inputs.NAME]` declares, in file order (`crw.engine.config.inputs`)."""
    input_lines: dict[str, int] = {}
    """The line of each input's table in the file, for a refusal of its value."""

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
    with paused_gc():  # a 100,000-node workflow is millions of objects, none garbage
        return _load(path)


def _load(path: Path) -> Workflow:
    """The load, its largest parts let go as soon as they have served: the file's
    bytes once hashed, the TOML table once the nodes are made of it, the nodes'
    equal parts shared before the graph is built. A 100,000-node workflow's load
    peaked at 166 MB (traced) with all of them held at once, for 56 MB kept; what
    a process's memory reached then stays its high-water mark for the run."""
    data, text, table = read_toml(path, "workflow")
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    del data
    file = str(path)
    absolute = path.resolve()
    parsed = _parsed(file, absolute, text, table)
    del table
    nodes = share_equal_parts(parsed.nodes)
    graph = check_graph(file, text, nodes, parsed.inputs)
    source = TomlSource(text) if parsed.inputs else None
    workflow = Workflow(
        name=parsed.name,
        pool=parsed.pool,
        token_ceiling=parsed.token_ceiling,
        repo=Path(parsed.repo) if parsed.repo is not None else None,
        head=parsed.head,
        verifier=parsed.verifier,
        settings=parsed.settings.settings() if parsed.settings else Settings(),
        nodes=nodes,
        evidence_cwd=(
            os.path.realpath(absolute.parent / parsed.evidence_cwd) if parsed.evidence_cwd else None
        ),
        path=absolute,
        digest=digest,
        inputs=parsed.inputs,
        input_lines={
            name: line
            for name in parsed.inputs
            if source is not None and (line := source.line_of(("inputs", name))) is not None
        },
    )
    workflow._graph = graph
    return workflow


def _parsed(file: str, absolute: Path, text: str, table: dict[str, Any]) -> _WorkflowFile:
    """The file's table checked, as its nodes and settings."""
    try:
        return _WorkflowFile.model_validate(
            table, context={"file": absolute, "schemas": {}, "schema_files": {}}
        )
    except ValidationError as err:
        raise validation_error(
            file, TomlSource(text), err, lambda loc: _context(table, loc), missing=_MISSING
        ) from None


def _context(table: dict[str, Any], loc: Loc) -> tuple[str, tuple[str, ...]]:
    """Who holds the key at `loc` (for the message) and the keys it knows."""
    if len(loc) < 2:
        return "", _TOP_KEYS
    if loc[0] == "verifier":
        return "[verifier]", ("go_root",)
    if loc[0] == "settings":
        return "[settings]", SETTINGS_KEYS
    if loc[0] == "inputs":
        return f"[inputs.{loc[1]}]", INPUT_KEYS
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
