"""`crw flow shadow`: a run replayed from its trace through the run's own decisions.

Pure: the journal's rows (as read, in order), the workflow run.json names, its
pool and attempt budget in; the report out: the recorded backend, what was
checked, what was taken as given, and each point where a replayed decision
differs from the row the run recorded. No host is asked anything.

The run's decisions replayed row by row, each by the function the actors call:

- admission (`gate.taken`, `gate.ready`, `gate.ceiling_reached`): a prepared row
  of a node's first call is a call the gate admits at that point of the rows;
- review rounds (`review.ends_of`, `review.next_action`): a node's later call is
  the round its chain runs next, with that role (and the handle a fix resumes);
- each call's turns, repairs, answers, tokens and lost attempts
  (`crw.engine.views.shadow_calls`);
- the ended row (`gate.taken`, `gate.ended_row`), unless a cancel ended the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.answers import answer, schema_check
from crw.engine.calls import gate, review
from crw.engine.config.workflow import Workflow
from crw.engine.holds import supersede
from crw.engine.steps import step_input
from crw.engine.views import shadow_calls
from crw.engine.views.shadow_calls import CallTrace, Point, ReadTotal
from crw.journal.replay import RunState, replay
from crw.journal.rows import Tokens

Row = Mapping[str, Any]


@dataclass
class Report:
    backend: str
    rows: int
    points: list[Point] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    """How many decisions of each kind were replayed."""
    given: tuple[str, ...] = shadow_calls.GIVEN


@dataclass
class _Walk:
    workflow: Workflow
    pool: int
    max_attempts: int
    read_total: ReadTotal
    report: Report
    state: RunState = field(default_factory=RunState)
    seen: list[Row] = field(default_factory=list)
    by_call: dict[str, list[Row]] = field(default_factory=dict)
    calls: dict[str, CallTrace] = field(default_factory=dict)
    cancelled: bool = False

    def count(self, check: str) -> None:
        self.report.checked[check] = self.report.checked.get(check, 0) + 1


def shadow(
    rows: Sequence[Row],
    workflow: Workflow,
    pool: int,
    max_attempts: int,
    read_total: ReadTotal,
) -> Report:
    """Replay `rows` (journal order; a row's line is its index + 1)."""
    started = next((r for r in rows if r.get("row") == "started"), {})
    backend = str(started.get("backend") or "app-server")  # none recorded: App Server (GEN-10)
    walk = _Walk(workflow, pool, max_attempts, read_total, Report(backend, len(rows)))
    for line, row in enumerate(rows, start=1):
        walk.report.points += _decide(walk, row, line)
        walk.seen.append(row)
        if row.get("call"):
            walk.by_call.setdefault(str(row["call"]), []).append(row)
        replay([row], into=walk.state)
    return walk.report


def _decide(walk: _Walk, row: Row, line: int) -> list[Point]:
    kind = row.get("row")
    if kind == "cancelled":
        walk.cancelled = True
    if kind == "prepared":
        return _prepared(walk, row, line)
    if kind == "reused":
        return _reused(walk, row, line)
    if kind == "ended":
        return _ended(walk, row, line)
    call = str(row.get("call") or "")
    trace = walk.calls.get(call)
    if not call or kind not in _CALL_ROWS:
        return []
    if trace is None:
        return [
            Point(
                line, row.get("seq"), call, "admission", f"{kind}", "no prepared row opens the call"
            )
        ]
    return _call_row(walk, trace, row, line)


_CALL_ROWS = frozenset(
    {
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
        "null_model",
        "held",
        "session_attempt_lost",
        "tokens_unmeasured",
    }
)


def _call_row(walk: _Walk, trace: CallTrace, row: Row, line: int) -> list[Point]:
    kind = row.get("row")
    points: list[Point] = []
    if trace.lost_next is not None and kind in ("step_published", "held"):
        walk.count("lost")
        points += shadow_calls.check_after_lost(trace, row, line)
    if kind == "step_published":
        if row.get("repair") and step_input.answer_of(row, trace.steps) is not None:
            walk.count("repair")
            points += shadow_calls.check_repair(trace, row, line)
        trace.steps.append(row)
    elif kind == "thread_started":
        trace.threads.append(row)
    elif kind == "tokens_unmeasured":
        trace.unmeasured = True
    elif kind == "turn_started":
        walk.count("turn")
        points += shadow_calls.check_turn(trace, row, line)
    elif kind == "session_attempt_lost":
        shadow_calls.lost_next(trace, walk.max_attempts)
    elif kind == "completed" and trace.reused:
        walk.count("reused")
        points += _reused_answer(trace, row, line)
    elif kind == "completed":
        walk.count("harvest")
        measured = shadow_calls.expected_tokens(
            trace, shadow_calls.last_step(trace), walk.read_total
        )
        walk.count("tokens" if measured is not None else "tokens taken as given")
        points += shadow_calls.check_end(trace, row, line, walk.read_total)
    elif kind == "null_model":
        walk.count("tokens")
        points += shadow_calls.check_tokens(trace, row, line, walk.read_total)
    return points


def _prepared(walk: _Walk, row: Row, line: int) -> list[Point]:
    call, node_id = str(row.get("call")), str(row.get("node"))
    node = next((n for n in walk.workflow.nodes if n.id == node_id), None)
    if node is None:
        return [_at(row, line, "admission", f"node {node_id}", "the workflow has no such node")]
    first = {n: r.ordinal for n, r in supersede.restarts(walk.seen).items()}.get(node_id, 1)
    ordinal = _ordinal(call) - first + 1
    trace = CallTrace(call, node_id, node.output_schema, node.review, ordinal)
    walk.calls[call] = trace
    if ordinal == 1:
        walk.count("admission")
        return _admitted(walk, row, line, node_id)
    walk.count("round")
    action = review.next_action(node.review, review.ends_of(node_id, walk.by_call, first))
    if not isinstance(action, review.RunCall) or action.ordinal != ordinal:
        return [
            _at(row, line, "round", f"call {call} prepared", _round_says(action, node_id, first))
        ]
    trace.review_call = action.kind == "review"
    trace.fork = action.kind == "fix" and walk.report.backend != "session"
    if trace.review_call:
        trace.schema = review.VERDICT_SCHEMA
    role = node.review.role if trace.review_call and node.review else node.role
    want = {
        "role": role,
        "resume": gate.call_id(node_id, first - 1 + action.handle) if action.handle else None,
    }
    return [
        _at(row, line, "round", f"{key} {row.get(key)}", f"{key} {value} ({action.kind} call)")
        for key, value in want.items()
        if row.get(key) != value
    ]


def _reused(walk: _Walk, row: Row, line: int) -> list[Point]:
    """A rerun's call opened by its source's answer: of a node of the workflow, not
    one the rerun runs (the gate admits none before the reused rows)."""
    call, node_id = str(row.get("call")), str(row.get("node"))
    node = next((n for n in walk.workflow.nodes if n.id == node_id), None)
    if node is None:
        return [_at(row, line, "reused", f"node {node_id}", "the workflow has no such node")]
    trace = CallTrace(call, node_id, node.output_schema, node.review, _ordinal(call), reused=True)
    trace.review_call = row.get("review") is not None
    if trace.review_call:
        trace.schema = review.VERDICT_SCHEMA
    walk.calls[call] = trace
    if any(t.node == node_id and not t.reused for t in walk.calls.values()):
        return [_at(row, line, "reused", f"{call} reused", f"node {node_id} runs in this run")]
    return []


def _reused_answer(trace: CallTrace, row: Row, line: int) -> list[Point]:
    """The completed row of a reused call: its result is the digest's and passes
    its node's schema."""
    result = row.get("result")
    points = []
    if answer.digest(result) != row.get("result_digest"):
        points.append(_at(row, line, "reused", "result_digest", "the result's digest"))
    try:
        errors = schema_check.check(result, trace.schema)
    except schema_check.SchemaCheckTimedOut as err:
        errors = [str(err)]
    if errors:
        points.append(_at(row, line, "reused", "a reused answer", f"schema: {errors[0]}"))
    return points


def _taken(walk: _Walk) -> tuple[dict[str, Any], dict[str, str]]:
    """What the rows so far leave done, as the run's gate reads them."""
    firsts = {n: r.ordinal for n, r in supersede.restarts(walk.seen).items()}
    return gate.taken(walk.state, walk.workflow, firsts)


def _admitted(walk: _Walk, row: Row, line: int, node_id: str) -> list[Point]:
    results, finished = _taken(walk)
    running = {
        str(t.node)
        for t in walk.calls.values()
        if t.node not in finished and t.call != row.get("call")
    }
    stopped = set(finished) - set(results)
    if gate.ceiling_reached(Tokens(**walk.state.spent), walk.workflow.token_ceiling):
        why = "the gate pauses the run: token ceiling"
    else:
        ready = gate.ready(walk.workflow, results.keys(), running, walk.pool, stopped)
        if node_id in {node.id for node in ready}:
            return []
        why = _why_not(walk, node_id, results, finished, running, [n.id for n in ready])
    return [_at(row, line, "admission", f"{node_id} admitted", why)]


def _why_not(
    walk: _Walk,
    node_id: str,
    results: Mapping[str, Any],
    finished: Mapping[str, str],
    running: set[str],
    ready: list[str],
) -> str:
    node = next(n for n in walk.workflow.nodes if n.id == node_id)
    missing = [need for need in node.needs if need not in results]
    if node_id in finished or node_id in running:
        return f"{node_id} is admitted already ({finished.get(node_id, 'running')})"
    if missing:
        return f"not admitted: {', '.join(missing)} not completed"
    if len(running) >= walk.pool:
        return f"not admitted: the pool of {walk.pool} is full ({', '.join(sorted(running))})"
    return f"not admitted: the gate admits {', '.join(ready)} first"


def _ended(walk: _Walk, row: Row, line: int) -> list[Point]:
    if walk.cancelled:
        return []
    walk.count("ended")
    _, finished = _taken(walk)
    want = gate.ended_row(walk.workflow, finished)
    return [
        _at(row, line, "ended", f"{key} {_text(row.get(key))}", f"{key} {_text(value)}")
        for key, value in (("status", want.status), ("state", want.state))
        if row.get(key) != value
    ]


def _round_says(action: review.RunCall | review.Finish, node_id: str, first: int) -> str:
    if isinstance(action, review.Finish):
        end = action.row if isinstance(action.row, Mapping) else action.row.model_dump()
        return f"node {node_id} has ended ({end.get('row')}): no further call"
    return f"the node runs {gate.call_id(node_id, first - 1 + action.ordinal)} ({action.kind}) next"


def _ordinal(call: str) -> int:
    tail = call.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _at(row: Row, line: int, check: str, recorded: str, replayed: str) -> Point:
    seq = row.get("seq")
    return Point(
        line, seq if isinstance(seq, int) else None, row.get("call"), check, recorded, replayed
    )


def framing_points(lines: Iterable[tuple[int, Row | None, str | None]]) -> list[Point]:
    """Damage the journal's framing shows (a checksum that does not match its
    line, a seq out of turn): a row edited or removed by hand without reframing."""
    points: list[Point] = []
    expected = 1
    for line, row, damage in lines:
        seq = row.get("seq") if row is not None else None
        if damage is not None:
            points.append(
                Point(
                    line,
                    seq if isinstance(seq, int) else None,
                    None,
                    "framing",
                    damage,
                    "a whole line",
                )
            )
        if isinstance(seq, int):
            if seq != expected:
                points.append(Point(line, seq, None, "framing", f"seq {seq}", f"seq {expected}"))
            expected = seq + 1
    return points
