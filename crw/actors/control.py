"""The run's control: a pause or cancellation asked by a command, and each call's stop.

`crw flow pause` and `crw flow cancel` drop a request into the run's inbox
(`crw.bus.control`); `RunControl.watch` reads it every `CONTROL_POLL`, and
`RunControl.stop` then stops the gate admitting calls and interrupts every call
in flight. A call's `CallStop` is how the interrupt reaches it: a call waits only
inside `CallStop.waiting()` (for a dispatch, for its turn), which an interrupt
cancels; a bind, a commit or a step write is never cut. The gate writes the
run's own row once every call it stopped has its terminal row, and the request
is taken out of the inbox only after that row is durable: a process that dies
before leaves the request for the resumed one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import trio

from crw.bus import control as requests
from crw.engine.held_reasons import DEADLINE
from crw.engine.run.rundir import RunDir

CONTROL_POLL = 0.25
"""Seconds between two reads of the inbox for a control request (a person's
command: a quarter second is soon enough, and costs one listing)."""


class Interrupted(Exception):
    """A call's wait was interrupted: its interrupt path takes over."""


@dataclass(eq=False)
class CallStop:
    """One call's interrupt: its reason once asked, and the waits it cancels.

    `deadline` (Trio's clock) is the node's timeout: a wait that reaches it, or
    begins after it, is interrupted for the reason `deadline`."""

    reason: str | None = None
    deadline: float = math.inf
    _waits: set[trio.CancelScope] = field(default_factory=set)

    def request(self, reason: str) -> None:
        """Interrupt the call for `reason` (the first reason stands)."""
        if self.reason is None:
            self.reason = reason
        for scope in self._waits:
            scope.cancel()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A wait the interrupt may cut; raises Interrupted when it did, or when the
        call was interrupted before it began waiting."""
        if self.reason is None and trio.current_time() >= self.deadline:
            self.reason = DEADLINE
        if self.reason is not None:
            raise Interrupted(self.reason)
        scope = trio.CancelScope(deadline=self.deadline)
        self._waits.add(scope)
        try:
            with scope:
                yield
        finally:
            self._waits.discard(scope)
        if scope.cancelled_caught:
            self.reason = self.reason or DEADLINE  # not asked: the deadline ran out
            raise Interrupted(self.reason)


@dataclass(eq=False)
class RunControl:
    """The run's stop: its reason and request, and the stops of the calls in flight."""

    run: RunDir | None = None
    reason: str | None = None
    request_id: str | None = None
    calls: set[CallStop] = field(default_factory=set)
    open_nodes: frozenset[str] = frozenset()
    """The nodes whose calls an earlier process left open: a stopped run still
    admits them, so that each is interrupted and held."""
    held_before: tuple[str, ...] = ()
    """The nodes whose calls a pause held before this process: they run again,
    unless the run stops first (then they stay held)."""

    def stop(self, reason: str, request_id: str | None = None) -> None:
        """Stop the run for `reason`: every call in flight, and every call it
        enters later (a resumed call's first wait), is interrupted."""
        if self.reason is None:
            self.reason, self.request_id = reason, request_id
        for call in self.calls:
            call.request(self.reason)

    @contextmanager
    def enter(self, timeout: float | None = None) -> Iterator[CallStop]:
        """A call's stop while the call runs; `timeout`: its node's, in seconds."""
        stop = CallStop()
        if timeout is not None:
            stop.deadline = trio.current_time() + timeout
        if self.reason is not None:
            stop.request(self.reason)
        self.calls.add(stop)
        try:
            yield stop
        finally:
            self.calls.discard(stop)

    async def watch(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the inbox for a control request until the run stops."""
        assert self.run is not None
        started = False
        while self.reason is None:
            # In the run's own thread, as the inbox reads: one small listing.
            found = requests.first_request(self.run)
            if found is not None:
                self.stop(found.reason, found.id)
            if not started:  # a request that waits is read before any call starts
                task_status.started()
                started = True
            if self.reason is None:
                await trio.sleep(CONTROL_POLL)

    def answered(self) -> None:
        """The run's row for the stop is durable: take out the requests it answers."""
        if self.run is not None and self.reason is not None:
            requests.remove_answered(self.run, self.reason)
