"""The bind decision: every reply of the spec's table, the pair rules, the rows of a
bind, and the marker lookup, over host snapshots shaped like codex 0.163's."""

from __future__ import annotations

from typing import Any

import pytest

from crw.engine.config.roles import RolePair
from crw.engine.steps.bind import (
    MAX_RETRIES,
    AttemptState,
    Bound,
    Decision,
    PublishedStep,
    Reply,
    Report,
    decide_bind,
    decide_report,
    find_marker_turn,
    marker_of,
    reply_pair,
    turn_marker,
)
from crw.engine.steps.lookup import find_spawned, strays
from crw.engine.steps.packet import send_input_message, spawn_message
from crw.engine.steps.replies import CallRecord
from crw.host.protocol import Thread
from crw.journal.rows import ThreadStarted, TurnStarted

RUN = "run-1"
OWNER = "019a0000-0000-7000-8000-000000000001"
AGENT = "019a0000-0000-7000-8000-0000000000a1"
OTHER_AGENT = "019a0000-0000-7000-8000-0000000000b2"
P = "/work/runs/run-1/build.1"
HOST_CWD = "/home/owner/project"
ROLLOUT = "/home/owner/.codex/sessions/2026/11/29/rollout-2026-11-29T20-08-28-019a.jsonl"
MARKER = "build.1/t1-a1"
PAIR = RolePair(agent_type="executor", model="gpt-5.5", effort="high")


def packet(call: str = "build.1", k: int = 1, attempt: int = 1, run: str = RUN) -> str:
    return f"/state/flow/{run}/steps/{call}/packet-t{k}-a{attempt}.md"


def spawn_text(call: str = "build.1", k: int = 1, attempt: int = 1, run: str = RUN) -> str:
    return spawn_message(call, k, attempt, "executor", P, packet(call, k, attempt, run))


def user_message(text: str, item_id: str = "item-u") -> dict[str, Any]:
    return {
        "type": "userMessage",
        "id": item_id,
        "content": [{"type": "text", "text": text, "text_elements": []}],
    }


