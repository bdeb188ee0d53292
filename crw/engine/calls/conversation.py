"""A session call's conversation and the continuation that goes on from it.

Pure (rows in, decisions out). A session call's conversation is its turns at the
conversation turn each turn_started row records, each place once: a turn run
again is recorded at the place of the turn it replaces (replaces_turn) and
supersedes it (ATT-42..44). A turn_started row of a journal written before the
place was recorded takes it from the repair member of the step_published row at
its k: the task turn 1, the repair 2; a later such turn at that place replaces
the earlier one (ATT-47, ATT-48).

A continuation (`resume: handle`) runs on a new subagent; its packet carries the
journal's record of the handle's turns, each with the input of the step it took:
the turns of the calls the handle continues, then the handle's own (ATT-40,
ATT-41), built from the conversation list alone (ATT-45). Its input digest keeps
the handle's thread chain in order (ATT-49). Only the decided parts of the role's
pair are compared with the pair the handle's subagent was bound with; a decided
part that differs refuses the continuation, pair_refused (DISP-21..23), and so
does an explicit effort (a review's fix_effort) of a role whose effort is
undecided that differs from the effort the handle's subagent ran (DISP-24). Inside a
resume's suffix (the handle's turns were recorded by an earlier process) it takes
the checkpoint branch: checkpoint_started (ATT-39).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crw.engine.answers import answer
from crw.engine.config.roles import RolePair
from crw.engine.steps import step_input

Row = Mapping[str, Any]

PAIR_REFUSED = "pair_refused"
"""The held reason of a continuation whose role's decided pair differs from the
pair the handle's subagent was bound with."""
CHECKPOINT = "checkpoint"
"""checkpoint_started's branch: the journal's record, never a fork of a thread."""


@dataclass(frozen=True)
class Turn:
    """One conversation turn of a call: where it stands and what it took."""

    call: str
    place: int
    """Its conversation turn (1 the task, 2 the repair)."""
    k: int
    attempt: int
    turn_id: str | None
    thread_id: str | None
    input: str
    """The input of the step it took (a spawn message, a send_input message)."""


def conversation(call: str, rows: Iterable[Row]) -> list[Turn]:
    """`call`'s conversation from its rows in journal order: each place once, the
    newest turn at a place superseding the one it replaces, in place order."""
    steps: dict[tuple[int, int], Row] = {}
    thread: str | None = None
    places: dict[int, Turn] = {}
    for row in rows:
        if row.get("call") != call:
            continue
        kind = row.get("row")
        if kind == "step_published":
            steps[(int(row.get("k") or 1), int(row.get("attempt") or 1))] = row
        elif kind == "thread_started":
            thread = row.get("thread_id")
        elif kind == "turn_started":
            key = (int(row.get("k") or 1), int(row.get("attempt") or 1))
            step = steps.get(key, {})
            place = row.get("conversation_turn") or (2 if step.get("repair") else 1)
            agent = step.get("agent_id") if step.get("action") == "send_input" else thread
            places[int(place)] = Turn(
                call=call,
                place=int(place),
                k=key[0],
                attempt=key[1],
                turn_id=row.get("turn_id"),
                thread_id=agent,
                input=step_input.full(
                    step.get("input"),
                    step_input.answer_of(step, steps.values()),
                    step.get("input_answer_at"),
                ),
            )
    return [places[place] for place in sorted(places)]


def chain(handle: str, rows: Sequence[Row]) -> list[str]:
    """The calls of `handle`'s conversation, oldest first: the calls it continues
    (each prepared row's `resume`), then `handle` itself."""
    resumes = {row.get("call"): row.get("resume") for row in rows if row.get("row") == "prepared"}
    calls = [handle]
    while isinstance(resumes.get(calls[0]), str) and resumes[calls[0]] not in calls:
        calls.insert(0, str(resumes[calls[0]]))
    return calls


