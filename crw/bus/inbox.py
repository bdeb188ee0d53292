"""Dispatch reports and replies (DISP-1, DISP-2).

`crw flow dispatched` writes a report `inbox/<id>.json` (temporary name
`.<id>.tmp`, then a rename) and waits for `replies/<id>.json`. The run process
reads the inbox, writes the reply atomically, and only then removes the report: a
crash between the two answers the same report again with the same reply, since the
decision is a pure function of the rows and the host. The `dispatched` that wrote
the report takes its reply (`take_reply`: read, then removed): no other process
reads it, and the run's end removes only the replies nobody took.

Blocking functions: the run's actors call them from a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Container
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from crw.engine.run.rundir import PRIVATE_DIR, RunDir
from crw.private import write_atomic
from crw.rawfile import read_bytes

log = logging.getLogger("crw.bus")

_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")

_warned: set[tuple[str, int, int]] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class Report:
    """A dispatch report: the owner dispatched `agent_id` (or nothing) for the step
    `call`/t`k`-a`attempt` of run `run` at `reported_at` (RFC 3339). `failed`: the
    host refused the spawn, with this tool output (then `agent_id` is None)."""

    id: str
    run: str
    call: str
    k: int
    attempt: int
    agent_id: str | None
    reported_at: str
    failed: str | None = None

    @classmethod
    def new(
        cls,
        run: str,
        call: str,
        k: int,
        attempt: int,
        agent_id: str | None,
        reported_at: str,
        failed: str | None = None,
    ) -> Report:
        """A report under a fresh id (uuid4 hex)."""
        import uuid  # here: the commands that only read the inbox do not pay for it

        return cls(uuid.uuid4().hex, run, call, k, attempt, agent_id, reported_at, failed)

    def to_json(self) -> dict[str, Any]:
        """The report's members; `failed` only on a report of a failed spawn."""
        # Its members are strings, ints and None: a flat dict, not asdict's deep copy.
        members = {name: getattr(self, name) for name in _MEMBERS}
        if self.failed is None:
            del members["failed"]
        return members

    @classmethod
    def from_json(cls, data: Any) -> Report:
        """The report `data` holds; `agent_id` and `failed` may be null or absent.

        Raises:
            ValueError: not an object with the members, well typed.
        """
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        values: dict[str, Any] = {"agent_id": None, "failed": None} | data
        expected = {"id", "run", "call", "k", "attempt", "agent_id", "reported_at", "failed"}
        if set(values) != expected:
            raise ValueError(f"members {sorted(data)} are not {sorted(expected)}")
        for name, kind in _TYPES.items():
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"{name} is {value!r}")
        if values["failed"] is not None and values["agent_id"] is not None:
            raise ValueError("a report of a failed spawn names no subagent")
        if not _ID.fullmatch(values["id"]):
            raise ValueError(f"id {values['id']!r} is not a report id")
        return cls(**values)


_MEMBERS = tuple(f.name for f in fields(Report))

_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "run": str,
    "call": str,
    "k": int,
    "attempt": int,
    "agent_id": (str, type(None)),
    "reported_at": str,
    "failed": (str, type(None)),
}


def report_path(run: RunDir, report_id: str) -> Path:
    """`inbox/<id>.json`."""
    return run.inbox / f"{_checked(report_id)}.json"


def reply_path(run: RunDir, report_id: str) -> Path:
    """`replies/<id>.json`."""
    return run.replies / f"{_checked(report_id)}.json"


def _checked(report_id: str) -> str:
    if not _ID.fullmatch(report_id):
        raise ValueError(f"{report_id!r} is not a report id")
    return report_id


def _encode(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, ensure_ascii=False) + "\n").encode()


def write_report(run: RunDir, report: Report) -> Path:
    """Write `report` as `inbox/<id>.json`: `.<id>.tmp` first, then a rename.

    Without an fsync: the report is read by the live run, and a power loss that
    takes it ends the `crw flow dispatched` waiting on it too; the resumed run
    finds the subagent it named on the host by the step's marker (ATT-19), as it
    finds one never reported.

    Raises:
        OSError: the write failed; no partial report is left.
    """
    path = report_path(run, report.id)
    _write_in(run.inbox, path, _encode(report.to_json()), f".{report.id}.tmp")
    return path