def host_turn(turn_id: str, *items: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {
        "id": turn_id,
        "rootTurnId": None,
        "items": list(items),
        "itemsView": "full",
        "status": status,
        "error": None,
        "startedAt": 1795982910,
        "completedAt": 1795982940 if status != "inProgress" else None,
        "durationMs": 30000 if status != "inProgress" else None,
    }


def subagent(turns: list[dict[str, Any]] | None = None, **fields: Any) -> Thread:
    """A thread/read answer's thread of a subagent, as codex 0.163 sends it."""
    thread: dict[str, Any] = {
        "id": AGENT,
        "environments": [{"environmentId": "local", "cwd": HOST_CWD, "runtimeWorkspaceRoots": []}],
        "extra": None,
        "sessionId": OWNER,
        "forkedFromId": None,
        "parentThreadId": OWNER,
        "preview": "crw-flow-op: build.1/t1-a1",
        "ephemeral": False,
        "historyMode": "paginated",
        "modelProvider": "openai",
        "model": "gpt-5.5",
        "reasoningEffort": "high",
        "createdAt": 1795982908,
        "updatedAt": 1795982940,
        "recencyAt": 1795982940,
        "status": {"type": "idle"},
        "path": ROLLOUT,
        "cwd": HOST_CWD,
        "cliVersion": "0.163.0",
        "originator": "codex_cli_rs",
        "source": {
            "subAgent": {
                "thread_spawn": {
                    "parent_thread_id": OWNER,
                    "depth": 1,
                    "agent_path": "/root/executor",
                    "agent_nickname": "Ada",
                    "agent_role": "executor",
                }
            }
        },
        "canAcceptDirectInput": True,
        "threadSource": "subagent",
        "agentNickname": "Ada",
        "agentRole": "executor",
        "gitInfo": None,
        "name": None,
        "turns": [host_turn("turn-1", user_message(spawn_text()))] if turns is None else turns,
    }
    thread.update(fields)
    return Thread.model_validate(thread)


def spawn_step(**fields: Any) -> PublishedStep:
    base: dict[str, Any] = {
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "op": "build.1/t1",
        "marker": MARKER,
        "role": "executor",
        "action": "spawn",
        "agent_id": None,
        "workspace": P,
        "run": RUN,
        "packet": packet(),
        "conversation_turn": 1,
        "replaces_turn": None,
    }
    return PublishedStep(**{**base, **fields})


def repair_step(**fields: Any) -> PublishedStep:
    return spawn_step(
        **{
            "k": 2,
            "op": "build.1/t2",
            "marker": "build.1/t2-a1",
            "action": "send_input",
            "agent_id": AGENT,
            "packet": None,
            "conversation_turn": 2,
            **fields,
        }
    )


def report(**fields: Any) -> Report:
    base: dict[str, Any] = {
        "id": "0f1e",
        "run": RUN,
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "agent_id": AGENT,
    }
    return Report(**{**base, **fields})


def decide(
    *,
    rep: Report | None = None,
    step: PublishedStep | None = None,
    attempt: AttemptState | None = None,
    pair: RolePair = PAIR,
    thread: Thread | None = None,
    host_error: str | None = None,
    record: CallRecord | None = None,
    unknown: bool = False,
    retries: int = 0,
) -> Decision:
    return decide_report(
        RUN,
        OWNER,
        rep or report(),
        step or spawn_step(),
        record or CallRecord(attempt=1, published=frozenset({(1, 1)})),
        attempt or AttemptState(),
        pair,
        thread,
        host_error,
        unknown=unknown,
        retries=retries,
    )


def reply(decision: Decision) -> Reply:
    assert isinstance(decision, Reply), decision
    return decision


def bound(decision: Decision) -> Bound:
    assert isinstance(decision, Bound), decision
    return decision


def started(decision: Decision) -> ThreadStarted:
    row = bound(decision).thread_started
    assert row is not None
    return row


# The reply table.


def test_report_for_another_run_is_refused() -> None:
    """spec: DISP-10"""
    answer = reply(decide(rep=report(run="run-2"), thread=subagent()))
    assert (answer.kind, answer.reason) == ("refused", "another run")


def test_report_without_subagent_for_unpublished_step_is_refused() -> None:
    """spec: DISP-11"""
    answer = reply(decide(rep=report(agent_id=None, k=3)))
    assert answer.kind == "refused"
    assert "did not publish" in answer.reason


def test_early_report_with_subagent_for_unpublished_step_is_answered_close() -> None:
    """spec: DISP-15"""
    answer = reply(decide(rep=report(k=3), thread=subagent()))
    assert (answer.kind, answer.reason) == (
        "close",
        "a step the run did not publish (an early report)",
    )


def test_report_for_another_call_than_the_waiting_one_is_an_early_report() -> None:
    """spec: DISP-15 (the call's record is not the other call's)"""
    answer = reply(decide(rep=report(call="zzz.1")))
    assert answer.reason == "a step the run did not publish (an early report)"


def test_report_naming_another_attempt_than_the_published_step_is_an_early_report() -> None:
    """spec: DISP-15"""
    answer = reply(decide(rep=report(attempt=2), thread=subagent()))
    assert answer.kind == "close"


def test_second_subagent_for_bound_attempt_is_answered_close() -> None:
    """spec: DISP-16"""
    answer = reply(
        decide(
            rep=report(agent_id=OTHER_AGENT),
            attempt=AttemptState(thread_id=AGENT),
            thread=subagent(id=OTHER_AGENT),
        )
    )
    assert (answer.kind, answer.reason) == ("close", "a second subagent for a bound attempt")


def test_unreadable_host_is_answered_retry() -> None:
    """spec: DISP-9"""
    answer = reply(decide(thread=None, host_error="thread/read timed out"))
    assert answer.kind == "retry"
    assert answer.reason.startswith("the host cannot be read yet")


def test_host_not_read_yet_is_answered_retry() -> None:
    """spec: DISP-9"""
    assert reply(decide(thread=None)).kind == "retry"


def test_host_error_wins_over_a_stale_snapshot() -> None:
    """spec: DISP-9"""
    assert reply(decide(thread=subagent(), host_error="connection lost")).kind == "retry"


def test_thread_that_is_not_the_owners_subagent_is_refused() -> None:
    """spec: DISP-3, DISP-12"""
    answer = reply(decide(thread=subagent(parentThreadId="019a-someone-else")))
    assert (answer.kind, answer.reason) == ("refused", "not a subagent of the owner thread")


def test_interactive_thread_without_parent_is_refused() -> None:
    """spec: DISP-12"""
    assert reply(decide(thread=subagent(parentThreadId=None, source="vscode"))).kind == "refused"


def test_subagent_with_no_turn_yet_is_answered_retry() -> None:
    """spec: DISP-4, DISP-9"""
    answer = reply(decide(thread=subagent(turns=[])))
    assert (answer.kind, answer.reason) == ("retry", "the marker turn cannot be read yet")


def test_marker_only_in_a_later_message_of_the_turn_does_not_bind() -> None:
    """spec: DISP-4"""
    turn = host_turn("turn-1", user_message("hello"), user_message(spawn_text(), "item-2"))
    assert reply(decide(thread=subagent(turns=[turn]))).kind == "retry"


def test_marker_of_another_attempt_does_not_bind() -> None:
    """spec: DISP-4"""
    turn = host_turn("turn-1", user_message(spawn_text(attempt=2)))
    assert reply(decide(thread=subagent(turns=[turn]))).kind == "retry"


def test_snapshot_of_another_thread_than_reported_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="not"):
        decide(thread=subagent(id=OTHER_AGENT))


