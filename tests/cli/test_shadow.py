"""`crw flow shadow RUN`: a real demo run on the simulated host, replayed from its
trace, and the same trace edited by hand.

Each backend's demo (a repair, a review round with a rejection and a fix) runs
once for the module, as a user runs it; every test copies its run directory and
edits the copy's journal the way a person would, reframing the lines (seq and
checksum) so only the decisions can tell.
"""

from __future__ import annotations

import json
import shutil
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Crw, Result

Rows = list[dict[str, Any]]


pytestmark = pytest.mark.xdist_group("test_shadow")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The run directory of one finished demo run per backend."""
    root = tmp_path_factory.mktemp("demos")
    runs: dict[str, Path] = {}
    runners = []
    for backend in ("session", "app-server"):
        (root / backend / "tmp").mkdir(parents=True)
        crw = Crw(root / backend / "state", root / backend / "tmp")
        runners.append(crw)
        result = crw("flow", "demo", "--state", str(crw.state), "--backend", backend, "--json")
        if result.code == 0:
            crw.pids.append(result.json()["host_pid"])
        assert result.code == 0, result.stderr
        runs[backend] = Path(result.json()["run_dir"])
    yield runs
    for crw in runners:
        crw.reap()


def _copy(crw: Crw, demos: dict[str, Path], backend: str) -> Path:
    run = crw.state / "flow" / demos[backend].name
    shutil.copytree(demos[backend], run)
    return run


def _rows(run: Path) -> Rows:
    rows = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    return rows


def _write(run: Path, rows: Rows) -> None:
    """The rows as a journal the run could have written: seq and commit_seq
    renumbered, every line's checksum made again."""
    lines = []
    for seq, row in enumerate(rows, start=1):
        body = {k: v for k, v in row.items() if k not in ("seq", "commit_seq", "crc")}
        text = json.dumps({"seq": seq, **body, "commit_seq": seq}, separators=(",", ":"))
        head = text[:-1].encode()
        lines.append(head + b',"crc":"%08x"}\n' % zlib.crc32(head))
    (run / "journal.jsonl").write_bytes(b"".join(lines))


def _find(rows: Rows, kind: str, call: str | None = None, **fields: Any) -> int:
    return next(
        i
        for i, row in enumerate(rows)
        if row["row"] == kind
        and (call is None or row.get("call") == call)
        and all(row.get(k) == v for k, v in fields.items())
    )


def _shadow(crw: Crw, run: Path, *more: str) -> Result:
    return crw("flow", "shadow", str(run), *more)


def _edited(crw: Crw, demos: dict[str, Path], backend: str, edit: Callable[[Rows], None]) -> Any:
    run = _copy(crw, demos, backend)
    rows = _rows(run)
    edit(rows)
    _write(run, rows)
    result = _shadow(crw, run, "--json")
    assert result.code == 1, result.stdout + result.stderr
    out = result.json()
    assert out["equal"] is False
    return [(p["line"], p["call"], p["check"], p["recorded"], p["replayed"]) for p in out["points"]]


@pytest.mark.parametrize("backend", ["session", "app-server"])
def test_a_finished_demo_run_replays_equal_and_names_its_backend(
    crw: Crw, demos: dict[str, Path], backend: str
) -> None:
    """spec: GEN-13, GEN-14"""
    result = _shadow(crw, demos[backend], "--json")
    assert result.code == 0, result.stdout + result.stderr
    out = result.json()
    assert out["backend"] == backend
    assert out["equal"] is True and out["points"] == []
    checked = out["checked"]
    assert (checked["admission"], checked["round"], checked["ended"]) == (4, 3, 1)
    assert (checked["harvest"], checked["repair"], checked["turn"]) == (7, 1, 8)
    assert checked["tokens"] + checked.get("tokens taken as given", 0) == 7
    assert out["given"]  # what the trace cannot tell is said, never checked
    human = _shadow(crw, demos[backend])
    assert human.code == 0
    assert f"backend {backend}" in human.stdout.splitlines()[0]
    assert human.stdout.splitlines()[0].endswith(": equal")
    assert "taken as given" in human.stdout


