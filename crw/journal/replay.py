"""`replay(rows) -> RunState`: the one read model over a run's rows.

A pure function of the journal's rows (plain dicts, as `crw.journal.log` reads
them), so `status`, `next`, resume and shadow all read a run the same way, and it
stays fast: a journal of 100,000 rows replays in well under a second
(`bench/replay.py`). It imports nothing heavier than the standard library, so a
command that only reads a run starts quickly.

Readings the spec fixes:
- a started row that records no backend is an App Server run (GEN-10);
- a token part a row leaves out reads as 0 (HARV-20);
- the call's pair is its newest thread_started row's, its earlier pairs that
  row's prior_pairs (BIND-8, BIND-9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crw.journal.framing import paused_gc

TOKEN_PARTS = ("input", "cached_input", "output", "reasoning_output", "total")
_NO_TOKENS = dict.fromkeys(TOKEN_PARTS, 0)
"""Every part 0: copied for each new call (a copy takes a third of `dict.fromkeys`)."""

TERMINAL_ROWS = frozenset({"completed", "null_model", "held", "superseded"})
"""The terminal rows of a call (ARCHITECTURE.md, Rows)."""
SETTLED_STATES = frozenset({"completed", "null_model", "superseded", "skipped"})
"""A call's states that leave the run's state as it is (neither held nor waiting
for a session) and that rows rarely move on: the replay snapshot keeps such calls
packed, built only when read (`DeferredCalls`); most calls of a big run are."""

Row = Mapping[str, Any]


def token_parts(value: Any) -> dict[str, int]:
    """A row's `tokens` (or tokens_seen, call_tokens) in all five parts; a part
    the row leaves out is 0."""
    # A row read from the journal is a dict: no Mapping check through abc for it.
    source = value if type(value) is dict or isinstance(value, Mapping) else {}
    get = source.get  # the parts spelled out: a comprehension costs twice as much
    return {
        "input": int(get("input") or 0),
        "cached_input": int(get("cached_input") or 0),
        "output": int(get("output") or 0),
        "reasoning_output": int(get("reasoning_output") or 0),
        "total": int(get("total") or 0),
    }


def add_tokens(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    get, more = a.get, b.get
    return {
        "input": get("input", 0) + more("input", 0),
        "cached_input": get("cached_input", 0) + more("cached_input", 0),
        "output": get("output", 0) + more("output", 0),
        "reasoning_output": get("reasoning_output", 0) + more("reasoning_output", 0),
        "total": get("total", 0) + more("total", 0),
    }


@dataclass
class CallState:
    """One call as its rows leave it."""

    call: str
    node: str | None = None
    role: str | None = None
    backend: str | None = None
    state: str = "prepared"
    """prepared, waiting_session (a step published, no subagent bound), running
    (a turn bound), completed, null_model, held, superseded, lost, skipped,
    restarting (answered restart, not superseded yet)."""
    last_row: str = "prepared"
    attempt: int = 0
    """The newest attempt the rows name (0 before the first step)."""
    turns: int = 0
    """turn_started rows: the turns the call's subagents took."""
    k: int = 0
    """The newest step's k."""
    turn_k: int = 0
    """The k of the newest turn bound (turn_started)."""
    tokens: dict[str, int] = field(default_factory=_NO_TOKENS.copy)
    """What the call's terminal rows counted, in all parts."""
    result: Any = None
    reason: str | None = None
    """A held, null_model or lost call's reason."""
    error: str | None = None
    """A held call's error (spawn_failed: the host's message)."""
    errors: list[str] | None = None
    """A null_model call's errors: its last answer's schema errors (answer_too_large:
    one line naming its size and the cap)."""
    verdict: str | None = None
    """The `verdict` of the call's answer (a completed row's result, or a held
    review_rejected row's), when it has one: a review's accept or reject."""
    findings: int | None = None
    """How many `findings` that answer names."""
    thread_id: str | None = None
    pair: dict[str, str | None] | None = None
    prior_pairs: list[Any] = field(default_factory=list)
    workspace: str | None = None
    by: str | None = None
    """The call that supersedes this one (a decision to restart names it)."""
    started_at: str | None = None
    """The `at` of the call's prepared row."""
    ended_at: str | None = None
    """The `at` of the call's newest terminal row, until a decision sends it on."""
    reused: str | None = None
    """A rerun's call that took its source's answer (a reused row): `<run>/<call>`
    of the source call that answered."""


