"""Flow evidence records: which directories a call's rows name, and the record.

A gated executor role's call (an executor or executor-t1 call of a node with a
review gate, its fix calls included) in a run with an evidence cwd (the
workflow's `evidence_cwd`) has a flow evidence record: a small JSON file the
stop hook of the subagent's session claims its receipt from, at
`<cwd>/.crw/evidence/<run>/<call>.json` under each directory the call's rows
name (docs/workspaces.md, Evidence records).

Each copy is named by a row before it is written (intent before effect):

- a spawn step's step_published names, in evidence_cwds, the directories the
  rows of the call's newest generation (its rows from the newest prepared on)
  named before it, where the record was written before the row; after the row
  the step writer rewrites each copy with the step's record. evidence_ignored
  names the directories only an older generation's rows name: the step writes
  no copy there, and a bind there places one anew.
- a bind whose host cwd no row of the newest generation names commits
  evidence_placed for it, then writes the record there, then thread_started
  with evidence_cwd.

So the release of a superseded call, the restore of a resumed one and the
release at the run's end find every copy from the rows alone (`copies`,
`restore`, `run_copies`). The decisions here are pure;
`write_record` and `remove_record` are the only file effects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.engine.config.role_names import WRITING_ROLES
from crw.journal.rows import EvidencePlaced
from crw.private import make_dirs, write_atomic

Row = Mapping[str, Any]

RECORD_DIR = Path(".crw") / "evidence"
"""Where under a cwd the records of every run lie: `<RECORD_DIR>/<run>/<call>.json`."""


def gated(role: str, review: object | None) -> bool:
    """A gated executor role: an executor role of a node whose work passes a
    review gate (`review = {...}`)."""
    return role in WRITING_ROLES and review is not None


def assignment(
    *,
    run: str,
    call: str,
    node: str,
    role: str,
    step: Row,
    gate: Mapping[str, Any],
) -> dict[str, Any]:
    """The flow evidence record of a spawn `step` (its step_published fields)."""
    return {
        "run": run,
        "call": call,
        "node": node,
        "role": role,
        "op": step.get("op"),
        "marker": step.get("marker"),
        "attempt": step.get("attempt"),
        "k": step.get("k"),
        "workspace": step.get("workspace"),
        "gate": dict(gate),
    }


def generation(rows: Sequence[Row]) -> Sequence[Row]:
    """The call's newest generation: its rows from the newest prepared on (all
    of them when it has none)."""
    for index in range(len(rows) - 1, -1, -1):
        if rows[index].get("row") == "prepared":
            return rows[index:]
    return rows


def named_cwds(rows: Iterable[Row]) -> list[str]:
    """The directories `rows` name as holding a copy, each once, first first:
    step_published's evidence_cwds, evidence_placed's and thread_started's
    evidence_cwd."""
    named: dict[str, None] = {}
    for row in rows:
        kind = row.get("row")
        if kind == "step_published":
            named.update(dict.fromkeys(str(cwd) for cwd in row.get("evidence_cwds") or ()))
        elif kind in ("evidence_placed", "thread_started") and row.get("evidence_cwd"):
            named[str(row["evidence_cwd"])] = None
    return list(named)


def step_fields(
    rows: Sequence[Row], record: dict[str, Any], *, new_generation: bool = False
) -> dict[str, Any]:
    """The evidence members of a spawn step's step_published, published after the
    call's `rows` (`new_generation`: a prepared row is committed with the step,
    so none of `rows` is of its generation)."""
    newest = [] if new_generation else generation(rows)
    cwds = named_cwds(newest)
    older = rows if new_generation else rows[: len(rows) - len(newest)]
    ignored = [cwd for cwd in named_cwds(older) if cwd not in cwds]
    return {"evidence_assignment": record, "evidence_cwds": cwds, "evidence_ignored": ignored}


@dataclass(frozen=True)
class Placement:
    """Where a bind writes the step's record: `cwd`, and the evidence_placed row
    to commit first when no row of the newest generation names it (else None)."""

    cwd: str
    record: dict[str, Any]
    placed: EvidencePlaced | None


def placement(
    rows: Sequence[Row], step: Row, host_cwd: str | None, fallback: str | None
) -> Placement | None:
    """The bind's placement of `step`'s record under the subagent's `host_cwd`
    (`fallback`, the run's evidence cwd, when the host reports none); None for a
    step with no record, or no cwd to place it under. `rows` are the call's rows,
    `step` among them."""
    record = step.get("evidence_assignment")
    cwd = host_cwd or fallback
    if not record or not cwd:
        return None
    if cwd in named_cwds(generation(rows)):
        return Placement(cwd, dict(record), None)
    placed = EvidencePlaced(
        call=step.get("call"),
        evidence_assignment=dict(record),
        evidence_cwd=cwd,
        attempt=step.get("attempt"),
        marker=step.get("marker"),
    )
    return Placement(cwd, dict(record), placed)


def record_path(cwd: str, run: str, call: str) -> Path:
    """The copy of `call`'s record under `cwd`."""
    return Path(cwd) / RECORD_DIR / run / f"{call}.json"


def newest_record(rows: Iterable[Row]) -> dict[str, Any] | None:
    """The record of the call's newest step that has one."""
    record: dict[str, Any] | None = None
    for row in rows:
        if row.get("row") == "step_published" and row.get("evidence_assignment"):
            record = dict(row["evidence_assignment"])
    return record


def copies(rows: Sequence[Row], run: str, call: str) -> list[Path]:
    """Every copy of `call`'s record its rows name, every generation's: what the
    release of a superseded or prepared-again call removes."""
    return [record_path(cwd, run, call) for cwd in named_cwds(rows)]


def run_copies(rows: Iterable[Row], run: str) -> list[Path]:
    """Every copy the rows of a run name, of every call: what the end of the run
    releases."""
    by_call: dict[str, list[Row]] = {}
    for row in rows:
        call = row.get("call")
        if isinstance(call, str) and row.get("row") in _NAMING:
            by_call.setdefault(call, []).append(row)
    return [path for call, named in by_call.items() for path in copies(named, run, call)]


_NAMING = frozenset({"step_published", "evidence_placed", "thread_started"})
"""The rows that name a copy's directory."""


@dataclass(frozen=True)
class Restore:
    """A resumed call's copies: `write` each path with `record` (the newest
    generation's), `remove` those only an older generation names."""

    record: dict[str, Any] | None
    write: list[Path]
    remove: list[Path]


def restore(rows: Sequence[Row], run: str, call: str) -> Restore:
    """What the restore of a resumed call does: every copy its newest
    generation's rows name holds its newest step's record again (a process
    killed after evidence_placed, before or while writing, left it missing or
    partial), and a copy only an older generation names is released."""
    newest = generation(rows)
    record = newest_record(newest)
    keep = named_cwds(newest) if record is not None else []
    older = named_cwds(rows[: len(rows) - len(newest)])
    return Restore(
        record,
        [record_path(cwd, run, call) for cwd in keep],
        [record_path(cwd, run, call) for cwd in older if cwd not in keep],
    )


def record_text(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


IGNORE_ALL = b"*\n"
"""`.crw/evidence/.gitignore`: git ignores every record, and the file itself, so a
copy in a checkout (the owner's, or P) is in no status, no trace digest and no
pending tree."""


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    """Write the record at `path` (`record_path`), its directories and the
    evidence directory's `.gitignore` made as needed.

    Raises:
        OSError: it cannot be placed there (the cwd not writable, a file in the way).
    """
    make_dirs(path.parent)
    ignore = path.parent.parent / ".gitignore"
    if not ignore.exists():
        write_atomic(ignore, IGNORE_ALL)
    write_atomic(path, record_text(record))


def remove_record(path: Path) -> None:
    """Remove the copy at `path` (`record_path`) if it is there, then what it
    leaves empty: its run's directory, then `.crw/evidence` (with its
    `.gitignore`) and `.crw`. A file that cannot be removed stays."""
    evidence_dir = path.parent.parent
    try:
        path.unlink(missing_ok=True)
        os.rmdir(path.parent)
        if [entry.name for entry in os.scandir(evidence_dir)] != [".gitignore"]:
            return
        (evidence_dir / ".gitignore").unlink()
        os.rmdir(evidence_dir)
        os.rmdir(evidence_dir.parent)
    except OSError:
        return
