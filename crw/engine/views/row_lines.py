"""One line of text for each journal row: what `crw flow show` and `watch` print.

A pure formatter: a row (the plain dict the journal reader gives, framing
stripped) in, a line out. The line is the row's time of day (`at`, UTC, to the
millisecond), its seq, its call, its kind and the key fields of that kind, so a
run's history reads like `temporal workflow show`:

    10:00:01.234    12 build.1        turn_started         turn 1, attempt 1: turn-7f3a

Every kind of the row catalogue (docs/rows.md) has its own detail; a kind a later
crw writes shows its fields as `name=value`. A field a row leaves out is left out
of its line. The caller makes the line safe to print (control characters,
surrogates): the formatter only chooses the words.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from crw.engine.views.durations import duration

Row = Mapping[str, Any]

KIND_WIDTH = 20
CALL_WIDTH = 14
DETAIL_MAX = 240
"""A detail longer than this (a long error, a big unknown field) is cut, marked `…`."""


def row_line(row: Row) -> str:
    """`time seq call kind detail` for `row`."""
    at = row.get("at")
    time = at[11:23] if isinstance(at, str) and len(at) >= 23 else f"{at or '-':<12}"
    seq = row.get("seq")
    call = row.get("call") or "-"
    kind = str(row.get("row") or "?")
    detail = row_detail(row)
    if len(detail) > DETAIL_MAX:
        detail = detail[: DETAIL_MAX - 1] + "…"
    line = f"{time} {seq if seq is not None else '-':>5} {call:<{CALL_WIDTH}} {kind:<{KIND_WIDTH}}"
    return f"{line} {detail}".rstrip()


def row_detail(row: Row) -> str:
    """The key fields of `row`'s kind, in words."""
    kind = row.get("row")
    detail = DETAILS.get(kind) if isinstance(kind, str) else None
    return detail(row) if detail is not None else _unknown(row)


def _parts(*parts: object) -> str:
    """The parts that say something, joined by `, `."""
    return ", ".join(str(part) for part in parts if part not in (None, "", [], {}))


def _when(value: object, text: str) -> str | None:
    return text if value not in (None, "", False, [], {}) else None


def _tokens(row: Row) -> str | None:
    tokens = row.get("tokens")
    total = tokens.get("total") if isinstance(tokens, Mapping) else None
    return f"tokens {total}" if total else None


def _short(digest: object) -> str | None:
    """A digest to its first 12 hex digits (`sha256:` dropped)."""
    return str(digest).removeprefix("sha256:")[:12] if digest else None


def _turn(row: Row) -> str:
    """`turn K, attempt N` of the row's fields that are there."""
    return _parts(_when(row.get("k"), f"turn {row.get('k')}"), _attempt(row))


def _attempt(row: Row) -> str | None:
    return _when(row.get("attempt"), f"attempt {row.get('attempt')}")


def _with(head: str | None, tail: str | None, sep: str = ": ") -> str:
    return sep.join(part for part in (head, tail) if part)


def _started(row: Row) -> str:
    pairs = row.get("role_pairs")
    return _parts(
        f"{row.get('backend') or 'app-server'} backend",
        _when(row.get("pid"), f"pid {row.get('pid')}"),
        _when(pairs, f"{len(pairs or ())} roles pinned"),
    )


def _prepared(row: Row) -> str:
    allocation = row.get("allocation")
    workspace = allocation.get("kind") if isinstance(allocation, Mapping) else None
    return _parts(
        _when(row.get("node"), f"node {row.get('node')}"),
        _when(row.get("role"), f"role {row.get('role')}"),
        _when(row.get("resume"), f"continues {row.get('resume')}"),
        _when(row.get("review"), f"reviews {row.get('review')}"),
        workspace,
    )


def _reused(row: Row) -> str:
    saved = row.get("saved_tokens")
    total = saved.get("total") if isinstance(saved, Mapping) else None
    return _parts(
        _when(row.get("node"), f"node {row.get('node')}"),
        _when(row.get("role"), f"role {row.get('role')}"),
        f"the answer of {row.get('source_run')}/{row.get('source_call')}",
        _when(row.get("result_digest"), f"result {_short(row.get('result_digest'))}"),
        _when(total, f"tokens {total} not spent again"),
    )


