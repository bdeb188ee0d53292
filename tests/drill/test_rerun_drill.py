"""The rerun's kill drill: real processes, a rerun killed around its reused rows.

A source run of the drill's workflow (explore, build, review) ends failed (build
null_model) on a `crw host sim serve` host; a rerun from build is started with
`CRW_CRASH_AFTER` (its detached run process SIGKILLs itself right after the row is
durable): after its started row, before the reused batch, or after the reused
batch, before any call. Once the process is gone it is resumed with `crw flow
resume RUN --detach`. Every kill point must end as the undisturbed rerun does:
completed, explore's reused row written once with the source's answer, every
result the same, and no turn for explore on the host.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import held_process_tokens
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from crw.workspace import refs
from tests.cli.test_rerun import GOOD, failed_run, rows_of
from tests.cli.test_wait import BROKEN, cli
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import (
    RUN_DEADLINE,
    Drill,
    alive,
    drill_at,
    kill,
    served,
    wait_until,
)
from tests.workspace.gitrepo import make_repo

CALL0 = "explore.1"

pytestmark = pytest.mark.xdist_group("test_rerun_drill")


def _reap(drill: AppDrill) -> None:
    drill.reap()
    for path in (drill.crw.state / "flow").iterdir():
        for row in rows_of(drill, path.name):
            if row["row"] == "started":
                kill(row["pid"])


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[AppDrill]:
    with served(drill_at(AppDrill, tmp_path / "run"), _reap) as made:
        yield made


def rerun(
    drill: AppDrill, source: str, crash_after: str | None, start_from: str = "build"
) -> RunDir:
    env = drill.crw.env | ({"CRW_CRASH_AFTER": crash_after} if crash_after else {})
    done = drill.crw("flow", "rerun", source, "--from", start_from, "--json",
                     "--state", str(drill.crw.state), env=env)  # fmt: skip
    assert done.code == 0, done.stderr
    return RunDir(Path(done.json()["run_dir"]))


def ended(drill: AppDrill, run: RunDir) -> list[dict[str, Any]]:
    def over() -> bool:
        rows = rows_of(drill, run.id)
        return bool(rows) and rows[-1]["row"] == "ended"

    wait_until("the rerun ends", over, RUN_DEADLINE)
    return rows_of(drill, run.id)


@pytest.mark.parametrize(
    "crash_after",
    [
        pytest.param("started", id="started, before the reused rows"),
        pytest.param("reused@explore.1", id="reused, before any call"),
    ],
)
def test_a_rerun_killed_around_its_reused_rows_resumes_to_the_same_end(
    drill: AppDrill, crash_after: str
) -> None:
    source = failed_run(drill)
    taken = next(
        r for r in rows_of(drill, source) if r["row"] == "completed" and r["call"] == "explore.1"
    )
    drill.host("sim/script", GOOD)
    run = rerun(drill, source, crash_after)
    first = next(r for r in rows_of(drill, run.id) if r["row"] == "started")
    wait_until("the killed run process is gone", lambda: not alive(first["pid"]))
    wait_until("its process lock is let go", lambda: held_process_tokens(run) == [])
    dead = [r["row"] for r in rows_of(drill, run.id)]
    assert dead[-1] != "ended" and ("reused" in dead) == crash_after.startswith("reused")

    resumed = cli(drill, "flow", "resume", run.id, "--detach", "--json")
    assert resumed.code == 0, resumed.stderr
    rows = ended(drill, run)
    assert rows[-1]["status"] == "completed"
    explore = [r for r in rows if r.get("call") == "explore.1"]
    assert [r["row"] for r in explore] == ["reused", "completed"]
    assert explore[1]["result"] == taken["result"]
    started = [i for i, r in enumerate(rows) if r["row"] == "started"]
    assert len(started) == 2
    at = started[0] if crash_after.startswith("reused") else started[1]
    assert rows[at + 1]["row"] == "reused"  # the batch right after a started row, once
    assert {r["call"] for r in rows if r["row"] == "turn_started"} == {"build.1", "review.1"}
    shadow = cli(drill, "flow", "shadow", run.id, "--json")
    assert shadow.code == 0, shadow.stdout
    assert json.loads(shadow.stdout)["points"] == []


@pytest.mark.parametrize(
    "crash_after",
    [
        pytest.param(None, id="undisturbed"),
        pytest.param("reused@explore.1", id="killed after the reused batch"),
    ],
)
def test_a_session_rerun_reuses_explore_and_the_owner_runs_the_rest(
    tmp_path: Path, crash_after: str | None
) -> None:
    """On the session backend, the owner played by the drill's owner process: the
    source ends failed, the rerun (on the source's owner and host) writes explore's
    reused rows and publishes steps only for build and review. Killed right after
    the reused batch, the owner's `crw flow next` resumes it and it ends the same."""

    def reap(drill: Drill) -> None:
        drill.reap()
        for path in (drill.crw.state / "flow").iterdir():
            for row in read_journal(RunDir(path).journal).rows:
                if row["row"] == "started":
                    kill(row["pid"])

    with served(drill_at(Drill, tmp_path / "run"), reap) as drill:
        drill.host("sim/script", BROKEN)
        drill.start(crash_after=None)
        assert drill.finish()[-1]["status"] == "failed"
        assert drill.run is not None
        source = drill.run.id
        taken = next(r for r in drill.rows() if r["row"] == "completed" and r["call"] == CALL0)
        drill.host("sim/script", GOOD)

        env = drill.crw.env | ({"CRW_CRASH_AFTER": crash_after} if crash_after else {})
        done = drill.crw("flow", "rerun", source, "--from", "build", "--json",
                         "--state", str(drill.crw.state), env=env)  # fmt: skip
        assert done.code == 0, done.stderr
        assert done.json()["backend"] == "session" and done.json()["owner"] == drill.owner_thread
        drill.run = RunDir(Path(done.json()["run_dir"]))
        drill.owner = drill.spawn(
            "tests.drill.owner", drill.run.id, "--state", str(drill.crw.state),
            "--socket", str(drill.socket), "--owner", drill.owner_thread,
            "--control", str(drill.control),
        )  # fmt: skip
        rows = drill.finish()
        assert rows[-1]["status"] == "completed"
        assert sum(r["row"] == "started" for r in rows) == (2 if crash_after else 1)
        explore = [r for r in rows if r.get("call") == CALL0]
        assert [r["row"] for r in explore] == ["reused", "completed"]
        assert explore[1]["result"] == taken["result"]
        published = {r["call"] for r in rows if r["row"] == "step_published"}
        assert published == {"build.1", "review.1"}
        turns, _ = drill.subagent_turns()
        # the host's turns of both runs: explore's the source's alone, build's one each
        assert (turns["explore.1/t1-a1"], turns["build.1/t1-a1"]) == (1, 2), turns
        shadow = drill.crw("flow", "shadow", drill.run.id, "--json",
                           "--state", str(drill.crw.state))  # fmt: skip
        assert shadow.code == 0 and shadow.json()["backend"] == "session", shadow.stdout


@pytest.mark.parametrize(
    "crash_after",
    [
        pytest.param(None, id="undisturbed"),
        pytest.param("reused@build.1", id="killed after the reused batch, before the ref"),
    ],
)
def test_a_git_rerun_keeps_a_reused_executors_crw_commit_on_its_node_branch(
    tmp_path: Path, crash_after: str | None
) -> None:
    """A run in a git checkout: build, an executor, writes a file and its
    crw.commit advances the node branch; a rerun from review reuses build, and its
    own node branch refs/crw/flow/<rerun>/nodes/build holds that commit (a
    crw_commit row in the reused batch, durable before the ref moves; the rerun's
    effect proofs hold it), killed after that batch or not."""
    project = tmp_path / "project"
    repo = make_repo(project)

    with served(drill_at(AppDrill, tmp_path / "run"), _reap) as drill:
        text = drill.workflow.read_text()
        drill.workflow.write_text(text.replace("pool = 1\n", f'pool = 1\nrepo = "{project}"\n'))
        writes = {"seconds": 0.1, "writes": {"fix.py": "fixed\n"}}
        drill.host("sim/script", {"match": {"marker": "build.1/*"}, "behaviour": writes})
        drill.start(crash_after=None)
        source_rows = drill.finish()
        assert source_rows[-1]["status"] == "completed"
        assert drill.run is not None
        source = drill.run.id
        made = next(r for r in source_rows if r["row"] == "crw_commit")
        assert refs.read(repo, made["node_ref"]) == made["commit"]

        run = rerun(drill, source, crash_after, start_from="review")
        node_ref = f"refs/crw/flow/{run.id}/nodes/build"
        if crash_after is not None:  # the row is durable, the ref not moved yet
            first = next(r for r in rows_of(drill, run.id) if r["row"] == "started")
            wait_until("the killed run process is gone", lambda: not alive(first["pid"]))
            wait_until("its process lock is let go", lambda: held_process_tokens(run) == [])
            assert rows_of(drill, run.id)[-1]["row"] == "crw_commit"
            assert refs.read(repo, node_ref) is None
            resumed = cli(drill, "flow", "resume", run.id, "--detach", "--json")
            assert resumed.code == 0, resumed.stderr
        rows = ended(drill, run)
        assert rows[-1]["status"] == "completed" and "held" not in {r["row"] for r in rows}
        build = [r for r in rows if r.get("call") == "build.1"]
        assert [r["row"] for r in build] == ["reused", "completed", "crw_commit"]
        kept = build[2]
        assert (kept["node_ref"], kept["commit"], kept["tree"]) == (
            node_ref, made["commit"], made["tree"],
        )  # fmt: skip
        assert "node_old" not in kept and "head_ref" not in kept
        assert refs.read(repo, node_ref) == made["commit"]
        assert refs.read(repo, made["node_ref"]) == made["commit"]  # the source's, as it was
        assert {r["call"] for r in rows if r["row"] == "turn_started"} == {"review.1"}
