"""The hint of `crw flow next` (pure): what the owner does next, in sentences,
from what next read and the slots (spec, "crw flow next RUN ..."; CMD-NEXT-12..14,
CMD-NEXT-19, CMD-NEXT-32), and the held calls with the command of each answer.

Readings fixed here (see `crw.engine.owner.next_view` for the rest of the answer):
- the hint fits the backend: an app-server run's process makes its calls on the
  host itself, so there is no subagent to wait on (no wait_agent);
- a run no process holds and none could start for (`NextRead.launch_refused`)
  names what stopped the launch and the resume to run once it is fixed, and no
  host call to make: its step files are a dead process's; and, while that launch
  holds the next one back (`NextRead.launch_held`), that next starts none until
  the files it could have stopped on change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crw.engine.held_fix import answer_choices, with_fix
from crw.engine.held_reasons import paused_why
from crw.engine.owner.next_state import RESUMABLE_STATES, NextRead, can_do_nothing, step_key

WAIT_AGENT_TIMEOUT_MS = 30_000
"""The timeout_ms the hint proposes for wait_agent."""
NEXT_WAIT_S = 30
"""The --wait the hint proposes for the next `crw flow next`."""


@dataclass(frozen=True)
class Slots:
    """The owner's agent threads: `limit` is agents.max_threads, `agents` the open
    subagents' ids (CMD-NEXT-8, CMD-NEXT-9)."""

    limit: int
    agents: tuple[str, ...]

    @property
    def open(self) -> int:
        return len(self.agents)

    @property
    def full(self) -> bool:
        return self.open >= self.limit

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "open": self.open, "agents": list(self.agents)}


def hint(read: NextRead, state: str, paused_reason: str | None, slots: Slots) -> str:
    """What to do next, in sentences (CMD-NEXT-12..14, CMD-NEXT-19, CMD-NEXT-32)."""
    sentences = []
    if read.resumed_pid is not None:
        sentences.append(
            f"No process held the run: next resumed it, as {read.command('resume', '--detach')} "
            f"does (pid {read.resumed_pid})."
        )
    refused = no_process(read)
    if refused is not None:
        return " ".join([*sentences, *_dead_sentences(state, paused_reason, read, refused)])
    sentences += _state_sentences(state, paused_reason, read)
    if state == "starting":
        return " ".join(sentences)
    if read.closes and state != "ended":
        targets = _close_targets(read)
        sentences.append(f"Close these subagents first: {targets}.")
    sentences += _step_sentences(read, slots)
    if state in RESUMABLE_STATES and not can_do_nothing(read):
        closing = {close.agent_id for close in read.closes}
        waiting = [agent for agent in slots.agents if agent not in closing]
        sentences.append(_wait_sentence(waiting, read))
    return " ".join(sentences)


def no_process(read: NextRead) -> str | None:
    """Why no process could start for a run that none holds and that is not over
    (`NextRead.launch_refused`), or None."""
    if read.held or read.run_state.state == "ended":
        return None
    return read.launch_refused


def _dead_sentences(
    state: str, paused_reason: str | None, read: NextRead, refused: str
) -> list[str]:
    """A run no process holds and none could start for: its state, what stopped
    the launch and what to run once it is fixed; its steps are a dead process's."""
    sentences = [f"The run is paused {paused_why(paused_reason)}."] if state == "paused" else []
    if state == "waiting_decision":
        sentences.append(_decision_sentence(read))
    sentences.append(
        f"No process holds the run and none could start: {refused}. Take no step until "
        f"that is fixed, then go on with: {read.command('resume', '--detach')}."
    )
    if read.launch_held:
        sentences.append(
            "next starts no process for it until its run.json, workflow file, roles.toml "
            "or journal changes."
        )
    if read.closes:
        sentences.append(f"Close these subagents meanwhile: {_close_targets(read)}.")
    return sentences


def _close_targets(read: NextRead) -> str:
    tool = "interrupt_agent" if _v2(read) else "close_agent"
    return ", ".join(f"{tool}(target={json.dumps(c.agent_id)})" for c in read.closes)


def _v2(read: NextRead) -> bool:
    """The run speaks multi-agent v2: wait_agent takes no targets, interrupt_agent closes."""
    return read.run_state.multi_agent == "multi_agent_v2"


