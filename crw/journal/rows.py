"""The row catalogue: one pydantic model per row kind, one union on `row`.

Every row a run writes is one of these models. The names are the spec's
(docs/spec.md) and ARCHITECTURE.md's: a reader greps the spec
word and finds the model. A field the catalogue does not know is kept on read
(`extra="allow"`) and written back unchanged; a kind it does not know reads as
`UnknownRow`, so a journal written by a later crw never fails to read.

The journal line of a row is `{"seq", "at", "row", "call"?, ...fields}`; `seq` and
`at` are set by the journal writer when it commits the row. docs/rows.md says what
each field means and when each kind is written.

Every field is optional: a row of an older journal may lack any of them, and a
field that is None is left out of the line. Enumerations are `str` unless the spec
fixes the set, so a reason a later crw adds still reads. The models are flat and
run no validators of their own: a journal of 100,000 rows is read in one pass.

It is one module, past 400 lines, on purpose: it is one table of row kinds, read
beside the spec's Row table and docs/rows.md, and the `Row` union, `ROW_KINDS` and
`crw schema rows` are made from every kind at once; split by call and run, a
reader would look for a kind in two places and the union would import both.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Tag,
    TypeAdapter,
    model_serializer,
)

TOKEN_PARTS = ("input", "cached_input", "output", "reasoning_output", "total")


class Tokens(BaseModel):
    """Token counts in all their parts. A part that is 0 is left out of the row,
    and a row written before the parts existed reads each missing one as 0."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    input: int = 0
    cached_input: int = 0
    output: int = 0
    reasoning_output: int = 0
    total: int = 0

    @model_serializer(mode="plain")
    def _omit_zero_parts(self) -> dict[str, Any]:
        parts = {name: getattr(self, name) for name in TOKEN_PARTS if getattr(self, name)}
        parts.update(self.model_extra or {})
        return parts

    def __add__(self, other: Tokens) -> Tokens:  # ints of two valid Tokens: nothing to validate
        mine, theirs = self.__dict__, other.__dict__
        return _tokens_made({p: mine[p] + theirs[p] for p in TOKEN_PARTS})

    def __sub__(self, other: Tokens) -> Tokens:
        mine, theirs = self.__dict__, other.__dict__
        return _tokens_made({p: mine[p] - theirs[p] for p in TOKEN_PARTS})


_ALL_PARTS = frozenset(TOKEN_PARTS)


def _tokens_made(parts: dict[str, int]) -> Tokens:
    """Tokens of `parts` (every part, an int), set as `Tokens.model_construct(**parts)`
    sets them, without its Python walk of the fields: a fifth of its CPU (the run
    settles each call's tokens with two sums)."""
    made = object.__new__(Tokens)
    object.__setattr__(made, "__dict__", parts)
    object.__setattr__(made, "__pydantic_fields_set__", set(_ALL_PARTS))
    object.__setattr__(made, "__pydantic_extra__", {})
    object.__setattr__(made, "__pydantic_private__", None)
    return made


NO_TOKENS = Tokens.model_construct()
"""Tokens() without its validation (a call's counts start from it)."""


class _Part(BaseModel):
    """A nested object of a row: a part that is None is left out, and a field the
    catalogue does not know is written back as it was read, nulls included."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    @model_serializer(mode="plain")
    def _omit_none(self) -> dict[str, Any]:
        body = {
            name: value
            for name in type(self).model_fields
            if (value := getattr(self, name)) is not None
        }
        body.update(self.model_extra or {})
        return body


class Allocation(_Part):
    """Where a call runs: its directory P, what kind of directory, and the commit
    it was made at. Every attempt of the call shares it."""

    workspace: str | None = None
    kind: str | None = None
    start_commit: str | None = None
    branch: str | None = None
    """The run's branch a worktree (kind worktree or scratch) is on."""


class ExecutorHeadMoved(_Part):
    """An executor's subagent committed: the commit its worktree was to be at, the
    HEAD it left, and the stray ref that keeps that HEAD."""

    start: str | None = None
    head: str | None = None
    ref: str | None = None


class TraceDigests(_Part):
    """SessionConfig.Trace's digests at a bind (`crw.workspace.trace`): P's, the
    owner's checkout's (`outside`, of the directory `checkout`, taken only when it
    is a git checkout other than P) and the run's shared state's."""

    workspace: str | None = None
    outside: str | None = None
    checkout: str | None = None
    shared: str | None = None


