"""Where a workflow's `evidence_cwd` may lie: inside the run's repository or the
workflow file's directory, symlinks resolved (the run writes flow evidence records
under it, docs/workspaces.md). A path outside both is refused when the run starts."""

from __future__ import annotations

import json
import os

from crw.engine.config._tomlsource import TomlSource, one_line, read_toml
from crw.engine.config.workflow import Workflow


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def check_evidence_cwd(workflow: Workflow, repository: str | None) -> None:
    """Refuse the workflow's evidence cwd (resolved at load) when it lies outside
    the run's `repository` (its checkout root; None: the run has none) and outside
    the workflow file's directory.

    Raises:
        InputError: one line `<workflow>:<line>: <what>; <fix>`; nothing is written.
    """
    if workflow.evidence_cwd is None:
        return
    roots = [os.path.realpath(workflow.path.parent)]
    if repository is not None:
        roots.insert(0, os.path.realpath(repository))
    if any(_inside(workflow.evidence_cwd, root) for root in roots):
        return
    _, text, table = read_toml(workflow.path, "workflow")  # loaded a moment ago
    given = table.get("evidence_cwd")
    where = " or ".join(
        [f"the run's repository {roots[0]}"] * (repository is not None)
        + [f"the workflow's directory {roots[-1]}"]
    )
    resolved = (
        "" if given == workflow.evidence_cwd else f" (it resolves to {workflow.evidence_cwd})"
    )
    raise one_line(
        str(workflow.path),
        TomlSource(text).line_of(("evidence_cwd",)),
        f"evidence_cwd = {json.dumps(given)} lies outside {where}{resolved}",
        "give a directory inside one of them, relative to the workflow file "
        '(evidence_cwd = "." is the workflow\'s directory), or leave evidence_cwd out',
    )
