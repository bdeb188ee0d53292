"""What `status`, `list` and `watch` read of a run's run.json and workflow file,
without the models that load them: run.json as plain JSON, the workflow file it
names, and that file's node count. Standard library only: the commands start cold.
"""

from __future__ import annotations

import functools
import json as json_module
import re
from typing import Any

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


_NODE_TABLE = re.compile(rb"^[ \t]*\[\[[ \t]*node[ \t]*\]\]", re.MULTILINE)


@functools.cache
def workflow_nodes(path: str | None) -> int:
    """How many nodes the workflow file has now, counted by its `[[node]]` lines
    (a parse of a workflow of 10,000 nodes would cost status its cold start);
    0 when it cannot be read."""
    if path is None:
        return 0
    try:
        with open(path, "rb") as file:
            return len(_NODE_TABLE.findall(file.read()))
    except OSError:
        return 0
