"""One call of a run, whole: what `crw flow call` prints and the web view's call page shows.

Pure: the call's state as the run's replay leaves it (`CallState`, from the
replay snapshot), the call's rows (only its own, in journal order: the rows that
name it, the session wakes and escalations whose ops name its steps and the
deliveries of those wakes), and what the caller read beside them (each packet
file's text, the schema the answer was checked against, the commit's changed
files, the host's transcript) in; a frozen `CallDetail` out, `to_json()` its
JSON. It reads no file and asks no host.

Its state and reason are status's (`crw flow status`): a held call's reason, the
answer commands and the fix (`held_fix`), a null_model call's schema errors, a
review call's verdict and how many findings it names. Its attempts, turns, steps
and repairs: `crw.engine.views.call_turns`. Every row of the call is in `rows`,
each with the line `crw flow show` prints for it (`row_lines`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from crw.engine.held_fix import held_entry, with_fix
from crw.engine.views.call_turns import AttemptView, RepairView, attempts, repairs
from crw.engine.views.row_lines import row_detail
from crw.engine.views.run_view import seconds_between
from crw.journal.replay import CallState

Row = Mapping[str, Any]

NOTE_ROWS = frozenset(
    {
        "reused",
        "interrupt_requested",
        "decision",
        "evidence_placed",
        "checkpoint_started",
        "tokens_unmeasured",
        "session_host_warning",
        "step_unwritten",
        "read_role_wrote",
        "executor_wrote_outside",
        "shared_state_changed",
        "session_wake",
        "message_delivery",
        "escalation",
    }
)
"""The rows that are neither a step, a bind, a turn nor an end: shown as notes."""


@dataclass(frozen=True)
class SchemaView:
    """The JSON Schema the call's answer is checked against (the caller finds it)."""

    source: str
    """`file` (the node's schema file), `inline` (in the workflow file), `review`
    (crw's verdict schema of a review call) or `unknown` (not found)."""
    path: str | None
    """The schema file, or the workflow file that holds it inline."""
    schema: Any
    note: str | None
    """Why it may not be the schema the run used (the workflow file changed since)."""


@dataclass(frozen=True)
class ChangedFile:
    path: str
    status: str
    """added, deleted, modified, renamed, … (git's delta status, in words)."""


@dataclass(frozen=True)
class WorkspaceView:
    path: str | None
    kind: str | None
    """The placer's mode: worktree, checkout, scratch or directory."""
    start_commit: str | None
    branch: str | None
    commit: dict[str, Any] | None
    """crw.commit: the call's `crw_commit` row's fields (commit, tree, start, head,
    head_ref, when, node_ref, node_old)."""
    pending_tree: str | None
    head_moved: dict[str, Any] | None
    """The completed row's `executor_head_moved` {start, head, ref}."""
    changed_files: tuple[ChangedFile, ...] | None
    """The files crw.commit changed from its parent (None: not read)."""
    changed_error: str | None
    """Why the changed files are not shown, when there is a commit."""


@dataclass(frozen=True)
class AnswerView:
    """The answer that passed (a completed row), or a rejecting review's (held)."""

    result: Any
    result_digest: str | None
    raw_text: str | None
    """The message, when the result was taken out of prose."""
    extracted: bool
    attempt: int | None
    k: int | None
    at: str | None


@dataclass(frozen=True)
class TranscriptItem:
    type: str
    text: str


@dataclass(frozen=True)
class TranscriptView:
    """The host's items of one turn (`thread/read`), or why the host gave none."""

    thread_id: str | None
    turn_id: str | None
    status: str | None
    items: tuple[TranscriptItem, ...]
    error: str | None


@dataclass(frozen=True)
class RowEntry:
    seq: int | None
    at: str | None
    kind: str
    call: str | None
    detail: str
    """The row's key fields in words, as `crw flow show` prints them."""


@dataclass(frozen=True)
class CallDetail:
    run: str
    call: str
    node: str | None
    role: str | None
    backend: str | None
    state: str
    reason: str | None
    error: str | None
    fix: str | None
    answer_commands: dict[str, str] | None
    """A held call of a run not ended: each answer's command (retry, skip, ...)."""
    errors: tuple[str, ...] | None
    """A null_model call's schema errors (answer_too_large: its size and the cap)."""
    review: dict[str, Any] | None
    """A review call's {of, verdict, findings}, once it answered."""
    reviews: str | None
    """The call whose answer it judges (its prepared row's `review`)."""
    resume: str | None
    """A fix call: the call whose conversation it goes on from."""
    by: str | None
    """The call that runs its node again (a restart)."""
    started_at: str | None
    ended_at: str | None
    seconds: float | None
    attempt: int
    turns: int
    tokens: dict[str, int]
    """The call's tokens by part, as its terminal rows counted them."""
    attempts: tuple[AttemptView, ...]
    repairs: tuple[RepairView, ...]
    answer: AnswerView | None
    schema: SchemaView | None
    workspace: WorkspaceView
    transcript: TranscriptView | None
    notes: tuple[RowEntry, ...]
    """Interrupts, decisions, warnings, wakes, evidence: the rows of `NOTE_ROWS`."""
    rows: tuple[RowEntry, ...]
    """Every row of the call, in journal order."""

    def to_json(self) -> dict[str, Any]:
        """The view as JSON: every field by its name, nested records as objects."""
        return dataclasses.asdict(self)


