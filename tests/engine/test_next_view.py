"""The answer of `crw flow next` as a pure function of what it read."""

from __future__ import annotations

import dataclasses
from typing import Any

from crw.engine.config.roles import ROLES
from crw.engine.owner.next_view import (
    NEXT_WAIT_S,
    WAIT_AGENT_TIMEOUT_MS,
    NextRead,
    next_view,
    should_resume,
)
from crw.engine.steps.step_file import CloseStep, StepFile

PINNED = {
    "architect": {"agent_type": "architect", "model": "gpt-5", "effort": "high"},
    "executor": {"agent_type": "executor", "model": "gpt-5-codex"},
    "executor-t1": {"agent_type": "executor"},
    "reviewer": {"agent_type": "reviewer", "model": "o3", "effort": "medium"},
    "explorer": {"agent_type": "explorer"},
    "critic": {"agent_type": "reviewer"},
}
STORE = {role: {"agent_type": "explorer" if role == "explorer" else role} for role in ROLES}


def started(**fields: Any) -> dict[str, Any]:
    return {"row": "started", "backend": "session", "role_pairs": PINNED, **fields}


def row(kind: str, call: str, **fields: Any) -> dict[str, Any]:
    return {"row": kind, "call": call, **fields}


def spawn(call: str = "build.1", k: int = 1, attempt: int = 1, **over: Any) -> StepFile:
    fields: dict[str, Any] = {
        "call": call,
        "k": k,
        "attempt": attempt,
        "op": f"{call}/t{k}",
        "marker": f"{call}/t{k}-a{attempt}",
        "role": "executor",
        "action": "spawn",
        "agent_type": "executor",
        "model": "gpt-5-codex",
        "reasoning_effort": "high",
        "message": f"crw-flow-op: {call}/t{k}-a{attempt}\nCRW-ROLE: executor\n\nRead ...",
        "packet": f"/s/flow/r/steps/{call}/packet-t{k}-a{attempt}.md",
        "workspace": "/work/p",
        "agent_id": None,
    }
    return StepFile(**(fields | over))


def send_input(call: str = "build.1", agent: str = "thr-b") -> StepFile:
    return spawn(call, k=2, action="send_input", agent_id=agent, message="crw-flow-op: x\nfix it")


def read(rows: list[dict[str, Any]], **over: Any) -> NextRead:
    fields: dict[str, Any] = {
        "run": "r1",
        "rows": rows,
        "max_threads": 6,
        "held": True,
        "store_pairs": STORE,
    }
    return NextRead(**(fields | over))


RUNNING = [started(), row("prepared", "build.1", role="executor")]


def test_started_run_without_steps_is_running() -> None:
    """spec: CMD-NEXT-1"""
    view = next_view(read(RUNNING))
    assert view.state == "running" and view.steps == []
    assert view.ended_status is None and view.ended_state is None


def test_published_spawn_step_waits_on_the_session() -> None:
    """spec: CMD-NEXT-1, CMD-NEXT-3"""
    rows = [*RUNNING, row("step_published", "build.1", k=1, attempt=1, action="spawn")]
    view = next_view(read(rows, steps=[spawn()]))
    assert view.state == "waiting_session"
    assert [step["op"] for step in view.steps] == ["build.1/t1"]


def test_ended_run_answers_its_status_and_the_ended_rows_state() -> None:
    """spec: CMD-NEXT-1"""
    ends = {"build": "completed", "review": "unrun"}
    view = next_view(read([*RUNNING, {"row": "ended", "status": "completed", "state": ends}]))
    assert (view.state, view.ended_status, view.ended_state) == ("ended", "completed", ends)
    assert view.to_json()["ended_state"] == ends


def test_held_call_waits_on_a_decision_and_a_paused_run_is_paused() -> None:
    """spec: CMD-NEXT-2"""
    held = next_view(read([*RUNNING, row("held", "build.1", reason="no_answer")]))
    assert held.state == "waiting_decision"
    assert "waits on a decision" in held.hint
    paused = next_view(read([*RUNNING, {"row": "paused", "reason": "host_unavailable"}]))
    assert paused.state == "paused"
    assert "paused (host_unavailable)" in paused.hint and "crw flow resume r1" in paused.hint


