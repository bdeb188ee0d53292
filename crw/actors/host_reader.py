"""The HostReader actor: the only user of the host connection in a run process.

Calls never talk to the host themselves; they ask the reader. It

- coalesces reads: however many calls wait on one thread, one `thread/read` of it
  is in flight at a time and every waiter takes its answer;
- follows the host's notifications (`turn/completed`, `thread/tokenUsage/updated`,
  `error`, and in a session run `thread/status/changed` and `turn/started`) and
  wakes a thread's waiters at once on all but the token count, so a turn's end is
  seen within a read, not a poll interval, and a long turn's token counts cost no
  read; it polls only as a fallback, every `Settings.host_poll_interval`, in case
  a notification was lost or never sent;
- keeps the newest token usage each thread reported, until the call it is for
  forgets the thread (for at most UNCLAIMED_KEPT threads no call asked about):
  what it was told of each thread is `crw.actors.thread_watches`'s;
- turns a host that stops answering into one typed error, `HostUnavailable`,
  raised to every caller, who decides what it means for its call; a connection
  that is lost wakes every waiter at once, to meet it;
- while any turn is followed (`wait_turn`, or a caller's `following` block),
  probes the host once every `Settings.host_timeout` (`crw.actors.host_watch`):
  a host that stopped answering with the connection open is taken for lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from crw.actors.host_watch import HostWatch
from crw.actors.owner_children import OwnerChildren
from crw.actors.spawn_index import OwnerSpawns
from crw.actors.thread_watches import FOLLOWED, ThreadWatch, ThreadWatches
from crw.engine.answers import unreachable
from crw.host.errors import HostRequestError, HostUnavailable, unknown_thread
from crw.host.protocol import Thread, ThreadTokenUsage, Turn
from crw.settings import DEFAULT_SETTINGS, Settings

if TYPE_CHECKING:  # the client loads once a host's socket is open (`connect_host`)
    from crw.host.client import HostClient


EMPTY_ROLLOUT_EVERY = 0.02
"""Seconds between two reads of a thread whose rollout codex cannot read yet."""


class ModelUnreachable(Exception):
    """The host kept retrying a turn past `Settings.unreachable_after`; the
    message is the held row's error (`crw.engine.answers.unreachable`)."""