# The pair rules.


def test_subagent_on_the_roles_pair_is_bound_without_warnings() -> None:
    """spec: DISP-5, DISP-6"""
    decision = bound(decide(thread=subagent()))
    assert decision.warnings == []
    assert (decision.kind, decision.reason) == ("bound", "the subagent is the step's")


def test_role_left_to_the_host_is_bound_pair_unchecked() -> None:
    """spec: DISP-17"""
    decision = decide(
        pair=RolePair(agent_type="executor"), thread=subagent(model="o9", reasoningEffort="low")
    )
    assert bound(decision).warnings == ["pair_unchecked"]
    row = started(decision)
    assert (row.pair_unchecked, row.effort_unchecked) == (True, None)
    assert (row.model, row.effort) == ("o9", "low")


def test_other_model_is_answered_pair_mismatch_naming_the_roles_pair() -> None:
    """spec: DISP-7, DISP-8"""
    answer = reply(decide(thread=subagent(model="gpt-5.4-mini")))
    assert answer.kind == "pair_mismatch"
    assert answer.pair == PAIR
    assert reply_pair(PAIR) == {
        "agent_type": "executor",
        "model": "gpt-5.5",
        "reasoning_effort": "high",
    }
    assert "close it and spawn again with the role's pair" in answer.reason


def test_same_model_other_effort_is_answered_pair_mismatch() -> None:
    """spec: DISP-5, DISP-7"""
    answer = reply(decide(thread=subagent(reasoningEffort="medium")))
    assert (answer.kind, answer.pair) == ("pair_mismatch", PAIR)


def test_decided_effort_against_unknown_host_effort_is_pair_mismatch() -> None:
    """spec: DISP-5, DISP-7"""
    assert reply(decide(thread=subagent(reasoningEffort=None))).kind == "pair_mismatch"


def test_model_without_effort_is_bound_on_model_alone_effort_unchecked() -> None:
    """spec: DISP-19, DISP-20"""
    pair = RolePair(agent_type="executor", model="gpt-5.5")
    decision = decide(pair=pair, thread=subagent(reasoningEffort="xhigh"))
    assert bound(decision).warnings == ["effort_unchecked"]
    row = started(decision)
    assert (row.effort, row.effort_unchecked, row.pair_unchecked) == ("xhigh", True, None)


def test_model_without_effort_still_refuses_another_model() -> None:
    """spec: DISP-19, DISP-7"""
    pair = RolePair(agent_type="executor", model="gpt-5.5")
    answer = reply(decide(pair=pair, thread=subagent(model="gpt-5.4")))
    assert (answer.kind, answer.pair) == ("pair_mismatch", pair)


def test_other_agent_role_is_recorded_and_bound() -> None:
    """spec: DISP-18"""
    decision = decide(thread=subagent(agentRole="explorer"))
    assert bound(decision).warnings == ["session_agent_role_mismatch"]
    row = started(decision)
    assert (row.session_agent_role_mismatch, row.agent_role) == (True, "explorer")


