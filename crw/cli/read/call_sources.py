"""What `crw flow call` reads beside a call's rows: its packet files, the schema
its answer was checked against and the files its crw.commit changed (the host's
transcript of a turn: `call_transcript`). Each gives what it found, or one line
saying why not; none raises for what a run directory or a repository may lack.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from crw.engine.views.call_detail import ChangedFile, SchemaView

PACKET_MAX = 1 << 20
"""The most bytes of a packet file shown: a packet is a few KiB."""


def packets(paths: Iterable[str]) -> dict[str, str | OSError]:
    """Each packet file's text (up to PACKET_MAX bytes), or the error reading it."""
    found: dict[str, str | OSError] = {}
    for path in paths:
        try:
            with open(path, "rb") as file:
                found[path] = file.read(PACKET_MAX).decode("utf-8", "replace")
        except OSError as err:
            found[path] = err
    return found


def schema_of(spec: Mapping[str, Any], node: str | None, review: bool) -> SchemaView:
    """The schema the call's answer was checked against: crw's verdict schema for a
    review call, else the node's in the workflow file run.json names (its `schema`
    file, or inline), with a note when that file changed since the run started."""
    if review:
        from crw.engine.calls.review import VERDICT_SCHEMA

        return SchemaView("review", None, VERDICT_SCHEMA, None)
    workflow = spec.get("workflow")
    where = workflow.get("path") if isinstance(workflow, Mapping) else None
    if not isinstance(where, str) or node is None:
        return SchemaView("unknown", None, None, "run.json names no workflow file")
    path = Path(where)
    try:
        data = path.read_bytes()
        entry = _node_table(data.decode("utf-8"), node)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        return SchemaView("unknown", where, None, f"the workflow file cannot be read: {err}")
    recorded = workflow.get("digest") if isinstance(workflow, Mapping) else None
    note = None
    if recorded is not None and "sha256:" + hashlib.sha256(data).hexdigest() != recorded:
        note = f"{where} changed since the run started: this is its schema now"
    value = entry.get("schema") if entry is not None else None
    if isinstance(value, dict):
        return SchemaView("inline", where, value, note)
    if not isinstance(value, str):
        return SchemaView("unknown", where, None, f"node {node} is not in {where} now")
    file = path.parent / value
    try:
        schema = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return SchemaView("file", str(file), None, f"the schema file cannot be read: {err}")
    return SchemaView("file", str(file), schema, note)


_NODE_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*node[ \t]*\]\]", re.MULTILINE)
_ARRAY_HEADER = re.compile(r"^[ \t]*\[\[", re.MULTILINE)


def _node_table(text: str, node: str) -> dict[str, Any] | None:
    """The `[[node]]` table of `node` in a workflow file's `text`: the block its
    `id` line stands in parsed alone (a parse of a 10,000-node file costs most of
    the command), or the whole file parsed when no line gives the id as a string."""
    quoted = "|".join(re.escape(q) for q in (json.dumps(node), f"'{node}'"))
    found = re.search(rf"^[ \t]*id[ \t]*=[ \t]*(?:{quoted})[ \t]*(?:#.*)?$", text, re.MULTILINE)
    if found is not None:
        heads = [m.start() for m in _NODE_HEADER.finditer(text, 0, found.start())]
        after = _ARRAY_HEADER.search(text, found.end())
        if heads:
            block = text[heads[-1] : after.start() if after is not None else len(text)]
            nodes = tomllib.loads(block).get("node")
            if isinstance(nodes, list) and nodes and nodes[0].get("id") == node:
                return nodes[0] if isinstance(nodes[0], dict) else None
    nodes = tomllib.loads(text).get("node")
    if not isinstance(nodes, list):
        return None
    return next((n for n in nodes if isinstance(n, dict) and n.get("id") == node), None)


_STATUS = {
    "A": "added",
    "D": "deleted",
    "M": "modified",
    "R": "renamed",
    "C": "copied",
    "T": "type changed",
}


def changed_files(repository: str | None, commit: str | None) -> tuple[ChangedFile, ...] | str:
    """The files `commit` changed from its first parent, read from the run's
    `repository` (run.json's: the call's worktree is gone once released, its
    commits are not); or why they could not be read."""
    import pygit2

    if repository is None or commit is None:
        return "run.json names no repository"
    try:
        repo = pygit2.Repository(repository)
        target = repo.revparse_single(commit).peel(pygit2.Commit)
        if target.parents:
            diff = repo.diff(target.parents[0], target)
        else:  # a root commit: every file added
            diff = target.tree.diff_to_tree(swap=True)
        diff.find_similar()
        return tuple(
            ChangedFile(delta.new_file.path, _STATUS.get(delta.status_char(), delta.status_char()))
            for delta in diff.deltas
        )
    except (pygit2.GitError, KeyError, ValueError, OSError) as err:
        return f"the repository at {repository} cannot be read: {err}"