@dataclass
class RunState:
    """A run as its rows leave it."""

    state: str = "starting"
    """starting (no started row yet), running, waiting_session, waiting_decision,
    paused, ended."""
    backend: str | None = None
    """The newest started row's backend; a row with none is app-server (GEN-10)."""
    processes: int = 0
    """How many started rows: the n-th process of the run."""
    process: str | None = None
    """The token of the newest started row's process lock (None: it took none)."""
    pid: int | None = None
    role_pairs: dict[str, Any] | None = None
    policy_digest: str | None = None
    multi_agent: str | None = None
    """A session run's multi-agent protocol as its first started row that names
    one records it (None: none named; such a run ran on v1)."""
    repinned: bool = False
    """Whether the newest process repinned the run (a policy_repinned row after
    its started row): it runs on the role store as it read, not the earlier pins."""
    ended_status: str | None = None
    paused_reason: str | None = None
    paused_error: str | None = None
    paused_file: str | None = None
    """The newest paused row's error and file (a write_failed pause names it)."""
    calls: dict[str, CallState] = field(default_factory=dict)
    spent: dict[str, int] = field(default_factory=_NO_TOKENS.copy)
    """The run's tokens: every call's terminal rows, each counted once."""
    last_seq: int = 0
    ended_state: Any = None
    """The newest ended (or cancelled) row's `state`: each node's end."""
    started_at: str | None = None
    """The `at` of the run's first started row."""
    last_at: str | None = None
    """The `at` of the newest row."""
    bound: dict[str, str] = field(default_factory=dict)
    """Each call's open subagent, in the order they were bound: the one its newest
    thread_started row bound, until the call ends (a terminal row), loses the
    attempt or publishes a spawn step (the next subagent replaces it)."""

    @property
    def paused_why(self) -> str:
        """`write_failed: <file>: <error>`: why the run is paused, as its row says."""
        parts = (self.paused_reason, self.paused_file, self.paused_error)
        return ": ".join(part for part in parts if part)

    def defer_calls(self, deferred: DeferredCalls) -> None:
        """Have `calls` made by `deferred` when it is first read, not now: the replay
        snapshot's state of a run of 10,000 calls is read by `next`, whose answer
        names no settled call (`crw.journal.snapshot`). Until then a replay folds
        rows into `deferred.open`, and builds all the calls only for a row that
        names a settled one."""
        self.__dict__.pop("calls", None)
        self.__dict__[_DEFERRED] = deferred

    def deferred_calls(self) -> DeferredCalls | None:
        """The calls not built yet (None: `calls` is built)."""
        deferred: DeferredCalls | None = self.__dict__.get(_DEFERRED)
        return deferred

    if not TYPE_CHECKING:  # typed as the field it stands in for

        def __getattr__(self, name: str) -> Any:
            """`calls`, made once by the `defer_calls` object, on its first read."""
            deferred = self.__dict__.get(_DEFERRED) if name == "calls" else None
            if deferred is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            del self.__dict__[_DEFERRED]
            self.calls = deferred.build(deferred.open)
            return self.calls


@dataclass
class DeferredCalls:
    """A run's calls, most of them not built yet (a replay snapshot's)."""

    open: dict[str, CallState]
    """The calls built: those not settled, and those a replay added since."""
    settled: AbstractSet[str]
    """The calls not built: each in one of SETTLED_STATES (a set the exit's
    streamed replay adds to as it packs, `crw.journal.streamed`)."""
    build: Callable[[dict[str, CallState]], dict[str, CallState]]
    """All the calls, in the order their rows first named them, given `open` as
    the replay left it."""
    source: object = None
    """What `build` builds from, for its maker (the snapshot writes it again)."""


