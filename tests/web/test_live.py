"""The live updates: a run's events come from its journal's wake (the inotify
watch `show --follow` uses), and a page of rows is a window of the journal, so
paging through them shows every row once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.cli.read.status import run_status
from crw.engine.run.rundir import RunDir
from crw.web import live, views
from tests.deadlines import LOADED
from tests.web.runs import COMPLETED, append, call_rows, started, write_run

RUN = "chain-20261201-000000-aaaa"


def parsed(text: str) -> tuple[str, object]:
    head, data = text.strip().split("\n")
    return head.removeprefix("event: "), json.loads(data.removeprefix("data: "))


@pytest.fixture
def no_safety_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    """The streams' safety wake an hour away: only the journal's wake wakes them."""
    monkeypatch.setattr(live, "SAFETY_WAKE", 3600.0)


@pytest.mark.usefixtures("no_safety_wake")
async def test_a_row_appended_wakes_the_run_stream_with_the_calls_it_changed(
    tmp_path: Path,
) -> None:
    """No poll: the event comes at the append (the safety wake is an hour away)."""
    state = tmp_path / "state"
    run = write_run(state, RUN, [started(), *call_rows("build.1", "build", end=None)])
    events = live.run_events(run, state)
    with trio.fail_after(LOADED):
        assert parsed(await events.__anext__())[0] == "run"  # its state at connect
        # Appended once the stream waits on the wake: only the wake can bring it.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                trio.to_thread.run_sync,
                lambda: append(run, [{"call": "build.1"} | COMPLETED]),
            )
            name, calls = parsed(await events.__anext__())
    assert name == "calls"
    assert isinstance(calls, list) and [(c["call"], c["state"]) for c in calls] == [
        ("build.1", "completed")
    ]
    name, rows = parsed(await events.__anext__())
    assert name == "rows" and isinstance(rows, list)
    assert "completed" in rows[0]["text"]
    await events.aclose()


@pytest.mark.usefixtures("no_safety_wake")
async def test_a_new_run_wakes_the_runs_stream(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_run(state, RUN, [started()])
    events = live.runs_events(state)
    with trio.fail_after(LOADED):
        async with trio.open_nursery() as nursery:

            async def later() -> None:
                await trio.sleep(0.1)
                await trio.to_thread.run_sync(
                    lambda: write_run(state, "chain-20261202-000000-bbbb", [started()])
                )

            nursery.start_soon(later)
            assert parsed(await events.__anext__())[0] == "runs"
    await events.aclose()


@pytest.mark.parametrize("batch", [1, 7, 300])
def test_paging_through_the_rows_shows_each_row_once_in_order(
    tmp_path: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page is the whole batches of a window of the journal's bytes (a batch
    larger than the window is read whole): together they are the journal."""
    monkeypatch.setattr(views, "HISTORY_BYTES", 4096)
    rows = [started()]
    for n in range(1, 400):
        rows += call_rows(f"build.{n}", "build", end=None)
    run = write_run(tmp_path / "state", RUN, rows, batch=batch)
    seen: list[int] = []
    before = None
    while True:
        page = views.history(run, before=before)
        seen = [line["seq"] for line in page["lines"]] + seen
        if page["older"] is None:
            break
        assert before is None or page["older"] < before
        before = page["older"]
    assert seen == list(range(1, len(rows) + 1))


def test_an_ended_runs_status_is_read_again_only_when_its_journal_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    run = write_run(state, RUN, [started(), *call_rows("build.1", "build", end=COMPLETED),
                                 {"row": "ended", "status": "completed"}])  # fmt: skip
    reads: list[str] = []
    real = run_status

    def counted(run_dir: RunDir, ref: str) -> dict[str, object]:
        reads.append(run_dir.id)
        return real(run_dir, ref)

    monkeypatch.setattr(views, "run_status", counted)
    first = views.run_page(run, state, page=1)
    assert views.run_page(run, state, page=1) == first and len(reads) == 1
    append(run, [{"row": "session_host_warning", "message": "late"}])
    views.run_page(run, state, page=1)
    assert len(reads) == 2


@pytest.mark.usefixtures("no_safety_wake")
async def test_a_wake_of_one_run_reads_that_run_again_not_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs list with 50 runs: one run's append wakes its stream, and the table
    fetched again on that event reads that run's journal only (the others' entries
    are kept while their journal, run.json and locks are as they were)."""
    state = tmp_path / "state"
    runs = [
        write_run(
            state, f"chain-20261201-0000{n:02d}-aaaa", [started(), *call_rows("b.1", "b", end=None)]
        )
        for n in range(50)
    ]
    reads: list[str] = []
    from crw.cli.read.list import listed as real

    def counted(run: RunDir, ref: str = "", spec: dict[str, object] | None = None) -> object:
        reads.append(run.id)
        return real(run, ref, spec)

    monkeypatch.setattr(views, "listed", counted)
    first = views.runs(state, states=frozenset(), workflow=None, page=1)
    assert len(reads) == 50 and len(first["runs"]) == 50
    reads.clear()
    events = live.runs_events(state)
    with trio.fail_after(LOADED):
        async with trio.open_nursery() as nursery:
            woken = runs[7]
            nursery.start_soon(
                trio.to_thread.run_sync, lambda: append(woken, [{"call": "b.1"} | COMPLETED])
            )
            assert parsed(await events.__anext__())[0] == "runs"
    await events.aclose()
    again = views.runs(state, states=frozenset(), workflow=None, page=1)
    assert reads == [woken.id]
    shown = {entry["run"]: entry["calls"]["done"] for entry in again["runs"]}
    assert shown[woken.id] == 1 and sum(shown.values()) == 1


def test_the_timeline_of_a_run_no_process_holds_is_drawn_again_only_when_its_journal_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crw.cli.read import timeline_read

    state = tmp_path / "state"
    run = write_run(state, RUN, [started(), *call_rows("build.1", "build", end=COMPLETED),
                                 {"row": "ended", "status": "completed"}])  # fmt: skip
    reads: list[str] = []
    real = timeline_read.read_tracks

    def counted(run_dir: RunDir, **kwargs: Any) -> Any:
        reads.append(run_dir.id)
        return real(run_dir, **kwargs)

    monkeypatch.setattr(timeline_read, "read_tracks", counted)
    first = views.timeline_svg(run)
    assert views.timeline_svg(run) == first and len(reads) == 1
    append(run, [{"row": "session_host_warning", "message": "late"}])
    assert views.timeline_svg(run) != first and len(reads) == 2