def test_agent_role_is_compared_with_the_pairs_agent_type() -> None:
    """spec: DISP-18 (executor-t1 pairs with the executor type)"""
    step = spawn_step(role="executor-t1")
    pair = RolePair(agent_type="executor", model="gpt-5.5", effort="high")
    assert bound(decide(step=step, pair=pair, thread=subagent())).warnings == []


def test_pair_unchecked_and_agent_role_mismatch_are_both_recorded() -> None:
    """spec: DISP-17, DISP-18"""
    decision = decide(pair=RolePair(agent_type="reviewer"), thread=subagent())
    assert bound(decision).warnings == ["pair_unchecked", "session_agent_role_mismatch"]


# The rows of a bind.


def test_bind_writes_thread_started_and_turn_started_with_every_field() -> None:
    """spec: BIND-1, BIND-2, BIND-5, STEP-7"""
    decision = bound(decide(thread=subagent()))
    assert decision.thread_started == ThreadStarted(
        call="build.1",
        thread_id=AGENT,
        model="gpt-5.5",
        effort="high",
        cwd=P,
        host_cwd=HOST_CWD,
        parent_thread_id=OWNER,
        agent_role="executor",
        attempt=1,
        via="session",
        rollout_path=ROLLOUT,
        marker=MARKER,
    )
    assert decision.turn_started == TurnStarted(
        call="build.1",
        k=1,
        op="build.1/t1",
        turn_id="turn-1",
        attempt=1,
        marker=MARKER,
        conversation_turn=1,
        replaces_turn=None,
        host_started_at=1795982910,  # the host's startedAt: the timeline draws the turn from it
    )


def test_thread_started_line_leaves_out_the_flags_that_do_not_apply() -> None:
    """spec: BIND-1, BIND-2"""
    line = started(decide(thread=subagent())).model_dump(exclude_none=True)
    assert line == {
        "row": "thread_started",
        "call": "build.1",
        "thread_id": AGENT,
        "model": "gpt-5.5",
        "effort": "high",
        "cwd": P,
        "host_cwd": HOST_CWD,
        "parent_thread_id": OWNER,
        "agent_role": "executor",
        "attempt": 1,
        "via": "session",
        "rollout_path": ROLLOUT,
        "marker": MARKER,
    }


def test_host_cwd_is_never_the_calls_cwd() -> None:
    """spec: BIND-1, STEP-7"""
    row = started(decide(thread=subagent(cwd="/elsewhere")))
    assert (row.cwd, row.host_cwd) == (P, "/elsewhere")


def test_turn_started_binds_the_turn_that_carries_the_marker() -> None:
    """spec: BIND-5, DISP-4"""
    turns = [
        host_turn("turn-0", user_message("crw-flow-op: build.1/t1-a0\nCRW-ROLE: executor")),
        host_turn("turn-7", user_message(spawn_text()), status="inProgress"),
    ]
    assert bound(decide(thread=subagent(turns=turns))).turn_started.turn_id == "turn-7"


def test_turn_started_records_the_place_a_replacing_turn_takes() -> None:
    """spec: BIND-5"""
    step = spawn_step(
        k=3,
        op="build.1/t3",
        marker="build.1/t3-a2",
        attempt=2,
        packet=packet(k=3, attempt=2),
        conversation_turn=1,
        replaces_turn=1,
    )
    thread = subagent(turns=[host_turn("turn-9", user_message(spawn_text(k=3, attempt=2)))])
    decision = bound(decide(rep=report(k=3, attempt=2), step=step, thread=thread))
    row = decision.turn_started
    assert (row.k, row.op, row.attempt, row.marker) == (3, "build.1/t3", 2, "build.1/t3-a2")
    assert (row.conversation_turn, row.replaces_turn) == (1, 1)
    assert started(decision).attempt == 2


def test_prior_pairs_recorded_when_an_earlier_attempt_ran_another_pair() -> None:
    """spec: BIND-3, BIND-9"""
    earlier = ({"model": "gpt-5.5", "effort": "medium"}, {"model": "gpt-5.5", "effort": "high"})
    row = started(decide(attempt=AttemptState(prior_pairs=earlier), thread=subagent()))
    assert row.prior_pairs == [{"model": "gpt-5.5", "effort": "medium"}]


