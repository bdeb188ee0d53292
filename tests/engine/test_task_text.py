"""A multi-agent v2 child's task checked where it is readable
(`crw.engine.steps.task_text`, `crw.engine.steps.bind_v2`): the rollout's task
lines by turn, the marker and packet checked as on v1 when the text is plain,
the bind by task name alone when it is ciphertext or absent."""

from __future__ import annotations

import json
from pathlib import Path

from crw.actors.step_binder_v2 import read_task_texts
from crw.engine.steps.bind import AttemptState, Bound, SpawnFailed
from crw.engine.steps.bind_v2 import decide_bind_v2
from crw.engine.steps.task_text import not_the_steps, task_texts
from crw.host.sim.rollout import inter_agent_task
from tests.engine.test_bind import (
    AGENT,
    MARKER,
    OWNER,
    PAIR,
    RUN,
    host_turn,
    packet,
    repair_step,
    spawn_step,
    spawn_text,
)
from tests.engine.test_bind_v2 import PATH, agent_message, v2_child

CIPHER = "gAAAAABnX2Jk0v9Vx-ciphertext=="


def rollout(tmp_path: Path, *tasks: tuple[str, str]) -> Path:
    """A child's rollout with its session line, each (turn, text) task as the
    simulated host (and codex, offline) writes it, and a line still being written."""
    lines = [{"type": "session_meta", "payload": {"id": AGENT}}]
    for turn, text in tasks:
        task = inter_agent_task("/root", PATH, text, turn)
        lines.append({"type": "response_item", "payload": task})
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"type": "resp')
    return path


def test_the_rollout_gives_each_turns_task(tmp_path: Path) -> None:
    path = rollout(tmp_path, ("turn-1", spawn_text()), ("turn-2", CIPHER))
    assert task_texts(path.read_text()) == {"turn-1": spawn_text(), "turn-2": CIPHER}
    assert read_task_texts(str(path)) == {"turn-1": spawn_text(), "turn-2": CIPHER}
    assert read_task_texts(str(tmp_path / "none.jsonl")) == {}
    (tmp_path / "latin.jsonl").write_bytes(b"\xff\xfe")
    assert read_task_texts(str(tmp_path / "latin.jsonl")) == {}


def test_a_readable_task_is_checked_as_on_v1_and_an_unreadable_one_is_not() -> None:
    assert not_the_steps(spawn_text(), MARKER, RUN, packet()) is None
    other = spawn_text(k=2)
    assert not_the_steps(other, MARKER, RUN, packet()) == "its marker line names build.1/t2-a1"
    foreign = spawn_text(run="run-2")
    assert not_the_steps(foreign, MARKER, RUN, packet()) == (
        f"it names no packet of step {MARKER} of run {RUN}"
    )
    assert not_the_steps(CIPHER, MARKER, RUN, packet()) is None
    assert not_the_steps(None, MARKER, RUN, packet()) is None


def test_a_spawns_child_given_another_task_holds_the_call_and_ciphertext_binds() -> None:
    """The child at the step's task name, its first task readable and another
    step's: no bind (its name cannot be spawned again), the call held spawn_failed
    naming the retry; the same child with its task encrypted, or no rollout read,
    binds by its name alone."""
    step, child = spawn_step(), v2_child()
    held = decide_bind_v2(
        OWNER, step, AttemptState(), PAIR, AGENT, child, tasks={"turn-1": spawn_text(k=2)}
    )
    assert isinstance(held, SpawnFailed), held
    assert held.held.reason == "spawn_failed"
    assert held.reason == (
        f"the child {PATH} at the step's task name was given another task (its marker "
        "line names build.1/t2-a1): codex keeps one child a name, so the step cannot be "
        "spawned again; answer --retry to spawn attempt 2 under a new task name, with the "
        "step's message"
    )
    for tasks in ({"turn-1": CIPHER}, {}, {"turn-1": spawn_text()}):
        bound = decide_bind_v2(OWNER, step, AttemptState(), PAIR, AGENT, child, tasks=tasks)
        assert isinstance(bound, Bound), (tasks, bound)


def test_a_follow_ups_turn_is_the_first_after_the_previous_whose_task_is_the_steps() -> None:
    """A turn after the previous step's whose readable task is another step's (a
    message the owner sent the child besides) is passed over, as v1's marker
    lookup passes over a turn of another marker."""
    turns = [host_turn(f"turn-{n}", agent_message()) for n in (1, 2, 3)]
    child = v2_child(turns=turns)
    tasks = {
        "turn-2": "crw-flow-op: build.9/t2-a1\nfix it",
        "turn-3": "crw-flow-op: build.1/t2-a1\nfix it",
    }
    decision = decide_bind_v2(
        OWNER, repair_step(), AttemptState(), PAIR, AGENT, child, after_turn="turn-1", tasks=tasks
    )
    assert isinstance(decision, Bound) and decision.turn_started.turn_id == "turn-3"
    encrypted = decide_bind_v2(
        OWNER, repair_step(), AttemptState(), PAIR, AGENT, child, after_turn="turn-1",
        tasks={"turn-2": CIPHER},
    )  # fmt: skip
    assert isinstance(encrypted, Bound) and encrypted.turn_started.turn_id == "turn-2"
