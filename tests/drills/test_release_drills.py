"""The end drills with real processes: a git session run ended from the command
line releases what it holds in the user's checkout, as its process's own end does.

A `crw host sim serve` host, whose owner thread works in the repository's
checkout (so the gated executor's flow evidence record is placed there), the
run's process, the process-level owner (`tests.drill.owner`) and the commands a
person types. One run is held (its build call's deadline) and ended with
`crw flow answer --abort`; one is paused with `crw flow pause`, then, no process
holding it, ended with `crw flow cancel`. Each then leaves what the run left that
ended on its own (the reference): no worktree, no branch of the run, no call
directory, no evidence record, and the checkout's status as it was. Every
process is reaped by pid at teardown (the crash drill's `reap`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.engine.run.locks import run_is_live
from tests.deadlines import LOADED
from tests.drill.test_crash_drill import drill_at, served, wait_until
from tests.drills.test_kill_drills import QUICK, REJECT, REVIEWED, TIMEOUT, KillDrill
from tests.workspace.gitrepo import make_repo

GIT = REVIEWED.replace("pool = 1\n", 'pool = 1\nrepo = "project"\nevidence_cwd = "project"\n')


@dataclass(frozen=True)
class End:
    point: str
    stop: str


ENDS = [End("held", "abort"), End("paused", "cancel")]


@dataclass
class GitDrill:
    drill: KillDrill
    repo: pygit2.Repository

    def script(self, end: End | None) -> None:
        """The git workflow (the build node's deadline for an abort) and the host's
        scripts: build.1's first turn hangs unless the run is undisturbed."""
        text = GIT
        if end is not None and end.stop == "abort":
            text = text.replace('role = "executor"\n', f'role = "executor"\ntimeout = {TIMEOUT}\n')
        self.drill.workflow.write_text(text)
        scripts: list[tuple[str, dict[str, Any]]] = [
            ("build.1/*", QUICK),
            ("build.2/*", {**QUICK, "answer": REJECT}),
        ]
        if end is not None:
            scripts.append(("build.1/t1-a1", {"hang": True}))
        for marker, behaviour in scripts:
            self.drill.host("sim/script", {"match": {"marker": marker}, "behaviour": behaviour})

    def left(self) -> dict[str, Any]:
        """What the run holds in the checkout once no process holds it."""
        assert self.drill.run is not None
        run = self.drill.run
        wait_until("the run process lets the run go", lambda: not run_is_live(run))
        checkout = Path(self.repo.workdir)
        return {
            "worktrees": self.repo.list_worktrees(),
            "branches": [n for n in self.repo.references if n.startswith("refs/heads/crw/")],
            "calls": sorted(p.name for p in run.calls.iterdir()) if run.calls.exists() else [],
            "records": sorted(str(p) for p in (checkout / ".crw").rglob("*")),
            "status": self.repo.status(),
        }


@contextlib.contextmanager
def git_drill_at(root: Path) -> Iterator[GitDrill]:
    """A drill in `root` whose owner works in the checkout `root/project`; every
    process it started is reaped by pid at the end."""
    repo = make_repo(root / "project", {"main.py": "print('hi')\n"})
    with served(drill_at(KillDrill, root)) as drill:
        owner = drill.host("sim/startOwner", {"cwd": str(repo.workdir).rstrip("/")})
        drill.owner_thread = str(owner["threadId"])  # the owner works in the checkout
        yield GitDrill(drill, repo)


@pytest.fixture
def git_drill(tmp_path: Path) -> Iterator[GitDrill]:
    with git_drill_at(tmp_path) as made:
        yield made


pytestmark = pytest.mark.xdist_group("test_release_drills")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the undisturbed run leaves in the checkout once it ended on its own,
    having placed the gated executor's record there."""
    with git_drill_at(tmp_path_factory.mktemp("reference")) as ran:
        ran.script(None)
        ran.drill.start(crash_after=None)
        rows = ran.drill.finish()
        left = ran.left()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert any(r["row"] == "evidence_placed" for r in rows)
    return left


def held(drill: KillDrill, reason: str) -> list[dict[str, Any]]:
    """Wait until build.1 is held for `reason` and no process holds the run; the
    owner is paused from then (its next would resume a paused run)."""

    def there() -> bool:
        return any(r["row"] == "held" and r.get("reason") == reason for r in drill.rows())

    # A deadline hold comes TIMEOUT seconds after build.1 starts, whatever the load.
    wait_until(f"build.1 is held {reason}", there, timeout=TIMEOUT + LOADED)
    drill.pause_owner()
    assert drill.run is not None
    run = drill.run
    wait_until("the run process lets the run go", lambda: not run_is_live(run))
    return drill.rows()


@pytest.mark.parametrize("end", ENDS, ids=[f"{e.point}-{e.stop}" for e in ENDS])
def test_a_git_run_ended_from_the_command_line_leaves_what_its_own_end_leaves(
    git_drill: GitDrill, reference: dict[str, Any], end: End, found: dict[str, Any]
) -> None:
    """The held run is answered --abort, the paused one cancelled, no process
    holding either: the command releases what the run holds after its rows, and
    the checkout is left as the run's own end leaves it."""
    drill = git_drill.drill
    git_drill.script(end)
    drill.start(crash_after=None)
    assert drill.run is not None
    run = drill.run.id
    if end.stop == "abort":
        before = held(drill, "deadline")
        found["held"] = "deadline"
        drill.command("answer", run, "build.1", "--abort")
        added = ["decision"]
    else:
        wait_until("build.1 runs its turn", lambda: any(
            r["row"] == "turn_started" and r["call"] == "build.1" for r in drill.rows()
        ))  # fmt: skip
        drill.pause_owner()
        assert drill.command("pause", run, "--wait", "60")["via"] == "process"
        before = held(drill, "paused")
        found["held"] = "paused"
        assert drill.command("cancel", run)["via"] == "here"
        added = ["cancelled", "ended"]
    assert any(r["row"] == "evidence_placed" for r in before)
    left = git_drill.left()
    drill.unpause_owner()
    rows = drill.finish()
    assert [r["row"] for r in rows[len(before) :]] == added
    assert (
        left
        == reference
        == {
            "worktrees": [],
            "branches": [],
            "calls": [],
            "records": [],
            "status": {},
        }
    )
    found["end"] = f"{'aborted' if end.stop == 'abort' else 'cancelled'}, nothing left"
