"""The owner's subagents by the marker of their first message: the marker lookup's index.

The marker lookup (DISP-25) asks, at every poll of every call that waits on a
spawn step, which of the owner's subagents carry the step's marker. Listing and
reading every subagent each time would cost host requests in proportion to every
thread the host ever held; the index costs them in proportion to the subagents
spawned since the last look:

- `thread/list` (sourceKinds subAgentThreadSpawn) answers the newest created
  first; a look pages down to the first subagent an earlier look listed (a small
  first page: a look finds the few spawned since the last one), so its cost is
  the subagents new since, not the run's rate. A subagent shows in the listing
  once its first message is written, a moment after its creation second, so it
  may show below one an earlier look listed: once every `LISTING_SETTLE_S` a look
  pages down to the subagents created `LISTING_SETTLE_S` before the newest one the
  previous such deep look saw, and finds those late ones;
- each new subagent of the owner, listed open, is read (thread/read) until its
  first turn shows its first user message; its marker (or that it has none) is
  then known for good: a spawn step's marker is the first message of its subagent,
  and a later turn (a repair) is looked up on its one known subagent directly. A
  subagent listed closed (notLoaded) is never read;
- one look serves every waiting call: a look under way, or begun less than
  `max_age` ago (the poll interval), is shared; but a call asking for the strays
  of a subagent it bound that no look listed yet gets a look begun after it asked
  (an older look cannot show the strays the owner spawned before that subagent);
- the run's sweep for duplicates of ended calls' steps (`crw.actors.late_strays`)
  takes the subagents indexed since its last look (`since`).

The candidates a marker names are read afresh for the bind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from crw.engine.steps.bind import spawn_marker
from crw.host.errors import HostRequestError, unknown_thread
from crw.host.protocol import Thread

LISTING_SETTLE_S = 5
"""How far below the newest creation time seen a look still pages: a subagent is
listed once its first message is written, which may be after a later subagent's."""

FIRST_PAGE = 10
"""The first page's length of a look that stops at the first subagent listed before."""
PAGE = 100

ListPage = Callable[[str | None, int], Awaitable[tuple[list[Thread], str | None]]]
"""One page of `thread/list` for subagents, from a cursor, of a length: its threads
and the next cursor."""
Read = Callable[[str], Awaitable[Thread]]


@dataclass
class OwnerSpawns:
    """What the index knows of one owner's subagents."""

    owner: str
    list_page: ListPage
    read: Read
    max_age: float
    seen: set[str] = field(default_factory=set)
    """Every subagent listed so far (of any owner: the listing is the host's)."""
    newest: int | None = None
    """The newest creation time (s) listed so far."""
    deep_newest: int | None = None
    """`newest` when the last deep look ended (None: no look yet: the first lists all)."""
    deep_at: float | None = None
    """When the last deep look began."""
    unread: list[str] = field(default_factory=list)
    """The owner's open subagents whose first message is not read yet, oldest first."""
    by_marker: dict[str, list[str]] = field(default_factory=dict)
    """The owner's subagents by the marker of their first message, oldest first."""
    indexed: set[str] = field(default_factory=set)
    """The subagents whose first message the index read (marker or none)."""
    order: list[tuple[str, str]] = field(default_factory=list)
    """The subagents with a marker, with it, in the order they were indexed."""
    looked_at: float | None = None
    looking: trio.Event | None = None

    async def carrying(self, marker: str, bound: Thread | None = None) -> list[Thread]:
        """The owner's subagents whose first message carries `marker`, read now.

        `bound` is the subagent a call bound, as its bind read it: it is indexed
        from that read (no look reads it), and it is left out of the answer
        unread (the caller asks for the others: strays). A `bound` no look listed
        yet is asked about after a look begun now."""
        fresh = bound is not None and bound.id not in self.seen
        if bound is not None:
            self.learn(bound)
        await self._look(fresh=fresh)
        found = []
        for thread_id in list(self.by_marker.get(marker, ())):
            if bound is not None and thread_id == bound.id:
                continue
            try:
                found.append(await self.read(thread_id))
            except HostRequestError as err:
                if not unknown_thread(err):
                    raise
                self.by_marker[marker].remove(thread_id)  # the host holds it no more
        return found

    async def since(self, seen: int, *, look: bool = True) -> tuple[list[tuple[str, str]], int]:
        """The subagents (id, marker) indexed after the first `seen`, after a look
        (shared as `carrying`'s) when `look`, and how many are indexed now."""
        if look:
            await self._look()
        return self.order[seen:], len(self.order)

    async def _look(self, *, fresh: bool = False) -> None:
        """List the subagents created since the last look and read the new ones,
        or share the look under way or just made; `fresh`: only a look begun
        after this one was asked for is shared."""
        if self.looking is not None:
            await self.looking.wait()
            if not fresh:
                return
            if self.looking is not None:  # begun after the ask
                await self.looking.wait()
                return
        now = trio.current_time()
        if not fresh and self.looked_at is not None and now - self.looked_at < self.max_age:
            return
        self.looking = looking = trio.Event()
        try:
            await self._list()
            await self._read_unread()
            self.looked_at = now
        finally:
            self.looking = None
            looking.set()

    async def _list(self) -> None:
        """Page `thread/list` down to the first subagent listed before, or (a deep
        look, every `LISTING_SETTLE_S`) down to the subagents the last deep look
        saw settled."""
        now = trio.current_time()
        deep = self.deep_at is None or now - self.deep_at >= LISTING_SETTLE_S
        floor = None
        if deep:
            self.deep_at = now
            if self.deep_newest is not None:
                floor = self.deep_newest - LISTING_SETTLE_S
        new: list[Thread] = []
        cursor: str | None = None
        limit = PAGE if deep else FIRST_PAGE
        while True:
            page, cursor = await self.list_page(cursor, limit)
            limit = PAGE
            settled = False
            for thread in page:
                if floor is not None and thread.createdAt is not None and thread.createdAt < floor:
                    settled = True  # newest first: the rest were listed before
                    break
                if thread.id not in self.seen:
                    new.append(thread)
                elif not deep:
                    settled = True  # newest first: a deep look finds one shown late
                    break
            if settled or not cursor:
                break
        for thread in reversed(new):  # oldest first
            self.seen.add(thread.id)
            if thread.createdAt is not None:
                self.newest = max(self.newest or 0, thread.createdAt)
            if thread.parentThreadId == self.owner and thread.status.type != "notLoaded":
                self.unread.append(thread.id)
        if deep:
            self.deep_newest = self.newest

    async def _read_unread(self) -> None:
        """Read each new subagent until its first message shows; then index it."""
        pending, self.unread = [i for i in self.unread if i not in self.indexed], []
        done = 0
        try:
            for thread_id in pending:
                try:
                    thread = await self.read(thread_id)
                except HostRequestError as err:
                    if not unknown_thread(err):
                        raise
                else:
                    self._index(thread)
                done += 1
        finally:
            self.unread += pending[done:]

    def learn(self, thread: Thread) -> None:
        """Index one of the owner's subagents from a read made elsewhere (the
        bind's) once it shows its first message: no look reads it then."""
        if thread.parentThreadId == self.owner and spawn_marker(thread)[0]:
            self._index(thread)

    def _index(self, thread: Thread) -> None:
        if thread.id in self.indexed:
            return
        shown, marker = spawn_marker(thread)
        if not shown and thread.status.type != "notLoaded":
            self.unread.append(thread.id)  # its first message is not written yet
            return
        self.indexed.add(thread.id)
        if marker is not None:
            self.by_marker.setdefault(marker, []).append(thread.id)
            self.order.append((thread.id, marker))
