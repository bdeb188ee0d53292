"""What an App Server call costs the run process, counted: work done once a call,
or once a run, is not done again for every call (a 10,000-call run pays each
per-call step ten thousand times)."""

from __future__ import annotations

import importlib.resources
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors import thread_watches
from crw.actors.thread_watches import ThreadWatches
from crw.engine.answers import schema_check
from crw.engine.calls.gate import RunSpent
from crw.engine.steps import packet
from crw.host.protocol import Notification, Turn
from crw.journal.replay import RunState, replay
from crw.journal.rows import Tokens
from tests.actors.test_app_server_run import harness

CALLS = 6


def _wide(calls: int) -> str:
    """`calls` independent explorer nodes sharing one schema, pool 3."""
    nodes = "".join(
        f'\n[[node]]\nid = "n{i}"\nrole = "explorer"\ntask = "Answer ok."\n'
        'schema = { type = "object", properties = { ok = { type = "boolean" } } }\n'
        for i in range(calls)
    )
    return 'name = "wide"\npool = 3\n' + nodes


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, seen: list[Any]) -> None:
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


async def test_a_call_composes_its_packet_once_and_reads_no_overlay_or_validator_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: STEP-56, STEP-57 (the turn text is the journaled input with the
    Repository tools section after it: one packet a call), HARV-6 (each answer
    checked against its schema, by a validator made once for the schema)"""
    composed: list[Any] = []
    overlays: list[Any] = []
    validators: list[Any] = []
    _counting(monkeypatch, packet, "_compose", composed)
    _counting(monkeypatch, importlib.resources, "files", overlays)
    _counting(monkeypatch, schema_check, "_Validator", validators)
    pretty: list[Any] = []
    dumps = json.dumps

    def dumped(value: Any, **kwargs: Any) -> str:
        if kwargs.get("indent") is not None:
            pretty.append(value)
        return dumps(value, **kwargs)

    monkeypatch.setattr(json, "dumps", dumped)
    async with harness(tmp_path, _wide(CALLS)) as h:
        state, rows = await h.run()
    assert state == "ended" and sum(r["row"] == "completed" for r in rows) == CALLS
    assert len(composed) == CALLS
    assert len(overlays) <= 1  # the explorer's overlay, if no earlier test read it
    assert len(validators) <= 1
    assert len(pretty) <= 1  # the output contract's schema


async def test_a_call_hops_to_no_worker_thread_and_takes_only_the_notifications_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: STEP-7 (P made after the rows, in the run's own thread), HARV-2 (the
    turn's end and its tokens are what the reader follows)"""
    parsed: Counter[str] = Counter()
    parse = Notification.parse
    followed: Counter[str] = Counter()
    follow = ThreadWatches.on_notification

    def counted(note: Notification) -> Any:
        parsed[note.method] += 1
        return parse(note)

    def taken(watches: ThreadWatches, note: Notification) -> None:
        followed[note.method] += 1
        follow(watches, note)

    monkeypatch.setattr(Notification, "parse", counted)
    monkeypatch.setattr(ThreadWatches, "on_notification", taken)
    async with harness(tmp_path, _wide(CALLS)) as h:
        hops: list[Any] = []
        _counting(monkeypatch, trio.to_thread, "run_sync", hops)
        state, _ = await h.run()
    assert state == "ended"
    assert len(hops) <= 1  # the journal's open, once a run
    assert set(parsed) <= {
        "thread/tokenUsage/updated",
        "turn/started",
        "turn/completed",
        "thread/status/changed",
    }
    assert parsed["turn/completed"] == CALLS
    assert followed == parsed  # the others never reach the reader's task