def test_a_run_whose_process_waits_for_its_host_is_said_to_go_on_by_itself() -> None:
    """A run paused host_unavailable whose process waits for the host: the hint says
    it goes on by itself, asks again with --wait (never at once, which would spin),
    and still names the resume that goes on now."""
    rows = [*RUNNING, {"row": "paused", "reason": "host_unavailable"}]
    waiting = next_view(read(rows, held=False, host_waiter=(4242, "2026-12-06T10:00:00Z")))
    assert waiting.state == "paused"
    assert "its process 4242 waits for the host until 2026-12-06T10:00:00Z" in waiting.hint
    assert "goes on by itself" in waiting.hint
    assert "crw flow next r1 --wait 30" in waiting.hint
    assert "to go on now instead: crw flow resume r1 --detach" in waiting.hint
    alone = next_view(read(rows, held=False))
    assert "by itself" not in alone.hint and "crw flow resume r1 --detach" in alone.hint


def test_each_held_call_is_shown_with_its_reason_and_the_exact_answer_commands() -> None:
    """spec: CMD-NEXT-2: the hint names each held call's reason and the command that
    answers it; --json lists them under held, with each answer's command."""
    rows = [*RUNNING, row("held", "build.1", reason="host_failure")]
    view = next_view(read(rows, state_ref="/s"))
    assert "build.1 (host_failure): crw flow answer r1 build.1 --retry --state /s" in view.hint
    assert view.to_json()["held"] == [
        {
            "call": "build.1",
            "reason": "host_failure",
            "answer": {
                "retry": "crw flow answer r1 build.1 --retry --state /s",
                "skip": "crw flow answer r1 build.1 --skip --state /s",
                "abort": "crw flow answer r1 build.1 --abort --state /s",
                "restart": "crw flow answer r1 build.1 --restart --state /s",
            },
        }
    ]
    assert "(or --skip, --abort, --restart; see docs/decisions.md)" in view.hint


def test_a_held_call_of_an_app_server_run_is_not_offered_a_restart() -> None:
    """An app-server run refuses `answer --restart`, so its held calls' hints and
    --json name only retry, skip and abort."""
    rows = [started(backend="app-server"), row("held", "build.1", reason="host_failure")]
    view = next_view(read(rows, state_ref="/s"))
    assert list(view.to_json()["held"][0]["answer"]) == ["retry", "skip", "abort"]
    assert "(or --skip, --abort; see docs/decisions.md)" in view.hint


def test_run_without_a_started_row_is_starting() -> None:
    view = next_view(read([], held=False))
    assert view.state == "starting" and "ask again" in view.hint


def test_step_carries_the_step_files_members_and_its_host_call() -> None:
    """spec: CMD-NEXT-4"""
    step = next_view(read(RUNNING, steps=[spawn()])).steps[0]
    assert list(step) == [
        "call",
        "k",
        "attempt",
        "op",
        "role",
        "action",
        "agent_type",
        "model",
        "reasoning_effort",
        "message",
        "packet",
        "workspace",
        "agent_id",
        "reported",
        "host_call",
    ]
    assert step["packet"] == "/s/flow/r/steps/build.1/packet-t1-a1.md"
    assert step["workspace"] == "/work/p" and step["agent_id"] is None


def test_spawn_step_is_spawn_agent_then_dispatched() -> None:
    """spec: CMD-NEXT-5 (and the engine's `on_failure`, docs/session.md: the report
    of a spawn the host refused, its placeholder in single quotes)"""
    step = spawn()
    call = next_view(read(RUNNING, steps=[step])).steps[0]["host_call"]
    assert call == {
        "tool": "spawn_agent",
        "arguments": {
            "agent_type": "executor",
            "message": step.message,
            "model": "gpt-5-codex",
            "reasoning_effort": "high",
            "fork_context": False,
        },
        "then": "crw flow dispatched r1 build.1 --agent <agent_id> --k 1 --attempt 1",
        "on_failure": "crw flow dispatched r1 build.1 --k 1 --attempt 1 --failed '<tool_output>'",
    }


