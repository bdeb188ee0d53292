"""The subset of the Codex app-server protocol (v2) that crw reads, as pydantic models.

Field names are the wire's camelCase names, so a reader greps host-protocol.md's
words and finds them here. Every model ignores fields it does not know, and a field
is required only when the protocol always sends it: the protocol moves between
releases (host-protocol.md), and the simulated host sends only what crw reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from crw.host.errors import HostError

M = TypeVar("M", bound=BaseModel)


class HostProtocolError(HostError):
    """The host sent something that does not fit the protocol."""


def parse_model(model: type[M], data: Any, what: str) -> M:
    """`data` as a `model`; a mismatch is a HostProtocolError naming `what`."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise HostProtocolError(
            f"the host sent {what} that does not fit the protocol: "
            f"{where}: {first['msg']} ({err.error_count()} error(s))"
        ) from err


class _Wire(BaseModel):
    # Built at first use: a process reads a few of these (a session run, its
    # thread pages; a command, none), and building them all is most of this import.
    model_config = ConfigDict(extra="ignore", defer_build=True)


class ThreadStatus(_Wire):
    """`notLoaded | idle | systemError | active` (with `activeFlags`)."""

    type: str
    activeFlags: list[str] = Field(default_factory=list)


class UserMessage(_Wire):
    type: Literal["userMessage"] = "userMessage"
    id: str
    content: list[dict[str, Any]] = Field(default_factory=list)

    def first_text(self) -> str | None:
        """The text of the first text input: where a turn's marker line is."""
        for part in self.content:
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                return str(part["text"])
        return None


class AgentMessage(_Wire):
    type: Literal["agentMessage"] = "agentMessage"
    id: str
    text: str = ""
    phase: str | None = None
    """`commentary | partial_answer | final_answer`; None is "unknown"."""


class CollabAgentState(_Wire):
    status: str
    """`pendingInit | running | interrupted | completed | errored | shutdown | notFound`."""
    message: str | None = None


class CollabAgentToolCall(_Wire):
    """The owner's (or a subagent's) call of a multi-agent tool."""

    type: Literal["collabAgentToolCall"] = "collabAgentToolCall"
    id: str
    tool: str = ""
    """`spawnAgent | sendInput | resumeAgent | wait | closeAgent | …`."""
    status: str = ""
    """`inProgress | completed | failed | interrupted`."""
    senderThreadId: str | None = None
    receiverThreadIds: list[str] = Field(default_factory=list)
    """Empty on item/started of a spawn; item/completed has the child's id."""
    prompt: str | None = None
    model: str | None = None
    reasoningEffort: str | None = None
    agentsStates: dict[str, CollabAgentState] = Field(default_factory=dict)


class SubAgentActivity(_Wire):
    """On multi-agent v2, the owner's item for a child it spawned (`kind` started),
    messaged or followed up (`interacted`), or that finished (`completed`)."""

    type: Literal["subAgentActivity"] = "subAgentActivity"
    id: str
    """For a spawn, the tool call's id (the spawn hook's `tool_use_id`)."""
    kind: str = ""
    agentThreadId: str | None = None
    agentPath: str | None = None
    """`/root/<task_name>`."""
    model: str | None = None
    reasoningEffort: str | None = None


class OtherItem(_Wire):
    """An item of a type crw does not read (commands, reasoning, file changes, …)."""

    type: str
    id: str | None = None


_ITEM_TAGS = frozenset({"userMessage", "agentMessage", "collabAgentToolCall", "subAgentActivity"})


def _item_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _ITEM_TAGS else "other"


ThreadItem = Annotated[
    Annotated[UserMessage, Tag("userMessage")]
    | Annotated[AgentMessage, Tag("agentMessage")]
    | Annotated[CollabAgentToolCall, Tag("collabAgentToolCall")]
    | Annotated[SubAgentActivity, Tag("subAgentActivity")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_tag),
]


class TurnError(_Wire):
    message: str = ""
    codexErrorInfo: str | dict[str, Any] | None = None
    additionalDetails: str | None = None

    @property
    def kind(self) -> str | None:
        """The error's kind in either wire form: `"usageLimitExceeded"`, or the one
        key of `{"httpConnectionFailed": {"httpStatusCode": 502}}`."""
        info = self.codexErrorInfo
        if isinstance(info, dict):
            return next(iter(info), None)
        return info


class Turn(_Wire):
    id: str
    rootTurnId: str | None = None
    items: list[ThreadItem] = Field(default_factory=list)
    itemsView: str | None = None
    status: str
    """`completed | interrupted | failed | inProgress`."""
    error: TurnError | None = None
    startedAt: int | None = None
    completedAt: int | None = None
    durationMs: int | None = None


