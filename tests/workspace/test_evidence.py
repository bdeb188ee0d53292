"""The flow evidence decisions over a call's rows (`crw.workspace.evidence`):
which directories its newest generation names, the evidence_placed row, the
copies a release and a restore find, and that evidence_placed changes no
reading of the call's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crw.engine.calls.session_progress import progress
from crw.engine.config.workflow import load_workflow
from crw.engine.steps.replies import call_record
from crw.journal.replay import replay
from crw.workspace import evidence

Rows = list[dict[str, Any]]
RUN, CALL = "run-1", "build.1"
RECORD = {"run": RUN, "call": CALL, "marker": f"{CALL}/t1-a1", "attempt": 1}


def step(k: int = 1, attempt: int = 1, cwds: list[str] | None = None) -> dict[str, Any]:
    return {
        "row": "step_published",
        "call": CALL,
        "k": k,
        "attempt": attempt,
        "action": "spawn",
        "op": f"{CALL}/t{k}",
        "marker": f"{CALL}/t{k}-a{attempt}",
        "evidence_assignment": RECORD | {"attempt": attempt},
        "evidence_cwds": cwds or [],
        "evidence_ignored": [],
    }


def placed(cwd: str, attempt: int = 1) -> dict[str, Any]:
    return {"row": "evidence_placed", "call": CALL, "evidence_cwd": cwd, "attempt": attempt}


def started(cwd: str | None, attempt: int = 1) -> dict[str, Any]:
    return {
        "row": "thread_started",
        "call": CALL,
        "thread_id": f"agent-{attempt}",
        "attempt": attempt,
        "evidence_cwd": cwd,
    }


PREPARED = {"row": "prepared", "call": CALL, "node": "build", "role": "executor"}
HELD = {"row": "held", "call": CALL, "reason": "host_failure"}


def test_only_an_executor_role_of_a_reviewed_node_is_gated() -> None:
    """spec: STEP-19: the gated executor roles (docs/workspaces.md)."""
    gate = {"role": "reviewer", "rounds": 1}
    assert evidence.gated("executor", gate) and evidence.gated("executor-t1", gate)
    assert not evidence.gated("executor", None)
    assert not evidence.gated("reviewer", gate) and not evidence.gated("explorer", gate)


def test_a_steps_record_names_the_step_and_the_gate() -> None:
    """spec: STEP-19: evidence_assignment, the step's flow evidence record."""
    published = step(k=2, attempt=3) | {"workspace": "/p"}
    record = evidence.assignment(
        run=RUN, call=CALL, node="build", role="executor", step=published, gate={"rounds": 2}
    )
    assert record == {
        "run": RUN,
        "call": CALL,
        "node": "build",
        "role": "executor",
        "op": f"{CALL}/t2",
        "marker": f"{CALL}/t2-a3",
        "attempt": 3,
        "k": 2,
        "workspace": "/p",
        "gate": {"rounds": 2},
    }


def test_a_first_step_names_no_directory_and_ignores_an_older_generations() -> None:
    """spec: STEP-20: the first step of a generation was written under no directory
    before its row; an older generation's directories are its evidence_ignored."""
    assert evidence.step_fields([], RECORD, new_generation=True) == {
        "evidence_assignment": RECORD,
        "evidence_cwds": [],
        "evidence_ignored": [],
    }
    older = [PREPARED, step(), placed("/a"), started("/a"), HELD]
    fields = evidence.step_fields(older, RECORD, new_generation=True)
    assert (fields["evidence_cwds"], fields["evidence_ignored"]) == ([], ["/a"])


def test_a_later_step_names_the_directories_its_generation_wrote_it_under() -> None:
    """spec: STEP-20: evidence_cwds are the directories the rows of the call's
    newest generation named before the step's row (each once, first first);
    evidence_ignored those only an older generation names."""
    rows = [
        PREPARED,
        step(cwds=["/x"]),
        placed("/old"),
        HELD,
        PREPARED,
        step(),
        placed("/a"),
        started("/a"),
        step(k=1, attempt=2, cwds=["/a"]),
        placed("/b", 2),
        started("/b", 2),
    ]
    fields = evidence.step_fields(rows, RECORD)
    assert fields["evidence_cwds"] == ["/a", "/b"]
    assert fields["evidence_ignored"] == ["/x", "/old"]


def test_a_bind_under_a_directory_no_row_of_the_generation_names_places_the_record() -> None:
    """spec: ROWS-8, BIND-10: evidence_placed (evidence_assignment, evidence_cwd,
    attempt, marker) for a directory no row of the newest generation names; one
    that a row names, or only an older generation names, decides accordingly."""
    rows = [PREPARED, step(cwds=[]), placed("/old"), HELD, PREPARED, step()]
    found = evidence.placement(rows, rows[-1], "/old", "/fallback")
    assert found is not None and found.placed is not None
    assert found.placed.model_dump(exclude_none=True) == {
        "row": "evidence_placed",
        "call": CALL,
        "evidence_assignment": RECORD,
        "evidence_cwd": "/old",
        "attempt": 1,
        "marker": f"{CALL}/t1-a1",
    }
    again = [*rows, placed("/old"), started("/old"), step(attempt=2, cwds=["/old"])]
    found = evidence.placement(again, again[-1], "/old", None)
    assert found is not None and found.placed is None and found.cwd == "/old"
    assert found.record == RECORD | {"attempt": 2}


