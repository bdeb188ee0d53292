"""What the host's notifications told a run of each thread, and which it follows.

Owns one `ThreadWatch` a thread the host reader knows of: its change signal (set on
each change the host announced, so a waiter wakes within a read, not a poll), the
turns `turn/completed` announced, the newest token usage, the turns the host is
retrying, and the last read. Keeps what it was told of threads no call asked about
for at most UNCLAIMED_KEPT of them. It never talks to the host: the reader
(`crw.actors.host_reader`) reads, subscribes and hands each notification here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from crw.engine.answers import unreachable
from crw.host.protocol import (
    ErrorNotification,
    Notification,
    Thread,
    ThreadStatusChanged,
    ThreadTokenUsage,
    TokenUsageUpdated,
    Turn,
    TurnError,
    TurnNotification,
)

FOLLOWED_APP_SERVER = frozenset({"thread/tokenUsage/updated", "turn/completed", "error"})
"""The notifications an App Server run's reader follows: a turn's end, its tokens and
the host's retries. Its waits read the thread on these and poll between them."""

FOLLOWED = FOLLOWED_APP_SERVER | {"turn/started", "thread/status/changed"}
"""The notifications a session run's reader follows: an App Server run's, and the
changes that wake its followers (a subagent's turn starting, a thread's status for
the lost rule, the owner's for the wake). A turn brings ten or more; the others
(each item with its text, every thread's start) never reach a reader: nothing in
it waits on them."""


UNCLAIMED_KEPT = 1024
"""The most threads the reader keeps what notifications told of (token usage, an
ended turn, retries) while no call has asked about them. The host sends a
subagent's notifications to every client, so a run on a shared host hears other
runs' subagents, and its own before they are bound; past this, the oldest of
them is dropped, and a run's memory does not grow with the host's threads."""


def followed(backend: str) -> frozenset[str]:
    """The notifications a run on `backend` follows, the rest opted out of at the host."""
    return FOLLOWED_APP_SERVER if backend == "app-server" else FOLLOWED


@dataclass
class ThreadWatch:
    """What the reader knows of one thread: its change signal, its in-flight read."""

    changed: trio.Event = field(default_factory=trio.Event)
    generation: int = 0
    """Counts the changes the host announced for the thread."""
    reading: tuple[int, trio.Event] | None = None
    """The read in flight: the generation it started at, and its end."""
    last: Thread | None = None
    last_generation: int = 0
    """The generation `last`'s read started at: it shows every change announced
    up to it, and maybe none after."""
    error: BaseException | None = None
    usage: ThreadTokenUsage | None = None
    ended: dict[str, Turn] = field(default_factory=dict)
    """The turns `turn/completed` announced, by id (their status and error are the
    final ones; their items are a summary)."""
    ended_generation: dict[str, int] = field(default_factory=dict)
    """The generation each of `ended` was announced at."""
    retrying: dict[str, unreachable.Retrying] = field(default_factory=dict)
    """The turns the host is retrying (`error {willRetry: true}`) since their last
    model response, by id."""
    failing: dict[str, TurnError] = field(default_factory=dict)
    """The turns the host said fail (`error {willRetry: false}`), by id: the error
    each ends with. It comes before `turn/completed`, and until codex's rollout
    holds it a read shows the turn interrupted with no error (docs/host-testing.md)."""


