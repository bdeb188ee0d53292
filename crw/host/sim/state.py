"""What the simulated host knows: threads, turns, items and token counts.

Plain data and the wire shapes the real `codex app-server` 0.163.0 gives them
(host-protocol.md, Objects); no I/O and no Trio. Only the fields crw reads are
modelled, with the names and nullability of the generated protocol schema.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

CLI_VERSION = "0.163.0"
MODEL_PROVIDER = "sim"
DEFAULT_MODEL = "sim-model"
MODEL_CONTEXT_WINDOW = 258400

INTERACTIVE_KINDS = frozenset({"cli", "vscode", "exec", "appServer", "unknown"})
"""The source kinds `thread/list` lists when it is given none."""

SUBAGENT_KINDS = frozenset({"subAgent", "subAgentThreadSpawn"})
NICKNAMES = ("Euclid", "Noether", "Turing", "Hopper", "Lovelace", "Gauss", "Curie", "Dirac")


class RpcError(Exception):
    """A JSON-RPC error answer, as the real host words it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def uuid_refusal(thread_id: str) -> str | None:
    """codex's refusal of a v2 child's path (`/root/<name>`) read as a thread id
    (it takes only uuids: `invalid thread id: invalid character: …`); None for
    any other id. Other ids that are no uuid are still `thread not found`, so a
    test may name a thread that does not exist in plain words."""
    if not thread_id.startswith("/"):
        return None
    return (
        "invalid thread id: invalid character: expected an optional prefix of "
        "`urn:uuid:` followed by [0-9a-fA-F-], found `/` at 1"
    )


def invalid_request(message: str) -> RpcError:
    """The host's answer to a request it cannot do: code -32600."""
    return RpcError(-32600, message)


@dataclass
class Usage:
    """Token counts of one model response, or a thread's running sum of them."""

    input: int = 0
    cached_input: int = 0
    output: int = 0
    reasoning_output: int = 0

    @property
    def total(self) -> int:
        """As the real host counts it: input plus output (their parts are inside)."""
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.cached_input + other.cached_input,
            self.output + other.output,
            self.reasoning_output + other.reasoning_output,
        )

    def wire(self) -> dict[str, int]:
        """A `TokenUsageBreakdown` of `thread/tokenUsage/updated`."""
        return {
            "totalTokens": self.total,
            "inputTokens": self.input,
            "cachedInputTokens": self.cached_input,
            "cacheWriteInputTokens": 0,
            "outputTokens": self.output,
            "reasoningOutputTokens": self.reasoning_output,
        }

    def rollout(self) -> dict[str, int]:
        """The same counts as a rollout file's `token_count` spells them."""
        return {
            "input_tokens": self.input,
            "cached_input_tokens": self.cached_input,
            "cache_write_input_tokens": 0,
            "output_tokens": self.output,
            "reasoning_output_tokens": self.reasoning_output,
            "total_tokens": self.total,
        }


def turn_text(turn: Turn) -> str:
    """The text of the turn's first user message (its marker is on the first line)."""
    for item in turn.items:
        if item["type"] == "userMessage":
            return "\n".join(c.get("text", "") for c in item["content"] if c["type"] == "text")
    return ""


@dataclass
class Turn:
    """One turn; `started_at`/`completed_at` are wall seconds, as on the wire."""

    id: str
    started_at: int
    items: list[dict[str, Any]] = field(default_factory=list)
    status: str = "inProgress"
    error: dict[str, Any] | None = None
    completed_at: int | None = None
    duration_ms: int | None = None
    started_clock: float = 0.0
    """When it started on Trio's clock (its durationMs); not on the wire."""

    def copy(self) -> Turn:
        return copy.deepcopy(self)

    def wire(self, items_view: str = "full") -> dict[str, Any]:
        """The turn as the host sends it; `items_view` is how much of it."""
        if items_view == "notLoaded":
            items: list[dict[str, Any]] = []
        elif items_view == "summary":
            items = [i for i in self.items if i["type"] != "userMessage"]
        else:
            items = self.items
        return {
            "id": self.id,
            "rootTurnId": self.id,
            "items": list(items),  # items are never changed in place (`Turns.item`)
            "itemsView": items_view,
            "status": self.status,
            "error": copy.deepcopy(self.error),
            "startedAt": self.started_at,
            "completedAt": self.completed_at,
            "durationMs": self.duration_ms,
        }