def _completed(row: Row) -> str:
    moved = row.get("executor_head_moved")
    head = moved.get("head") if isinstance(moved, Mapping) else None
    return _parts(
        _turn(row),
        _tokens(row),
        _when(row.get("result_digest"), f"result {_short(row.get('result_digest'))}"),
        _when(row.get("extracted"), "taken out of prose"),
        _when(head, f"executor committed {_short(head)}"),
    )


def _crw_commit(row: Row) -> str:
    return _parts(
        _when(row.get("commit"), f"commit {_short(row.get('commit'))}"),
        _when(row.get("start"), f"on {_short(row.get('start'))}"),
        _when(row.get("node_ref"), f"advances {row.get('node_ref')}"),
    )


def _null_model(row: Row) -> str:
    errors = row.get("errors")
    first = errors[0] if isinstance(errors, list) and errors else None
    return _with(_parts(row.get("reason") or "null_model", _tokens(row)), first)


def _held(row: Row) -> str:
    return _with(_parts(row.get("reason") or "held", _tokens(row)), row.get("error"))


def _superseded(row: Row) -> str:
    return _parts(_when(row.get("by"), f"by {row.get('by')}"), _tokens(row))


def _paused(row: Row) -> str:
    ceiling = row.get("token_ceiling")
    reason = _parts(row.get("reason") or "paused", _tokens(row))
    why = _with(row.get("file"), row.get("error"))
    return _parts(_with(reason, why), _when(ceiling, f"token ceiling {ceiling}"))


def _cancelled(row: Row) -> str:
    return _parts(row.get("reason") or "cancelled", _ends(row.get("state")))


def _decision(row: Row) -> str:
    held = _when(row.get("reason"), f"held {row.get('reason')}")
    by = _when(row.get("by"), f"runs again as {row.get('by')}")
    return _parts(row.get("choice") or "?", held, by)


def _ended(row: Row) -> str:
    return _parts(row.get("status") or "ended", _ends(row.get("state")))


def _ends(state: object) -> str | None:
    """Each node's end: `explore completed, build held`."""
    if isinstance(state, Mapping):
        return ", ".join(f"{node} {end}" for node, end in state.items()) or None
    return str(state) if state else None


def _step_published(row: Row) -> str:
    pair = " ".join(str(row[key]) for key in ("model", "effort") if row.get(key))
    who = _parts(row.get("role"), pair)
    head = f"{row.get('action') or 'step'} {row.get('marker') or row.get('op') or ''}".rstrip()
    return _parts(
        f"{head} ({who})" if who else head,
        _when(row.get("agent_id"), f"to {row.get('agent_id')}"),
        _when(row.get("repair"), "repair"),
        row.get("note"),
    )


def _thread_started(row: Row) -> str:
    pair = " ".join(str(row[key]) for key in ("model", "effort") if row.get(key))
    return _parts(
        _with(_attempt(row), _when(row.get("thread_id"), f"thread {row.get('thread_id')}")),
        pair,
        _when(row.get("via"), f"via {row.get('via')}"),
        _when(row.get("agent_role"), f"agent role {row.get('agent_role')}"),
    )


def _turn_started(row: Row) -> str:
    return _with(_turn(row), row.get("turn_id"))


def _interrupt_requested(row: Row) -> str:
    turn = _when(row.get("turn_id"), f"turn {row.get('turn_id')}")
    return _with(row.get("reason") or "interrupt", _parts(_attempt(row), turn))


def _session_attempt_lost(row: Row) -> str:
    host = _parts(
        _when(row.get("host_status"), f"host {row.get('host_status')}"),
        _when(row.get("turn_status"), f"turn {row.get('turn_status')}"),
    )
    return _with(_parts(_turn(row), row.get("agent_id")), _parts(row.get("reason"), host))


def _evidence_placed(row: Row) -> str:
    return _with(_parts(row.get("marker"), _attempt(row)), row.get("evidence_cwd"))


