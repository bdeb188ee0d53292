"""Every way a run ends releases what it holds in the user's checkout, as the run
process does at its own end (docs/workspaces.md, Restore and release): the call
worktrees, their branches when they hold no commit of their own, the calls'
directories and the flow evidence records. The run's node branches and stray refs
stay. `crw flow answer --abort` and `crw flow cancel` of a run no process holds
end a run with no process, and `crw flow rm`/`gc` release what a release cut
short left. The run is a git session run built by hand: its rows, the worktrees
the placer made for them and the record its bind placed; each command is a real
`crw` process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import read_journal
from crw.workspace import evidence
from crw.workspace.placer import Placer
from tests.cli.conftest import Crw, Result
from tests.cli.test_next import _append_rows
from tests.workspace.gitrepo import make_repo

RUN = "released-20261206-000000-abcd"
BUILD = "build.1"
WORKFLOW = """
name = "released"
pool = 1
repo = "repo"
evidence_cwd = "owner"

[[node]]
id = "explore"
role = "explorer"
task = "Find the files."
schema = { type = "object", required = ["files"], properties = { files = { type = "array" } } }

[[node]]
id = "build"
role = "executor"
needs = ["explore"]
task = "Fix it, starting from {explore.files}."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
review = { role = "reviewer", rounds = 1 }
"""
STRAY = f"refs/crw/flow/{RUN}/stray/build/a1-{BUILD}"


@dataclass
class GitRun:
    """The run, its repository and the owner's cwd, where the bind placed the record."""

    run: RunDir
    repo: pygit2.Repository
    owner: Path

    def left(self) -> dict[str, Any]:
        """What the run holds in the checkout, as a person looks at it."""
        records = self.owner / evidence.RECORD_DIR
        return {
            "worktrees": self.repo.list_worktrees(),
            "branches": sorted(n for n in self.repo.references if n.startswith("refs/heads/crw/")),
            "calls": sorted(p.name for p in self.run.calls.iterdir()),
            "records": sorted(str(p.relative_to(self.owner)) for p in records.rglob("*")),
            "run_refs": sorted(n for n in self.repo.references if n.startswith("refs/crw/")),
        }


RELEASED = {"worktrees": [], "branches": [], "calls": [], "records": [], "run_refs": [STRAY]}
"""What a run's end leaves: its stray ref (the run's result), nothing else."""


def _git_run(crw: Crw, tmp_path: Path, build_held: str) -> GitRun:
    """A git session run whose explore.1 completed in its checkout and whose build.1
    (a gated executor) is held `build_held` in its worktree, its record placed
    under the owner's cwd; both worktrees made as the placer makes them."""
    repo = make_repo(tmp_path / "repo", {"main.py": "print('hi')\n"})
    owner = tmp_path / "owner"
    owner.mkdir()
    (tmp_path / "wf.toml").write_text(WORKFLOW)
    workflow = load_workflow(tmp_path / "wf.toml")
    root, head = str(repo.workdir).rstrip("/"), str(repo.head.target)
    run = RunDir.of(crw.state, RUN)
    run.create()
    write_run_spec(
        run.run_json,
        RunSpec(
            id=RUN,
            workflow=WorkflowRef(path=str(tmp_path / "wf.toml"), digest=workflow.digest),
            backend="session",
            pool=1,
            repository=root,
            head=head,
            host=f"unix:{crw.state / 'no-host.sock'}",
            owner="owner-thread",
        ),
    )
    placer = Placer(RUN, root, head, run.calls)
    looked = placer.allocate("explore.1", "explore", "explorer", None)
    built = placer.allocate(BUILD, "build", "executor", None)
    placer.make(looked, "explore")
    placer.make(built, "build")
    repo.references.create(STRAY, repo.head.target)
    step = {"op": f"{BUILD}/t1", "marker": f"{BUILD}/t1-a1", "attempt": 1, "k": 1}
    record = evidence.assignment(
        run=RUN,
        call=BUILD,
        node="build",
        role="executor",
        step={**step, "workspace": built.workspace},
        gate={"role": "reviewer", "rounds": 1},
    )
    evidence.write_record(evidence.record_path(str(owner), RUN, BUILD), record)
    _append_rows(
        run,
        {"row": "started", "backend": "session", "pid": 1, "role_pairs": None},
        _prepared("explore.1", "explore", "explorer", looked.model_dump()),
        {"row": "completed", "call": "explore.1", "result": {"files": []}},
        _prepared(BUILD, "build", "executor", built.model_dump()),
        {"row": "step_published", "call": BUILD, "action": "spawn", **step}
        | {"workspace": built.workspace, "evidence_assignment": record, "evidence_cwds": []},
        {"row": "evidence_placed", "call": BUILD, "evidence_cwd": str(owner)}
        | {"evidence_assignment": record, "attempt": 1, "marker": step["marker"]},
        {"row": "thread_started", "call": BUILD, "thread_id": "thr-b", "attempt": 1}
        | {"evidence_cwd": str(owner), "cwd": built.workspace},
        {"row": "turn_started", "call": BUILD, "k": 1, "attempt": 1, "turn_id": "turn-1"},
        {"row": "held", "call": BUILD, "reason": build_held},
    )
    made = GitRun(run, repo, owner)
    assert made.left()["worktrees"] and made.left()["records"]  # what the run holds
    return made


