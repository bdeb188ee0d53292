"""The owner's children on multi-agent v2, by path: one read of the owner a poll.

On v2 a waiting spawn step's child is found on the owner's thread (its
`subAgentActivity` item of kind `started` at `/root/<task_name>`, docs/session.md,
"Multi-agent v2: binding by task name"), and every call that waits on a spawn
step asks at each of its polls. Reading the owner for each would cost a
`thread/read` of the owner's every turn and item per waiting call per poll;
instead one look serves every call, as v1's spawn index does
(`crw.actors.spawn_index`):

- a look reads the owner once and keeps only what the calls ask for, each child's
  path and thread id (the first `started` item at a path; the owner's items are
  not kept, and the owner's thread is forgotten by the reader at once);
- a child found is known for good: its item stays on the owner's thread (after a
  host restart too), so a path already known is answered without a look;
- a look under way, or begun less than `max_age` ago (the poll interval), is
  shared by every call that asks for a path not known yet, its failure too (each
  sharer gets the look's error); `fresh` asks for a look begun after the ask (a
  report names a child the owner spawned a moment ago: an older look cannot show
  it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from crw.engine.steps.bind_v2 import spawned_children
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable

Read = Callable[[str], Awaitable[Thread]]


@dataclass
class _Look:
    """One read of the owner: when it began, its end, and why it failed (if it did)."""

    began: float
    done: trio.Event = field(default_factory=trio.Event)
    error: HostUnavailable | HostRequestError | None = None


@dataclass
class OwnerChildren:
    """The children one owner's thread names, by path, as the looks found them."""

    owner: str
    read: Read
    forget: Callable[[str], None]
    max_age: float
    children: dict[str, str] = field(default_factory=dict)
    """Each child found: its path (`/root/<name>`) and its thread id."""
    looks: int = 0
    """The owner's reads the looks made (tests count them)."""
    _last: _Look | None = None

    async def child(self, path: str, *, fresh: bool = False) -> str | None:
        """The thread id of the owner's child at `path`, None when the owner's thread
        names none yet; `fresh`: from a look begun after this ask when not known.

        Raises:
            HostUnavailable, HostRequestError: the look could not read the owner.
        """
        if path not in self.children:
            await self._look(path, fresh=fresh)
        return self.children.get(path)

    async def _look(self, path: str, *, fresh: bool) -> None:
        look = self._last
        now = trio.current_time()
        if look is not None and not look.done.is_set():  # under way
            await look.done.wait()
            if not fresh or path in self.children:
                self._raise(look)
                return
            if self._last is not look and self._last is not None:  # begun after the ask
                await self._last.done.wait()
                self._raise(self._last)
                return
        elif look is not None and not fresh and now - look.began < self.max_age:
            self._raise(look)
            return
        await self._read()

    async def _read(self) -> None:
        look = self._last = _Look(trio.current_time())
        try:
            self.looks += 1
            thread = await self.read(self.owner)
            for path, child in spawned_children(thread).items():
                self.children.setdefault(path, child)
        except (HostUnavailable, HostRequestError) as err:
            look.error = err
        finally:
            self.forget(self.owner)  # its turns are not kept for the run's life
            look.done.set()
        self._raise(look)

    @staticmethod
    def _raise(look: _Look) -> None:
        if look.error is not None:
            raise look.error