class RowModel(BaseModel):
    """Fields every row has. `seq` and `at` are the journal writer's."""

    # Each kind is built at its first use: a run writes a few of the kinds, and
    # building them all is most of this module's import.
    model_config = ConfigDict(extra="allow", defer_build=True)

    seq: int | None = None
    at: str | None = None
    row: str | None = None
    """The kind; each kind's model narrows it. Declared here so that a row's
    fields serialize in the journal line's order: seq, at, row, call, fields."""
    call: str | None = None


StepAction = Literal["spawn", "send_input"]
HostWarning = Literal["no_ledger_line", "ledger_op_differs", "several_spawns", "window_ended"]
NullModelReason = Literal[
    "schema_invalid_after_repair",
    "context_window_exceeded",
    "empty_answer",
    "schema_check_timed_out",
    "answer_too_large",
]
Choice = Literal["retry", "skip", "abort", "restart"]

RolePairs = dict[str, dict[str, str]]


# The engine's own rows (ARCHITECTURE.md, "Rows").


class Started(RowModel):
    """The run's process came up and holds the run (engine row)."""

    row: Literal["started"] = "started"
    backend: str | None = None
    process: str | None = None
    pid: int | None = None
    role_pairs: RolePairs | None = None
    policy_digest: str | None = None
    inputs: dict[str, Any] | None = None
    """The run's inputs as run.json records them (a file input by path and digest)."""
    multi_agent: str | None = None
    """A session run's multi-agent protocol, `multi_agent_v1` or `multi_agent_v2`:
    the one its first process recorded, for its life."""


class Prepared(RowModel):
    """A call was admitted: its node, role, backend and allocation (engine row)."""

    row: Literal["prepared"] = "prepared"
    node: str | None = None
    role: str | None = None
    backend: str | None = None
    allocation: Allocation | None = None
    input_digest: str | None = None
    ordinal: int | None = None
    resume: str | None = None
    """A continuation's handle: the call whose conversation it goes on from."""
    review: str | None = None
    """A review call: the call whose answer it judges (a call whose role is
    reviewer or critic and that reviews no call has none)."""


class Completed(RowModel):
    """A call's answer passed its schema (terminal row)."""

    row: Literal["completed"] = "completed"
    result: Any = None
    result_digest: str | None = None
    raw_text: str | None = None
    """The message as it was, when the result was taken out of prose (HARV-7)."""
    result_span: list[int] | None = None
    """Where the result's object stands in `raw_text` ([start, end], characters):
    the journal writes no `result` beside it and reads it back from there
    (`crw.journal.result_span`)."""
    extracted: bool | None = None
    tokens: Tokens | None = None
    pending_tree: str | None = None
    executor_head_moved: ExecutorHeadMoved | None = None
    attempt: int | None = None
    k: int | None = None


class Reused(RowModel):
    """A call of a rerun that takes a completed answer of its source run instead of
    running (`crw flow rerun`): written by the rerun's process in place of the
    call's prepared and turn rows, with the source's completed row after it in
    the same batch (engine row)."""

    row: Literal["reused"] = "reused"
    node: str | None = None
    role: str | None = None
    source_run: str | None = None
    """The run whose answer the call takes."""
    source_call: str | None = None
    """The call of `source_run` that answered."""
    result_digest: str | None = None
    """The answer's digest, as the source's completed row records it."""
    saved_tokens: Tokens | None = None
    """What the source's call counted: tokens not spent again (no run's figure)."""
    review: str | None = None
    """A review call's judged call in this run (`<node>.<n-1>`), as `prepared`'s."""


class CrwCommit(RowModel):
    """crw.commit of an executor call (engine row): the pending tree committed on
    the commit its worktree was to be at, the worktree's HEAD moved to it from the
    observed HEAD, and the node branch advanced to it, each by compare-and-swap.
    Committed with the call's completed row, before any ref moves."""

    row: Literal["crw_commit"] = "crw_commit"
    node: str | None = None
    tree: str | None = None
    start: str | None = None
    head: str | None = None
    head_ref: str | None = None
    commit: str | None = None
    when: int | None = None
    node_ref: str | None = None
    node_old: str | None = None


class NullModel(RowModel):
    """A call ended with no answer that passed (terminal row)."""

    row: Literal["null_model"] = "null_model"
    reason: NullModelReason | None = None
    tokens: Tokens | None = None
    errors: list[str] | None = None
    answer_bytes: int | None = None
    """answer_too_large: the answer's size in UTF-8 bytes (its text is not kept)."""
    answer_max_bytes: int | None = None
    """answer_too_large: the run's answer_max_bytes it was over."""


class Held(RowModel):
    """A call stopped and waits for a decision or a resume (terminal row)."""

    row: Literal["held"] = "held"
    reason: str | None = None
    error: str | None = None
    tokens: Tokens | None = None


