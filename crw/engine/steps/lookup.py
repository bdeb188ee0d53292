"""The marker lookup (DISP-25, DISP-26): which of the owner's subagents carries a
published spawn step that was never reported, and which others carry a bound
one (its strays).

A subagent spawned, or a repair sent, and never reported is found by the marker
line its turn starts with, and taken only when its first message names the run's
own packet (`crw.engine.steps.bind.carries_step`, `crw.engine.steps.step_match`:
two runs on one owner publish the same markers). Pure: host snapshots in
(`crw.actors.spawn_index` reads them), threads out.
"""

from __future__ import annotations

from collections.abc import Iterable

from crw.engine.config.roles import RolePair
from crw.engine.steps.bind import PublishedStep, carries_step, pair_mismatch
from crw.engine.steps.step_match import find_marker_turn
from crw.host.protocol import Thread


def find_spawned(
    step: PublishedStep, owner: str, threads: Iterable[Thread], pair: RolePair
) -> Thread | None:
    """The owner's subagent that carries the spawn `step` and can be bound (DISP-25).

    `threads` are host snapshots with turns: the subagents whose first message
    carries the step's marker (`crw.actors.spawn_index`), read now. One whose first
    message does not name the step's packet (another run's step of the same
    marker), a closed subagent (notLoaded), one whose pair the bind would refuse and
    one whose parentThreadId is not `owner` are never taken; of several others, the
    earliest created is.
    """
    found = [
        thread
        for thread in _carrying(step, owner, threads)
        if thread.status.type != "notLoaded" and pair_mismatch(pair, thread) is None
    ]
    return found[0] if found else None


def strays(step: PublishedStep, owner: str, bound_id: str, threads: Iterable[Thread]) -> list[str]:
    """The ids of the owner's other open subagents that carry a bound attempt's
    `step`: each gets a close step (a spawn for one step made twice). Another run's
    subagents of the same marker are not the run's to close."""
    return [
        thread.id
        for thread in _carrying(step, owner, threads)
        if thread.id != bound_id and thread.status.type != "notLoaded"
    ]


def _carrying(step: PublishedStep, owner: str, threads: Iterable[Thread]) -> list[Thread]:
    """The owner's subagents with a turn that carries the step (`carries_step`),
    earliest created first."""
    found = [
        thread
        for thread in threads
        if thread.parentThreadId == owner
        and (turn := find_marker_turn(step.marker, thread)) is not None
        and carries_step(step, thread, turn)
    ]
    found.sort(key=lambda thread: (thread.createdAt is None, thread.createdAt or 0))
    return found
