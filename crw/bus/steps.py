"""The step files of the file step bus (engine.FileStepBus, STEP-21, STEP-22, STEP-28).

The run process writes a step after its step_published row is durable: the packet
`steps/<call>/packet-t<k>-a<n>.md` first, then the step file
`steps/<call>/t<k>-a<n>.json`. A close step is `steps/<call>/close-a<n>-<agent>.json`,
one file per subagent (STEP-29). Each file is written atomically (`write_atomic`), so
a reader sees a whole file or none.

Neither is synced, nor is the directory that holds them: the row that announces a
step is durable before its files exist, and a process that takes the run again
makes the files of a step no subagent was bound to again from that row (the
packet, when it is not whole, first: `packet_whole`; then both, ATT-21), so a power
loss that takes them, or leaves a packet torn, costs a rewrite, never a step. A
packet a later call's packet names (a reviewed node's, whose fix calls continue
it) is the exception: it is synced, directory entries and all (`durable`), since
nothing rewrites the packet of a call that ended.

These are blocking functions, each a few syscalls when not durable: the run's
actors call those in the event loop's thread, and a durable write from a worker
thread. A write that fails raises OSError and leaves no partial file; the caller
records step_unwritten (crw/bus/unwritten.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from crw.bus import live
from crw.engine.run.rundir import PRIVATE_DIR, RunDir
from crw.engine.steps.markers import marker, op

# The step file's and the close step's members are the engine's (its views read
# them); the bus writes and reads the files, and names the types for its callers.
from crw.engine.steps.step_file import CloseStep as CloseStep
from crw.engine.steps.step_file import StepFile as StepFile
from crw.private import fsync_dir, write_atomic
from crw.rawfile import read_bytes, read_stat

log = logging.getLogger("crw.bus")

T = TypeVar("T")

_STEP_NAME = re.compile(r"t(\d+)-a(\d+)\.json")
_CLOSE_NAME = re.compile(r"close-a(\d+)-(.+)\.json")
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _call_dir(run: RunDir, call: str) -> str:
    if not _SEGMENT.fullmatch(call):
        raise ValueError(f"call {call!r} is not one path segment")
    return os.path.join(run.steps, call)


def step_paths(run: RunDir, call: str, k: int, attempt: int) -> tuple[Path, Path]:
    """The packet's path and the step file's path of `marker(call, k, attempt)`."""
    packet, step = _step_paths(run, call, k, attempt)
    return Path(packet), Path(step)


def _step_paths(run: RunDir, call: str, k: int, attempt: int) -> tuple[str, str]:
    """`step_paths` as strings: what the writes open."""
    directory = _call_dir(run, call)
    return (
        os.path.join(directory, f"packet-t{k}-a{attempt}.md"),
        os.path.join(directory, f"t{k}-a{attempt}.json"),
    )


def close_path(run: RunDir, call: str, attempt: int, agent_id: str) -> Path:
    """The file of the close step of `agent_id` in `call`'s attempt `attempt`."""
    return Path(_close_path(run, call, attempt, agent_id))


def _close_path(run: RunDir, call: str, attempt: int, agent_id: str) -> str:
    if not _SEGMENT.fullmatch(agent_id):
        raise ValueError(f"agent id {agent_id!r} is not one path segment")
    return os.path.join(_call_dir(run, call), f"close-a{attempt}-{agent_id}.json")


def _ensure_dir(directory: str, *, durable: bool) -> None:
    """Make a call's directory unless it is there, its entry durable when
    `durable`: one `mkdir` a write (no stat first, nor of its parent, which the
    run made)."""
    try:
        os.mkdir(directory, PRIVATE_DIR)
    except FileExistsError:
        return
    except FileNotFoundError:  # steps/ itself is gone: made again, as a run makes it
        os.makedirs(directory, mode=PRIVATE_DIR, exist_ok=True)
    if durable:
        fsync_dir(os.path.dirname(directory))


def _encode(value: dict[str, Any]) -> bytes:
    """`value` as `json.dumps(value, ensure_ascii=False, indent=2)` writes it, and a
    newline. A step or close file's members are strings, integers and nulls: each
    is written here (a string by json's C escaper) and the lines joined, the same
    bytes, where `indent` makes json encode the object in Python (which was a step
    file's largest cost); anything else is left to json."""
    lines = []
    for key, member in value.items():
        if isinstance(member, str):
            text = _quote(member)
        elif member is None:
            text = "null"
        elif type(member) is int:
            text = int.__repr__(member)
        else:
            return (json.dumps(value, ensure_ascii=False, indent=2) + "\n").encode()
        lines.append(f"  {_quote(key)}: {text}")
    if not lines:
        return b"{}\n"
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode()


