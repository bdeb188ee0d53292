"""Who hears what the simulated host does: its connections, each thread's
subscribers, and the rollout records of a step.

`notify` sends a notification to whom the real host sends it (codex 0.163.0):
thread/started and status changes to all, a subagent's events to all, the others
to the thread's subscribers, each encoded once for all and never to a connection
that opted out of its method. While a request is answered (`hold` … `release`)
its notifications wait for its response, and a step's rollout records are written
in one go at its end. It never changes a thread or a turn: `crw.host.sim.turns`
and `crw.host.sim.server` decide what happens, this module only tells it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crw.host.sim import rollout
from crw.host.sim.connection import Connection
from crw.host.sim.state import Thread
from crw.host.transport import encode

_TO_ALL = frozenset({"thread/started", "thread/status/changed"})

Held = list[tuple[set[Connection], dict[str, Any]]]
"""Notifications held while a request is answered, with whom each goes to."""


class Broadcast:
    """The connections of one simulated host and what reaches each of them."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self._connections: set[Connection] = set()
        self._subscribers: dict[str, set[Connection]] = {}
        self._held: Held | None = None
        self._records: dict[str, list[rollout.Record]] = {}
        """Rollout records of this step not written yet, by file (`write_records`)."""
        self.posted: dict[str, int] = {}
        """Notifications posted, by method: one a connection sent it."""

    def connect(self) -> Connection:
        conn = Connection()
        self._connections.add(conn)
        return conn

    def disconnect(self, conn: Connection) -> None:
        self._connections.discard(conn)
        for subscribers in self._subscribers.values():
            subscribers.discard(conn)
        conn.outbox.close()

    def subscribe(self, conn: Connection, thread: Thread) -> None:
        self._subscribers.setdefault(thread.id, set()).add(conn)

    def unsubscribe(self, conn: Connection, thread: Thread) -> bool:
        """Whether `conn` was subscribed to `thread` (it is not now)."""
        subscribers = self._subscribers.get(thread.id, set())
        if conn not in subscribers:
            return False
        subscribers.discard(conn)
        return True

    def unsubscribe_all(self) -> None:
        """Nobody is subscribed to any thread (the host process restarted)."""
        self._subscribers.clear()

    def hold(self) -> None:
        """Hold the notifications from now until `release`: a request's response
        goes out before what it caused."""
        self._held = []

    def release(self) -> Held:
        """Stop holding; write the step's rollout records. The notifications held,
        for `deliver_held` once the response is posted."""
        held, self._held = self._held, None
        self.write_records()
        return held or []

    def deliver_held(self, held: Held) -> None:
        for targets, notification in held:
            self._deliver(targets, notification)

    def notify(self, method: str, params: dict[str, Any], thread: Thread) -> None:
        """Send a notification to whom the real host sends it: thread/started and
        status changes to all, a subagent's events to all (as in 0.163.0), the
        others to the thread's subscribers."""
        message = {"method": method, "params": params, "emittedAtMs": int(self._wall() * 1000)}
        if method in _TO_ALL or thread.is_subagent:
            targets = set(self._connections)
        else:
            targets = set(self._subscribers.get(thread.id, ()))
        if self._held is not None:
            self._held.append((targets, message))
        else:
            self._deliver(targets, message)

    def _deliver(self, targets: set[Connection], message: dict[str, Any]) -> None:
        """Post `message` to each of `targets` still connected that did not opt out
        of its method, encoded once for all."""
        text: str | None = None
        method = message["method"]
        for conn in targets & self._connections:
            if method in conn.opted_out:
                continue
            if text is None:
                text = encode(message)
            conn.post_encoded(text)
            self.posted[method] = self.posted.get(method, 0) + 1

    def record(self, thread: Thread, kind: str, payload: dict[str, Any], wall: float) -> None:
        """Add a record to the thread's rollout at the end of this step (`write_records`)."""
        self._records.setdefault(thread.path, []).append((kind, payload, wall))

    def write_records(self) -> None:
        """Write the records of this step, one write a rollout. Called before the
        step's end (no checkpoint in between): a client that reads a rollout after
        the response or notification of a step finds its records there."""
        records, self._records = self._records, {}
        for path, lines in records.items():
            rollout.append_all(path, lines)