def test_a_later_attempts_on_failure_names_its_turn_and_attempt() -> None:
    """The failure report names the step's own k and attempt (a repair spawned on a
    new subagent, a later attempt), as its `then` does."""
    call = next_view(read(RUNNING, steps=[spawn(k=2, attempt=3)])).steps[0]["host_call"]
    assert call["on_failure"] == (
        "crw flow dispatched r1 build.1 --k 2 --attempt 3 --failed '<tool_output>'"
    )


def test_spawn_of_an_undecided_pair_leaves_model_and_effort_out() -> None:
    """spec: CMD-NEXT-5"""
    step = spawn(model=None, reasoning_effort=None)
    arguments = next_view(read(RUNNING, steps=[step])).steps[0]["host_call"]["arguments"]
    assert list(arguments) == ["agent_type", "message", "fork_context"]


def test_send_input_step_is_send_input_to_its_subagent_then_dispatched() -> None:
    """spec: CMD-NEXT-6"""
    step = send_input(agent="thr-b")
    call = next_view(read(RUNNING, steps=[step])).steps[0]["host_call"]
    assert call == {
        "tool": "send_input",
        "arguments": {"target": "thr-b", "message": step.message},
        "then": "crw flow dispatched r1 build.1 --agent thr-b --k 2 --attempt 1",
    }


def test_close_step_is_close_agent_and_comes_first() -> None:
    """spec: CMD-NEXT-7"""
    view = next_view(
        read(RUNNING, steps=[spawn(attempt=2)], closes=[CloseStep("build.1", 1, "thr-a")])
    )
    assert view.steps[0] == {
        "call": "build.1",
        "attempt": 1,
        "action": "close",
        "agent_id": "thr-a",
        "host_call": {"tool": "close_agent", "arguments": {"target": "thr-a"}},
    }
    assert view.steps[1]["action"] == "spawn"


def test_commands_name_the_state_directory_the_owner_gave() -> None:
    """spec: CMD-NEXT-5"""
    view = next_view(read(RUNNING, steps=[spawn()], state_ref="/s"))
    assert view.steps[0]["host_call"]["then"].endswith("--attempt 1 --state /s")
    assert view.steps[0]["host_call"]["on_failure"].endswith(
        "--attempt 1 --failed '<tool_output>' --state /s"
    )
    assert f"crw flow next r1 --wait {NEXT_WAIT_S} --state /s" in view.hint


def test_slots_limit_is_max_threads() -> None:
    """spec: CMD-NEXT-8"""
    assert next_view(read(RUNNING, max_threads=3)).slots.to_json() == {
        "limit": 3,
        "open": 0,
        "agents": [],
    }


def test_slots_count_bound_subagents_of_calls_not_ended_and_close_steps() -> None:
    """spec: CMD-NEXT-9"""
    rows = [
        started(),
        row("thread_started", "a.1", thread_id="thr-a", attempt=1),  # running: open
        row("thread_started", "b.1", thread_id="thr-b", attempt=1),
        row("completed", "b.1"),  # ended: not open
        row("thread_started", "c.1", thread_id="thr-c", attempt=1),
        row("session_attempt_lost", "c.1", reason="gone"),  # lost: its close step counts
        row("step_published", "c.1", k=1, attempt=2, action="spawn"),
        row("thread_started", "d.1", thread_id="thr-d1", attempt=1),
        row("step_published", "d.1", k=2, attempt=1, action="send_input", agent_id="thr-d1"),
        row("thread_started", "e.1", thread_id="thr-e", attempt=1),
        row("held", "e.1"),
    ]
    closes = [CloseStep("c.1", 1, "thr-c"), CloseStep("a.1", 1, "thr-a")]
    slots = next_view(read(rows, closes=closes)).slots
    assert slots.agents == ("thr-a", "thr-d1", "thr-c")
    assert slots.to_json()["open"] == 3


