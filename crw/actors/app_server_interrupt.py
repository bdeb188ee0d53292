"""An App Server call's interrupt: a pause, a cancellation, its node's deadline,
or a model the host cannot reach (`crw.engine.answers.unreachable`).

The run opened the call's thread, so it interrupts the turn itself: the
`interrupt_requested` row (reason, op, attempt, turn_id) is durable before
`turn/interrupt` is sent (HARV-35); the turn is then read until it has ended
(HARV-31), and only then is the call held for the reason.
"""

from __future__ import annotations

import contextlib

from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import JournalWriter
from crw.engine.answers.harvest import CallEnd
from crw.engine.holds import interrupt
from crw.host.errors import HostRequestError
from crw.journal.rows import StepPublished, Tokens


async def stop_turn(
    journal: JournalWriter,
    reader: HostReader,
    step: StepPublished,
    thread_id: str,
    turn_id: str,
    reason: str,
    tokens: Tokens,
    error: str | None = None,
) -> CallEnd:
    """Interrupt the call's turn `turn_id` of `step` and hold the call once it ended."""
    call = str(step.call)
    await journal.commit([interrupt.requested(reason, step, turn_id)])
    with contextlib.suppress(HostRequestError):  # the turn ended already: read it as it is
        await reader.interrupt(thread_id, turn_id)
    await reader.wait_turn(thread_id, turn_id)
    held = interrupt.held(call, reason, tokens, error)
    await journal.commit([held])
    return CallEnd(held)
