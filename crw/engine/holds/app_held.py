"""How a held App Server call goes on in place (pure): rows in, the step out.

A held App Server call answered retry, or held by a pause when the run resumes,
goes on on its own thread, resumed with the leaf keys as `app_resume` resumes it
(ATT-30..35, as on the session path, with the thread in place of a subagent):

- its newest step was published and never bound (no turn_started): it is looked
  up by its marker on the thread first, as `app_resume.decide` does (ATT-35);
- else its delivered turn is taken again by a new turn on the same thread, once
  the thread's running turns are interrupted (interrupt_requested, reason held,
  durable first) and have ended (ATT-30, ATT-31): the next k, attempt n+1, at
  the conversation turn of the turn it replaces, which `replaces_turn` names;
  its text says why the previous turn stopped (ATT-32);
- a call held in its repair turn goes on with that repair: the new turn is the
  repair again, with the answer it repairs and its errors, so the call has no
  second repair (ATT-33, ATT-34).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from crw.engine.answers import answer
from crw.engine.holds import decision
from crw.engine.steps import packet, step_input
from crw.host.protocol import Thread
from crw.journal.rows import InterruptRequested, StepPublished

Row = Mapping[str, Any]
ON_THE_THREAD = "a new turn on the call's thread"
"""Where an App Server call's turn is taken again (the note says so)."""


def retake(
    rows: Sequence[Row], call_packet: packet.Packet, model: str | None
) -> StepPublished | None:
    """The step that takes the held call's delivered turn again on its thread, its
    `input` the turn's journaled input (the text without the Repository tools
    section, STEP-57); None when its newest step was never bound: it is looked up
    by its marker first."""
    plan = decision.in_place(rows, call_packet.role, call_packet.workspace)
    if plan.look_up:
        return None
    note = decision.held_note(
        rows, call_packet.role, call_packet.workspace, plan.attempt, where=ON_THE_THREAD
    )
    mark = packet.marker(call_packet.call, plan.k, plan.attempt)
    if plan.repair:
        repair = packet.repair_text(
            plan.repair_errors or [], str(plan.previous_answer or ""), call_packet.output_schema
        )
        journaled = packet.send_input_message(mark, f"{note}\n\n{repair}")
    else:
        journaled = packet.journaled_input(replace(call_packet, note=note), plan.k, plan.attempt)
    step = StepPublished(
        call=call_packet.call,
        k=plan.k,
        op=packet.op(call_packet.call, plan.k),
        marker=mark,
        attempt=plan.attempt,
        action="send_input",
        input=journaled,
        input_digest=answer.digest(journaled),
        role=call_packet.role,
        model=model,
        note=note,
        conversation_turn=plan.conversation_turn,
        replaces_turn=plan.replaces_turn,
        repair=plan.repair,
        previous_answer=plan.previous_answer,
        repair_errors=plan.repair_errors,
    )
    return step_input.refer(step_input.fold(step), plan.previous_answer_in)


def running_turns(thread: Thread) -> list[str]:
    """The turns of the held call's thread still running: each is interrupted
    before the call goes on (ATT-31)."""
    return [turn.id for turn in thread.turns if turn.status == "inProgress"]


def held_interrupt(rows: Sequence[Row], call: str, turn_id: str) -> InterruptRequested:
    """The intent to interrupt `turn_id`, naming the step and attempt the rows
    bound it to (ROWS-6), durable before the interrupt is sent."""
    bound = [r for r in rows if r.get("row") == "turn_started" and r.get("turn_id") == turn_id]
    steps = [r for r in rows if r.get("row") == "step_published"]
    step = bound[-1] if bound else (steps[-1] if steps else {})
    return InterruptRequested(
        call=call,
        reason=decision.HELD_INTERRUPT,
        op=step.get("op"),
        attempt=step.get("attempt"),
        turn_id=turn_id,
    )