def test_spawn_formats_are_the_holders_started_rows_pairs() -> None:
    """spec: CMD-NEXT-10"""
    rows = [started(role_pairs={"architect": {"agent_type": "old"}}), started()]
    formats = next_view(read(rows)).spawn_formats
    assert [f["role"] for f in formats] == list(ROLES)
    assert formats[0] == {
        "role": "architect",
        "agent_type": "architect",
        "model": "gpt-5",
        "reasoning_effort": "high",
        "format": 'spawn_agent(agent_type="architect", message=<the step\'s message>, '
        'model="gpt-5", reasoning_effort="high", fork_context=false)',
    }
    executor = formats[1]
    assert (executor["model"], executor["reasoning_effort"]) == ("gpt-5-codex", None)
    assert "reasoning_effort" not in executor["format"]
    assert formats[5]["agent_type"] == "reviewer"  # the critic's pinned type


def test_spawn_formats_of_a_run_nobody_holds_are_the_role_stores() -> None:
    """spec: CMD-NEXT-10"""
    formats = next_view(read(RUNNING, held=False)).spawn_formats
    assert all(f["model"] is None and f["reasoning_effort"] is None for f in formats)
    assert [f["agent_type"] for f in formats] == [STORE[role]["agent_type"] for role in ROLES]


def test_spawn_formats_of_a_run_that_pinned_no_pairs_are_the_role_stores() -> None:
    """spec: CMD-NEXT-10"""
    formats = next_view(read([started(role_pairs=None)])).spawn_formats
    assert formats[0]["format"] == (
        'spawn_agent(agent_type="architect", message=<the step\'s message>, fork_context=false)'
    )


def test_hint_alternates_wait_agent_on_the_open_subagents_with_next_wait() -> None:
    """spec: CMD-NEXT-12"""
    rows = [*RUNNING, row("thread_started", "build.1", thread_id="thr-a", attempt=1)]
    hint = next_view(read(rows)).hint
    assert (
        f'Alternate wait_agent(targets=["thr-a"], timeout_ms={WAIT_AGENT_TIMEOUT_MS}) '
        f"with crw flow next r1 --wait {NEXT_WAIT_S}."
    ) in hint


def test_hint_without_open_subagents_asks_for_the_next_step() -> None:
    """spec: CMD-NEXT-12"""
    hint = next_view(read(RUNNING)).hint
    assert "wait_agent" not in hint and f"crw flow next r1 --wait {NEXT_WAIT_S}" in hint


def test_hint_names_the_subagents_to_close_first_and_waits_on_the_others() -> None:
    """spec: CMD-NEXT-13"""
    rows = [*RUNNING, row("thread_started", "build.1", thread_id="thr-b", attempt=2)]
    hint = next_view(read(rows, closes=[CloseStep("build.1", 1, "thr-a")])).hint
    assert 'Close these subagents first: close_agent(target="thr-a").' in hint
    assert 'wait_agent(targets=["thr-b"]' in hint


def test_hint_says_the_limit_is_reached_and_the_spawn_step_stays() -> None:
    """spec: CMD-NEXT-14"""
    rows = [started()] + [
        row("thread_started", f"c{i}.1", thread_id=f"thr-{i}", attempt=1) for i in range(2)
    ]
    view = next_view(read(rows, max_threads=2, steps=[spawn("new.1")]))
    assert "agent thread limit reached (2 of 2 open); the step stays" in view.hint
    assert [step["call"] for step in view.steps] == ["new.1"]  # the step stays listed
    assert "Make each step's host call" not in view.hint


def test_full_slots_still_let_a_send_input_step_go() -> None:
    """spec: CMD-NEXT-14"""
    rows = [started(), row("thread_started", "build.1", thread_id="thr-b", attempt=1)]
    view = next_view(read(rows, max_threads=1, steps=[spawn("new.1"), send_input()]))
    assert "agent thread limit reached" in view.hint
    assert "Make each send_input step's host call" in view.hint


def test_free_slots_say_nothing_of_the_limit() -> None:
    """spec: CMD-NEXT-14"""
    view = next_view(read(RUNNING, steps=[spawn()]))
    assert "limit" not in view.hint and "Make each step's host call" in view.hint


