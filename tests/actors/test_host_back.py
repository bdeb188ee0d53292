"""The wait of a run paused host_unavailable for its host (`crw.actors.host_back`):
its probes' schedule, its bound, and what ends it; under a MockClock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from crw.actors import host_back
from crw.actors.host_back import paused_end, wait_for_host
from crw.engine.run.host_wait import next_interval, paused_here
from crw.journal import streamed
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import Ended, Paused, RowModel, Started
from crw.settings import Settings
from tests.journal.test_snapshot import STAMP, _append

SETTINGS = Settings(host_wait=10.0, host_timeout=4.0, poll_interval=2.0)


def journal(tmp_path: Path) -> tuple[Path, int]:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"row": "paused"}\n')
    return path, path.stat().st_size


def run(wait: Callable[[], Awaitable[tuple[str, float]]]) -> tuple[str, float]:
    return trio.run(wait, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_wait_is_bounded_by_host_wait_its_probes_doubling_up_to_host_timeout(
    tmp_path: Path,
) -> None:
    """A host that never answers: probes 1 s after the pause, then 2 s, then every
    host_timeout (4 s); the wait ends at host_wait (10 s), the run left paused."""
    path, end = journal(tmp_path)
    probed: list[float] = []

    async def never() -> bool:
        probed.append(trio.current_time())
        return False

    async def wait() -> tuple[str, float]:
        with trio.fail_after(3600):
            outcome = await wait_for_host(path, end, SETTINGS, never)
        return outcome, trio.current_time()

    assert run(wait) == ("ran_out", 10.0)
    assert probed == [1.0, 3.0, 7.0]


def test_a_host_that_answers_ends_the_wait_at_that_probe(tmp_path: Path) -> None:
    path, end = journal(tmp_path)
    answers = iter([False, False, True])

    async def third() -> bool:
        return next(answers)

    async def wait() -> tuple[str, float]:
        outcome = await wait_for_host(path, end, SETTINGS, third)
        return outcome, trio.current_time()

    assert run(wait) == ("answered", 7.0)


@pytest.mark.parametrize("moved", ["appended", "removed"])
def test_a_journal_that_moves_on_ends_the_wait_within_a_poll(tmp_path: Path, moved: str) -> None:
    """A resume's started row, a cancel's ended row (or the run removed): the run
    went on without the waiter, which stops, probing no more."""
    path, end = journal(tmp_path)
    probed: list[float] = []

    async def never() -> bool:
        probed.append(trio.current_time())
        return False

    async def wait() -> tuple[str, float]:
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await trio.sleep(3.5)
                if moved == "appended":
                    with path.open("ab") as file:
                        file.write(b'{"row": "started"}\n')
                else:
                    path.unlink()

            nursery.start_soon(move)
            outcome = await wait_for_host(path, end, SETTINGS, never)
        return outcome, trio.current_time()

    outcome, at = run(wait)
    assert outcome == "went_on" and 3.5 <= at <= 3.5 + SETTINGS.poll_interval
    assert probed == [1.0, 3.0]


def test_the_wait_is_made_only_by_the_process_whose_paused_row_ends_the_journal() -> None:
    started = {"seq": 1, "row": "started", "pid": 7}
    paused = {"seq": 2, "row": "paused", "reason": "host_unavailable"}
    assert paused_here([started, paused], 7) == 2
    assert paused_here([started, paused], 8) is None  # another process paused it
    assert paused_here([started, {**paused, "reason": "paused"}], 7) is None
    assert paused_here([started, paused, {"seq": 3, "row": "started", "pid": 9}], 7) is None
    assert next_interval(1.0, 60.0) == 2.0 and next_interval(40.0, 60.0) == 60.0


def _run_journal(tmp_path: Path, last: list[RowModel]) -> Path:
    """A journal of 300 completed calls by the process pid 7, then the rows `last`."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "journal.jsonl"
    seq = _append(path, 1, range(300))
    with path.open("ab") as file:
        file.write(encode_batch(seq, STAMP, [encode_body(Started(backend="app-server", pid=7))]))
        if last:
            file.write(encode_batch(seq + 1, STAMP, [encode_body(row) for row in last]))
    return path


@pytest.mark.parametrize("nodes", [1, 20_000])
def test_a_process_leaving_an_ended_run_reads_only_the_journals_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int
) -> None:
    """The run process's last look at its journal (is there a host to wait for?)
    decodes no row of a run that ended: decoded whole, a big run's rows were the
    process's peak memory, past the run's own, and their decode some 0.1 ms of
    CPU a call. The ended row of a big run names every node (400 KB at 20,000,
    over TAIL): the tail read grows until it holds it whole."""
    state = {f"n{i}": "completed" for i in range(nodes)}
    path = _run_journal(tmp_path, [Ended(status="completed", state=state)])
    assert nodes == 1 or len(encode_body(Ended(state=state))) > host_back.TAIL

    def whole(*_: object, **__: object) -> object:
        raise AssertionError("the whole journal was read")

    monkeypatch.setattr(host_back, "pieces", whole)
    assert paused_end(path, 7) is None


def test_a_process_that_paused_the_run_finds_the_journals_end_a_piece_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused = Paused(reason="host_unavailable", error="gone")
    path = _run_journal(tmp_path, [paused])
    monkeypatch.setattr(streamed, "PIECE", 4096)
    assert paused_end(path, 7) == read_journal(path).end == path.stat().st_size
    assert paused_end(path, 8) is None  # another process paused it
    path = _run_journal(tmp_path / "other", [Paused(reason="paused")])
    assert paused_end(path, 7) is None
