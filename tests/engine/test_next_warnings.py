"""`crw flow next` and the holder: whose pins the spawn formats are, the window
a new holder has to bind the owner's line, and the warnings next records nothing
about."""

from __future__ import annotations

import dataclasses
from typing import Any

from crw.engine.config.roles import ROLES
from crw.engine.owner.next_view import NextRead, next_view
from tests.engine.test_next_view import PINNED, STORE, read, row, started

SECOND = 10**9
NOW = 1_000_000 * SECOND
OLD_PINS = {role: {"agent_type": "old-type"} for role in ROLES}
LINE = {"kind": "orchestrator", "run_id": "r1", "policyDigest": "sha256:new"}


def holder(rows: list[dict[str, Any]] | None = None, **over: Any) -> NextRead:
    """A run held by the process `new` that took its lock 20 s ago, bound to owner
    o1 by the holder's line, its store reading the pins."""
    rows = rows or [started(process="new", policy_digest="sha256:new"), row("prepared", "b.1")]
    fields: dict[str, Any] = {
        "process_tokens": ("new",),
        "holder_since": NOW - 20 * SECOND,
        "now": NOW,
        "owner": "o1",
        "owner_line": LINE,
        "store_pairs": PINNED,
    }
    return read(rows, **(fields | over))


def test_spawn_formats_are_the_newest_started_rows_when_its_process_lock_is_held() -> None:
    """spec: CMD-NEXT-22, CMD-NEXT-29: never an earlier process's pins."""
    rows = [
        started(process="old", role_pairs=OLD_PINS),
        started(process="new", role_pairs=PINNED, policy_digest="sha256:new"),
    ]
    view = next_view(holder(rows, store_pairs=STORE))
    assert view.state == "running"
    assert [f["agent_type"] for f in view.spawn_formats][:2] == ["architect", "executor"]
    assert view.spawn_formats[0]["model"] == "gpt-5"
    # The newest row names a lock nobody holds: its process let it go, a new one comes.
    coming = next_view(holder(rows, process_tokens=("old",)))
    assert (coming.state, coming.spawn_formats) == ("starting", [])


def test_a_started_row_naming_no_process_gives_the_formats_while_no_process_lock_is_held() -> None:
    """spec: CMD-NEXT-23: a process of a crw before the process lock."""
    rows = [started(process="old", role_pairs=OLD_PINS), started(role_pairs=PINNED)]
    view = next_view(holder(rows, process_tokens=(), holder_since=None, store_pairs=STORE))
    assert view.state == "running"
    assert view.spawn_formats[0]["model"] == "gpt-5"
    assert next_view(holder(rows, process_tokens=("new",))).spawn_formats == []


def test_a_run_that_recorded_no_pairs_answers_the_role_stores() -> None:
    """spec: CMD-NEXT-40"""
    view = next_view(holder([started(process="new", role_pairs=None)], store_pairs=STORE))
    assert view.state == "running"
    assert [f["model"] for f in view.spawn_formats] == [None] * 6
    assert view.spawn_formats[3]["agent_type"] == "reviewer"
    assert view.warnings == []  # no pins: nothing to differ from


def test_a_new_holder_that_has_not_bound_the_owners_line_is_read_again() -> None:
    """spec: CMD-NEXT-33: its lock taken < 15 s ago, its started row recorded, the
    owner's line not yet under that row's digest."""
    fresh = holder(holder_since=NOW - 14 * SECOND)
    closed = {"kind": "closed", "run_id": "r1"}
    for line in ({**LINE, "policyDigest": "sha256:old"}, {**LINE, "run_id": "r0"}, closed):
        view = next_view(dataclasses.replace(fresh, owner_line=line))
        assert (view.state, view.spawn_formats, view.warnings) == ("starting", [], [])
    unreadable = dataclasses.replace(fresh, owner_line=None, owner_line_problem="unreadable")
    assert next_view(unreadable).state == "starting"
    assert next_view(fresh).state == "running"  # bound: answered at once
    # An owner with no line at all (no start or process ever bound it) is reported
    # at once.
    (warning,) = next_view(dataclasses.replace(fresh, owner_line=None)).warnings
    assert "(it has none)" in warning
    # An app-server run has no owner to bind; a run without an owner neither.
    app = [started(process="new", backend="app-server"), row("prepared", "b.1")]
    assert next_view(holder(app, holder_since=NOW - SECOND, owner_line=None)).state == "running"
    unowned = holder(holder_since=NOW - SECOND, owner=None, owner_line=None)
    assert next_view(unowned).state == "running"


