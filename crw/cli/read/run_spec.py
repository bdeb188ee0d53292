"""What `status`, `list` and `watch` read of a run's run.json and workflow file,
without the models that load them: run.json as plain JSON, the workflow file it
names, that file's nodes and the calls each needs, and the start that runs it again on the same host
and owner. Standard library only: the commands start cold.
"""

from __future__ import annotations

import functools
import json as json_module
import re
from typing import Any

from crw.cli.shell import shell_word
from crw.engine.run.rundir import RunDir


def spec_json(run: RunDir) -> dict[str, Any]:
    """run.json as plain JSON, no model for a few fields ({} when it cannot be read)."""
    try:
        spec = json_module.loads(run.run_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}


def workflow_file(spec: dict[str, Any]) -> str | None:
    """The workflow file run.json names."""
    workflow = spec.get("workflow")
    path = workflow.get("path") if isinstance(workflow, dict) else None
    return path if isinstance(path, str) else None


def start_again(spec: dict[str, Any], state_ref: str) -> str | None:
    """The `crw flow start` that runs the run's workflow again where the run ran:
    its backend, the host run.json records (a session run's default host is the
    socket the start resolved then, not the one $CODEX_HOME names now), its owner
    thread, the codex binary of a private host and its inputs (a file input by the
    path its start read); None when run.json names no
    workflow file. `state_ref` is the --state as the user gave it (quoted), or ""."""
    workflow = workflow_file(spec)
    if workflow is None:
        return None
    words = ["crw", "flow", "start", shell_word(workflow)]
    for flag, key in (
        ("--backend", "backend"),
        ("--host", "host"),
        ("--owner", "owner"),
        ("--codex-bin", "codex_bin"),
    ):
        value = spec.get(key)
        if isinstance(value, str) and value:
            words += [flag, shell_word(value)]
    words += _input_flags(spec.get("inputs"))
    if state_ref:
        words += ["--state", state_ref]
    return " ".join(words)


def _input_flags(inputs: object) -> list[str]:
    """The `--input` and `--input-file` flags that give a run's recorded inputs again."""
    words: list[str] = []
    for name, value in (inputs if isinstance(inputs, dict) else {}).items():
        if isinstance(value, dict):
            words += ["--input-file", shell_word(f"{name}={value.get('path')}")]
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            words += ["--input", shell_word(f"{name}={shown}")]
    return words


_WORKFLOW_LINE = re.compile(
    rb"^[ \t]*(?:\[(\[?)[ \t]*([^\]\n]*?)[ \t]*\]|(id|review)[ \t]*=[ \t]*"
    rb"(?:\"([^\"\n]*)\"|'([^'\n]*)')?)",
    re.MULTILINE,
)
"""The lines of a workflow file `workflow_plan` reads: a table's header (`[[node]]`,
`[node.review]`, any other), and a node's `id = "…"` and `review = …`."""


@functools.cache
def workflow_plan(path: str | None) -> dict[str, int]:
    """Each node of the workflow file as it is now, and the calls it needs at
    least: 1, 2 for a node with a review (its call and the review). Read from its
    lines (`[[node]]`, `id = "…"`, `review = …` or `[node.review]`), not parsed: a
    parse of a workflow of 10,000 nodes would cost status its cold start; {} when
    it cannot be read."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as file:
            text = file.read()
    except OSError:
        return {}
    plan: dict[str, int] = {}
    node: list[Any] | None = None  # [id, reviewed] of the [[node]] table read now
    nodes: list[list[Any]] = []
    for line in _WORKFLOW_LINE.finditer(text):
        array, table, key, double, single = line.groups()
        if table is not None:
            name = table.replace(b" ", b"").replace(b"\t", b"")
            if array and name == b"node":
                node = [None, False]
                nodes.append(node)
            elif array or not name.startswith(b"node."):
                node = None
            elif name == b"node.review" and node is not None:
                node[1] = True
        elif node is not None and key == b"review":
            node[1] = True
        elif node is not None and node[0] is None:
            value = double if double is not None else single
            node[0] = value.decode("utf-8", "replace") if value is not None else None
    for index, (node_id, reviewed) in enumerate(nodes):
        plan[node_id if node_id is not None else f"#{index}"] = 2 if reviewed else 1
    return plan