_quote: Callable[[str], str] = json.encoder.encode_basestring
"""A JSON string as json writes it with ensure_ascii=False (its C escaper)."""


def write_step(
    run: RunDir, step: StepFile, packet_text: str | None, *, durable: bool = False
) -> None:
    """Write the step's packet, then its step file, each atomically (STEP-21):
    `write_packet`, then `write_step_file`.

    `step.packet` is meant to be the packet path `step_paths` names; a step
    without a packet (a send_input: its message is all it says) passes None.

    Nothing is synced unless `durable` (the packet then, before the step file is
    there: a later packet, a continuation's, names it): a process that dies, or a
    power loss, before its step is bound leaves a step its resumed process
    writes again from its row, files and all (ATT-21), and a bound step's file
    is retracted.

    Raises:
        OSError: a write failed. The step file is then absent (STEP-30); the
            packet may be there, which is harmless: nobody reads it without the file.
        ValueError: the call id is not one path segment, or op or marker disagree
            with call, k and attempt.
    """
    write_packet(run, step, packet_text, durable=durable)
    write_step_file(run, step)


def write_packet(
    run: RunDir, step: StepFile, packet_text: str | None, *, durable: bool = False
) -> None:
    """The first half of `write_step`: the call's directory and the step's packet
    (None: no packet), atomically; synced, the directory's entries too, when
    `durable` (which keeps it off an event loop's thread).

    Raises:
        OSError: a write failed; the step file must not be written.
        ValueError: as `write_step` says.
    """
    if step.op != op(step.call, step.k) or step.marker != marker(step.call, step.k, step.attempt):
        raise ValueError(f"op {step.op!r} or marker {step.marker!r} is not the step's")
    packet_path, _ = _step_paths(run, step.call, step.k, step.attempt)
    # Not marked in the live index: a packet is no step, and a reader would list the
    # call's directory for nothing while the packet is written (`write_step_file` marks).
    _ensure_dir(os.path.dirname(packet_path), durable=durable)
    if packet_text is not None:
        write_atomic(packet_path, packet_text.encode(), durable=durable)


def packet_whole(run: RunDir, call: str, k: int, attempt: int, packet_digest: str) -> bool:
    """Whether the packet of `marker(call, k, attempt)` is there with the text its
    row's `packet_digest` names (a power loss may take an unsynced packet, or
    leave it torn, while its step file survives). Imports the answer's digest
    only here, at a resume: the commands that read the bus never load jsonschema."""
    packet_path, _ = _step_paths(run, call, k, attempt)
    try:
        text = read_bytes(packet_path).decode()
    except (OSError, UnicodeDecodeError):
        return False
    from crw.engine.answers.answer import digest

    return digest(text) == packet_digest


def write_step_file(run: RunDir, step: StepFile) -> None:
    """The second half of `write_step`, after `write_packet`: the step file,
    atomically and not synced (no fsync: cheap enough for an event loop's thread).
    The call is marked in the live index first (the packet's write leaves it as
    it was: a directory that holds only packets is no reader's to list).

    Raises:
        OSError: the write failed; no step file is left.
    """
    _, step_path = _step_paths(run, step.call, step.k, step.attempt)
    with live.writing(run, step.call, os.path.basename(step_path)):
        write_atomic(step_path, _encode(step.to_json()), durable=False)


def retract_torn(run: RunDir, published: Iterable[Mapping[str, Any]]) -> list[str]:
    """Retract the step file of each of the `published` step rows (each a spawn
    step bound to no subagent, `crw.engine.steps.unbound`) whose packet is not
    whole, so no subagent is spawned on a packet a power loss took or tore; the
    markers of those retracted, in order."""
    retracted = []
    for row in published:
        call, k, attempt = str(row["call"]), int(row["k"]), int(row["attempt"])
        if not packet_whole(run, call, k, attempt, str(row["packet_digest"])):
            retract_step(run, call, k, attempt)
            retracted.append(str(row["marker"]))
    return retracted


def retract_step(run: RunDir, call: str, k: int, attempt: int) -> None:
    """Remove the step file, if present; the packet stays."""
    _, step_path = _step_paths(run, call, k, attempt)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(step_path)
    live.settle(run, call, os.path.basename(step_path))


def write_close(
    run: RunDir, call: str, attempt: int, agent_id: str, *, durable: bool = True
) -> None:
    """Write the close step of `agent_id` (STEP-28), atomically; with `durable`
    False without an fsync (a close a resumed process publishes again when a power
    loss takes it: the one after a call's terminal row, `close_left_open`).

    Raises:
        OSError: the write failed; no partial file is left.
        ValueError: the call or agent id is not one path segment.
    """
    path = _close_path(run, call, attempt, agent_id)
    data = _encode(CloseStep(call, attempt, agent_id).to_json())
    with live.writing(run, call, os.path.basename(path), close=True):
        try:  # the call's directory is there: its step was written in it
            write_atomic(path, data, durable=durable)
        except FileNotFoundError:  # no step of the call was ever written
            _ensure_dir(os.path.dirname(path), durable=durable)
            write_atomic(path, data, durable=durable)