def test_prior_pairs_left_out_when_every_earlier_pair_is_this_one() -> None:
    """spec: BIND-3"""
    earlier = ({"model": "gpt-5.5", "effort": "high"},) * 2
    row = started(decide(attempt=AttemptState(prior_pairs=earlier), thread=subagent()))
    assert row.prior_pairs is None
    assert "prior_pairs" not in row.model_dump(exclude_none=True)


def test_prior_pairs_name_each_differing_pair_once_in_attempt_order() -> None:
    """spec: BIND-3"""
    earlier = (
        {"model": "o9", "effort": None},
        {"model": "gpt-5.4", "effort": "low"},
        {"model": "o9", "effort": None},
    )
    row = started(decide(attempt=AttemptState(prior_pairs=earlier), thread=subagent()))
    assert row.prior_pairs == [
        {"model": "o9", "effort": None},
        {"model": "gpt-5.4", "effort": "low"},
    ]


# A send_input step: the subagent is bound, the decision is about its turn.


def repair_thread(*extra_turns: dict[str, Any]) -> Thread:
    turns = [host_turn("turn-1", user_message(spawn_text()))]
    return subagent(turns=[*turns, *extra_turns])


def repair_turn(turn_id: str = "turn-2") -> dict[str, Any]:
    return host_turn(turn_id, user_message(send_input_message("build.1/t2-a1", "Repair it.")))


def repair(**kwargs: Any) -> Decision:
    kwargs.setdefault("rep", report(k=2))
    kwargs.setdefault("step", repair_step())
    kwargs.setdefault("attempt", AttemptState(thread_id=AGENT))
    kwargs.setdefault(
        "record",
        CallRecord(attempt=1, published=frozenset({(1, 1), (1, 2)}), turns={(1, 1): AGENT}),
    )
    return decide(**kwargs)


def test_send_input_binds_turn_started_only() -> None:
    """spec: BIND-7, DISP-26"""
    decision = bound(repair(thread=repair_thread(repair_turn())))
    assert decision.thread_started is None
    assert decision.warnings == []
    assert decision.turn_started == TurnStarted(
        call="build.1",
        k=2,
        op="build.1/t2",
        turn_id="turn-2",
        attempt=1,
        marker="build.1/t2-a1",
        conversation_turn=2,
        replaces_turn=None,
        host_started_at=1795982910,
    )


def test_send_input_before_its_turn_shows_is_answered_retry() -> None:
    """spec: DISP-9, DISP-26"""
    answer = reply(repair(thread=repair_thread()))
    assert (answer.kind, answer.reason) == ("retry", "the marker turn cannot be read yet")


def test_send_input_report_naming_another_subagent_is_answered_close() -> None:
    """spec: DISP-16"""
    answer = reply(repair(rep=report(k=2, agent_id=OTHER_AGENT), thread=None))
    assert (answer.kind, answer.reason) == ("close", "a second subagent for a bound attempt")


def test_send_input_report_without_subagent_reads_the_steps_subagent() -> None:
    """spec: DISP-26"""
    decision = repair(rep=report(k=2, agent_id=None), thread=repair_thread(repair_turn()))
    assert bound(decision).turn_started.turn_id == "turn-2"


def test_send_input_is_not_pair_checked_again() -> None:
    """spec: BIND-7 (the subagent's pair was judged when it was bound)"""
    decision = repair(
        pair=RolePair(agent_type="executor", model="other"), thread=repair_thread(repair_turn())
    )
    assert bound(decision).thread_started is None


# The marker lookup (a subagent never reported).


def test_spawned_subagent_found_by_marker_binds_without_a_report() -> None:
    """spec: DISP-25"""
    threads = [subagent(id=OTHER_AGENT, turns=[]), subagent()]
    found = find_spawned(spawn_step(), OWNER, threads, PAIR)
    assert found is not None and found.id == AGENT
    decision = decide_bind(OWNER, spawn_step(), AttemptState(), PAIR, None, found)
    assert started(decision).thread_id == AGENT


def test_lookup_ignores_a_thread_of_another_owner() -> None:
    """spec: DISP-25, DISP-3"""
    assert find_spawned(spawn_step(), OWNER, [subagent(parentThreadId="someone")], PAIR) is None