_DEFERRED = "_deferred_calls"


def replay(rows: Iterable[Row], into: RunState | None = None) -> RunState:
    """Fold a run's rows, in journal order, into its state. Never raises for a
    kind or field it does not know: later crw versions may write them.

    `into`: the state the rows before `rows` left, folded on in place (a reader
    that reads a growing journal folds each row once).
    """
    run = into if into is not None else RunState()
    # One loop, its lookups bound once: it runs once a row (100,000 in a big run).
    run_handlers, call_handlers = _RUN_HANDLERS, _CALL_HANDLERS
    calls: dict[str, CallState] | None = None  # read at the first call row: a snapshot's
    settled: AbstractSet[str] = frozenset()  # calls are built only then, or only the open
    # ones (`RunState.defer_calls`). A list, so the last seq is read from its end after
    # the fold rather than kept a row at a time.
    folded = rows if isinstance(rows, list) else list(rows)
    row: Row = {}
    with paused_gc():  # a fold of many rows builds many objects, none in a cycle
        for row in folded:
            kind = row.get("row", "")
            call_handler = call_handlers.get(kind)
            if call_handler is None:
                handler = run_handlers.get(kind)
                if handler is not None:
                    handler(run, row)
                continue
            call_id = row.get("call")
            if type(call_id) is str or isinstance(call_id, str):
                if calls is None:
                    deferred = run.deferred_calls()
                    calls = run.calls if deferred is None else deferred.open
                    settled = frozenset() if deferred is None else deferred.settled
                if call_id in settled:  # a row moves a settled call on: build them all
                    calls, settled = run.calls, frozenset()
                call = calls.get(call_id)
                if call is None:
                    call = calls[call_id] = CallState(call=call_id)
                call.last_row = kind
                call_handler(run, call, row)
    # The newest row that names a seq.
    last_seq = next((seq for seq in map(_seq_of, reversed(folded)) if seq), None)
    if last_seq:
        run.last_seq = int(last_seq)
    run.last_at = row.get("at", run.last_at)
    run.state = _run_state(run)
    return run


def _seq_of(row: Row) -> Any:
    return row.get("seq")


def _run_state(run: RunState) -> str:
    if run.processes == 0:
        return "starting"
    if run.ended_status is not None:
        return "ended"
    if run.paused_reason is not None:
        return "paused"
    deferred = run.deferred_calls()  # the calls not built are settled: neither held
    calls = run.calls if deferred is None else deferred.open  # nor waiting a session
    states = {call.state for call in calls.values()}
    if "held" in states:
        return "waiting_decision"
    if "waiting_session" in states:
        return "waiting_session"
    return "running"


def _started(run: RunState, row: Row) -> None:
    run.processes += 1
    run.started_at = run.started_at or row.get("at")
    run.backend = row.get("backend") or "app-server"
    run.process = row.get("process")
    run.pid = row.get("pid")
    run.role_pairs = row.get("role_pairs")
    run.policy_digest = row.get("policy_digest")
    run.multi_agent = run.multi_agent or row.get("multi_agent")
    run.repinned = False
    run.paused_reason = run.paused_error = run.paused_file = None


def _paused(run: RunState, row: Row) -> None:
    run.paused_reason = row.get("reason") or "paused"
    run.paused_error, run.paused_file = row.get("error"), row.get("file")


def _ended(run: RunState, row: Row) -> None:
    run.ended_status = row.get("status") or "ended"
    run.ended_state = row.get("state")


def _policy_repinned(run: RunState, row: Row) -> None:
    if row.get("role_pairs") is not None:
        run.role_pairs = row.get("role_pairs")
    run.policy_digest = row.get("store_digest") or run.policy_digest
    run.repinned = True


_RUN_HANDLERS: dict[str, Callable[[RunState, Row], None]] = {
    "started": _started,
    "paused": _paused,
    "ended": _ended,
    "cancelled": _ended,
    "policy_repinned": _policy_repinned,
}