async def test_a_finished_call_leaves_no_token_figure_of_its_own_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: HARV-24 (each token counted once: a finished call's figure joins the
    run's), with nothing kept per finished call"""
    made: list[RunSpent] = []
    of = RunSpent.of

    def kept(replayed: RunState) -> RunSpent:
        made.append(of(replayed))
        return made[-1]

    monkeypatch.setattr(RunSpent, "of", staticmethod(kept))
    taken_back: list[Any] = []
    _counting(monkeypatch, Tokens, "__sub__", taken_back)
    async with harness(tmp_path, _wide(CALLS)) as h:
        await h.script({}, tokens={"input": 10, "output": 2})
        state, rows = await h.run()
    assert state == "ended"
    (spent,) = made
    assert spent.calls == {}
    assert spent.spent() == Tokens(input=10 * CALLS, output=2 * CALLS, total=12 * CALLS)
    assert spent.spent().total == replay(rows).spent["total"]
    assert taken_back == []  # a call counted only at its end has nothing to take back


class _Yields(trio.abc.Instrument):
    """Where each call task stopped after each of its steps: the innermost crw
    function its await chain was in (`module:function`)."""

    def __init__(self) -> None:
        self.at: Counter[str] = Counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not task.name.endswith("call_task"):
            return
        where = ""
        awaited: Any = task.coro
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None)
            if frame is not None and "/crw/" in frame.f_code.co_filename:
                module = frame.f_globals["__name__"]
                where = f"{module}:{frame.f_code.co_name}"
            awaited = getattr(awaited, "cr_await", None)
        self.at[where] += 1


async def test_a_call_yields_only_to_wait_for_the_journal_or_the_host(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A call task's schedule points are its commits' waits and its host requests'
    sends and replies: each other yield resumes the call's whole await chain once
    more a call (the gate's report of the call's end, a checkpoint after P's
    mkdir). It waits for two commits: its opening rows (before P and thread/start)
    and thread_started (before turn/start); turn_started and its end announce no
    effect, and are committed behind (every later commit is durable after them)."""
    yields = _Yields()
    async with harness(tmp_path, _wide(CALLS)) as h:
        trio.lowlevel.add_instrument(yields)
        try:
            state, _ = await h.run()
        finally:
            trio.lowlevel.remove_instrument(yields)
    assert state == "ended"
    assert yields.at.pop("crw.actors.journal_writer:wait") == 2 * CALLS
    assert yields.at.pop("", 0) <= CALLS  # a task's end: its coroutine is gone
    host = {"transport:send_under", "rpc:wait"}
    reader = {"crw.actors.host_reader:wait_turn", "crw.actors.host_reader:_first_news"}
    waits = {f"crw.host.{where}" for where in host} | reader
    assert set(yields.at) <= waits, yields.at


async def test_a_call_reads_the_turn_it_started_once_when_the_host_tells_its_end(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-1 (the call reads its thread until the marker turn ends). An
    instant turn ends as its turn/start is answered: a read sent before its
    turn/completed came was answered running, and read again. A call waits for the
    host to tell the end of the turn it started (the poll interval the fallback):
    three host requests a call, thread/start, turn/start and one thread/read."""
    async with harness(tmp_path, _wide(CALLS)) as h:
        before = h.reader.reads
        state, rows = await h.run()
    assert state == "ended" and sum(r["row"] == "completed" for r in rows) == CALLS
    assert h.reader.reads - before == CALLS


async def test_a_runs_tool_entries_and_paths_are_made_once_a_run_not_once_a_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: STEP-58, STEP-60 (the entries are the run's: every call's thread and
    turn text carry the same ones, so they are made once)"""
    made: dict[str, list[Any]] = {}
    for name in ("shell_environment_config", "tools_section"):
        _counting(monkeypatch, packet, name, made.setdefault(name, []))
    async with harness(tmp_path, _wide(CALLS)) as h:
        state, rows = await h.run()
    assert state == "ended" and sum(r["row"] == "completed" for r in rows) == CALLS
    assert {name: len(calls) for name, calls in made.items()} == {
        "shell_environment_config": 1,
        "tools_section": 1,
    }
    assert {r["cwd"] for r in rows if r["row"] == "thread_started"} == {
        str(tmp_path / "run" / "calls" / f"n{i}.1") for i in range(CALLS)
    }


async def test_a_plain_calls_thread_is_watched_once_and_its_ended_turn_taken_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: HARV-2 (the turn's end is what turn/completed announced; a read made
    after it shows that end already, and is taken as it is, not copied)"""
    watches: list[Any] = []
    _counting(monkeypatch, thread_watches, "ThreadWatch", watches)
    copies: list[Any] = []
    _counting(monkeypatch, Turn, "model_copy", copies)
    async with harness(tmp_path, _wide(CALLS)) as h:
        state, rows = await h.run()
    assert state == "ended" and sum(r["row"] == "completed" for r in rows) == CALLS
    assert len(watches) == CALLS
    assert copies == []