def test_resumed_run_says_so_in_the_hint_and_the_answer() -> None:
    """spec: CMD-NEXT-19"""
    view = next_view(read(RUNNING, held=False, resumed_pid=4242))
    assert "next resumed it" in view.hint and "pid 4242" in view.hint
    assert view.to_json()["resumed_pid"] == 4242


def test_ended_run_hint_says_it_is_over_and_proposes_no_wait() -> None:
    """spec: CMD-NEXT-1"""
    hint = next_view(read([*RUNNING, {"row": "ended", "status": "failed"}])).hint
    assert "over" in hint and "--wait" not in hint


def test_json_has_exactly_the_specs_names() -> None:
    """spec: CMD-NEXT-10"""
    payload = next_view(read(RUNNING)).to_json()
    assert set(payload) == {
        "run",
        "state",
        "ended_status",
        "ended_state",
        "steps",
        "slots",
        "spawn_formats",
        "hint",
        "warnings",
    }


def test_a_run_nobody_holds_that_goes_on_is_resumed() -> None:
    """spec: CMD-NEXT-18"""
    assert should_resume(read(RUNNING, held=False))
    waiting = [*RUNNING, row("step_published", "build.1", k=1, attempt=1, action="spawn")]
    assert should_resume(read(waiting, held=False))
    held = [*RUNNING, row("held", "build.1")]
    assert should_resume(read(held, held=False, ready_nodes=("review",)))
    assert should_resume(read([*held, row("prepared", "explore.1")], held=False))
    assert not should_resume(read(RUNNING, held=True))


def test_a_paused_ended_or_starting_run_is_not_resumed() -> None:
    """spec: CMD-NEXT-20"""
    assert not should_resume(read([*RUNNING, {"row": "paused"}], held=False))
    assert not should_resume(read([*RUNNING, {"row": "ended", "status": "ok"}], held=False))
    assert not should_resume(read([], held=False))


def test_a_run_whose_calls_all_wait_on_a_decision_is_not_resumed() -> None:
    """spec: CMD-NEXT-2, CMD-NEXT-18: a process for it would do nothing."""
    held = [*RUNNING, row("held", "build.1", reason="attempts_exhausted")]
    assert not should_resume(read(held, held=False, ready_nodes=()))
    view = next_view(read(held, held=False, ready_nodes=()))
    assert view.state == "waiting_decision"
    assert "build.1 (attempts_exhausted): crw flow answer r1 build.1 --retry" in view.hint
    assert "--wait" not in view.hint  # nothing will come to wait for
    # A workflow that cannot be read leaves it to the resume, as before.
    assert should_resume(read(held, held=False, ready_nodes=None))


def test_a_launch_under_way_makes_the_run_starting_and_nothing_is_resumed() -> None:
    """spec: CMD-NEXT-26, CMD-NEXT-30, CMD-NEXT-31, CMD-NEXT-32"""
    dead = read([started(process="old")], held=False, launching=True, steps=[spawn()])
    assert not should_resume(dead)
    view = next_view(dead)
    assert (view.state, view.steps, view.spawn_formats) == ("starting", [], [])
    assert "ask again at once with crw flow next r1." in view.hint
    assert "Make each step" not in view.hint
    waited = next_view(dataclasses.replace(dead, wait=40)).hint
    assert (
        "ask again with crw flow next r1 --wait 40: it answers when the state changes or "
        "--wait runs out" in waited
    )


def test_a_holder_that_has_not_recorded_its_started_row_is_starting() -> None:
    """spec: CMD-NEXT-24, CMD-NEXT-25, CMD-NEXT-29"""
    rows = [started(process="old"), row("prepared", "build.1")]
    assert next_view(read(rows, process_tokens=("new",))).state == "starting"
    assert next_view(read(rows, process_tokens=("old",))).state == "running"
    unnamed = [started(), row("prepared", "build.1")]
    assert next_view(read(unnamed, process_tokens=("new",))).state == "starting"
    assert next_view(read(unnamed, process_tokens=())).state == "running"
    ended = [*rows, {"row": "ended", "status": "completed"}]
    assert next_view(read(ended, process_tokens=("new",), launching=True)).state == "ended"