def test_lookup_takes_the_earliest_of_two_spawns() -> None:
    """spec: DISP-25"""
    late = subagent(createdAt=1795982999)
    early = subagent(id=OTHER_AGENT, createdAt=1795982900)
    found = find_spawned(spawn_step(), OWNER, [late, early], PAIR)
    assert found is not None and found.id == OTHER_AGENT


def test_lookup_finds_the_repair_turn_on_the_subagent() -> None:
    """spec: DISP-26"""
    thread = repair_thread(repair_turn("turn-2"), repair_turn("turn-3"))
    found = find_marker_turn("build.1/t2-a1", thread)
    assert found is not None and found.id == "turn-2"
    assert find_marker_turn("build.1/t3-a1", thread) is None


def test_marker_is_read_from_the_first_line_only() -> None:
    """spec: DISP-4"""
    assert marker_of("crw-flow-op: build.1/t1-a1\nCRW-ROLE: executor") == "build.1/t1-a1"
    assert marker_of("crw-flow-op: build.1/t2-a1\r\nRepair it.") == "build.1/t2-a1"
    assert marker_of("hello\ncrw-flow-op: build.1/t1-a1") is None
    assert marker_of("crw-flow-op: ") is None
    assert marker_of("") is None
    assert marker_of(None) is None


def test_turn_marker_reads_the_first_user_message_after_other_items() -> None:
    """spec: DISP-4"""
    turn = Thread.model_validate(
        {
            "id": "t",
            "status": {"type": "idle"},
            "turns": [
                host_turn(
                    "turn-1",
                    {"type": "reasoning", "id": "r1"},
                    user_message(spawn_text()),
                    user_message("crw-flow-op: build.1/t9-a9", "item-2"),
                )
            ],
        }
    ).turns[0]
    assert turn_marker(turn) == MARKER


def test_subagent_with_no_agent_role_is_recorded_as_a_mismatch() -> None:
    """spec: DISP-18 (a spawn without the role's agent_type runs no expected type)"""
    decision = decide(thread=subagent(agentRole=None))
    assert bound(decision).warnings == ["session_agent_role_mismatch"]


def test_report_without_subagent_for_published_spawn_waits_for_the_lookup() -> None:
    """spec: DISP-9, DISP-25"""
    assert reply(decide(rep=report(agent_id=None), thread=None)).kind == "retry"
    found = decide(rep=report(agent_id=None), thread=subagent())
    assert started(found).thread_id == AGENT


def test_lookup_skips_a_closed_subagent_and_one_on_another_pair() -> None:
    """spec: DISP-25, DISP-5 (a pair_mismatch, then a respawn never reported)"""
    closed = subagent(id="closed", createdAt=1795982800, status={"type": "notLoaded"})
    wrong = subagent(id="wrong", createdAt=1795982850, model="gpt-5.4-mini")
    right = subagent(createdAt=1795982900)
    found = find_spawned(spawn_step(), OWNER, [closed, wrong, right], PAIR)
    assert found is not None and found.id == AGENT
    assert find_spawned(spawn_step(), OWNER, [closed, wrong], PAIR) is None


def test_lookup_of_a_role_left_to_the_host_takes_any_pair() -> None:
    """spec: DISP-17, DISP-25"""
    other = subagent(model="o9", reasoningEffort="low")
    found = find_spawned(spawn_step(), OWNER, [other], RolePair(agent_type="executor"))
    assert found is not None and found.id == AGENT


def test_other_open_subagents_carrying_the_bound_marker_are_strays() -> None:
    """spec: DISP-16 (a second subagent for a bound attempt is closed)"""
    threads = [
        subagent(id="late", createdAt=1795982999),
        subagent(),
        subagent(id="early", createdAt=1795982000),
        subagent(id="closed", status={"type": "notLoaded"}),
        subagent(id="foreign", parentThreadId="someone"),
        subagent(id="unmarked", turns=[]),
    ]
    assert strays(spawn_step(), OWNER, AGENT, threads) == ["early", "late"]
    assert strays(spawn_step(), OWNER, AGENT, [subagent()]) == []


def test_report_naming_a_thread_the_host_does_not_have_is_refused() -> None:
    """spec: DISP-9 (retry is only for a host that cannot answer now)"""
    answer = reply(decide(thread=None, unknown=True))
    assert answer.kind == "refused"
    assert answer.reason == (
        f"the host has no thread {AGENT}: report the agent_id spawn_agent answered"
    )