def record(handle: str, rows: Sequence[Row]) -> list[Turn]:
    """The journal's record of `handle`'s turns: every call of its chain's
    conversation, oldest call first (ATT-40, ATT-41)."""
    return [turn for call in chain(handle, rows) for turn in conversation(call, rows)]


def continued_packet(handle: str, rows: Sequence[Row]) -> str | None:
    """The packet of the call a continuation continues: the one of the step its
    task turn took (its conversation's first place)."""
    turns = conversation(handle, rows)
    if not turns:
        return None
    first = turns[0]
    for row in rows:
        if (
            row.get("call") == handle
            and row.get("row") == "step_published"
            and (row.get("k"), row.get("attempt")) == (first.k, first.attempt)
        ):
            return row.get("packet")
    return None


def thread_chain(turns: Sequence[Turn]) -> list[str]:
    """The threads of a record, each once, in the order the conversation ran on them."""
    threads: list[str] = []
    for turn in turns:
        if turn.thread_id and turn.thread_id not in threads:
            threads.append(turn.thread_id)
    return threads


def input_digest(task: str, schema: Mapping[str, Any], handle: str, turns: Sequence[Turn]) -> str:
    """The continuation's input digest: its task and schema, its handle, and the
    handle's thread chain in order, so a position replays only after every one
    before it (ATT-49)."""
    return answer.digest(
        {"task": task, "schema": schema, "resume": handle, "threads": thread_chain(turns)}
    )


def bound_pair(handle: str, rows: Sequence[Row]) -> Row | None:
    """The handle's newest thread_started row: the pair its subagent was bound with."""
    started = [r for r in rows if r.get("call") == handle and r.get("row") == "thread_started"]
    return started[-1] if started else None


def pair_refusal(role: RolePair, bound: Row | None, effort: str | None = None) -> str | None:
    """Why a continuation on `role`'s pair is refused, or None: each decided part of
    the role's pair against the pair the handle's subagent ran (DISP-21, DISP-23).
    An undecided part is not compared, so a handle bound pair_unchecked or
    effort_unchecked goes on (DISP-22). `effort`, the explicit effort the
    continuation asks for (given only where the role's is undecided), is compared
    with the effort the handle's subagent ran (DISP-24). A part the handle's row
    does not record is not compared."""
    if bound is None:
        return None
    thread = bound.get("thread_id")
    for part, decided in (("model", role.model), ("effort", role.effort)):
        ran = bound.get(part)
        if decided is not None and ran is not None and ran != decided:
            return f"the role's {part} is {decided}, the subagent {thread} it continues ran {ran}"
    ran = bound.get("effort")
    if effort is not None and ran is not None and ran != effort:
        return (
            f"the continuation asks effort {effort} (the role leaves it undecided), the "
            f"subagent {thread} it continues ran effort {ran}"
        )
    return None


def in_resume_suffix(handle: str, rows: Sequence[Row]) -> bool:
    """Whether the continuation starts inside a resume's suffix: a `started` row
    (a resumed process) comes after the handle's last row (ATT-39)."""
    last_handle = max((i for i, r in enumerate(rows) if r.get("call") == handle), default=-1)
    return any(r.get("row") == "started" for r in rows[last_handle + 1 :])


def section(handle: str, turns: Sequence[Turn], packet: str | None, answer_file: str) -> str:
    """The packet's record of the conversation the continuation goes on from."""
    lines = [
        "## The conversation you go on from",
        "",
        f"You continue the conversation of {handle} (resume: {handle}) as a new subagent. "
        "The journal's record of its turns follows, each with the input it took, oldest first.",
    ]
    for turn in turns:
        lines += ["", f"### {turn.call} turn {turn.place} (t{turn.k}-a{turn.attempt})", ""]
        lines.append(fenced(turn.input))
    lines += [
        "",
        f"The packet of the call you continue: {packet or '(none recorded)'}.",
        f"Its answer: {answer_file}.",
    ]
    return "\n".join(lines)


def fenced(text: str) -> str:
    """`text` in a fence longer than any run of backticks in it."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"
