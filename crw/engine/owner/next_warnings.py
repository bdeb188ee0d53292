"""The warnings of `crw flow next` (pure): next records nothing about them.

- the owner's last line is not the holder's (another run's: the owner is bound
  to that run, said as such; another digest's, or none): the spawn hook gives
  the owner's spawns no pair of the run until the run's process, or its next
  process when the run is resumed, binds it (CMD-NEXT-36);
- the role store reads other pairs than the holder pinned: the process runs on
  its pins, a resume takes the store's (CMD-NEXT-37);
- the process next resumed repinned the run (its policy_repinned row): it runs
  on the store as it reads now, not on the earlier process's pins (CMD-NEXT-39).

A starting run is warned about nothing (its holder has pinned nothing yet), and
a run no process holds only about the process next resumed (which may have let
the run go already, paused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crw.engine.config.role_names import ROLES
from crw.engine.owner.next_state import NextRead, binds_owner, is_starting, line_is_holders


def next_warnings(read: NextRead) -> list[str]:
    """The answer's warnings, one line each (empty for a run with no holder)."""
    if read.run_state.state == "ended" or is_starting(read):
        return []
    warnings = []
    if not read.held and read.launch_refused is not None:
        warnings.append(
            f"no process holds run {read.run} and none could start: {read.launch_refused}"
        )
    if read.held and binds_owner(read) and not line_is_holders(read):
        warnings.append(_line_warning(read))
    changed = _changed_roles(read.run_state.role_pairs, read.store_pairs) if read.held else []
    if changed:
        warnings.append(
            f"the role store reads other pairs than run {read.run} pinned ({', '.join(changed)}): "
            "its process runs on its pins; a resume takes the store's and records "
            "policy_repinned"
        )
    if read.resumed_pid is not None and read.run_state.repinned:
        warnings.append(
            f"the process next resumed repinned run {read.run} (policy_repinned): it runs on "
            "the role store as it reads now, not on the pairs the earlier process pinned"
        )
    return warnings


def _line_warning(read: NextRead) -> str:
    line = read.owner_line
    other = line.get("run_id") if line is not None else None
    if line is not None and line.get("kind") == "orchestrator" and other != read.run:
        return _bound_to_other(read, str(other))
    return (
        f"owner thread {read.owner}'s last line is not run {read.run}'s ({_line_is(read)}): "
        "the spawn hook gives the owner's spawns no pair of the run until the run's "
        "process, or its next process when the run is resumed, binds it"
    )


def _bound_to_other(read: NextRead, other: str) -> str:
    """The owner is bound to another run: a thread holds the line of one live run
    (BIND-LINE-22), and the run binds only the subagents its own step messages
    spawned (DISP-25)."""
    return (
        f"owner thread {read.owner} is bound to run {other}, not to run {read.run}: the "
        f"spawn hook gives the owner's spawns run {other}'s pairs, run {read.run}'s too, "
        f"until a process of run {read.run} binds the thread (a thread holds the line of "
        f"one live run: run {read.run}'s next process binds it once run {other} no longer "
        f"lives); run {read.run} binds only the subagents spawned with its own step "
        "messages, which name its packets"
    )


def _line_is(read: NextRead) -> str:
    """What the owner's last line is instead of the holder's."""
    line = read.owner_line
    if line is None:
        return read.owner_line_problem or "it has none"
    run_id = line.get("run_id")
    if line.get("kind") != "orchestrator":
        return f"it closed run {run_id}" if run_id else "it is no orchestrator line"
    return (
        f"it binds the run under policy digest {line.get('policyDigest')}, not "
        f"{read.run_state.policy_digest} that its process pinned"
    )


def _changed_roles(
    pinned: Mapping[str, Any] | None, store: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """The roles whose pair the store reads other than pinned (none when the run
    pinned nothing or the store was not read)."""
    if pinned is None or not store:
        return []
    return [role for role in ROLES if pinned.get(role) != store.get(role)]