class Thread(_Wire):
    id: str
    sessionId: str | None = None
    forkedFromId: str | None = None
    parentThreadId: str | None = None
    """Set only on a subagent: its owner."""
    preview: str = ""
    ephemeral: bool = False
    modelProvider: str | None = None
    model: str | None = None
    reasoningEffort: str | None = None
    createdAt: int | None = None
    updatedAt: int | None = None
    status: ThreadStatus
    path: str | None = None
    """The rollout file."""
    cwd: str | None = None
    cliVersion: str | None = None
    source: str | dict[str, Any] | None = None
    threadSource: str | None = None
    agentNickname: str | None = None
    agentRole: str | None = None
    name: str | None = None
    turns: list[Turn] = Field(default_factory=list)

    @property
    def agent_path(self) -> str | None:
        """A spawned subagent's path (`source.subAgent.thread_spawn.agent_path`):
        `/root/<task_name>` on multi-agent v2; None when the host names none."""
        source = self.source if isinstance(self.source, dict) else {}
        sub = source.get("subAgent")
        spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
        path = spawn.get("agent_path") if isinstance(spawn, dict) else None
        return path if isinstance(path, str) else None


class TokenBreakdown(_Wire):
    totalTokens: int = 0
    inputTokens: int = 0
    cachedInputTokens: int = 0
    cacheWriteInputTokens: int = 0
    outputTokens: int = 0
    reasoningOutputTokens: int = 0


class ThreadTokenUsage(_Wire):
    total: TokenBreakdown = Field(default_factory=TokenBreakdown)
    """Cumulative for the thread."""
    last: TokenBreakdown = Field(default_factory=TokenBreakdown)
    """The last model response."""
    modelContextWindow: int | None = None


class TurnNotification(_Wire):
    """`turn/started` and `turn/completed` (a summary turn: read the full items)."""

    threadId: str
    turn: Turn


class ThreadStarted(_Wire):
    """`thread/started` (none for a subagent)."""

    thread: Thread


class ThreadStatusChanged(_Wire):
    threadId: str
    status: ThreadStatus


class ThreadClosed(_Wire):
    threadId: str


class TokenUsageUpdated(_Wire):
    """`thread/tokenUsage/updated`."""

    threadId: str
    turnId: str | None = None
    tokenUsage: ThreadTokenUsage


class ItemNotification(_Wire):
    """`item/started` and `item/completed`."""

    threadId: str
    turnId: str | None = None
    item: ThreadItem


class ErrorNotification(_Wire):
    """`error`: a turn's error; `willRetry: false` means the turn fails."""

    threadId: str
    turnId: str | None = None
    error: TurnError
    willRetry: bool = False


NotificationParams = (
    TurnNotification
    | ThreadStarted
    | ThreadStatusChanged
    | ThreadClosed
    | TokenUsageUpdated
    | ItemNotification
    | ErrorNotification
)

NOTIFICATION_PARAMS: dict[str, type[NotificationParams]] = {
    "turn/started": TurnNotification,
    "turn/completed": TurnNotification,
    "thread/started": ThreadStarted,
    "thread/status/changed": ThreadStatusChanged,
    "thread/closed": ThreadClosed,
    "thread/tokenUsage/updated": TokenUsageUpdated,
    "item/started": ItemNotification,
    "item/completed": ItemNotification,
    "error": ErrorNotification,
}
"""The notifications crw reads, by method, and the model of their params."""


class Notification(_Wire):
    """One notification as it came, its params untyped until `parse()`."""

    method: str
    params: dict[str, Any] = Field(default_factory=dict)
    emittedAtMs: int | None = None

    def parse(self) -> NotificationParams | None:
        """The typed params, or None for a method crw does not read.

        Raises:
            HostProtocolError: the params of a known method do not fit its model.
        """
        model = NOTIFICATION_PARAMS.get(self.method)
        if model is None:
            return None
        return parse_model(model, self.params, f"a {self.method} notification")


class ThreadPage(_Wire):
    """A `thread/list` answer."""

    data: list[Thread] = Field(default_factory=list)
    nextCursor: str | None = None


class ThreadIdPage(_Wire):
    """A `thread/loaded/list` answer."""

    data: list[str] = Field(default_factory=list)
    nextCursor: str | None = None


NOTIFICATION_METHODS = frozenset(
    {
        "thread/started",
        "thread/status/changed",
        "thread/closed",
        "thread/name/updated",
        "thread/tokenUsage/updated",
        "turn/started",
        "turn/completed",
        "turn/diff/updated",
        "turn/plan/updated",
        "item/started",
        "item/completed",
        "item/agentMessage/delta",
        "item/plan/delta",
        "item/reasoning/summaryTextDelta",
        "item/reasoning/summaryPartAdded",
        "item/reasoning/textDelta",
        "item/commandExecution/outputDelta",
        "item/fileChange/outputDelta",
        "hook/started",
        "hook/completed",
        "account/rateLimits/updated",
        "error",
    }
)
"""What a turn streams to every client: methods codex sends only as notifications
(`ServerNotification` of `generate-json-schema`, 0.163; none is a method of the
host's own requests, which must always be read and refused). A client drops those
no subscription of its wants before decoding them."""
