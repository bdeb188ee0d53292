"""Control requests: `crw flow pause` and `crw flow cancel` to the live run process.

The command writes `inbox/<id>.control` (a temporary name, then a rename) and
waits, up to a bound, for the row that answers it: the run's `paused` or
`cancelled` row naming the request (`request: <id>`), as `crw flow dispatched`
waits for its reply. The run process reads the inbox (`RunControl.watch`),
interrupts its calls, writes that row once every call it stopped is held, and
only then removes the request: a process that dies before leaves it for the
resumed process, which stops the same way. Dispatch reports are `<id>.json`
files of the same directory; the inbox actor reads only those.

Blocking functions; the files are a few dozen bytes.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from crw.engine.run.rundir import PRIVATE_DIR, RunDir
from crw.private import write_atomic

Op = Literal["pause", "cancel"]
REASONS: dict[str, str] = {"pause": "paused", "cancel": "cancelled"}
"""The held reason (and run row) each request's op leads to."""

_SUFFIX = ".control"
_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Request:
    """A pause or cancel request of run `run`, made at `requested_at` (RFC 3339)."""

    id: str
    run: str
    op: Op
    requested_at: str

    @property
    def reason(self) -> str:
        return REASONS[self.op]

    @classmethod
    def new(cls, run: str, op: Op, requested_at: str) -> Request:
        return cls(uuid.uuid4().hex, run, op, requested_at)


def request_path(run: RunDir, request_id: str) -> Path:
    if not _ID.fullmatch(request_id):
        raise ValueError(f"{request_id!r} is not a request id")
    return run.inbox / f"{request_id}{_SUFFIX}"


def write_request(run: RunDir, request: Request) -> Path:
    """Write `request` into the run's inbox, atomically.

    Raises:
        OSError: the write failed; no partial request is left.
    """
    path = request_path(run, request.id)
    run.inbox.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    body = (json.dumps(asdict(request)) + "\n").encode()
    write_atomic(path, body, temp=run.inbox / f".{request.id}.control.tmp")
    return path


def read_requests(run: RunDir) -> list[Request]:
    """The run's pending requests, oldest first; a file that is no request of this
    run is skipped (the command that wrote it waits in vain and says so)."""
    try:
        paths = [p for p in run.inbox.iterdir() if p.suffix == _SUFFIX]
    except FileNotFoundError:
        return []
    found = [r for r in map(_read, paths) if r is not None and r.run == run.id]
    return sorted(found, key=lambda r: (r.requested_at, r.id))


def first_request(run: RunDir) -> Request | None:
    """The request the run acts on: a cancel before any pause (a cancel ends what a
    pause would only stop), else the oldest."""
    pending = read_requests(run)
    cancels = [r for r in pending if r.op == "cancel"]
    chosen = cancels or pending
    return chosen[0] if chosen else None


def _read(path: Path) -> Request | None:
    try:
        data = json.loads(path.read_bytes())
        request = Request(
            id=str(data["id"]),
            run=str(data["run"]),
            op=data["op"],
            requested_at=str(data["requested_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if request.op not in REASONS or request.id != path.stem:
        return None
    return request


def remove_request(run: RunDir, request_id: str) -> None:
    """Take the request out of the inbox, once the row answering it is durable."""
    request_path(run, request_id).unlink(missing_ok=True)


def remove_answered(run: RunDir, reason: str) -> None:
    """Take out the requests the run's `reason` row answers: every pause request
    once it paused, every request once it was cancelled."""
    for request in read_requests(run):
        if reason == "cancelled" or request.reason == reason:
            remove_request(run, request.id)