def test_after_the_window_the_holders_line_is_reported_as_it_is() -> None:
    """spec: CMD-NEXT-34, CMD-NEXT-36"""
    view = next_view(holder(holder_since=NOW - 15 * SECOND, owner_line={**LINE, "run_id": "r0"}))
    assert view.state == "running" and view.spawn_formats[0]["model"] == "gpt-5"
    assert view.warnings == [BOUND_TO_R0]


BOUND_TO_R0 = (
    "owner thread o1 is bound to run r0, not to run r1: the spawn hook gives the owner's "
    "spawns run r0's pairs, run r1's too, until a process of run r1 binds the thread (a "
    "thread holds the line of one live run: run r1's next process binds it once run r0 no "
    "longer lives); run r1 binds only the subagents spawned with its own step messages, "
    "which name its packets"
)


def test_next_of_a_run_whose_owner_another_run_holds_says_the_owner_is_bound_to_it() -> None:
    """spec: CMD-NEXT-36, BIND-LINE-22, DISP-25: a second run on one owner thread was
    not bound (owner_bound warned at its start); its next names the run the owner is
    bound to, what its spawns get, and that it binds only its own subagents."""
    (warning,) = next_view(holder(owner_line={**LINE, "run_id": "r0"})).warnings
    assert warning == BOUND_TO_R0


def test_next_warns_when_the_owners_last_line_is_not_the_holders() -> None:
    """spec: CMD-NEXT-36: another run's, another digest's, or none."""
    cases = {
        "it binds the run under policy digest sha256:old, not sha256:new that its process pinned": {
            **LINE,
            "policyDigest": "sha256:old",
        },
        "it closed run r1": {"kind": "closed", "run_id": "r1"},
    }
    for what, line in cases.items():
        (warning,) = next_view(holder(owner_line=line)).warnings
        assert f"owner thread o1's last line is not run r1's ({what}):" in warning
    untrusted = holder(owner_line=None, owner_line_problem="/s/o1.jsonl is a symbolic link")
    (warning,) = next_view(untrusted).warnings
    assert "(/s/o1.jsonl is a symbolic link)" in warning
    assert next_view(holder()).warnings == []
    # No holder, no line to be: a run nobody holds is resumed and its process binds.
    assert next_view(holder(held=False, process_tokens=(), owner_line=None)).warnings == []


def test_next_warns_when_the_store_reads_other_pairs_than_the_holder_pinned() -> None:
    """spec: CMD-NEXT-37: the process keeps running on its pins."""
    store = {**PINNED, "executor": {"agent_type": "executor", "model": "gpt-6"}}
    view = next_view(holder(store_pairs=store))
    assert view.warnings == [
        "the role store reads other pairs than run r1 pinned (executor): its process runs "
        "on its pins; a resume takes the store's and records policy_repinned"
    ]
    assert view.spawn_formats[1]["model"] == "gpt-5-codex"  # the pins


def test_next_warns_when_the_process_it_resumed_repinned() -> None:
    """spec: CMD-NEXT-39"""
    repinned = {"row": "policy_repinned", "pinned_digest": "sha256:old"}
    rows = [
        started(process="old", role_pairs=OLD_PINS, policy_digest="sha256:old"),
        started(process="new", policy_digest="sha256:new"),
        {**repinned, "store_digest": "sha256:new", "role_pairs": PINNED},
    ]
    expected = (
        "the process next resumed repinned run r1 (policy_repinned): it runs on the role "
        "store as it reads now, not on the pairs the earlier process pinned"
    )
    assert next_view(holder(rows, resumed_pid=7)).warnings == [expected]
    gone = {"held": False, "process_tokens": (), "holder_since": None}
    paused = next_view(holder([*rows, {"row": "paused"}], resumed_pid=7, **gone))
    assert paused.warnings == [expected]  # it let the run go already
    assert next_view(holder(rows)).warnings == []  # next resumed nothing
    again = [*rows, started(process="new", policy_digest="sha256:new")]
    assert next_view(holder(again, resumed_pid=7)).warnings == []  # this process did not


def test_the_hint_of_an_app_server_run_proposes_no_wait_agent() -> None:
    """spec: CMD-NEXT-12: an app-server run's process makes its calls itself; the
    owner has no subagent to wait on."""
    rows = [
        started(process="new", backend="app-server"),
        row("prepared", "b.1"),
        row("thread_started", "b.1", thread_id="thr-app", attempt=1),
    ]
    hint = next_view(holder(rows)).hint
    assert "wait_agent" not in hint
    assert hint == (
        "The run's process makes its calls on the host itself (app-server): there is no "
        "subagent to wait on; follow it with crw flow next r1 --wait 30."
    )
    session = next_view(holder([*rows[1:], started(process="new")]))
    assert 'wait_agent(targets=["thr-app"]' in session.hint