def test_a_step_an_earlier_process_left_is_not_handed_out_until_the_holder_passed_over_it() -> None:
    """spec: ATT-19, ATT-21, CMD-NEXT-28: next answers the new process's first
    published state, never the old step."""
    rows = [started(process="new"), row("step_published", "build.1", k=1, attempt=1)]
    key = ("build.1", 1, 1)
    left = read(rows, process_tokens=("new",), holder_since=1_000, steps=[spawn()])
    stale = next_view(dataclasses.replace(left, step_times={key: 999}))
    assert (stale.state, stale.steps) == ("starting", [])
    fresh = next_view(dataclasses.replace(left, step_times={key: 1_000}))
    assert fresh.state == "waiting_session" and [s["op"] for s in fresh.steps] == ["build.1/t1"]


def test_a_step_whose_report_waits_in_the_inbox_is_marked_reported() -> None:
    """spec: ATT-18: the run answers the report first; the owner spawns nothing."""
    rows = [*RUNNING, row("step_published", "build.1", k=1, attempt=1)]
    view = next_view(read(rows, steps=[spawn()], reported=frozenset({("build.1", 1, 1)})))
    assert view.steps[0]["reported"] is True
    assert "build.1/t1-a1" in view.hint and "the run will answer it" in view.hint
    assert "Make each step's host call" not in view.hint
    other = next_view(read(rows, steps=[spawn()], reported=frozenset({("build.1", 1, 2)})))
    assert other.steps[0]["reported"] is False and "Make each step's host call" in other.hint


def test_ended_run_with_close_steps_says_to_close_them_and_not_that_nothing_is_left() -> None:
    """spec: CMD-NEXT-7, CMD-NEXT-13"""
    ended = [*RUNNING, {"row": "ended", "status": "completed"}]
    hint = next_view(read(ended, closes=[CloseStep("build.1", 1, "thr-a")])).hint
    assert 'close_agent(target="thr-a")' in hint
    assert "nothing more to do" not in hint and hint.count("close_agent") == 1
    assert "nothing more to do" in next_view(read(ended)).hint


def test_a_run_paused_at_its_token_ceiling_is_not_told_to_resume() -> None:
    """A resume of a run at its workflow's token_ceiling pauses again at once, so
    the hint names what the user can do instead: read the results, start anew."""
    paused = next_view(
        read([*RUNNING, {"row": "paused", "reason": "token_ceiling", "token_ceiling": 10}])
    )
    assert paused.state == "paused"
    assert "resume r1" not in paused.hint
    assert "token_ceiling" in paused.hint and "crw flow status r1 --json" in paused.hint


def test_an_answer_replays_the_rows_once(monkeypatch: Any) -> None:
    """spec: CMD-NEXT-1. However many decisions the answer takes (starting, resume,
    can do nothing, the view and its hint), the rows are replayed once."""
    from crw.engine.owner import next_state
    from crw.engine.owner import next_view as view_module
    from crw.journal.replay import replay

    replays: list[int] = []

    def counted(rows: Any, into: Any = None) -> Any:
        replays.append(1)
        return replay(rows) if into is None else replay(rows, into)

    for module in (view_module, next_state):
        monkeypatch.setattr(module, "replay", counted, raising=False)
    rows = [started(seq=1), row("prepared", "a.1"), row("held", "a.1", reason="no answer")]
    read = NextRead(run="r", rows=rows, held=False, ready_nodes=())
    next_state.should_resume(read)
    next_state.is_starting(read)
    next_state.can_do_nothing(read)
    view = next_view(read)
    assert view.state == "waiting_decision"
    assert len(replays) == 1