def test_a_host_that_reports_no_cwd_places_under_the_runs_evidence_cwd() -> None:
    """spec: BIND-4: the cwd the stop hook claims its receipt under."""
    rows = [PREPARED, step()]
    found = evidence.placement(rows, rows[-1], None, "/evidence")
    assert found is not None and found.cwd == "/evidence" and found.placed is not None
    assert evidence.placement(rows, rows[-1], None, None) is None
    bare = {**step(), "evidence_assignment": None}
    assert evidence.placement([PREPARED, bare], bare, "/a", "/b") is None


def test_a_release_finds_every_copy_every_generation_named() -> None:
    """spec: ROWS-9: the release of a superseded or prepared-again call."""
    rows = [
        PREPARED,
        step(),
        placed("/old"),
        HELD,
        PREPARED,
        step(cwds=[]),
        placed("/a"),
        started("/a"),
        step(attempt=2, cwds=["/a"]),
        placed("/b", 2),
    ]
    assert evidence.copies(rows, RUN, CALL) == [
        Path(f"/old/.crw/evidence/{RUN}/{CALL}.json"),
        Path(f"/a/.crw/evidence/{RUN}/{CALL}.json"),
        Path(f"/b/.crw/evidence/{RUN}/{CALL}.json"),
    ]


def test_the_end_of_a_run_finds_every_copy_of_every_call() -> None:
    """What the run's end releases: every call's copies, from the rows alone."""
    other = [{**row, "call": "build.3"} for row in (step(), placed("/c"))]
    rows = [PREPARED, step(), placed("/a"), {"row": "ended", "status": "completed"}, *other]
    assert evidence.run_copies(rows, RUN) == [
        Path(f"/a/.crw/evidence/{RUN}/{CALL}.json"),
        Path(f"/c/.crw/evidence/{RUN}/build.3.json"),
    ]


def test_a_restore_rewrites_the_newest_generations_copies_and_releases_older_ones() -> None:
    """spec: ROWS-10: the restore of a resumed call finds every copy from the rows:
    an evidence_placed whose record was never written is written now."""
    rows = [PREPARED, step(), placed("/old"), HELD, PREPARED, step(), placed("/a")]
    plan = evidence.restore(rows, RUN, CALL)
    assert plan.record == RECORD
    assert plan.write == [Path(f"/a/.crw/evidence/{RUN}/{CALL}.json")]
    assert plan.remove == [Path(f"/old/.crw/evidence/{RUN}/{CALL}.json")]
    assert evidence.restore([PREPARED], RUN, CALL) == evidence.Restore(None, [], [])


def test_a_record_is_written_and_removed_with_the_directories_it_made(tmp_path: Path) -> None:
    """spec: BIND-11, ROWS-9: the file effects; a record in a git checkout is in
    no status; a file in the way is an OSError."""
    repo = pygit2.init_repository(str(tmp_path))
    path = evidence.record_path(str(tmp_path), RUN, CALL)
    other = evidence.record_path(str(tmp_path), "run-2", CALL)
    evidence.write_record(path, RECORD)
    evidence.write_record(other, RECORD)
    assert path.read_bytes() == evidence.record_text(RECORD)
    assert repo.status() == {}
    evidence.remove_record(path)
    assert not path.parent.exists() and other.exists()
    evidence.remove_record(other)
    assert [p.name for p in tmp_path.iterdir()] == [".git"]
    evidence.remove_record(path)  # gone already: nothing to do
    (tmp_path / ".crw").write_text("in the way")
    with pytest.raises(OSError):
        evidence.write_record(path, RECORD)


_ROWS = st.lists(
    st.sampled_from(
        [
            PREPARED,
            step(),
            step(k=2, attempt=1, cwds=["/a"]),
            started("/a"),
            {"row": "turn_started", "call": CALL, "k": 1, "turn_id": "t", "attempt": 1},
            {"row": "completed", "call": CALL, "result": {}},
            HELD,
            {"row": "session_attempt_lost", "call": CALL, "attempt": 1},
        ]
    ),
    max_size=12,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ROWS, st.data())
def test_evidence_placed_changes_no_reading_of_the_calls_state(rows: Rows, data: Any) -> None:
    """spec: ROWS-11: evidence_placed rows anywhere among a call's rows change
    neither the run's read model, nor the call's record, nor its progress."""
    with_placed = list(rows)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(with_placed)))
        with_placed.insert(at, placed(data.draw(st.sampled_from(["/a", "/b"]))))
    assert replay(with_placed).calls == replay(rows).calls
    assert call_record(with_placed) == call_record(rows)
    assert progress(with_placed) == progress(rows)


def test_the_runs_evidence_cwd_is_the_workflows_option_relative_to_its_file(
    tmp_path: Path,
) -> None:
    """spec: STEP-19: a run with an evidence cwd (docs/workspaces.md)."""
    body = '[[node]]\nid = "a"\nrole = "executor"\ntask = "t"\nschema = { type = "object" }\n'
    (tmp_path / "with.toml").write_text(f'name = "w"\nevidence_cwd = "owner"\n{body}')
    (tmp_path / "without.toml").write_text(f'name = "w"\n{body}')
    assert load_workflow(tmp_path / "with.toml").evidence_cwd == str(tmp_path / "owner")
    assert load_workflow(tmp_path / "without.toml").evidence_cwd is None