def call_detail(
    run: str,
    state: CallState,
    rows: Sequence[Row],
    *,
    backend: str | None,
    run_ended: bool,
    state_ref: str = "",
    judged: str | None = None,
    packets: Mapping[str, str | OSError] | None = None,
    schema: SchemaView | None = None,
    changed: tuple[ChangedFile, ...] | str | None = None,
    transcript: TranscriptView | None = None,
    now: datetime | None = None,
) -> CallDetail:
    """The view of call `state.call` of `run`. `judged`: the call a review call
    judges, as status finds it (`counts.reviews`); `changed`: crw.commit's changed
    files, or why they could not be read; `state_ref`: the --state the answer
    commands pass (empty: none)."""
    prepared = next((row for row in rows if row.get("row") == "prepared"), {})
    held: dict[str, Any] = {}
    if state.state == "held" and not run_ended:
        held = with_fix(held_entry(run, state.call, state.reason, state_ref, backend), state.error)
    review = None
    if judged is not None and state.verdict is not None:
        review = {"of": judged, "verdict": state.verdict, "findings": state.findings}
    tried = attempts(rows, packets or {}, now)
    return CallDetail(
        run=run,
        call=state.call,
        node=state.node,
        role=state.role,
        backend=state.backend or backend,
        state=state.state,
        reason=held.get("reason", state.reason),
        error=state.error,
        fix=held.get("fix"),
        answer_commands=held.get("answer"),
        errors=tuple(state.errors) if state.errors is not None else None,
        review=review,
        reviews=prepared.get("review"),
        resume=prepared.get("resume"),
        by=state.by,
        started_at=state.started_at,
        ended_at=state.ended_at,
        seconds=seconds_between(state.started_at, state.ended_at, now),
        attempt=state.attempt,
        turns=state.turns,
        tokens=dict(state.tokens),
        attempts=tried,
        repairs=repairs(rows, tried),
        answer=_answer(rows),
        schema=schema,
        workspace=_workspace(prepared, rows, changed),
        transcript=transcript,
        notes=tuple(_entry(row) for row in rows if row.get("row") in NOTE_ROWS),
        rows=tuple(_entry(row) for row in rows),
    )


def _answer(rows: Sequence[Row]) -> AnswerView | None:
    """The newest completed row's answer, or a held review_rejected row's."""
    for row in reversed(rows):
        kind = row.get("row")
        if kind == "completed" or (kind == "held" and "result" in row):
            return AnswerView(
                result=row.get("result"),
                result_digest=row.get("result_digest"),
                raw_text=row.get("raw_text"),
                extracted=bool(row.get("extracted")),
                attempt=row.get("attempt"),
                k=row.get("k"),
                at=row.get("at"),
            )
        if kind in ("null_model", "superseded"):
            return None
    return None


def _workspace(
    prepared: Row, rows: Sequence[Row], changed: tuple[ChangedFile, ...] | str | None
) -> WorkspaceView:
    allocation = prepared.get("allocation")
    place = allocation if isinstance(allocation, Mapping) else {}
    commit_row = next((row for row in reversed(rows) if row.get("row") == "crw_commit"), None)
    completed = next((row for row in reversed(rows) if row.get("row") == "completed"), {})
    commit = None
    if commit_row is not None:
        framing = {"seq", "at", "row", "call"}
        commit = {key: value for key, value in commit_row.items() if key not in framing}
    moved = completed.get("executor_head_moved")
    return WorkspaceView(
        path=place.get("workspace"),
        kind=place.get("kind"),
        start_commit=place.get("start_commit"),
        branch=place.get("branch"),
        commit=commit,
        pending_tree=completed.get("pending_tree"),
        head_moved=dict(moved) if isinstance(moved, Mapping) else None,
        changed_files=changed if isinstance(changed, tuple) else None,
        changed_error=changed if isinstance(changed, str) else None,
    )


def _entry(row: Row) -> RowEntry:
    call = row.get("call")
    return RowEntry(
        seq=row.get("seq"),
        at=row.get("at"),
        kind=str(row.get("row") or "?"),
        call=call if isinstance(call, str) else None,
        detail=row_detail(row),
    )