def test_retry_is_answered_a_bounded_number_of_times_then_says_why() -> None:
    """spec: DISP-9"""
    for retries in range(MAX_RETRIES):
        assert reply(decide(thread=None, host_error="down", retries=retries)).kind == "retry"
    answer = reply(decide(thread=None, host_error="down", retries=MAX_RETRIES))
    assert answer.kind == "refused"
    assert answer.reason.startswith(
        f"the host cannot be read yet: down (answered retry {MAX_RETRIES}"
    )
    assert "binds the subagent by its marker once the host answers" in answer.reason


def test_marker_retry_is_bounded_and_names_the_marker() -> None:
    """spec: DISP-4, DISP-9"""
    assert reply(decide(thread=subagent(turns=[]), retries=MAX_RETRIES - 1)).kind == "retry"
    answer = reply(decide(thread=subagent(turns=[]), retries=MAX_RETRIES))
    assert answer.kind == "refused"
    assert f"crw-flow-op: {MARKER}, close it and spawn again" in answer.reason


# Two runs on one owner thread: the marker names no run, the message's packet does.


def other_runs(agent_id: str = OTHER_AGENT, **fields: Any) -> Thread:
    """A subagent of the owner spawned with run-2's message of the same step."""
    turns = [host_turn("turn-1", user_message(spawn_text(run="run-2")))]
    return subagent(id=agent_id, turns=turns, **fields)


def test_a_subagent_with_another_runs_message_of_the_same_marker_is_not_this_runs() -> None:
    """spec: DISP-25, DISP-4: the lookup takes only a subagent whose first message
    names this run's packet of the step, the earlier-created other run's one never."""
    theirs = other_runs(createdAt=1795982800)
    found = find_spawned(spawn_step(), OWNER, [theirs, subagent(createdAt=1795982900)], PAIR)
    assert found is not None and found.id == AGENT
    assert find_spawned(spawn_step(), OWNER, [theirs], PAIR) is None
    bare = subagent(turns=[host_turn("turn-1", user_message(f"crw-flow-op: {MARKER}\n"))])
    assert find_spawned(spawn_step(), OWNER, [bare], PAIR) is None
    own_other_step = spawn_step(packet=packet(k=1, attempt=2))
    assert find_spawned(own_other_step, OWNER, [subagent()], PAIR) is None


def test_another_runs_subagent_is_never_a_stray_of_this_run() -> None:
    """spec: DISP-16, DISP-25: a bound attempt's strays get close steps; the other
    run's subagent of the same marker is not this run's to close."""
    assert strays(spawn_step(), OWNER, AGENT, [other_runs(), subagent(id="again")]) == ["again"]


def test_a_report_of_another_runs_subagent_is_refused_naming_that_run() -> None:
    """spec: DISP-10, DISP-3, DISP-4, DISP-5: the owner reported run-2's subagent to
    this run; the refusal names the run whose step it carries."""
    answer = reply(decide(rep=report(agent_id=OTHER_AGENT), thread=other_runs()))
    assert (answer.kind, answer.reason) == ("refused", "the subagent carries run run-2's step")
    # Its own message binds.
    assert started(decide(thread=subagent())).thread_id == AGENT


def test_a_report_of_a_subagent_whose_message_names_no_packet_of_the_run_is_refused() -> None:
    """spec: DISP-4: the marker line alone is not the step's message."""
    bare = subagent(turns=[host_turn("turn-1", user_message(f"crw-flow-op: {MARKER}\n"))])
    answer = reply(decide(thread=bare))
    assert answer.kind == "refused"
    assert answer.reason == (
        f"the subagent's first message does not name run {RUN}'s packet of step {MARKER}: "
        "close it and spawn again with the step's message"
    )


def test_a_repair_turn_on_another_runs_subagent_is_not_bound() -> None:
    """spec: DISP-26: the send_input's marker turn binds only on a subagent a spawn
    of this run made."""
    theirs = other_runs(agent_id=AGENT)
    theirs = subagent(turns=[*[t.model_dump() for t in theirs.turns], repair_turn()])
    answer = reply(repair(thread=theirs))
    assert (answer.kind, answer.reason) == ("refused", "the subagent carries run run-2's step")
    assert bound(repair(thread=repair_thread(repair_turn()))).thread_started is None