def _checkpoint_started(row: Row) -> str:
    return _parts(row.get("handle"), _when(row.get("branch"), f"branch {row.get('branch')}"))


def _tokens_unmeasured(row: Row) -> str:
    where = _parts(row.get("marker") or row.get("op"), _when(row.get("pauses"), "pauses the run"))
    return _with(where, row.get("error"))


def _session_wake(row: Row) -> str:
    ops = row.get("ops")
    waiting = row.get("waiting_seconds")
    return _with(
        _parts(
            row.get("wake_id"),
            _when(ops, f"{len(ops or ())} ops"),
            _when(row.get("owner"), f"owner {row.get('owner')}"),
            row.get("owner_status"),
            _when(row.get("renotify"), f"renotify {row.get('renotify')}"),
            _when(waiting, f"waited {duration(waiting)}"),
            _when(row.get("staged"), "staged"),
        ),
        _parts(row.get("reason"), row.get("error")),
    )


def _message_delivery(row: Row) -> str:
    how = _parts(
        _when(row.get("via"), f"via {row.get('via')}"),
        _when(row.get("turn_id"), f"turn {row.get('turn_id')}"),
    )
    return _with(_parts(row.get("wake_id"), row.get("status"), how), row.get("error"))


def _session_host_warning(row: Row) -> str:
    warnings = row.get("warnings")
    listed = ", ".join(str(w) for w in warnings) if isinstance(warnings, list) else None
    return _with(row.get("op"), listed)


def _digests(row: Row) -> str:
    """`pinned abc… → store def…`, of a role store's digests."""
    return f"pinned {_short(row.get('pinned_digest'))} → store {_short(row.get('store_digest'))}"


def _escalation(row: Row) -> str:
    ops = row.get("ops")
    waiting = row.get("waiting_seconds")
    return _with(
        row.get("reason") or "escalation",
        _parts(
            _when(ops, f"ops {', '.join(str(op) for op in ops or ())}"),
            _when(waiting, f"waited {duration(waiting)}"),
            _when(row.get("owner"), f"owner {row.get('owner')}"),
        ),
    )


def _step_unwritten(row: Row) -> str:
    failures = row.get("failures")
    return _with(
        _parts(
            f"{row.get('action') or 'step'} {row.get('marker') or ''}".rstrip(),
            _when(failures, f"{failures} failures"),
            _when(row.get("written"), "written since"),
        ),
        row.get("error"),
    )


def _digest_warning(row: Row) -> str:
    change = f"{_short(row.get('before')) or '-'} → {_short(row.get('after')) or '-'}"
    return _with(row.get("where"), change)


def _unknown(row: Row) -> str:
    """A kind this crw does not know: its fields as `name=value`."""
    skip = {"seq", "at", "row", "call"}
    return " ".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
        for key, value in row.items()
        if key not in skip
    )


DETAILS: dict[str, Callable[[Row], str]] = {
    "started": _started,
    "prepared": _prepared,
    "reused": _reused,
    "completed": _completed,
    "crw_commit": _crw_commit,
    "null_model": _null_model,
    "held": _held,
    "superseded": _superseded,
    "paused": _paused,
    "cancelled": _cancelled,
    "decision": _decision,
    "ended": _ended,
    "step_published": _step_published,
    "thread_started": _thread_started,
    "turn_started": _turn_started,
    "interrupt_requested": _interrupt_requested,
    "session_attempt_lost": _session_attempt_lost,
    "evidence_placed": _evidence_placed,
    "checkpoint_started": _checkpoint_started,
    "tokens_unmeasured": _tokens_unmeasured,
    "session_wake": _session_wake,
    "message_delivery": _message_delivery,
    "session_host_warning": _session_host_warning,
    "role_store_changed": _digests,
    "policy_repinned": _digests,
    "escalation": _escalation,
    "step_unwritten": _step_unwritten,
    "read_role_wrote": _digest_warning,
    "executor_wrote_outside": _digest_warning,
    "shared_state_changed": _digest_warning,
}
"""The detail of each kind of the row catalogue (`crw.journal.rows.ROW_KINDS`)."""