def test_a_reframed_unedited_journal_replays_equal(crw: Crw, demos: dict[str, Path]) -> None:
    """spec: GEN-13"""
    run = _copy(crw, demos, "session")
    _write(run, _rows(run))
    assert _shadow(crw, run).code == 0


def test_a_removed_completed_row_is_caught_at_the_admission_it_allowed(
    crw: Crw, demos: dict[str, Path]
) -> None:
    """spec: GEN-13"""

    def edit(rows: Rows) -> None:
        del rows[_find(rows, "completed", "explore.1")]

    points = _edited(crw, demos, "session", edit)
    assert points[0][1:] == (
        "plan.1",
        "admission",
        "plan admitted",
        "not admitted: explore not completed",
    )
    assert [p[2:5] for p in points[-2:]] == [
        ("ended", "status completed", "status failed"),
        (
            "ended",
            "state explore=completed, plan=completed, build=completed, critique=completed",
            "state explore=unrun, plan=completed, build=completed, critique=completed",
        ),
    ]


@pytest.mark.parametrize("backend", ["session", "app-server"])
def test_an_admission_moved_before_its_need_completed_is_caught(
    crw: Crw, demos: dict[str, Path], backend: str
) -> None:
    """spec: GEN-13"""

    def edit(rows: Rows) -> None:
        prepared = rows.pop(_find(rows, "prepared", "plan.1"))
        rows.insert(_find(rows, "completed", "explore.1"), prepared)

    points = _edited(crw, demos, backend, edit)
    assert [p[1:] for p in points] == [
        ("plan.1", "admission", "plan admitted", "not admitted: explore not completed")
    ]


def test_a_flipped_review_verdict_is_caught_by_the_harvest(
    crw: Crw, demos: dict[str, Path]
) -> None:
    """The last review accepted; edited to reject, the run's code holds the call
    (review_rejected after its one fix round), and the critic was never admitted.
    spec: GEN-13"""

    def edit(rows: Rows) -> None:
        end = rows[_find(rows, "completed", "build.4")]
        end["result"] = {"findings": ["no"], "verdict": "reject"}

    points = _edited(crw, demos, "session", edit)
    checks = [(p[1], p[2], p[3], p[4]) for p in points]
    assert ("build.4", "harvest", 'row "completed"', 'row "held"') in checks
    assert any(c[:2] == ("build.4", "harvest") and c[2].startswith("result_digest") for c in checks)
    assert checks[2][:3] == ("critique.1", "admission", "critique admitted")


@pytest.mark.parametrize("backend", ["session", "app-server"])
def test_changed_tokens_are_caught_against_the_rollout(
    crw: Crw, demos: dict[str, Path], backend: str
) -> None:
    """spec: GEN-13"""
    recorded: dict[str, Any] = {}

    def edit(rows: Rows) -> None:
        recorded["line"] = _find(rows, "completed", "critique.1") + 1
        end = rows[recorded["line"] - 1]
        recorded["tokens"] = end["tokens"]
        end["tokens"] = {**end["tokens"], "total": end["tokens"]["total"] + 100}

    points = _edited(crw, demos, backend, edit)
    assert len(points) == 1
    line, call, check, was, replayed = points[0]
    assert (line, call, check) == (recorded["line"], "critique.1", "tokens")
    assert json.loads(replayed.removeprefix("tokens ")) == recorded["tokens"]
    assert json.loads(was.removeprefix("tokens "))["total"] == recorded["tokens"]["total"] + 100


@pytest.mark.parametrize("backend", ["session", "app-server"])
def test_a_dropped_repair_is_caught(crw: Crw, demos: dict[str, Path], backend: str) -> None:
    """The repair step of build.1 removed: its turn answers no step, and the
    answer it gave is taken at k 2 where the run's code would take it at k 1.
    spec: GEN-13"""

    def edit(rows: Rows) -> None:
        del rows[_find(rows, "step_published", "build.1", k=2)]

    points = _edited(crw, demos, backend, edit)
    assert [(p[1], p[2], p[3]) for p in points] == [
        ("build.1", "turn", "turn_started k 2 attempt 1"),
        ("build.1", "harvest", "k 2"),
    ]
    assert points[1][4] == "k 1"


