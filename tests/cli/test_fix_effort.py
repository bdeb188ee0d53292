"""A review's fix_effort against a role store that decides the node role's effort.

The spawn hook gives every spawn of a role whose effort is decided that effort, so
a fix round could never run another: a fix_effort that differs is an input error
where the workflow meets the role store, at the start and in every run process
(a resume reads the store again), before anything is written. One equal to the
decided effort, or any where the role's effort is undecided, is taken (spec:
DISP-24 covers the undecided role; DISP-21, DISP-23 the decided one).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.actors.run import run_process
from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunEnv, RunSpec, WorkflowRef
from crw.errors import InputError
from crw.journal.log import read_journal
from tests.cli.conftest import Crw

REVIEWED = """name = "fixes"

[[node]]
id = "build"
role = "executor"
task = "Fix the parser."
schema = { type = "object" }
review = { role = "reviewer", rounds = 2, fix_effort = "high" }
"""


def refusal(workflow: Path, store: Path) -> str:
    return (
        f"{workflow}:8: node 'build' review: fix_effort = \"high\" differs from the effort"
        f' "medium" the role store {store} decides for executor, which every fix spawn runs;'
        f' write fix_effort = "medium", leave it out, or leave effort out of [executor]'
        f" in {store}"
    )


def test_a_fix_effort_the_role_store_contradicts_stops_the_start(crw: Crw, tmp_path: Path) -> None:
    """Exit 2, one line naming the workflow's line, the key and the fix; no run."""
    workflow = tmp_path / "wf.toml"
    workflow.write_text(REVIEWED)
    crw.state.mkdir()
    store = crw.state / "roles.toml"
    store.write_text('[executor]\nmodel = "m1"\neffort = "medium"\n')
    result = crw.start(str(workflow), "--owner", "o")
    assert result.code == 2
    assert result.error() == f"crw: error: {refusal(workflow, store)}\n"
    assert not (crw.state / "flow").exists()


async def test_a_run_process_refuses_a_role_store_changed_to_contradict_it(
    tmp_path: Path,
) -> None:
    """A resume reads the role store again: one that now decides another effort for
    the fix rounds refuses the process before its started row."""
    workflow_path = tmp_path / "wf.toml"
    workflow_path.write_text(REVIEWED)
    workflow = load_workflow(workflow_path)
    state = tmp_path / "state"
    run = RunDir(state / "flow" / "r1")
    run.create()
    spec = RunSpec(
        id="r1",
        workflow=WorkflowRef(path=str(workflow.path), digest=workflow.digest),
        backend="session",
        pool=1,
        host=f"unix:{tmp_path / 'nobody.sock'}",
        owner="owner-1",
        env=RunEnv(TMPDIR=str(tmp_path)),
    )
    store = state / "roles.toml"
    store.write_text('[executor]\nmodel = "m1"\neffort = "medium"\n')
    with pytest.raises(InputError) as refused:
        await run_process(run, spec, state)
    assert str(refused.value) == refusal(workflow.path, store)
    assert read_journal(run.journal).rows == []
    store.write_text('[executor]\nmodel = "m1"\neffort = "high"\n')  # the same effort: runs
    await run_process(run, spec, state)
    assert [row["row"] for row in read_journal(run.journal).rows] == ["started", "paused"]