def _prepared(call: str, node: str, role: str, allocation: dict[str, Any]) -> dict[str, Any]:
    return {"row": "prepared", "call": call, "node": node, "role": role, "allocation": allocation}


def _flow(crw: Crw, *args: str) -> Result:
    return crw("flow", *args, "--state", str(crw.state), "--json")


def _kinds(run: RunDir) -> list[str]:
    return [row["row"] for row in read_journal(run.journal).rows]


def test_an_abort_releases_what_the_run_holds_as_its_own_end_does(crw: Crw, tmp_path: Path) -> None:
    """The answer --abort of the held executor call ends the run with no process:
    after its decision row it releases both worktrees, their branches, the calls'
    directories and the evidence record; the stray ref stays, and the rows are
    the decision alone, the run ended aborted."""
    made = _git_run(crw, tmp_path, "deadline")
    before = _kinds(made.run)
    aborted = _flow(crw, "answer", RUN, BUILD, "--abort")
    assert aborted.code == 0, aborted.stderr
    assert aborted.json()["state"] == "ended"
    assert _kinds(made.run) == [*before, "decision"]
    assert made.left() == RELEASED
    assert _flow(crw, "status", RUN).json()["ended_status"] == "aborted"


def test_a_cancel_of_a_paused_run_no_process_holds_releases_what_it_holds(
    crw: Crw, tmp_path: Path
) -> None:
    """A paused run (its build.1 held by the pause) is cancelled by the command
    itself, no process holding it: after the cancelled and ended rows it releases
    what the run holds, as the run's process does at its end."""
    made = _git_run(crw, tmp_path, "paused")
    _append_rows(made.run, {"row": "paused", "reason": "paused"})
    before = _kinds(made.run)
    cancelled = _flow(crw, "cancel", RUN)
    assert cancelled.code == 0, cancelled.stderr
    assert (cancelled.json()["via"], cancelled.json()["ended_status"]) == ("here", "cancelled")
    assert _kinds(made.run) == [*before, "cancelled", "ended"]
    assert made.left() == RELEASED


@pytest.mark.parametrize("command", ["rm", "gc"])
def test_rm_and_gc_release_what_a_cut_short_release_left(
    crw: Crw, tmp_path: Path, command: str
) -> None:
    """A run whose ended row is durable and whose release a crash cut short keeps
    its worktrees and its evidence record: rm (or gc) releases both before it
    removes the run's directory."""
    made = _git_run(crw, tmp_path, "deadline")
    _append_rows(made.run, {"row": "ended", "status": "failed"})
    args = ["rm", RUN] if command == "rm" else ["gc", "--ended-before", "2026-12-01"]
    removed = _flow(crw, *args)
    assert removed.code == 0, removed.stderr
    assert not made.run.root.exists()
    assert made.repo.list_worktrees() == []
    assert not (made.owner / evidence.RECORD_DIR.parts[0]).exists()
    assert [n for n in made.repo.references if n.startswith("refs/heads/crw/")] == []


def test_an_abort_given_again_finishes_a_release_a_crash_cut_short(
    crw: Crw, tmp_path: Path
) -> None:
    """An abort whose command died after its decision row, before the release: the
    same answer given again appends nothing and releases what the run holds."""
    made = _git_run(crw, tmp_path, "deadline")
    decision = {"row": "decision", "call": BUILD, "choice": "abort", "reason": "deadline"}
    _append_rows(made.run, decision)
    before = _kinds(made.run)
    again = _flow(crw, "answer", RUN, BUILD, "--abort")
    assert again.code == 0, again.stderr
    assert (again.json()["recorded"], again.json()["state"]) == (False, "ended")
    assert _kinds(made.run) == before
    assert made.left() == RELEASED