def test_changed_repair_errors_are_caught(crw: Crw, demos: dict[str, Path]) -> None:
    """spec: GEN-13"""

    def edit(rows: Rows) -> None:
        rows[_find(rows, "step_published", "build.1", k=2)]["repair_errors"] = ["$: made up"]

    points = _edited(crw, demos, "session", edit)
    assert [(p[1], p[2], p[3]) for p in points] == [
        ("build.1", "repair", "repair_errors ['$: made up']")
    ]


def test_an_extra_review_round_is_caught(crw: Crw, demos: dict[str, Path]) -> None:
    """The first review edited to accept: the node ends there, so the fix call
    the rows go on with is no call the run's code runs.
    spec: GEN-13"""

    def edit(rows: Rows) -> None:
        end = rows[_find(rows, "completed", "build.2")]
        end["result"] = {"findings": [], "verdict": "accept"}
        end["result_digest"] = rows[_find(rows, "completed", "build.4")]["result_digest"]

    points = _edited(crw, demos, "session", edit)
    assert points[0][1:] == (
        "build.3",
        "round",
        "call build.3 prepared",
        "node build has ended (completed): no further call",
    )


def test_an_edit_left_unframed_is_named_with_its_line(crw: Crw, demos: dict[str, Path]) -> None:
    """spec: GEN-13"""
    run = _copy(crw, demos, "session")
    text = (
        (run / "journal.jsonl").read_text().replace('"verdict":"accept"', '"verdict":"reject"', 1)
    )
    (run / "journal.jsonl").write_text(text)
    result = _shadow(crw, run, "--json")
    assert result.code == 1
    first = result.json()["points"][0]
    line = _find(_rows(run), "completed", "build.4") + 1
    assert (first["line"], first["check"]) == (line, "framing")
    assert first["recorded"] == "a line's checksum does not match"


def test_an_unknown_run_or_a_changed_workflow_is_an_input_error(
    crw: Crw, demos: dict[str, Path], tmp_path: Path
) -> None:
    """spec: GEN-13"""
    missing = _shadow(crw, tmp_path / "nowhere")
    assert missing.code == 2 and missing.stdout == ""
    run = _copy(crw, demos, "session")
    spec = json.loads((run / "run.json").read_text())
    spec["workflow"]["digest"] = "sha256:" + "0" * 64
    (run / "run.json").write_text(json.dumps(spec))
    changed = _shadow(crw, run)
    assert changed.code == 2
    assert "changed since the run started" in changed.stderr
    assert len(changed.stderr.strip().splitlines()) == 1


def _reversed(value: Any) -> Any:
    """`value` with its keys in reverse order at every level."""
    if isinstance(value, dict):
        return {key: _reversed(value[key]) for key in reversed(value)}
    if isinstance(value, list):
        return [_reversed(item) for item in value]
    return value


def test_a_result_kept_as_a_span_of_its_message_replays_equal(
    crw: Crw, demos: dict[str, Path]
) -> None:
    """A completed row that keeps the message as it was (its own spaces and key
    order) and where its result stands in it, and no `result`, reads and replays
    as the row with its result: the gate's admissions, the review rounds and the
    harvest. spec: GEN-13, HARV-6, HARV-7"""
    run = _copy(crw, demos, "session")
    rows = _rows(run)
    end = rows[_find(rows, "completed", "build.4")]  # the review that accepted
    prose = "Done, here it is:\n\n"
    message = prose + json.dumps(_reversed(end["result"]), indent=1) + "\n"
    end |= {"raw_text": message, "extracted": True}
    end["result_span"] = [len(prose), len(message) - 1]
    del end["result"]
    _write(run, rows)
    result = _shadow(crw, run, "--json")
    assert result.code == 0, result.stdout + result.stderr
    assert result.json()["equal"] is True
