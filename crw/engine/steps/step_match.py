"""Whose step a subagent's message carries: its marker, and the run its packet names.

The marker line `crw-flow-op: <call>/t<k>-a<n>` names a step but no run, and two
session runs on one owner thread publish the same markers (`explore.1/t1-a1` in
both). The spawn message names the run's own packet,
`<state>/flow/<run>/steps/<call>/packet-t<k>-a<n>.md` (session-calls.md, "The
step"), so a subagent is a run's only when its first message names a packet of that
run, and a spawn step's only when it names that step's packet: the marker alone
never binds a subagent (DISP-25, DISP-26, DISP-3..5). The run is told by its
directory's name in the path, so a state directory spelled another way (a
relative --state) names the same run.

Pure: message texts and host snapshots in, markers, runs and verdicts out.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from crw.engine.steps.packet import MARKER_PREFIX
from crw.host.protocol import Thread, Turn, UserMessage

_PACKET = re.compile(r"^Read the task packet (.+?) in full and follow it exactly\.", re.MULTILINE)
"""The packet's path runs to the sentence's end: a state directory may hold a space."""


def marker_of(text: str | None) -> str | None:
    """The marker a text's first line names (`crw-flow-op: <marker>`), else None."""
    if not text:
        return None
    first = text.split("\n", 1)[0].rstrip()
    if not first.startswith(MARKER_PREFIX):
        return None
    return first[len(MARKER_PREFIX) :].strip() or None


def first_message(turn: Turn) -> str | None:
    """The text of a turn's first user message (None: it shows none)."""
    for item in turn.items:
        if isinstance(item, UserMessage):
            return item.first_text()
    return None


def turn_marker(turn: Turn) -> str | None:
    """The marker of a turn: its first user message's first text (DISP-4)."""
    return marker_of(first_message(turn))


def spawn_marker(thread: Thread) -> tuple[bool, str | None]:
    """Whether the subagent's first message shows yet, and the marker it carries
    (None: none). A spawn step's marker is its subagent's first message (DISP-25)."""
    first = thread.turns[0] if thread.turns else None
    if first is None or not any(isinstance(item, UserMessage) for item in first.items):
        return False, None
    return True, turn_marker(first)


def find_marker_turn(marker: str, thread: Thread) -> Turn | None:
    """The first turn of `thread` whose first user message carries `marker`
    (DISP-26 for a send_input step; the bind's check for every step)."""
    return next((turn for turn in thread.turns if turn_marker(turn) == marker), None)


def packet_key(path: str | None) -> tuple[str, ...] | None:
    """A packet path's run, `steps`, call and file name (None: not a step's packet)."""
    if not path:
        return None
    parts = PurePosixPath(path).parts
    if len(parts) < 4 or parts[-3] != "steps" or not parts[-1].startswith("packet-"):
        return None
    return tuple(parts[-4:])


def named_packet(text: str | None) -> tuple[str, ...] | None:
    """The key of the packet a spawn message names (`Read the task packet P in full`)."""
    found = _PACKET.search(text or "")
    return packet_key(found.group(1)) if found else None


def carries(text: str | None, run: str, packet: str | None) -> bool:
    """Whether a subagent's first message `text` carries a step of `run` (the run's
    directory name): it names a packet of `run`, and `packet`'s itself when the step
    is a spawn (`packet` None: a send_input, whose subagent a spawn of the run made)."""
    named = named_packet(text)
    if named is None or named[0] != run:
        return False
    return packet is None or named == packet_key(packet)


def thread_carries(thread: Thread, run: str, packet: str | None) -> bool:
    """`carries` for the subagent's first message as the host shows it."""
    return bool(thread.turns) and carries(first_message(thread.turns[0]), run, packet)


def other_run(thread: Thread, run: str) -> str | None:
    """Why the subagent is not `run`'s to bind, when its first message names a packet
    of another run: "the subagent carries run X's step". None: no other run's."""
    named = named_packet(first_message(thread.turns[0])) if thread.turns else None
    if named is None or named[0] == run:
        return None
    return f"the subagent carries run {named[0]}'s step"


def not_the_steps(run: str, marker: str) -> str:
    """Why a subagent whose turn carries `marker` is not the step's: its first
    message names no packet of `run`, or another step's."""
    return (
        f"the subagent's first message does not name run {run}'s packet of step {marker}: "
        "close it and spawn again with the step's message"
    )
