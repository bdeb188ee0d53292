"""The one count of a run's calls (`crw.engine.views.counts`), over rows: every
call the rows name, review rounds included, so status, list and watch agree with
the calls status lists; what a review decided; a crashed run's state; and the
workflow's nodes as `run_spec.workflow_plan` reads them from its lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crw.cli.read.run_spec import workflow_plan
from crw.engine.views.counts import counts, reviews, shown_state
from crw.journal.replay import replay
from crw.journal.snapshot import SNAPSHOT, peek_snapshot, save_snapshot

REPO = Path(__file__).resolve().parents[2]
DEMO_PLAN = {"explore": 1, "plan": 1, "build": 2, "critique": 1}
"""The demo workflow's nodes: build is reviewed."""


def _call(call: str, role: str, result: Any = None, **prepared: Any) -> list[dict[str, Any]]:
    node = call.partition(".")[0]
    return [
        {"row": "prepared", "call": call, "node": node, "role": role, **prepared},
        {"row": "step_published", "call": call, "k": 1, "attempt": 1, "action": "spawn"},
        {"row": "thread_started", "call": call, "attempt": 1},
        {"row": "turn_started", "call": call, "k": 1},
        {"row": "completed", "call": call, "result": result or {"ok": True}},
    ]


def demo_rows() -> list[dict[str, Any]]:
    """The demo's run: build reviewed once rejected, fixed, then accepted."""
    reject = {"verdict": "reject", "findings": ["the summary names no file"]}
    return [
        {"row": "started", "backend": "session"},
        *_call("explore.1", "explorer"),
        *_call("plan.1", "architect"),
        *_call("build.1", "executor"),
        *_call("build.2", "reviewer", reject),
        *_call("build.3", "executor", resume="build.1"),
        *_call("build.4", "reviewer", {"verdict": "accept", "findings": []}),
        *_call("critique.1", "critic", {"verdict": "accept", "findings": []}),
        {"row": "ended", "status": "completed", "state": dict.fromkeys(DEMO_PLAN, "completed")},
    ]


def test_a_review_round_counts_every_call_and_the_total_never_shrinks() -> None:
    """Before: 4/4 at the end while status listed 7 calls, 4/5 then 5/5 on the way."""
    rows = demo_rows()
    seen = []
    for end in range(1, len(rows) + 1):
        run = replay(rows[:end])
        counted = counts(run, {} if run.state == "ended" else DEMO_PLAN)
        assert counted.total >= len(run.calls)
        seen.append((counted.done, counted.total))
    totals = [total for _, total in seen]
    assert totals == sorted(totals)  # it grows as a rejection adds a fix and its review
    assert totals[0] == 5 and seen[-1] == (7, 7)
    assert set(totals) == {5, 7}
    ended = counts(replay(rows))
    assert (ended.nodes_completed, ended.nodes, ended.in_flight) == (4, 4, ())


def test_a_review_call_names_the_call_it_judges_and_a_plain_critic_is_none() -> None:
    run = replay(demo_rows())
    assert reviews(run.calls.values()) == {"build.2": "build.1", "build.4": "build.3"}
    build2, critique = run.calls["build.2"], run.calls["critique.1"]
    assert (build2.verdict, build2.findings) == ("reject", 1)
    assert critique.verdict == "accept"  # its answer has a verdict; it judges no call


def test_a_restart_starts_the_nodes_chain_again() -> None:
    rows: list[dict[str, Any]] = [
        {"row": "started", "backend": "session"},
        *_call("build.1", "executor"),
        {"row": "prepared", "call": "build.2", "node": "build", "role": "reviewer"},
        {"row": "held", "call": "build.2", "reason": "host_failure"},
        {"row": "decision", "call": "build.2", "choice": "restart", "by": "build.3"},
        {"row": "superseded", "call": "build.2", "by": "build.3"},
        *_call("build.3", "executor"),
    ]
    run = replay(rows)
    assert reviews(run.calls.values()) == {}
    counted = counts(run, {"build": 2})
    # build.2 superseded is done; build.3's review is still to come.
    assert (counted.done, counted.total) == (3, 4)