class HostReader:
    """Reads the host for the run's calls. Create it with `open_host_reader`."""

    def __init__(
        self, client: HostClient, settings: Settings, follows: frozenset[str] = FOLLOWED
    ) -> None:
        self._client = client
        self._settings = settings
        self._follows = follows
        self._watches = ThreadWatches()
        """What the host's notifications and reads told of each thread."""
        self.reads = 0
        """thread/read requests sent (tests assert the coalescing with it)."""
        self.lists = 0
        """thread/list requests sent (tests assert the marker lookup's cost with it)."""
        self._spawns: dict[str, OwnerSpawns] = {}
        self._children: dict[str, OwnerChildren] = {}
        self.host_watch = HostWatch(client, settings.host_timeout)
        """The probe of the host while turns are followed (`following`)."""

    @property
    def connected(self) -> bool:
        """Whether the connection to the host is up (a request that timed out on a
        live connection leaves it up)."""
        return self._client.connected

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
        watch = self._watches.claim(thread_id)
        while watch.reading is not None:
            generation, done = watch.reading
            await done.wait()
            if generation == watch.generation:
                return self._answer(watch)
        started = watch.generation
        watch.reading = (started, done := trio.Event())
        try:
            self.reads += 1
            watch.last = await self._read_once(thread_id)
            watch.last_generation, watch.error = started, None
        except HostUnavailable as err:
            watch.error = err
        finally:
            watch.reading = None
            done.set()
        return self._answer(watch)

    async def _read_once(self, thread_id: str) -> Thread:
        try:
            return await self._call(  # type: ignore[no-any-return]
                f"thread/read {thread_id}", lambda: self._client.thread_read(thread_id)
            )
        except HostRequestError as err:
            if not _no_turns_yet(err):
                raise
        # codex 0.163 answers a thread with no turn in its rollout yet (for a few ms
        # after turn/start, and always before the first turn) with one of these
        # errors: the thread is there, its turns are not readable yet. While its
        # rollout file is still empty (codex 0.169: made, its first line not yet
        # written) even the read without turns fails so: it is read again, within
        # host_timeout.
        deadline = trio.current_time() + self._settings.host_timeout
        while True:
            try:
                thread = await self._call(
                    f"thread/read {thread_id}",
                    lambda: self._client.thread_read(thread_id, include_turns=False),
                )
            except HostRequestError as err:
                if not _no_turns_yet(err) or trio.current_time() >= deadline:
                    raise
                await trio.sleep(EMPTY_ROLLOUT_EVERY)
                continue
            return thread.model_copy(update={"turns": []})  # type: ignore[no-any-return]

    @staticmethod
    def _answer(watch: ThreadWatch) -> Thread:
        if watch.error is not None:
            raise watch.error
        assert watch.last is not None
        return watch.last

    async def status(self, thread_id: str) -> Thread:
        """The thread read now without its turns (its status), uncoalesced."""
        return await self._call(  # type: ignore[no-any-return]
            f"thread/read {thread_id}",
            lambda: self._client.thread_read(thread_id, include_turns=False),
        )

    def following(self) -> contextlib.AbstractContextManager[None]:
        """A turn is followed while the block runs: the host is probed meanwhile."""
        return self.host_watch.following()

    async def wait_turn(
        self, thread_id: str, turn_id: str, *, give_up: bool = False, started: bool = False
    ) -> Turn:
        """Wait until the turn has ended; returns it with its items.

        The end is `turn/completed`'s status and error, or failed with the error
        of an `error {willRetry: false}` for the turn (`told_end`). A read alone is
        believed for completed and failed; an interrupted turn with no error only
        once it has stayed so for `Settings.interrupted_settle` (the poll interval,
        a second at least), since codex shows a turn just started as interrupted
        with no error for a moment, and a turn about to end (one about to fail
        until its error comes).

        `started`: the caller has just started the turn (its turn/start answered),
        so a read now would find it running: the first read waits for the host to
        tell a change of the thread (the turn's end, an error) or for the poll
        interval, as every later one does. A turn followed from an earlier
        process's rows is read at once.

        Raises:
            ModelUnreachable: with `give_up`, the host has retried the turn for
                `Settings.unreachable_after` with no model response.
        """
        with self.following():  # the host is probed while the turn is followed
            interrupted_since: float | None = None
            if started:
                await self._first_news(thread_id, turn_id, give_up)
            while True:
                watch = self._watches.claim(thread_id)
                changed = watch.changed
                thread = await self.read(thread_id)
                turn = next((t for t in thread.turns if t.id == turn_id), None)
                announced = self.told_end(thread_id, turn_id)
                if announced is not None and turn is not None:
                    if turn.status == announced.status and turn.error == announced.error:
                        return turn  # read after its end: the copy would be the same turn
                    return turn.model_copy(
                        update={"status": announced.status, "error": announced.error}
                    )
                if turn is not None and (turn.status in ("completed", "failed") or turn.error):
                    return turn
                now = trio.current_time()
                if turn is not None and turn.status == "interrupted":
                    interrupted_since = interrupted_since if interrupted_since is not None else now
                    if now - interrupted_since >= self._settings.interrupted_settle:
                        return turn
                else:
                    interrupted_since = None
                wait = self._settings.host_poll_interval
                if give_up:
                    wait = self._until_given_up(watch, turn_id, now, wait)
                with trio.move_on_after(wait):
                    await changed.wait()

    async def _first_news(self, thread_id: str, turn_id: str, give_up: bool) -> None:
        """Wait for the host's first change of a turn just started (its end, an
        error), at most a poll interval (a lost notification, a host that sends
        none); at once when the host told its end already."""
        watch = self._watches.claim(thread_id)
        if turn_id in watch.ended or turn_id in watch.failing:
            return
        wait = self._settings.host_poll_interval
        if give_up:
            wait = self._until_given_up(watch, turn_id, trio.current_time(), wait)
        with trio.move_on_after(wait):
            await watch.changed.wait()

    def until_given_up(self, thread_id: str, turn_id: str, now: float, wait: float) -> float:
        """How long a follower of the turn waits before judging its retries again
        (at most `wait`).

        Raises:
            ModelUnreachable: the host has retried the turn for
                `Settings.unreachable_after` with no model response.
        """
        return self._until_given_up(self._watches.claim(thread_id), turn_id, now, wait)

    def _until_given_up(self, watch: ThreadWatch, turn_id: str, now: float, wait: float) -> float:
        """How long to wait before the turn's retries are judged again (at most
        `wait`); raises ModelUnreachable once they are past the bound."""
        retrying, after = watch.retrying.get(turn_id), self._settings.unreachable_after
        why = unreachable.verdict(retrying, now, after)
        if why is not None:
            raise ModelUnreachable(why)
        deadline = unreachable.gives_up_at(retrying, after)
        return wait if deadline is None else min(wait, deadline - now)

    def changed(self, thread_id: str) -> trio.Event:
        """The event the thread's next change sets: take it before a read, then wait
        on it, so no change between the read and the wait is missed."""
        return self._watches.claim(thread_id).changed

    def announced(self, thread_id: str, turn_id: str) -> Turn | None:
        """The turn as `turn/completed` announced it (its final status and error), if it did."""
        return self._watches.announced(thread_id, turn_id)

    def told_end(self, thread_id: str, turn_id: str) -> Turn | None:
        """The turn's end as the host told it (`ThreadWatches.told_end`): `announced`
        if announced before the thread's last read began, else failed with the
        error the host said the turn fails with, if it did."""
        return self._watches.told_end(thread_id, turn_id)

    async def spawned(self, owner: str, marker: str, bound: Thread | None = None) -> list[Thread]:
        """The owner's subagents whose first message carries `marker`, each read now
        with its turns (the marker lookup, `crw.actors.spawn_index`); but `bound`,
        the one a call bound as its bind read it."""
        return await self.owner_spawns(owner).carrying(marker, bound)

    async def read_subagent(self, agent: str | None) -> tuple[Thread | None, str | None, bool]:
        """A bind's read of a subagent: its snapshot, or why the host cannot answer
        now, or that it has no such thread (True); nothing for no subagent. A host
        gone is raised: the run pauses."""
        if not agent:
            return None, None, False
        try:
            return await self.read(agent), None, False
        except HostUnavailable as err:
            if not self.connected:
                raise
            return None, str(err), False
        except HostRequestError as err:
            return (None, None, True) if unknown_thread(err) else (None, str(err), False)

    def owner_spawns(self, owner: str) -> OwnerSpawns:
        """The marker index of the owner's subagents, one for the reader's life."""
        spawns = self._spawns.get(owner)
        if spawns is None:
            spawns = self._spawns[owner] = OwnerSpawns(
                owner, self._list_subagents, self.read, self._settings.poll_interval
            )
        return spawns

    def owner_children(self, owner: str) -> OwnerChildren:
        """The owner's v2 children by path, one look a poll for every waiting call."""
        children = self._children.get(owner)
        if children is None:
            children = self._children[owner] = OwnerChildren(
                owner, self.read, self.forget, self._settings.poll_interval
            )
        return children

    async def loaded_subagents(self, owner: str) -> set[str]:
        """The ids of the owner's subagents the host lists loaded (not notLoaded):
        one thread/list page per 100 subagents, no thread/read."""
        loaded: set[str] = set()
        cursor: str | None = None
        while True:
            page, cursor = await self._list_subagents(cursor, 100)
            loaded |= {
                t.id for t in page if t.parentThreadId == owner and t.status.type != "notLoaded"
            }
            if not cursor:
                return loaded

    async def _list_subagents(
        self, cursor: str | None, limit: int
    ) -> tuple[list[Thread], str | None]:
        """One page of the host's subagents, newest created first."""
        params: dict[str, Any] = {"sourceKinds": ["subAgentThreadSpawn"], "limit": limit}
        if cursor:
            params["cursor"] = cursor
        self.lists += 1
        return await self._call("thread/list", lambda: self._client.thread_list(**params))  # type: ignore[no-any-return]

    @property
    def watched(self) -> int:
        """The threads the reader holds what it read and was told of."""
        return len(self._watches)

    def forget(self, thread_id: str) -> None:
        """Drop what the reader holds of a thread no call waits on any more (its
        last read, with every item of its turns): a run's memory then grows with
        the calls in flight, not with the calls it ran."""
        self._watches.forget(thread_id)

    def usage(self, thread_id: str) -> ThreadTokenUsage | None:
        """The newest token usage the host reported for the thread, if any."""
        return self._watches.usage(thread_id)

    async def start_thread(self, **params: Any) -> Thread:
        return await self._call("thread/start", lambda: self._client.thread_start(**params))  # type: ignore[no-any-return]

    async def resume_thread(self, thread_id: str, **params: Any) -> Thread:
        """thread/resume: load the thread if need be and subscribe to it."""
        return await self._call(  # type: ignore[no-any-return]
            f"thread/resume {thread_id}", lambda: self._client.thread_resume(thread_id, **params)
        )

    async def fork_thread(self, thread_id: str, **params: Any) -> Thread:
        """thread/fork: a new thread with `thread_id`'s history."""
        return await self._call(  # type: ignore[no-any-return]
            f"thread/fork {thread_id}", lambda: self._client.thread_fork(thread_id, **params)
        )

    async def start_turn(self, thread_id: str, text: str, **params: Any) -> Turn:
        return await self._call(  # type: ignore[no-any-return]
            f"turn/start {thread_id}", lambda: self._client.turn_start(thread_id, text, **params)
        )

    async def interrupt(self, thread_id: str, turn_id: str) -> None:
        await self._call(
            f"turn/interrupt {turn_id}", lambda: self._client.turn_interrupt(thread_id, turn_id)
        )

    async def _follow(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self._client.notifications(
            methods=self._follows, handler=self._watches.on_notification
        ) as notes:  # handled in the client's reader task: none is buffered here
            task_status.started()
            with contextlib.suppress(trio.EndOfChannel):  # raises what the handler raised
                await notes.receive()  # none comes this way: it ends with the connection
        # The subscription ended (the connection closed): the waiters fall back to
        # polling. A lost connection wakes them at once, so each reads the host now
        # and meets HostUnavailable.
        if not self.connected:
            self._watches.signal_all()


@asynccontextmanager
async def open_host_reader(
    client: HostClient, settings: Settings = DEFAULT_SETTINGS, follows: frozenset[str] = FOLLOWED
) -> AsyncIterator[HostReader]:
    """Run a HostReader over `client`, following the notifications `follows`
    names (a subset of what the client follows), until the block exits."""
    reader = HostReader(client, settings, follows)
    async with trio.open_nursery() as nursery:
        await nursery.start(reader._follow)
        await nursery.start(reader.host_watch.watch)
        yield reader
        nursery.cancel_scope.cancel()


def _no_turns_yet(err: HostRequestError) -> bool:
    """The errors codex answers thread/read with while a thread has no readable turn."""
    return "list_turns is not supported yet" in err.message or (
        "rollout at" in err.message and "is empty" in err.message
    )
