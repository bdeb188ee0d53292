"""Following a bound attempt's subagent until its marker turn ends or it is lost.

The call actor's read loop around the lost rule (`crw.engine.calls.lost.judge`): read
the thread through the HostReader, judge the read, and wait as the decision says
(for the thread's next change, or the decision's deadline). A host that went away
(the connection is down, or the host stopped answering the reader's probe while
the turn is followed: `crw.actors.host_watch`) raises HostUnavailable out of it:
the run pauses. A marker turn the host only retries (`error {willRetry: true}`,
no model response) for `Settings.unreachable_after` raises ModelUnreachable
(`crw.engine.answers.unreachable`).
"""

from __future__ import annotations

import trio

from crw.actors.host_reader import HostReader
from crw.engine.calls import lost
from crw.host.errors import HostRequestError, unknown_thread
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.settings import Settings


async def host_read(reader: HostReader, thread_id: str) -> lost.HostRead:
    """One read of the thread, or what kept the host from answering it."""
    try:
        return await reader.read(thread_id)
    except HostUnavailable as err:
        if not reader.connected:
            raise  # the host went away: the run pauses
        return lost.Unreadable(str(err))
    except HostRequestError as err:
        return lost.Unknown() if unknown_thread(err) else lost.Unreadable(str(err))


async def follow(
    reader: HostReader,
    settings: Settings,
    thread_id: str,
    *,
    turn_id: str | None,
    marker: str | None = None,
    bound: Thread | None = None,
) -> lost.Ended | lost.Found | lost.Lost:
    """Read the attempt's thread until the lost rule decides: its marker turn
    `turn_id` ended (or, looked for by `marker` while `turn_id` is None, shows),
    or the attempt is lost.

    `bound` is the thread as the bind read it: a marker turn that read itself shows
    completed (and no `turn/completed` says otherwise) is final, items and all, so
    it is harvested from that read without another; any other look is judged from
    a read taken now (a read taken before the turn ended holds only the items it
    had then, whatever a later notification says of its status).

    Raises:
        ModelUnreachable: the host has retried the marker turn `turn_id` for
            `Settings.unreachable_after` with no model response (HARV-14).
    """
    if bound is not None and turn_id is not None:
        announced = reader.announced(thread_id, turn_id)
        decision = lost.judge(bound, lost.Seen(), trio.current_time(), settings, turn_id=turn_id)
        if (
            isinstance(decision, lost.Ended)
            and decision.turn.status == "completed"
            and (announced is None or announced.status == "completed")
        ):
            return decision
    with reader.following():  # the host is probed while the turn is followed
        return await _judged(reader, settings, thread_id, turn_id, marker)


async def _judged(
    reader: HostReader, settings: Settings, thread_id: str, turn_id: str | None, marker: str | None
) -> lost.Ended | lost.Found | lost.Lost:
    """`follow`'s loop: read, judge, wait as the decision says."""
    seen = lost.Seen()
    while True:
        changed = reader.changed(thread_id)
        read = await host_read(reader, thread_id)
        announced = reader.told_end(thread_id, turn_id) if turn_id else None
        decision = lost.judge(
            read,
            seen,
            trio.current_time(),
            settings,
            turn_id=turn_id,
            marker=marker,
            announced=announced,
        )
        if not isinstance(decision, lost.Wait):
            return decision
        seen, until = decision.seen, decision.until
        if turn_id is not None:  # a marker turn the host only retries is given up
            now = trio.current_time()
            until = now + reader.until_given_up(thread_id, turn_id, now, until - now)
        with trio.move_on_at(until):
            await changed.wait()