@dataclass
class Thread:
    """One thread: an interactive one (the owner, an app-server call) or a subagent."""

    id: str
    seq: int
    cwd: str
    model: str
    path: str
    created_at: int
    reasoning_effort: str | None = None
    parent_thread_id: str | None = None
    forked_from_id: str | None = None
    session_id: str = ""
    depth: int = 0
    agent_role: str | None = None
    agent_nickname: str | None = None
    agent_path: str | None = None
    """A multi-agent v2 child's `/root/<task_name>` (`crw.host.sim.multi_agent_v2`)."""
    multi_agent_v2: bool = False
    """An owner given multi-agent v2's tools instead of v1's."""
    tasks: list[str] = field(default_factory=list)
    """The tasks a v2 child was given: inter-agent messages, no thread item."""
    status: str = "idle"
    updated_at: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    tokens: Usage = field(default_factory=Usage)
    _preview: tuple[list[Turn], str] | None = field(default=None, repr=False, compare=False)
    """The turns list `preview` found its text in, and the text (`preview`)."""

    @property
    def is_subagent(self) -> bool:
        return self.parent_thread_id is not None

    @property
    def source_kind(self) -> str:
        """The `sourceKinds` value of `thread/list` this thread is listed under."""
        return "subAgentThreadSpawn" if self.is_subagent else "vscode"

    def status_wire(self) -> dict[str, Any]:
        if self.status == "active":
            return {"type": "active", "activeFlags": []}
        return {"type": self.status}

    def spawn_source(self) -> dict[str, Any]:
        """`thread_spawn` of a subagent's source (snake_case inside, as the host)."""
        return {
            "parent_thread_id": self.parent_thread_id,
            "depth": self.depth,
            "agent_path": self.agent_path,
            "agent_nickname": self.agent_nickname,
            "agent_role": self.agent_role,
        }

    def active_turn(self) -> Turn | None:
        if self.turns and self.turns[-1].status == "inProgress":
            return self.turns[-1]
        return None

    def turn(self, turn_id: str) -> Turn | None:
        return next((t for t in self.turns if t.id == turn_id), None)

    def preview(self) -> str:
        """The text of the first turn that has one (every `thread/read` and each
        thread of a `thread/list` page shows it). Found once: a turn's first user
        message is never changed, the turns before it ended without one, and a
        thread's turns are only appended to (a fork gets a list of its own), so
        the preview found stands while that turn is still at its place."""
        kept = self._preview
        if kept is not None and kept[0] is self.turns:
            return kept[1]
        for turn in self.turns:
            text = turn_text(turn)
            if text:
                self._preview = (self.turns, text)
                return text
        return ""

    def result(
        self, *, include_turns: bool = False, wire: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The result of thread/start, thread/resume and thread/fork; `wire`, the
        thread's `wire()` when the caller made it already (never changed after)."""
        return {
            "thread": self.wire(include_turns=include_turns) if wire is None else wire,
            "model": self.model,
            "modelProvider": MODEL_PROVIDER,
            "reasoningEffort": self.reasoning_effort,
            "cwd": self.cwd,
            "approvalPolicy": "never",
            "approvalsReviewer": "user",
            "sandbox": {"type": "dangerFullAccess"},
        }

    def wire(self, *, include_turns: bool = False) -> dict[str, Any]:
        """The `Thread` object; turns only when asked for, as `thread/read` does."""
        source: Any = {"subAgent": {"thread_spawn": self.spawn_source()}}
        return {
            "id": self.id,
            "sessionId": self.session_id,
            "forkedFromId": self.forked_from_id,
            "parentThreadId": self.parent_thread_id,
            "preview": self.preview(),
            "ephemeral": False,
            "modelProvider": MODEL_PROVIDER,
            "model": self.model,
            "reasoningEffort": self.reasoning_effort,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at or self.created_at,
            "status": self.status_wire(),
            "path": self.path,
            "cwd": self.cwd,
            "cliVersion": CLI_VERSION,
            "source": source if self.is_subagent else "vscode",
            "threadSource": "subagent" if self.is_subagent else None,
            "agentNickname": self.agent_nickname,
            "agentRole": self.agent_role,
            "name": None,
            "turns": [t.wire() for t in self.turns] if include_turns else [],
        }


@dataclass
class SimState:
    """Every thread the host knows, loaded or not, in creation order."""

    threads: dict[str, Thread] = field(default_factory=dict)

    def add(self, thread: Thread) -> Thread:
        self.threads[thread.id] = thread
        return thread

    def new_thread(
        self,
        thread_id: str,
        params: dict[str, Any],
        *,
        path: str,
        wall: float,
        parent: Thread | None = None,
        role: str | None = None,
    ) -> Thread:
        """Add a thread made from thread/start-like `params` (`cwd`, `model`,
        `effort`, `config`); a subagent of `parent` inherits its settings."""
        config = dict(params.get("config") or {})
        thread = self.add(
            Thread(
                id=thread_id,
                seq=len(self.threads),
                cwd=params.get("cwd") or (parent.cwd if parent else "/"),
                model=params.get("model") or (parent.model if parent else DEFAULT_MODEL),
                reasoning_effort=params.get("effort") or config.get("model_reasoning_effort"),
                path=path,
                created_at=int(wall),
                config=(parent.config if parent else {}) | config,
            )
        )
        thread.session_id = parent.session_id if parent else thread.id
        if parent is not None:
            thread.parent_thread_id = parent.id
            thread.depth = parent.depth + 1
            thread.agent_role = role
            thread.agent_nickname = NICKNAMES[thread.seq % len(NICKNAMES)]
        return thread

    def find(self, thread_id: str, missing: str) -> Thread:
        """The thread, or the -32600 error `missing` (each method words it its own
        way: `thread not loaded: <id>`, `no rollout found for thread id <id>`); an
        id that is no uuid is refused as codex refuses it (`uuid_refusal`)."""
        thread = self.threads.get(thread_id)
        if thread is None:
            raise invalid_request(uuid_refusal(thread_id) or missing)
        return thread

    def loaded(self, thread_id: str) -> Thread:
        """A thread turn/start and turn/interrupt can act on: in memory, not notLoaded."""
        refused = uuid_refusal(thread_id)
        if refused is not None:
            raise invalid_request(refused)
        thread = self.threads.get(thread_id)
        if thread is None or thread.status == "notLoaded":
            raise invalid_request(f"thread not found: {thread_id}")
        return thread

    def listed(self, source_kinds: list[str] | None, cwd: str | None) -> Iterator[Thread]:
        """`thread/list`'s selection, newest first, made as it is read: a page of the
        newest costs its own length, not the host's every thread (`threads` is in
        creation order, `seq` order, as nothing is ever removed from it). A
        multi-agent v2 child is never listed, as codex lists none."""
        kinds = set(source_kinds or ()) or INTERACTIVE_KINDS
        if "subAgent" in kinds:
            kinds |= SUBAGENT_KINDS
        return (
            t
            for t in reversed(self.threads.values())
            if t.source_kind in kinds and (cwd is None or t.cwd == cwd) and t.agent_path is None
        )

    def loaded_ids(self) -> list[str]:
        return [t.id for t in self.threads.values() if t.status != "notLoaded"]


def page(values: Iterable[Any], params: dict[str, Any]) -> tuple[list[Any], str | None]:
    """One page of `values` from the request's opaque `cursor` (an offset here) and
    `limit`, and the cursor of the next page (None on the last). Reads `values`
    only through the page and one past it."""
    cursor = params.get("cursor")
    start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    limit = params.get("limit")
    if not (isinstance(limit, int) and limit > 0):
        return list(itertools.islice(values, start, None)), None
    taken = list(itertools.islice(values, start, start + limit + 1))
    return taken[:limit], (str(start + limit) if len(taken) > limit else None)


def fork_turns(source: Thread, last_turn_id: str | None) -> list[Turn]:
    """The completed history a fork takes: the ended turns up to `last_turn_id`."""
    taken: list[Turn] = []
    for turn in source.turns:
        if turn.status != "inProgress":
            taken.append(turn.copy())
        if turn.id == last_turn_id:
            break
    return taken


# The read-only methods: pure answers over the state.


def read_thread(state: SimState, params: dict[str, Any]) -> dict[str, Any]:
    """`thread/read {threadId, includeTurns}`."""
    thread_id = str(params.get("threadId"))
    thread = state.find(thread_id, f"thread not loaded: {thread_id}")
    if params.get("includeTurns") and not thread.turns:
        # As codex 0.163 answers a thread whose rollout holds no turn yet.
        raise RpcError(-32601, "list_turns is not supported yet")
    return {"thread": thread.wire(include_turns=bool(params.get("includeTurns")))}


def list_threads(state: SimState, params: dict[str, Any]) -> dict[str, Any]:
    """`thread/list {cursor, limit, sourceKinds, cwd}`, newest first."""
    data, cursor = page(state.listed(params.get("sourceKinds"), params.get("cwd")), params)
    return {"data": [t.wire() for t in data], "nextCursor": cursor, "backwardsCursor": None}


def list_loaded(state: SimState, params: dict[str, Any]) -> dict[str, Any]:
    """`thread/loaded/list {cursor, limit}`: the ids of threads in memory."""
    data, cursor = page(state.loaded_ids(), params)
    return {"data": data, "nextCursor": cursor}


def list_turns(state: SimState, params: dict[str, Any]) -> dict[str, Any]:
    """`thread/turns/list {threadId, cursor, limit, itemsView, sortDirection}`:
    newest first and `summary` items unless asked otherwise, as the host."""
    thread_id = str(params.get("threadId"))
    thread = state.find(thread_id, f"thread not loaded: {thread_id}")
    turns = thread.turns if params.get("sortDirection") == "asc" else thread.turns[::-1]
    data, cursor = page(turns, params)
    view = params.get("itemsView") or "summary"
    return {"data": [t.wire(view) for t in data], "nextCursor": cursor, "backwardsCursor": None}