class Superseded(RowModel):
    """A call was replaced by a newer call or attempt (terminal row)."""

    row: Literal["superseded"] = "superseded"
    by: str | None = None
    tokens: Tokens | None = None


class Paused(RowModel):
    """The run was paused (engine row)."""

    row: Literal["paused"] = "paused"
    reason: str | None = None
    error: str | None = None
    tokens: Tokens | None = None
    token_ceiling: int | None = None
    file: str | None = None
    """The file a write_failed pause could not write."""
    request: str | None = None
    """`crw flow pause`: the id of the request the row answers."""


class Cancelled(RowModel):
    """The run was cancelled (engine row)."""

    row: Literal["cancelled"] = "cancelled"
    reason: str | None = None
    request: str | None = None
    """The id of the `crw flow cancel` request the row answers."""
    state: dict[str, str] | None = None
    """Each node's end, as the ended row that follows says."""


class Decision(RowModel):
    """The answer to a held call: retry, skip or abort; or restart, to a held call
    or an open one of a process that is gone (engine row)."""

    row: Literal["decision"] = "decision"
    choice: Choice | None = None
    reason: str | None = None
    """The reason of the held row it answers."""
    by: str | None = None
    """A restart: the node's new call, which supersedes this one."""


class Ended(RowModel):
    """The run is over (engine row)."""

    row: Literal["ended"] = "ended"
    status: str | None = None
    state: dict[str, str] | str | None = None
    """Each node's end (completed, null_model, held, unrun, …)."""


# The spec's rows of a session call (its Row table and the rows its text names).


class StepPublished(RowModel):
    """The intent of a step, committed before its packet and step file."""

    row: Literal["step_published"] = "step_published"
    k: int | None = None
    op: str | None = None
    marker: str | None = None
    attempt: int | None = None
    action: StepAction | None = None
    input: str | None = None
    input_answer_at: int | None = None
    """A repair's input without its previous answer, which goes back in here
    (`crw.engine.steps.step_input`): the row keeps the answer once."""
    input_digest: str | None = None
    packet: str | None = None
    packet_digest: str | None = None
    role: str | None = None
    agent_type: str | None = None
    model: str | None = None
    effort: str | None = None
    workspace: str | None = None
    agent_id: str | None = None
    note: str | None = None
    previous_answer: Any = None
    previous_answer_in: str | None = None
    """A later step repairing an answer an earlier step row of the call holds (the
    attempt after a lost repair, a held repair taken again): that row's marker,
    instead of a copy in `previous_answer` (`crw.engine.steps.step_input`)."""
    tokens_seen: Tokens | None = None
    call_tokens: Tokens | None = None
    conversation_turn: int | None = None
    replaces_turn: int | str | None = None
    repair: bool | None = None
    repair_errors: list[str] | None = None
    evidence_assignment: dict[str, Any] | None = None
    evidence_cwds: list[str] | None = None
    evidence_ignored: list[str] | None = None


class ThreadStarted(RowModel):
    """A subagent bound to an attempt: one row per attempt and per continuation."""

    row: Literal["thread_started"] = "thread_started"
    thread_id: str | None = None
    model: str | None = None
    effort: str | None = None
    cwd: str | None = None
    host_cwd: str | None = None
    evidence_cwd: str | None = None
    parent_thread_id: str | None = None
    agent_role: str | None = None
    attempt: int | None = None
    via: str | None = None
    rollout_path: str | None = None
    marker: str | None = None
    prior_pairs: list[dict[str, Any]] | None = None
    pair_unchecked: bool | None = None
    effort_unchecked: bool | None = None
    session_agent_role_mismatch: bool | None = None


class TurnStarted(RowModel):
    """The turn of a step the subagent took, at its place in the conversation."""

    row: Literal["turn_started"] = "turn_started"
    k: int | None = None
    op: str | None = None
    turn_id: str | None = None
    attempt: int | None = None
    marker: str | None = None
    conversation_turn: int | None = None
    replaces_turn: int | str | None = None
    host_started_at: int | None = None
    """A session bind's: when the host says the turn started (its `startedAt`, Unix
    seconds), which is before the bind when the owner reported it late or the run
    found it by its marker: the timeline draws the turn from it."""
    trace: TraceDigests | None = None
    """With SessionConfig.Trace: the digests taken at the bind, which the harvest
    compares with its own."""


class InterruptRequested(RowModel):
    """The engine's interrupt of the turn in flight, committed before it is sent."""

    row: Literal["interrupt_requested"] = "interrupt_requested"
    reason: str | None = None
    op: str | None = None
    attempt: int | None = None
    turn_id: str | None = None
    error: str | None = None
    """The held row's words when they are not the reason's (what the host said)."""


