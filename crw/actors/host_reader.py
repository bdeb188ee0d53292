"""The HostReader actor: the only user of the host connection in a run process.

Calls never talk to the host themselves; they ask the reader. It

- coalesces reads: however many calls wait on one thread, one `thread/read` of it
  is in flight at a time and every waiter takes its answer;
- follows the host's notifications (`turn/completed`, `thread/status/changed`,
  `thread/tokenUsage/updated`) and wakes a thread's waiters at once, so a turn's
  end is seen within a read, not a poll interval; it polls only as a fallback, every
  `Settings.host_poll_interval`, in case a notification was lost or never sent;
- keeps the newest token usage each thread reported;
- turns a host that stops answering into one typed error, `HostUnavailable`,
  raised to every caller, who decides what it means for its call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from crw.host.client import HostClient
from crw.host.protocol import (
    Notification,
    Thread,
    ThreadStatusChanged,
    ThreadTokenUsage,
    TokenUsageUpdated,
    Turn,
    TurnNotification,
)
from crw.host.transport import HostUnavailable
from crw.settings import DEFAULT_SETTINGS, Settings


@dataclass
class _Watch:
    """What the reader knows of one thread: its change signal, its in-flight read."""

    changed: trio.Event = field(default_factory=trio.Event)
    generation: int = 0
    """Counts the changes the host announced for the thread."""
    reading: tuple[int, trio.Event] | None = None
    """The read in flight: the generation it started at, and its end."""
    last: Thread | None = None
    error: BaseException | None = None
    usage: ThreadTokenUsage | None = None


class HostReader:
    """Reads the host for the run's calls. Create it with `open_host_reader`."""

    def __init__(self, client: HostClient, settings: Settings) -> None:
        self._client = client
        self._settings = settings
        self._watches: dict[str, _Watch] = {}
        self.reads = 0
        """thread/read requests sent (tests assert the coalescing with it)."""

    def _watch(self, thread_id: str) -> _Watch:
        return self._watches.setdefault(thread_id, _Watch())

    async def _call(self, what: str, request: Callable[[], Any]) -> Any:
        """One host request under the reader's answer deadline."""
        with trio.move_on_after(self._settings.host_timeout) as scope:
            return await request()
        assert scope.cancelled_caught
        raise HostUnavailable(
            f"the host did not answer {what} within {self._settings.host_timeout:g} s"
        )

    async def read(self, thread_id: str) -> Thread:
        """The thread with its turns, read once for every concurrent caller.

        A caller joins the read in flight when it started after the newest change
        the host announced; else it waits for it and reads again, so no caller
        takes an answer older than the change that woke it.
        """
        watch = self._watch(thread_id)
        while watch.reading is not None:
            generation, done = watch.reading
            await done.wait()
            if generation == watch.generation:
                return self._answer(watch)
        watch.reading = (watch.generation, done := trio.Event())
        try:
            self.reads += 1
            watch.last = await self._call(
                f"thread/read {thread_id}", lambda: self._client.thread_read(thread_id)
            )
            watch.error = None
        except HostUnavailable as err:
            watch.error = err
        finally:
            watch.reading = None
            done.set()
        return self._answer(watch)

    @staticmethod
    def _answer(watch: _Watch) -> Thread:
        if watch.error is not None:
            raise watch.error
        assert watch.last is not None
        return watch.last

    async def wait_turn(self, thread_id: str, turn_id: str) -> Turn:
        """Wait until the turn is no longer in progress; returns it with its items."""
        while True:
            watch = self._watch(thread_id)
            changed = watch.changed
            thread = await self.read(thread_id)
            turn = next((t for t in thread.turns if t.id == turn_id), None)
            if turn is not None and turn.status != "inProgress":
                return turn
            with trio.move_on_after(self._settings.host_poll_interval):
                await changed.wait()

    def usage(self, thread_id: str) -> ThreadTokenUsage | None:
        """The newest token usage the host reported for the thread, if any."""
        watch = self._watches.get(thread_id)
        return watch.usage if watch else None

    async def start_thread(self, **params: Any) -> Thread:
        return await self._call("thread/start", lambda: self._client.thread_start(**params))  # type: ignore[no-any-return]

    async def start_turn(self, thread_id: str, text: str, **params: Any) -> Turn:
        return await self._call(  # type: ignore[no-any-return]
            f"turn/start {thread_id}", lambda: self._client.turn_start(thread_id, text, **params)
        )

    async def interrupt(self, thread_id: str, turn_id: str) -> None:
        await self._call(
            f"turn/interrupt {turn_id}", lambda: self._client.turn_interrupt(thread_id, turn_id)
        )

    def _signal(self, thread_id: str) -> None:
        watch = self._watches.get(thread_id)
        if watch is not None:
            watch.generation += 1
            watch.changed.set()
            watch.changed = trio.Event()

    def _on_notification(self, note: Notification) -> None:
        params = note.parse()
        if isinstance(params, TokenUsageUpdated):
            self._watch(params.threadId).usage = params.tokenUsage
            self._signal(params.threadId)
        elif isinstance(params, TurnNotification | ThreadStatusChanged):
            self._signal(params.threadId)

    async def _follow(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self._client.notifications() as notes:
            task_status.started()
            async for note in notes:
                self._on_notification(note)
        # The subscription ended (the connection closed, or it overflowed): the
        # waiters fall back to polling, which also surfaces a lost connection.


@asynccontextmanager
async def open_host_reader(
    client: HostClient, settings: Settings = DEFAULT_SETTINGS
) -> AsyncIterator[HostReader]:
    """Run a HostReader over `client` until the block exits."""
    reader = HostReader(client, settings)
    async with trio.open_nursery() as nursery:
        await nursery.start(reader._follow)
        yield reader
        nursery.cancel_scope.cancel()