def remove_close(run: RunDir, call: str, attempt: int, agent_id: str) -> None:
    """Remove the close step of `agent_id`, if present (its path joined as a string:
    `next` removes every close step it hands out, one a call)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_close_path(run, call, attempt, agent_id))


def list_steps(run: RunDir) -> list[StepFile]:
    """The step files under steps/, by call, k and attempt (`list_bus`'s first)."""
    return list_bus(run)[0]


def list_closes(run: RunDir) -> list[CloseStep]:
    """The close steps under steps/, by call, attempt and agent (`list_bus`'s second)."""
    return list_bus(run)[1]


def list_bus(run: RunDir) -> tuple[list[StepFile], list[CloseStep]]:
    """The step files, by call, k and attempt, and the close steps, by call,
    attempt and agent (`read_bus`'s, without the times)."""
    bus = read_bus(run)
    return bus.steps, bus.closes


@dataclass(frozen=True)
class Bus:
    """What one read of the bus found: the step files, by call, k and attempt;
    the close steps, by call, attempt and agent; each step file's mtime (ns), by
    (call, k, attempt), as the file it was read from has it."""

    steps: list[StepFile]
    closes: list[CloseStep]
    times: dict[tuple[str, int, int], int]


def read_bus(run: RunDir) -> Bus:
    """The bus, from one listing of each call directory that may hold a step or
    close step (`_files`), each file opened once (its mtime from the open file,
    not a stat of its path). A file that cannot be read, or whose members
    disagree with its path, is skipped."""
    steps: list[StepFile] = []
    closes: list[CloseStep] = []
    times: dict[tuple[str, int, int], int] = {}
    for directory, name in _files(run):
        if _STEP_NAME.fullmatch(name):
            step = _read(directory, name, StepFile.from_json, _is_step_file)
            if step is not None:
                steps.append(step[0])
                times[(step[0].call, step[0].k, step[0].attempt)] = step[1]
        elif _CLOSE_NAME.fullmatch(name):
            close = _read(directory, name, CloseStep.from_json, _is_close_file)
            if close is not None:
                closes.append(close[0])
    steps.sort(key=lambda s: (s.call, s.k, s.attempt))
    closes.sort(key=lambda c: (c.call, c.attempt, c.agent_id))
    return Bus(steps, closes, times)


def _is_step_file(step: StepFile, call: str, name: str) -> bool:
    """Whether `step` is the one `step_paths` puts at `<call>/<name>`."""
    return (
        step.call == call
        and _SEGMENT.fullmatch(call) is not None
        and name == f"t{step.k}-a{step.attempt}.json"
    )


def _is_close_file(close: CloseStep, call: str, name: str) -> bool:
    """Whether `close` is the one `close_path` puts at `<call>/<name>`."""
    return (
        close.call == call
        and _SEGMENT.fullmatch(call) is not None
        and _SEGMENT.fullmatch(close.agent_id) is not None
        and name == f"close-a{close.attempt}-{close.agent_id}.json"
    )


def _files(run: RunDir) -> list[tuple[str, str]]:
    """The files (directory, name) of the call directories under steps/ that may
    hold a step or close step: those the holding process's index marks
    (`crw.bus.live`), or an ended run's index, else every one; each listed once."""
    calls = live.live_calls(run)
    if calls is None:
        calls = live.ended_calls(run)
    if calls is None:
        calls = live.call_dirs(run.steps)
    files: list[tuple[str, str]] = []
    for call in calls:
        try:
            names = os.listdir(call)
        except (FileNotFoundError, NotADirectoryError):  # a call's directory just went
            continue
        files.extend((call, name) for name in names if name.endswith(".json"))
    return files


def _read(
    directory: str,
    name: str,
    parse: Callable[[Any], T],
    belongs: Callable[[T, str, str], bool],
) -> tuple[T, int] | None:
    """The file's value and its mtime (ns), or None when it cannot be read or its
    members name another file (`belongs(value, call, name)` is False)."""
    path = os.path.join(directory, name)
    try:
        data, stat = read_stat(path)  # four syscalls, not a buffered open's eleven
        value = parse(json.loads(data))
        if not belongs(value, os.path.basename(directory), name):
            raise ValueError("its members name another file")
    except (OSError, ValueError) as err:
        log.debug("skipping step file %s: %s", path, err)
        return None
    return value, stat.st_mtime_ns