class SessionAttemptLost(RowModel):
    """An attempt whose subagent will not finish its turn."""

    row: Literal["session_attempt_lost"] = "session_attempt_lost"
    attempt: int | None = None
    agent_id: str | None = None
    k: int | None = None
    turn_id: str | None = None
    reason: str | None = None
    host_status: str | None = None
    turn_status: str | None = None


class EvidencePlaced(RowModel):
    """The intent to write a step's flow evidence record under a new directory."""

    row: Literal["evidence_placed"] = "evidence_placed"
    evidence_assignment: dict[str, Any] | None = None
    evidence_cwd: str | None = None
    attempt: int | None = None
    marker: str | None = None


class CheckpointStarted(RowModel):
    """A continuation inside a resume's suffix took the checkpoint branch."""

    row: Literal["checkpoint_started"] = "checkpoint_started"
    handle: str | None = None
    branch: str | None = None


class TokensUnmeasured(RowModel):
    """A turn whose rollout could not be read: its tokens are not counted."""

    row: Literal["tokens_unmeasured"] = "tokens_unmeasured"
    pauses: bool = False
    k: int | None = None
    op: str | None = None
    marker: str | None = None
    attempt: int | None = None
    error: str | None = None


class SessionWake(RowModel):
    """A wake of the owner thread the run staged (flow row)."""

    row: Literal["session_wake"] = "session_wake"
    batch: str | None = None
    wake_id: str | None = None
    renotify: int | None = None
    ops: list[str] | None = None
    owner: str | None = None
    owner_status: str | None = None
    waiting_seconds: float | None = None
    staged: bool | None = None
    error: str | None = None
    reason: str | None = None


class MessageDelivery(RowModel):
    """The delivery of a staged wake, written by the daemon's settle."""

    row: Literal["message_delivery"] = "message_delivery"
    wake_id: str | None = None
    status: str | None = None
    error: str | None = None
    via: str | None = None
    """How it reached the owner: turn, resume_turn or after_turn."""
    turn_id: str | None = None
    """The owner's turn that carries it."""


class SessionHostWarning(RowModel):
    """What the session host adapter's marker search could not tie (flow row)."""

    row: Literal["session_host_warning"] = "session_host_warning"
    op: str | None = None
    warnings: list[HostWarning] | None = None


class RoleStoreChanged(RowModel):
    """Written by no command; an older run's journal may hold one (flow row)."""

    row: Literal["role_store_changed"] = "role_store_changed"
    pinned_digest: str | None = None
    store_digest: str | None = None


class PolicyRepinned(RowModel):
    """A resume took a role store that reads other pairs than the run pinned."""

    row: Literal["policy_repinned"] = "policy_repinned"
    pinned_digest: str | None = None
    store_digest: str | None = None
    role_pairs: RolePairs | None = None


class Escalation(RowModel):
    """The steps waited UnresponsiveAfter without a dispatched report (flow row)."""

    row: Literal["escalation"] = "escalation"
    reason: str | None = None
    owner: str | None = None
    ops: list[str] | None = None
    batch: str | None = None
    waiting_seconds: float | None = None


class StepUnwritten(RowModel):
    """A step whose packet or file could not be written: nothing was sent (flow row)."""

    row: Literal["step_unwritten"] = "step_unwritten"
    marker: str | None = None
    k: int | None = None
    attempt: int | None = None
    action: StepAction | None = None
    input_state: Literal["not_delivered"] = "not_delivered"
    error: str | None = None
    failures: int | None = None
    first_at: str | None = None
    last_at: str | None = None
    written: bool | None = None


class _DigestWarning(RowModel):
    """A trace digest that differs between the bind and the harvest (flow warning)."""

    before: str | None = None
    after: str | None = None
    where: str | None = None


class ReadRoleWrote(_DigestWarning):
    """P changed in the call of a role that changes nothing (flow warning)."""

    row: Literal["read_role_wrote"] = "read_role_wrote"


class ExecutorWroteOutside(_DigestWarning):
    """An executor's call changed the digest outside P (flow warning)."""

    row: Literal["executor_wrote_outside"] = "executor_wrote_outside"


class SharedStateChanged(_DigestWarning):
    """The run's shared state changed during a call (flow warning)."""

    row: Literal["shared_state_changed"] = "shared_state_changed"


class UnknownRow(RowModel):
    """A kind this catalogue does not know (a later crw's): kept as read."""

    row: str


def _kind_of(value: Any) -> str:
    kind = value.get("row") if isinstance(value, dict) else getattr(value, "row", None)
    return kind if isinstance(kind, str) and kind in _KNOWN_KINDS else "unknown"


