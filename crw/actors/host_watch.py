"""Whether the host still answers while the run waits on its turns.

A call that follows a turn waits mostly for the host's notifications, and a host
that stopped (its process SIGSTOPped or hung, its end of the connection open but
reading nothing) sends none: the run would show the call running for good. So
while any turn is followed, the run asks the host `thread/loaded/list {limit: 1}`
(an answer of one thread id, from memory) once every `Settings.host_timeout`:
one request an interval for the whole run, however many turns are open, and none
while none is. A probe the host does not answer within `host_timeout` takes the
connection for lost (`HostClient.give_up`): every request in flight and every
later one raises HostUnavailable, every waiter wakes to meet it, and the run
pauses host_unavailable as for a connection that closed (`crw.actors.faults`).
A host that stopped is so seen within twice `host_timeout`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

import trio

from crw.host.errors import HostError

if TYPE_CHECKING:  # the client loads once a host's socket is open (`connect_host`)
    from crw.host.client import HostClient

PROBE = "thread/loaded/list"


class HostWatch:
    """Probes the host while turns are followed; run `watch` in the reader's nursery."""

    def __init__(self, client: HostClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self._open = 0
        self._opened = trio.Event()
        """Set while a turn is followed; a new one once none is."""
        self.probes = 0
        """Probes sent (tests assert the cost with it)."""

    @contextmanager
    def following(self) -> Iterator[None]:
        """A turn is followed while the block runs."""
        self._open += 1
        self._opened.set()
        try:
            yield
        finally:
            self._open -= 1
            if not self._open:
                self._opened = trio.Event()

    async def watch(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Probe the host every `timeout` while a turn is followed, until the
        connection is lost (given up here, or closed)."""
        task_status.started()
        while self._client.connected:
            await self._opened.wait()
            await trio.sleep(self._timeout)
            if self._open and not await self._answers():
                self._client.give_up(
                    f"the host did not answer {PROBE} within {self._timeout:g} s"
                    " while a turn ran: it stopped answering"
                )

    async def _answers(self) -> bool:
        """Whether the host answered one probe within `timeout`: an error is an
        answer, and a connection lost meanwhile is not this watch's to report (every
        waiter meets it)."""
        self.probes += 1
        with trio.move_on_after(self._timeout):
            with suppress(HostError):
                await self._client.request(PROBE, {"limit": 1})
            return True
        return False