def _write_in(directory: Path, path: str | Path, data: bytes, temp: str) -> None:
    """`write_atomic` without an fsync into `directory`, which is made only when the
    write cannot open its file there, not at every report or reply. A `directory`
    that is not one fails as it did with a `mkdir` first: its EEXIST, naming it."""
    temp_path = os.path.join(directory, temp)
    try:
        write_atomic(path, data, temp=temp_path, durable=False)
    except (FileNotFoundError, NotADirectoryError):
        directory.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        write_atomic(path, data, temp=temp_path, durable=False)


def read_reports(run: RunDir, skip: Container[str] = ()) -> list[Report]:
    """The reports in the inbox, oldest first (by reported_at, then id), but those
    whose id is in `skip` (the run's inbox skips those it handed out: they are
    not read again while their call holds them).

    A file that is no report (bad JSON, other members, an id that is not its
    name) is skipped and logged once as a warning; it never stops the run.
    """
    try:
        names = os.listdir(run.inbox)
    except FileNotFoundError:
        return []
    ids = (name[: -len(".json")] for name in names if name.endswith(".json"))
    paths = [run.inbox / f"{i}.json" for i in ids if i not in skip and _ID.fullmatch(i)]
    reports = [report for report in map(_read_report, paths) if report is not None]
    return sorted(reports, key=lambda r: (r.reported_at, r.id))


def _read_report(path: Path) -> Report | None:
    try:
        text = read_bytes(path)  # in the loop's thread: four syscalls, not nine
        report = Report.from_json(json.loads(text))
        if report.id != path.stem:
            raise ValueError(f"its id {report.id} is not its name")
    except FileNotFoundError:  # answered and removed since the listing
        return None
    except (OSError, ValueError) as err:
        _warn_once(path, err)
        return None
    return report


def _warn_once(path: Path, err: Exception) -> None:
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = (str(path), 0, 0)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("skipping dispatch report %s: %s; remove or rewrite it", path, err)


def write_reply(run: RunDir, reply: dict[str, Any]) -> None:
    """Write `reply` as `replies/<id>.json` atomically, then remove its report.

    Without an fsync: the reply is read by a live `crw flow dispatched`, which a
    power loss ends too, and the rows it answers from are durable before it, so
    a report whose reply a power loss took is answered again from them.

    Raises:
        OSError: the write failed; the report stays, to be answered again.
        ValueError: `reply["id"]` is not a report id.
    """
    report_id = reply["id"]
    if not isinstance(report_id, str):
        raise ValueError(f"reply id {report_id!r} is not a report id")
    path = os.path.join(run.replies, f"{_checked(report_id)}.json")  # no path object
    _write_in(run.replies, path, _encode(reply), f".{report_id}.tmp")
    remove_report(run, report_id)


def remove_report(run: RunDir, report_id: str) -> None:
    """Remove `inbox/<id>.json`, if present."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run.inbox, f"{_checked(report_id)}.json"))


def take_reply(run: RunDir, report_id: str) -> dict[str, Any] | None:
    """`read_reply`, and a reply read is removed: only the `crw flow dispatched`
    that wrote the report reads it (its id is fresh), so a reply lives for
    milliseconds, not until the run's end. On ext4 without a journal a create
    scans past every inode of its block group freed within the last minutes once
    it was written back, so the thousands of replies a long run kept and removed
    at its end slowed every create of the next run there (bench/scale.py's session
    run of 1,000 calls right after one of 10,000: the reply's create 12 times
    slower). A reply that cannot be removed stays, for the run's end
    (`crw.bus.ended`)."""
    reply = read_reply(run, report_id)
    if reply is not None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(run.replies, f"{report_id}.json"))
    return reply


def read_reply(run: RunDir, report_id: str) -> dict[str, Any] | None:
    """The reply to report `report_id`, or None while there is none (or it cannot
    be read as a JSON object)."""
    try:  # raw (four syscalls), its path joined as a string: dispatched looks twice a report
        value = json.loads(read_bytes(os.path.join(run.replies, f"{_checked(report_id)}.json")))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