def test_a_held_call_waits_and_a_paused_run_has_nothing_in_flight() -> None:
    rows: list[dict[str, Any]] = [
        {"row": "started", "backend": "session"},
        {"row": "prepared", "call": "a.1", "node": "a", "role": "explorer"},
        {"row": "step_published", "call": "a.1", "k": 1, "attempt": 1, "action": "spawn"},
        {"row": "prepared", "call": "b.1", "node": "b", "role": "explorer"},
        {"row": "held", "call": "b.1", "reason": "host_failure"},
    ]
    running = counts(replay(rows))
    assert (running.in_flight, running.held, running.done) == (("a.1",), 1, 0)
    assert counts(replay(rows), live=False).in_flight == ()  # its process is gone
    paused = counts(replay([*rows, {"row": "paused", "reason": "paused"}]))
    assert (paused.in_flight, paused.held) == ((), 1)


def test_an_app_server_call_is_never_waiting_for_a_session() -> None:
    rows: list[dict[str, Any]] = [
        {"row": "started", "backend": "app-server"},
        {"row": "prepared", "call": "a.1", "node": "a", "role": "explorer",
         "backend": "app-server"},
        {"row": "step_published", "call": "a.1", "k": 1, "attempt": 1, "action": "spawn"},
    ]  # fmt: skip
    run = replay(rows)
    assert (run.state, run.calls["a.1"].state) == ("running", "running")
    session = replay([{**row, "backend": "session"} for row in rows])
    assert (session.state, session.calls["a.1"].state) == ("waiting_session", "waiting_session")


def test_a_null_model_call_keeps_its_last_answers_errors() -> None:
    error = "$.id: 'x' does not match '^BUG-[0-9]{3}$'"
    rows: list[dict[str, Any]] = [
        {"row": "started", "backend": "session"},
        {"row": "prepared", "call": "a.1", "node": "a", "role": "explorer"},
        {"row": "null_model", "call": "a.1", "reason": "schema_invalid_after_repair",
         "errors": [error]},
    ]  # fmt: skip
    call = replay(rows).calls["a.1"]
    assert (call.state, call.reason, call.errors) == (
        "null_model",
        "schema_invalid_after_repair",
        [error],
    )


def test_a_run_that_needs_a_process_and_has_none_crashed() -> None:
    for state in ("starting", "running", "waiting_session"):
        assert (shown_state(state, live=False), shown_state(state, live=True)) == (
            "crashed",
            state,
        )
    for state in ("paused", "waiting_decision", "ended"):
        assert shown_state(state, live=False) == state


def test_the_plan_of_a_workflow_is_each_node_and_the_calls_it_needs(tmp_path: Path) -> None:
    assert workflow_plan(str(REPO / "crw" / "examples" / "demo.toml")) == DEMO_PLAN
    table = tmp_path / "wf.toml"
    table.write_text(
        'name = "x"\n[[node]]\nid = "a"\nrole = "executor"\n[node.review]\nrole = "critic"\n'
        "rounds = 1\n[[node]]\nid = 'b'\nrole = \"explorer\"\n"
    )
    assert workflow_plan(str(table)) == {"a": 2, "b": 1}
    assert workflow_plan(str(tmp_path / "none.toml")) == {}


def test_an_ended_run_from_its_snapshot_counts_its_settled_calls_unbuilt(tmp_path: Path) -> None:
    """The demo's ended run, one call left unsettled before its end, read back from
    its replay snapshot: the same counts as its rows' replay, and its settled calls
    still not built (list reads a thousand runs so)."""
    rows = demo_rows()
    rows.insert(-1, {"row": "prepared", "call": "extra.1", "node": "extra", "role": "explorer"})
    whole = replay(rows)
    journal = tmp_path / "journal.jsonl"
    save_snapshot(journal, replay(rows), 1, 0)
    snapshot = peek_snapshot(tmp_path / SNAPSHOT)
    assert snapshot is not None and snapshot.state.deferred_calls() is not None
    counted = counts(snapshot.state, live=False)
    assert counted == counts(whole, live=False)
    assert (counted.done, counted.total) == (7, 8)
    assert snapshot.state.deferred_calls() is not None
