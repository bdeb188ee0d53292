"""The Inbox actor: dispatch reports in, to the call they name; replies out.

`crw flow dispatched` drops a report into `<run>/inbox/`. The inbox reads the
directory every `Settings.inbox_poll` and hands each report to the call actor
that waits on that call's step (its subscription, a bounded channel). A report
no call waits for is answered here, from the call's rows
(`crw.engine.steps.replies`): its attempt ended (close), its turn is bound already
(bound again, no row), or its step was never published (refused without a
subagent, close with one: an early report); a close for a subagent the call never
bound waits for the host's snapshot of it (another run's is refused); one that
names a call's open step waits in the inbox for that call's actor (a resumed run
reads its inbox before its calls come to their steps). Each report is handed out
once; the one who answers it writes the reply, then removes
the report (`crw.bus.inbox`), so a crash between the two answers it again, the
same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from crw.bus import inbox as files
from crw.bus import live
from crw.bus.dirwatch import DirWatch
from crw.engine.run.rundir import RunDir
from crw.settings import Settings

SWEEP_POLLS = 10
"""Polls' time (`inbox_poll` each) between two sweeps of the step index: a call
whose close step the owner took stays marked (a reader lists its directory) until
the next sweep, and a sweep lists each marked call's directory once."""
REPORTS_PER_CALL = 16
"""A call's subscription buffer: an owner reports a step once or a few times; a
report that does not fit waits in the inbox for the next read."""


class Inbox:
    """Routes reports to call actors; answers the ones no call waits for."""

    def __init__(
        self,
        run: RunDir,
        run_id: str,
        settings: Settings,
        answer_unrouted: Callable[[files.Report], Awaitable[dict[str, Any] | None]],
        token: str | None = None,
    ) -> None:
        self._run = run
        self._token = token
        """The process lock's token: the run's steps are indexed under it
        (`crw.bus.live`); None keeps no index."""
        self._run_id = run_id
        self._settings = settings
        self._answer_unrouted = answer_unrouted
        self._routes: dict[str, trio.MemorySendChannel[files.Report]] = {}
        self._handed: set[str] = set()
        self._left = False
        """Whether a report waits in the inbox to be read again (its call is not
        subscribed yet, its channel was full, or its call let it go)."""

    @contextmanager
    def subscribe(self, call: str) -> Iterator[trio.MemoryReceiveChannel[files.Report]]:
        """The reports of `call` while the block runs (one subscriber a call)."""
        send, receive = trio.open_memory_channel[files.Report](REPORTS_PER_CALL)
        self._routes[call] = send
        try:
            with receive:
                yield receive
                while True:  # reports handed out and not taken: read them again
                    try:
                        self.release(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
        finally:
            if self._routes.get(call) is send:
                del self._routes[call]
            send.close()

    async def reply(
        self,
        report: files.Report,
        reply: dict[str, Any],
        first: Callable[[], None] | None = None,
    ) -> None:
        """Write the run's reply to `report`, then take the report out of the inbox;
        `first`, when given, runs before the reply (what the owner must not see once
        it has the reply: the bound step's file).

        In the loop's thread: nothing here is synced (a dozen syscalls, two of them
        making and removing a file), and a worker-thread hop cost the run more CPU
        than the writes (the worker's wake and the loop's, Trio naming the thread
        twice, and GIL hand-offs with the busy loop around each of the worker's
        syscalls: docs/performance.md counts them)."""
        body = {
            "id": report.id,
            "call": report.call,
            "k": report.k,
            "attempt": report.attempt,
            "agent_id": report.agent_id,
        } | reply
        await trio.lowlevel.checkpoint_if_cancelled()  # as the hop was: a cancelled run writes none
        if first is not None:
            first()
        files.write_reply(self._run, body)
        self._handed.discard(report.id)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the inbox at once when a report arrives (`crw.bus.dirwatch`: a
        report waits for no poll), and every `inbox_poll` while a report waits
        there to be read again (every SWEEP_POLLS polls' time while none does;
        every `inbox_poll` without a watch); with a token, keep the
        index of the call directories that may hold a step (built before any step
        is written) and sweep it every SWEEP_POLLS polls' time."""
        if self._token is not None:
            live.open_index(self._run, self._token)
        watch = DirWatch.open(self._run.inbox)
        task_status.started()
        try:
            swept = trio.current_time()
            while True:
                await self.poll()
                # `now >= swept + t`, not `now - swept >= t`: the poll's deadline is
                # that sum, and the difference may round below t (a sweep skipped).
                if self._token is not None and (
                    trio.current_time() >= swept + SWEEP_POLLS * self._settings.inbox_poll
                ):
                    live.sweep(self._run)
                    swept = trio.current_time()
                if watch is None:
                    await trio.sleep(self._settings.inbox_poll)
                else:  # a report's arrival wakes it: no listing every poll for none
                    await watch.wait(self._settings.inbox_poll * (1 if self._left else SWEEP_POLLS))
        finally:
            if watch is not None:
                watch.close()
            live.close_index(self._run)

    async def poll(self) -> None:
        """Read the inbox once and hand out every report not handed out yet."""
        reports = files.read_reports(self._run, skip=self._handed)  # a listing, new reports
        self._left = False
        if reports and self._token is not None:
            live.reported(self._run)  # their next took the close steps there were
        for report in reports:
            route = self._routes.get(report.call) if report.run == self._run_id else None
            if route is None:
                answer = (
                    await self._answer_unrouted(report)
                    if report.run == self._run_id
                    else {
                        "reply": "refused",
                        "reason": f"the report is for another run ({report.run})",
                    }
                )
                if answer is not None:
                    self._handed.add(report.id)
                    await self.reply(report, answer)
                else:
                    self._left = True
                continue
            try:
                route.send_nowait(report)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self._left = True
                continue
            self._handed.add(report.id)

    def release(self, report: files.Report) -> None:
        """A report its call took and did not answer (it ended first): read it again."""
        self._handed.discard(report.id)
        self._left = True