def test_a_run_no_process_can_start_for_shows_no_step_and_names_the_fix() -> None:
    """spec: CMD-NEXT-1, CMD-NEXT-18: no process holds the run and none could start
    (`launch_refused`): the state stays the journal's, the dead process's step
    files are not handed out (a close step still is), and the hint and a warning
    name the reason and the resume to run; while a process holds the run the
    reason is not read and its steps are handed out."""
    reason = "run r1: the workflow w.toml changed since the run started; restore the file"
    close = CloseStep(call="explore.1", attempt=1, agent_id="thr-old")
    dead = next_view(
        read(RUNNING, held=False, launch_refused=reason, steps=[spawn()], closes=[close])
    )
    assert dead.state == "running"
    assert [step["action"] for step in dead.steps] == ["close"]
    assert f"none could start: {reason}." in dead.hint
    assert "crw flow resume r1 --detach" in dead.hint and "Make each step" not in dead.hint
    assert dead.warnings == [f"no process holds run r1 and none could start: {reason}"]
    live = next_view(read(RUNNING, launch_refused=reason, steps=[spawn()]))
    assert [step["action"] for step in live.steps] == ["spawn"] and reason not in live.hint
    paused = next_view(
        read(
            [*RUNNING, {"row": "paused", "reason": "host_unavailable"}],
            held=False,
            launch_refused=reason,
        )
    )
    assert paused.state == "paused"
    assert paused.hint.startswith("The run is paused (host_unavailable). No process holds the run")


def test_a_run_on_multi_agent_v2_names_v2_host_calls() -> None:
    """A run whose started row speaks multi-agent v2: a spawn names its task name
    and spawn_agent(task_name, message, fork_turns none) in the collaboration
    namespace, reported by the child's path; a repair is followup_task; a close
    is interrupt_agent; wait_agent takes no targets. spec: CMD-NEXT-4, CMD-NEXT-5,
    CMD-NEXT-7 (their v2 form, docs/session.md)"""
    from crw.engine.steps.task_name import task_name

    rows = [
        started(multi_agent="multi_agent_v2"),
        row("prepared", "build.1", role="executor"),
        row("prepared", "fix.1", role="executor"),
        row("thread_started", "fix.1", thread_id="thr-b", attempt=1),
    ]
    closes = [CloseStep(call="old.1", attempt=1, agent_id="thr-old")]
    view = next_view(read(rows, steps=[spawn(), send_input("fix.1")], closes=closes))
    close, first, repair = view.steps
    name = task_name("r1", "build.1/t1-a1")
    assert first["task_name"] == name
    assert first["host_call"]["tool"] == "spawn_agent"
    assert first["host_call"]["namespace"] == "collaboration"
    assert first["host_call"]["arguments"] == {
        "task_name": name,
        "message": spawn().message,
        "model": "gpt-5-codex",
        "reasoning_effort": "high",
        "fork_turns": "none",
    }
    assert f"--agent /root/{name} --k 1 --attempt 1" in first["host_call"]["then"]
    assert "task_name" not in repair
    assert repair["host_call"]["tool"] == "followup_task"
    assert repair["host_call"]["arguments"]["target"] == "thr-b"
    assert close["host_call"] == {
        "tool": "interrupt_agent",
        "namespace": "collaboration",
        "arguments": {"target": "thr-old"},
    }
    assert f"wait_agent(timeout_ms={WAIT_AGENT_TIMEOUT_MS})" in view.hint
    assert "interrupt_agent(target=" in view.hint
    v1 = next_view(read([started(), *rows[1:]], steps=[spawn()]))
    assert v1.steps[0]["host_call"]["tool"] == "spawn_agent" and "task_name" not in v1.steps[0]


def test_the_spawn_formats_of_a_run_on_multi_agent_v2_are_v2s_spawn_agent() -> None:
    """spec: CMD-NEXT-10 on v2: the call the owner makes, by task name, with no agent
    type (v2 cannot apply one)."""
    formats = next_view(read([started(multi_agent="multi_agent_v2")])).spawn_formats
    assert formats[0] == {
        "role": "architect",
        "agent_type": None,
        "model": "gpt-5",
        "reasoning_effort": "high",
        "format": "collaboration.spawn_agent(task_name=<the step's task name>, "
        'message=<the step\'s message>, model="gpt-5", reasoning_effort="high", '
        'fork_turns="none")',
    }