class ThreadWatches:
    """The reader's watches, by thread: claimed ones kept until `forget`, unclaimed
    ones (made for what a notification told) kept to UNCLAIMED_KEPT, oldest dropped."""

    def __init__(self) -> None:
        self._watches: dict[str, ThreadWatch] = {}
        self._unclaimed: dict[str, None] = {}
        """The watched threads no caller has asked about yet, oldest first."""

    def __len__(self) -> int:
        return len(self._watches)

    def get(self, thread_id: str) -> ThreadWatch | None:
        """The thread's watch, if there is one (never made here)."""
        return self._watches.get(thread_id)

    def claim(self, thread_id: str) -> ThreadWatch:
        """The thread's watch, made if need be, claimed by a caller: kept until
        `forget`."""
        watch = self._watches.get(thread_id)
        if watch is None:  # made once a thread, not once a look (several a notification)
            watch = self._watches[thread_id] = ThreadWatch()
        elif self._unclaimed:
            self._unclaimed.pop(thread_id, None)
        return watch

    def _told(self, thread_id: str) -> ThreadWatch:
        """The thread's watch for what a notification told of it; one made here is
        unclaimed until a caller asks about the thread, and the oldest unclaimed
        one goes once there are more than UNCLAIMED_KEPT."""
        watch = self._watches.get(thread_id)
        if watch is None:
            watch = self._watches[thread_id] = ThreadWatch()
            self._unclaimed[thread_id] = None
            if len(self._unclaimed) > UNCLAIMED_KEPT:
                oldest = next(iter(self._unclaimed))
                del self._unclaimed[oldest], self._watches[oldest]
        return watch

    def forget(self, thread_id: str) -> None:
        """Drop what is held of a thread no call waits on any more. Its change
        event is set as it goes: a caller that took it (`claim`) to keep what it
        read until the host announces a change would otherwise wait on an event no
        notification sets any more (the next one sets a new watch's), and believe
        a stale read; woken, it reads again. (A v2 bind forgets the owner after
        each read of it, while the wake keeps the owner's status it read: an
        owner that went idle then was taken for busy, and no wake was sent.)"""
        watch = self._watches.pop(thread_id, None)
        self._unclaimed.pop(thread_id, None)
        if watch is not None:
            watch.changed.set()

    def signal(self, thread_id: str) -> None:
        """Wake the thread's waiters: the host announced a change of it."""
        watch = self._watches.get(thread_id)
        if watch is not None:
            watch.generation += 1
            watch.changed.set()
            watch.changed = trio.Event()

    def signal_all(self) -> None:
        """Wake every waiter (the connection was lost: each reads and meets it)."""
        for thread_id in list(self._watches):
            self.signal(thread_id)

    def on_notification(self, note: Notification) -> None:
        """Take what one followed notification tells of its thread."""
        params = note.parse()
        if isinstance(params, TokenUsageUpdated):
            total = params.tokenUsage.total
            # codex reports an exceeded context window as a usage whose total is the
            # whole window and every part 0: no tokens were counted for it.
            if total.inputTokens or total.outputTokens or not total.totalTokens:
                self._told(params.threadId).usage = params.tokenUsage
            if params.turnId is not None:  # a model response: the model is reached
                self._told(params.threadId).retrying.pop(params.turnId, None)
            # No waiter is woken: a count ends nothing, and a read now would answer
            # every item of the turn so far, at each of a long turn's responses.
        elif isinstance(params, ErrorNotification):
            if params.turnId is not None:
                watch = self._told(params.threadId)
                if params.willRetry:
                    before = watch.retrying.get(params.turnId)
                    now = trio.current_time()
                    watch.retrying[params.turnId] = unreachable.retried(before, params.error, now)
                else:  # codex sends no error that leaves the turn's status as it is
                    watch.failing[params.turnId] = params.error
            self.signal(params.threadId)
        elif isinstance(params, TurnNotification):
            if note.method == "turn/completed":
                watch = self._told(params.threadId)
                watch.ended[params.turn.id] = params.turn
                watch.ended_generation[params.turn.id] = watch.generation + 1  # its signal's
            self.signal(params.threadId)
        elif isinstance(params, ThreadStatusChanged):
            self.signal(params.threadId)

    def announced(self, thread_id: str, turn_id: str) -> Turn | None:
        """The turn as `turn/completed` announced it (its final status and error), if it did."""
        watch = self._watches.get(thread_id)
        return watch.ended.get(turn_id) if watch else None

    def announced_before_read(self, thread_id: str, turn_id: str) -> Turn | None:
        """`announced`, if the end was announced before the thread's last read
        began: that read then shows the ended turn, items and all. An end announced
        while the read was on its way is not given (None): that read may hold the
        turn as it was before its end, without its answer, and the end's signal
        wakes the caller to read again."""
        watch = self._watches.get(thread_id)
        if watch is None or turn_id not in watch.ended:
            return None
        if watch.ended_generation[turn_id] > watch.last_generation:
            return None
        return watch.ended[turn_id]

    def told_end(self, thread_id: str, turn_id: str) -> Turn | None:
        """The turn's end as the host told it: `announced_before_read`, else, once
        the host said the turn fails (`error {willRetry: false}`), the turn failed
        with that error, as its `turn/completed` will say (HARV-11); a read may
        show it interrupted with no error until then, for as long as codex takes."""
        ended = self.announced_before_read(thread_id, turn_id)
        watch = self._watches.get(thread_id)
        if ended is not None or watch is None or turn_id not in watch.failing:
            return ended
        return Turn(id=turn_id, status="failed", error=watch.failing[turn_id])

    def usage(self, thread_id: str) -> ThreadTokenUsage | None:
        """The newest token usage the host reported for the thread, if any."""
        watch = self._watches.get(thread_id)
        return watch.usage if watch else None