def _prepared(run: RunState, call: CallState, row: Row) -> None:
    call.node = row.get("node", call.node)
    call.role = row.get("role", call.role)
    call.backend = row.get("backend", call.backend)
    allocation = row.get("allocation")
    if type(allocation) is dict or isinstance(allocation, Mapping):
        call.workspace = allocation.get("workspace")
    call.state = "prepared"
    call.reason = None
    call.started_at = call.started_at or row.get("at")


def _reused(run: RunState, call: CallState, row: Row) -> None:
    """A rerun's call opened by its source's answer (its completed row follows)."""
    _prepared(run, call, row)
    call.reused = f"{row.get('source_run')}/{row.get('source_call')}"


def _step_published(run: RunState, call: CallState, row: Row) -> None:
    call.k = int(row.get("k") or call.k)
    call.attempt = int(row.get("attempt") or call.attempt)
    # A send_input step goes to the bound subagent: the call still runs.
    if row.get("action") != "send_input":
        # An App Server call waits for no session: its run opens the thread.
        backend = call.backend or run.backend
        call.state = "running" if backend == "app-server" else "waiting_session"
        run.bound.pop(call.call, None)


def _thread_started(run: RunState, call: CallState, row: Row) -> None:
    call.thread_id = row.get("thread_id")
    if isinstance(call.thread_id, str):
        run.bound[call.call] = call.thread_id
    call.attempt = int(row.get("attempt") or call.attempt)
    call.pair = {"model": row.get("model"), "effort": row.get("effort")}
    prior = row.get("prior_pairs")
    call.prior_pairs = list(prior) if prior else []
    call.state = "running"


def _turn_started(run: RunState, call: CallState, row: Row) -> None:
    call.turns += 1
    call.k = int(row.get("k") or call.k)
    call.turn_k = call.k
    call.state = "running"


def _lost(run: RunState, call: CallState, row: Row) -> None:
    call.state = "lost"
    call.reason = row.get("reason")
    run.bound.pop(call.call, None)


def _terminal(run: RunState, call: CallState, row: Row) -> None:
    counted = row.get("tokens")
    if counted:  # a row that counts none adds nothing
        tokens = token_parts(counted)
        held = call.tokens  # none yet (a call's first terminal row): the row's are its
        call.tokens = tokens if held == _NO_TOKENS else add_tokens(held, tokens)
        run.spent = add_tokens(run.spent, tokens)
    kind = call.state = row["row"]
    call.reason, call.error = row.get("reason"), row.get("error")
    call.ended_at = row.get("at")
    run.bound.pop(call.call, None)
    errors = row.get("errors") if kind == "null_model" else None
    call.errors = [str(error) for error in errors] if isinstance(errors, list) else None
    result = row.get("result")
    if kind == "completed":
        call.result = result
    if type(result) is dict and isinstance(result.get("verdict"), str):
        findings = result.get("findings")
        call.verdict = result["verdict"]
        call.findings = len(findings) if isinstance(findings, list) else 0
    else:
        call.verdict = call.findings = None


def _decision(run: RunState, call: CallState, row: Row) -> None:
    choice = row.get("choice")
    if choice == "skip":
        call.state = "skipped"
    elif choice == "retry":
        call.state, call.ended_at = "prepared", None
    elif choice == "abort":
        run.ended_status = "aborted"
    elif choice == "restart":  # superseded once its subagents run nothing
        call.state, call.by = "restarting", row.get("by")


_CALL_HANDLERS: dict[str, Callable[[RunState, CallState, Row], None]] = {
    "prepared": _prepared,
    "reused": _reused,
    "step_published": _step_published,
    "thread_started": _thread_started,
    "turn_started": _turn_started,
    "session_attempt_lost": _lost,
    "completed": _terminal,
    "null_model": _terminal,
    "held": _terminal,
    "superseded": _terminal,
    "decision": _decision,
}
