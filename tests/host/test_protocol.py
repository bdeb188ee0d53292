"""The app-server protocol models: lenient, typed where crw reads, both error forms."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crw.host.protocol import (
    AgentMessage,
    CollabAgentToolCall,
    ErrorNotification,
    HostProtocolError,
    ItemNotification,
    Notification,
    OtherItem,
    Thread,
    ThreadClosed,
    ThreadStarted,
    ThreadStatusChanged,
    TokenUsageUpdated,
    Turn,
    TurnError,
    TurnNotification,
    UserMessage,
)
from crw.host.transport import HostError

# A thread/start answer's thread from codex app-server 0.163.0, as it came.
REAL_THREAD: dict[str, Any] = {
    "id": "01a228ec-5d2e-71d0-92d1-bd40308e3711",
    "environments": [{"environmentId": "local", "cwd": "/tmp/h", "runtimeWorkspaceRoots": []}],
    "extra": None,
    "sessionId": "01a228ec-5d2e-71d0-92d1-bd40308e3711",
    "forkedFromId": None,
    "parentThreadId": None,
    "preview": "",
    "ephemeral": False,
    "historyMode": "paginated",
    "modelProvider": "mock",
    "model": "gpt-5.5",
    "reasoningEffort": None,
    "createdAt": 1795982908,
    "updatedAt": 1795982908,
    "recencyAt": 1795982908,
    "status": {"type": "idle"},
    "path": "/tmp/h/sessions/2026/11/29/rollout-2026-11-29T20-08-28-01a2.jsonl",
    "cwd": "/tmp/h",
    "cliVersion": "0.163.0",
    "originator": "crw",
    "source": "vscode",
    "canAcceptDirectInput": True,
    "threadSource": None,
    "agentNickname": None,
    "agentRole": None,
    "gitInfo": None,
    "name": None,
    "turns": [],
}

IDLE = {"type": "idle"}
SUBAGENT_SOURCE = {
    "subAgent": {
        "thread_spawn": {
            "parent_thread_id": "owner",
            "depth": 1,
            "agent_path": "/root/x",
            "agent_nickname": "Ada",
            "agent_role": "reviewer",
        }
    }
}


def turn(**fields: Any) -> dict[str, Any]:
    return {"id": "turn-1", "status": "completed", "items": [], **fields}


def test_real_thread_start_answer_parses_ignoring_unknown_fields() -> None:
    thread = Thread.model_validate(REAL_THREAD)
    assert thread.id == REAL_THREAD["id"]
    assert thread.status.type == "idle"
    assert thread.source == "vscode"
    assert thread.parentThreadId is None
    assert thread.path is not None and thread.path.endswith(".jsonl")
    assert not hasattr(thread, "historyMode")


def test_subagent_thread_keeps_parent_and_nested_source() -> None:
    thread = Thread.model_validate(
        {
            "id": "child",
            "status": {"type": "active", "activeFlags": ["waitingOnApproval"]},
            "parentThreadId": "owner",
            "threadSource": "subagent",
            "source": SUBAGENT_SOURCE,
            "agentRole": "reviewer",
        }
    )
    assert thread.parentThreadId == "owner"
    assert thread.status.activeFlags == ["waitingOnApproval"]
    assert thread.source == SUBAGENT_SOURCE


def test_thread_without_status_does_not_fit() -> None:
    with pytest.raises(ValueError):
        Thread.model_validate({"id": "t"})


def test_items_are_typed_by_their_tag_and_unknown_types_kept() -> None:
    parsed = Turn.model_validate(
        turn(
            items=[
                {"type": "userMessage", "id": "u", "content": [{"type": "text", "text": "hi"}]},
                {"type": "agentMessage", "id": "a", "text": "done", "phase": "final_answer"},
                {"type": "collabAgentToolCall", "id": "c", "tool": "spawnAgent"},
                {"type": "commandExecution", "id": "x", "command": "ls", "exitCode": 0},
                {"type": "somethingNew", "id": "y", "payload": {"deep": [1, 2]}},
            ]
        )
    )
    assert [type(item) for item in parsed.items] == [
        UserMessage,
        AgentMessage,
        CollabAgentToolCall,
        OtherItem,
        OtherItem,
    ]
    assert [item.type for item in parsed.items][3:] == ["commandExecution", "somethingNew"]


def test_agent_message_phase_null_is_unknown() -> None:
    message = AgentMessage.model_validate({"type": "agentMessage", "id": "a", "text": "x"})
    assert message.phase is None


def test_user_message_first_text_skips_other_inputs() -> None:
    """The marker line is in the first text input of the turn."""
    message = UserMessage.model_validate(
        {
            "type": "userMessage",
            "id": "u",
            "content": [
                {"type": "image", "url": "https://x/y.png"},
                {"type": "text", "text": "crw-flow-op: build.1/t1-a1\nCRW-ROLE: coder"},
                {"type": "text", "text": "second"},
            ],
        }
    )
    assert message.first_text() == "crw-flow-op: build.1/t1-a1\nCRW-ROLE: coder"
    assert UserMessage.model_validate({"id": "u", "content": []}).first_text() is None


def test_spawn_call_completed_names_the_child_and_its_state() -> None:
    call = CollabAgentToolCall.model_validate(
        {
            "type": "collabAgentToolCall",
            "id": "c",
            "tool": "spawnAgent",
            "status": "completed",
            "senderThreadId": "owner",
            "receiverThreadIds": ["child"],
            "prompt": "crw-flow-op: build.1/t1-a1",
            "model": "gpt-5.5",
            "reasoningEffort": "low",
            "agentsStates": {"child": {"status": "pendingInit", "message": None}},
        }
    )
    assert call.receiverThreadIds == ["child"]
    assert call.agentsStates["child"].status == "pendingInit"


def test_codex_error_info_string_form_gives_its_kind() -> None:
    error = TurnError.model_validate(
        {"message": "quota", "codexErrorInfo": "usageLimitExceeded", "additionalDetails": None}
    )
    assert error.kind == "usageLimitExceeded"


def test_codex_error_info_object_form_gives_its_one_key() -> None:
    error = TurnError.model_validate(
        {"message": "502", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 502}}}
    )
    assert error.kind == "httpConnectionFailed"
    assert error.codexErrorInfo == {"httpConnectionFailed": {"httpStatusCode": 502}}


def test_codex_error_info_absent_has_no_kind() -> None:
    assert TurnError.model_validate({"message": "x", "codexErrorInfo": None}).kind is None
    assert TurnError.model_validate({}).kind is None


def test_failed_turn_carries_its_error() -> None:
    parsed = Turn.model_validate(
        turn(
            status="failed",
            error={"message": "context", "codexErrorInfo": "contextWindowExceeded"},
            durationMs=120,
        )
    )
    assert parsed.error is not None and parsed.error.kind == "contextWindowExceeded"


@pytest.mark.parametrize(
    ("method", "params", "model"),
    [
        ("turn/started", {"threadId": "t", "turn": turn(status="inProgress")}, TurnNotification),
        ("turn/completed", {"threadId": "t", "turn": turn()}, TurnNotification),
        ("thread/started", {"thread": REAL_THREAD}, ThreadStarted),
        (
            "thread/status/changed",
            {"threadId": "t", "status": {"type": "idle"}},
            ThreadStatusChanged,
        ),
        ("thread/closed", {"threadId": "t"}, ThreadClosed),
        ("item/started", {"threadId": "t", "turnId": "u", "item": {"type": "x"}}, ItemNotification),
        (
            "item/completed",
            {"threadId": "t", "turnId": "u", "item": {"type": "agentMessage", "id": "a"}},
            ItemNotification,
        ),
        (
            "error",
            {"threadId": "t", "turnId": "u", "error": {"message": "m"}, "willRetry": False},
            ErrorNotification,
        ),
        (
            "thread/tokenUsage/updated",
            {"threadId": "t", "turnId": "u", "tokenUsage": {"total": {}, "last": {}}},
            TokenUsageUpdated,
        ),
    ],
)
def test_known_notifications_parse_to_their_params(
    method: str, params: dict[str, Any], model: type[Any]
) -> None:
    assert isinstance(Notification(method=method, params=params).parse(), model)


def test_unknown_notification_parses_to_none() -> None:
    note = Notification(method="item/agentMessage/delta", params={"delta": "x"})
    assert note.parse() is None


def test_malformed_known_notification_is_a_host_error_naming_it() -> None:
    note = Notification(method="turn/completed", params={"threadId": "t"})
    with pytest.raises(HostProtocolError, match="turn/completed") as caught:
        note.parse()
    assert isinstance(caught.value, HostError)
    assert "\n" not in str(caught.value)


def test_token_usage_parts_missing_read_as_zero() -> None:
    note = Notification(
        method="thread/tokenUsage/updated",
        params={
            "threadId": "t",
            "turnId": "u",
            "tokenUsage": {
                "total": {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10},
                "last": {"totalTokens": 30, "inputTokens": 20, "cachedInputTokens": 5},
                "modelContextWindow": 272000,
            },
        },
    )
    params = note.parse()
    assert isinstance(params, TokenUsageUpdated)
    assert params.tokenUsage.total.model_dump() == {
        "totalTokens": 30,
        "inputTokens": 20,
        "cachedInputTokens": 0,
        "cacheWriteInputTokens": 0,
        "outputTokens": 10,
        "reasoningOutputTokens": 0,
    }
    assert params.tokenUsage.last.cachedInputTokens == 5
    assert params.tokenUsage.modelContextWindow == 272000


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


_UNKNOWN_OF_EVERY_KIND: dict[str, Any] = {
    "zzNull": None,
    "zzFlag": True,
    "zzCount": -7,
    "zzText": "é\n",
    "zzList": [1, "a", None, [], {}],
    "zzObject": {"id": "other", "status": {"type": "active"}, "items": [{"type": "x"}]},
}
"""An unknown field of each JSON kind, the object one shaped like the known fields
beside it (its `id`, `status`, `items` are not the thread's or the turn's)."""


@settings(max_examples=25)
@example(extra=_UNKNOWN_OF_EVERY_KIND)
@given(extra=st.dictionaries(st.text(min_size=1, max_size=12).map(lambda k: "zz" + k), _json))
def test_unknown_fields_anywhere_change_nothing(extra: dict[str, Any]) -> None:
    """Fields a newer host adds are ignored on threads, turns and items alike: the
    explicit example gives every level an unknown field of each JSON kind at once,
    the 25 drawn ones other names and nestings."""
    data = {
        **REAL_THREAD,
        **extra,
        "turns": [
            turn(
                **extra,
                items=[{"type": "agentMessage", "id": "a", "text": "x", **extra}],
                error={"message": "m", **extra},
            )
        ],
    }
    plain = {
        **REAL_THREAD,
        "turns": [
            turn(items=[{"type": "agentMessage", "id": "a", "text": "x"}], error={"message": "m"})
        ],
    }
    assert Thread.model_validate(data) == Thread.model_validate(plain)