Row = Annotated[
    Annotated[Started, Tag("started")]
    | Annotated[Prepared, Tag("prepared")]
    | Annotated[Completed, Tag("completed")]
    | Annotated[Reused, Tag("reused")]
    | Annotated[CrwCommit, Tag("crw_commit")]
    | Annotated[NullModel, Tag("null_model")]
    | Annotated[Held, Tag("held")]
    | Annotated[Superseded, Tag("superseded")]
    | Annotated[Paused, Tag("paused")]
    | Annotated[Cancelled, Tag("cancelled")]
    | Annotated[Decision, Tag("decision")]
    | Annotated[Ended, Tag("ended")]
    | Annotated[StepPublished, Tag("step_published")]
    | Annotated[ThreadStarted, Tag("thread_started")]
    | Annotated[TurnStarted, Tag("turn_started")]
    | Annotated[InterruptRequested, Tag("interrupt_requested")]
    | Annotated[SessionAttemptLost, Tag("session_attempt_lost")]
    | Annotated[EvidencePlaced, Tag("evidence_placed")]
    | Annotated[CheckpointStarted, Tag("checkpoint_started")]
    | Annotated[TokensUnmeasured, Tag("tokens_unmeasured")]
    | Annotated[SessionWake, Tag("session_wake")]
    | Annotated[MessageDelivery, Tag("message_delivery")]
    | Annotated[SessionHostWarning, Tag("session_host_warning")]
    | Annotated[RoleStoreChanged, Tag("role_store_changed")]
    | Annotated[PolicyRepinned, Tag("policy_repinned")]
    | Annotated[Escalation, Tag("escalation")]
    | Annotated[StepUnwritten, Tag("step_unwritten")]
    | Annotated[ReadRoleWrote, Tag("read_role_wrote")]
    | Annotated[ExecutorWroteOutside, Tag("executor_wrote_outside")]
    | Annotated[SharedStateChanged, Tag("shared_state_changed")]
    | Annotated[UnknownRow, Tag("unknown")],
    Discriminator(_kind_of),
]
"""Any row: the union of every kind, discriminated on `row`."""


def _members() -> dict[str, type[RowModel]]:
    union, _discriminator = get_args(Row)
    members: dict[str, type[RowModel]] = {}
    for member in get_args(union):
        model, *metadata = get_args(member)
        (tag,) = (item.tag for item in metadata if isinstance(item, Tag))
        members[tag] = model
    del members["unknown"]
    return members


ROW_KINDS: dict[str, type[RowModel]] = _members()
"""Every kind the catalogue knows, by its `row` name."""

_KNOWN_KINDS = frozenset(ROW_KINDS)

ROW_ADAPTER: TypeAdapter[Row] = TypeAdapter(Row, config=ConfigDict(defer_build=True))


def parse_row(data: dict[str, Any]) -> RowModel:
    """Validate one journal line's object into its row model.

    Raises:
        pydantic.ValidationError: the object names no kind, or a field of a known
            kind has the wrong type or a value outside the set the spec fixes.
    """
    return ROW_ADAPTER.validate_python(data)


def dump_row(row: RowModel) -> dict[str, Any]:
    """The row as the JSON object of its journal line: `seq, at, row, call` first,
    fields left unset as None left out, unknown fields exactly as they were read.

    Values the row holds as read (unknown fields, `result`) are shared with the
    answer, not copied: serialize it, do not change it. Every field is already a
    JSON value, so the Python dump is the JSON one; unlike pydantic's JSON mode it
    keeps a dict key that is not valid Unicode (a lone surrogate)."""
    body = row.model_dump(exclude_none=True)
    body.update(row.model_extra or {})
    head = {key: body.pop(key) for key in ("seq", "at", "row", "call") if key in body}
    return head | body


def backend_of(started: Started) -> str:
    """The backend a started row records; a row that records none is an App
    Server run's (spec: GEN-10)."""
    return started.backend if started.backend is not None else "app-server"


def rows_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a journal row: every kind of the
    catalogue, as `crw flow schema rows` prints it."""
    schema = ROW_ADAPTER.json_schema(mode="validation")
    defs = schema["$defs"]
    # A line always names its kind, and a kind the catalogue knows is never an
    # UnknownRow: so exactly one member of the oneOf matches any row.
    for model in ROW_KINDS.values():
        definition = defs[model.__name__]
        definition["required"] = ["row", *definition.get("required", [])]
    defs[UnknownRow.__name__]["properties"]["row"]["not"] = {"enum": sorted(ROW_KINDS)}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "crw journal row"
    return schema