def _step_sentences(read: NextRead, slots: Slots) -> list[str]:
    """The reported steps, the thread limit, and the host calls to make."""
    sentences = []
    reported = [s for s in read.steps if step_key(s) in read.reported]
    fresh = [s for s in read.steps if step_key(s) not in read.reported]
    if reported:
        ops = ", ".join(f"{s.op}-a{s.attempt}" for s in reported)
        sentences.append(
            f"Already reported ({ops}): its dispatch report waits in the inbox and the run "
            "will answer it; make no host call for it."
        )
    blocked = slots.full and any(step.action == "spawn" for step in fresh)
    if blocked:
        sentences.append(
            f"agent thread limit reached ({slots.open} of {slots.limit} open); the step "
            "stays: spawn it once a subagent is closed."
        )
    if any(step.action == "send_input" for step in fresh) and blocked:
        sentences.append("Make each send_input step's host call, then run the command it names.")
    elif fresh and not blocked:
        sentences.append("Make each step's host call, then run the command it names.")
    return sentences


def _state_sentences(state: str, paused_reason: str | None, read: NextRead) -> list[str]:
    if state == "ended" and read.closes:
        return [f"The run is over; close its last subagents: {_close_targets(read)}."]
    if state == "ended":
        return ["The run is over: there is nothing more to do."]
    if state == "paused" and paused_reason == "token_ceiling":
        return [
            "The run reached its workflow's token_ceiling and admits no more calls (a resume "
            f"pauses again at once); read its results with {read.command('status', '--json')} "
            "and start a new run with a higher ceiling for the rest."
        ]
    if state == "paused" and read.host_waiter is not None:
        pid, until = read.host_waiter
        resume = read.command("resume", "--detach")
        again = read.command("next", f"--wait {read.wait:g}" if read.wait > 0 else "--wait 30")
        return [
            f"The run is paused {paused_why(paused_reason)}; its process {pid} waits for the host "
            f"until {until} and goes on by itself when it answers: ask again with {again}, "
            f"which answers when the run's state changes; to go on now instead: {resume}."
        ]
    if state == "paused":
        resume = read.command("resume", "--detach")
        return [f"The run is paused {paused_why(paused_reason)}; go on with: {resume}."]
    if state == "starting":
        return [f"The run is starting: its process is coming up; {_ask_again(read)}."]
    if state == "waiting_decision":
        return [_decision_sentence(read)]
    return []


def _ask_again(read: NextRead) -> str:
    """Ask again at once without --wait; with it, the same --wait, which answers
    when the state changes or it runs out (CMD-NEXT-32)."""
    if read.wait <= 0:
        return f"ask again at once with {read.command('next')}"
    again = read.command("next", f"--wait {read.wait:g}")
    return f"ask again with {again}: it answers when the state changes or --wait runs out"


def _decision_sentence(read: NextRead) -> str:
    """The held calls, each with its reason and the exact command that answers it."""
    answers = "; ".join(
        f"{held['call']} ({held['reason']}): "
        + (
            f"{held['error']}; {held['fix']}"
            if "fix" in held
            else f"{held['answer']['retry']} (or {_others(held)}; see docs/decisions.md)"
        )
        for held in held_calls(read)
    )
    if not can_do_nothing(read):
        return (
            f"A call is held and waits on a decision: {answers}. The run goes on with its "
            "other calls meanwhile; an answer waits for them to end."
        )
    return (
        f"A call is held and waits on a decision: {answers}. Until it is answered the "
        "run can do nothing more and next starts no process for it."
    )


def _others(held: Mapping[str, Any]) -> str:
    """The answers but retry, as flags: `--skip, --abort[, --restart]`."""
    return ", ".join(f"--{choice}" for choice in held["answer"] if choice != "retry")


def held_calls(read: NextRead) -> list[dict[str, Any]]:
    """Each held call: its reason and the command of each answer (retry, skip,
    abort, and restart on the session backend); a spawn the host refused adds the
    host's message and the fix (`crw.engine.held_fix`)."""
    choices = answer_choices(read.run_state.backend)
    return [
        with_fix(
            {
                "call": call.call,
                "reason": call.reason or "held",
                "answer": {
                    choice: read.command("answer", f"{call.call} --{choice}") for choice in choices
                },
            },
            call.error,
        )
        for call in read.run_state.calls.values()
        if call.state == "held"
    ]


def _wait_sentence(agents: Sequence[str], read: NextRead) -> str:
    """Alternate wait_agent on the open subagents (but those closed now) with next."""
    next_wait = read.command("next", f"--wait {NEXT_WAIT_S}")
    if read.run_state.backend != "session":
        return (
            "The run's process makes its calls on the host itself (app-server): there is "
            f"no subagent to wait on; follow it with {next_wait}."
        )
    if not agents:
        return f"Then ask for the next step with {next_wait}."
    if _v2(read):  # any child's update ends it; 10 s at least
        return f"Alternate wait_agent(timeout_ms={WAIT_AGENT_TIMEOUT_MS}) with {next_wait}."
    targets = json.dumps(list(agents))
    return (
        f"Alternate wait_agent(targets={targets}, timeout_ms={WAIT_AGENT_TIMEOUT_MS}) "
        f"with {next_wait}."
    )
