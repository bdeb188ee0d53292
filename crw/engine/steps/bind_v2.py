"""The bind decision on codex's multi-agent v2: the subagent found by its task name.

On v2 a child's task is no user message, so its marker and packet cannot be read
on the host (docs/host.md, "Multi-agent v2"): the step's task name
(`crw.engine.steps.task_name`) stands where they stand on v1. The owner's thread
names each child it spawned (a `subAgentActivity` item of kind `started`, its
`agentPath` `/root/<task_name>`), also after the host restarts; the child's thread
names its path (`source.subAgent.thread_spawn.agent_path`). The rest is v1's:
the owner check, the pair check on model and effort (a v2 spawn asks for no agent
type, so none is compared), the rows of a bind, the replies and their retries.
Pure, as `crw.engine.steps.bind`; docs/session.md, "Multi-agent v2: binding by task
name", is the design.
"""

from __future__ import annotations

from crw.engine.config.roles import RolePair
from crw.engine.held_fix import SPAWN_FAILED
from crw.engine.steps.bind import (
    AttemptState,
    Bound,
    CallRecord,
    Decision,
    PublishedStep,
    Reply,
    ReportLike,
    SpawnFailed,
    _retry,
    bind_spawn,
    decide_failed,
    marker_turn_started,
    owners_subagent,
)
from crw.engine.steps.markers import marker
from crw.engine.steps.replies import decide_late
from crw.engine.steps.task_name import agent_path, name_of_path, task_name
from crw.engine.steps.task_text import TaskTexts, not_the_steps
from crw.host.protocol import SubAgentActivity, Thread, Turn
from crw.journal.rows import Held

_HOST_GIVE_UP = (
    "stop reporting it: the run binds the subagent by its task name once the host answers "
    "(crw flow next shows the step while it waits)"
)
_TURN_GIVE_UP = (
    "stop reporting it: the run binds it by its task name once its turn shows; if it was "
    "not spawned (or followed up) with the step's task_name and message, take the step again"
)


def step_task_name(step: PublishedStep) -> str:
    """The task name of a spawn step's child."""
    return task_name(step.run, step.marker)


def spawned_child(owner_thread: Thread, name: str) -> str | None:
    """The thread id of the owner's child spawned as `name` (the first `started`
    subAgentActivity at `/root/<name>` in the owner's turns), else None."""
    return spawned_children(owner_thread).get(agent_path(name))


def spawned_children(owner_thread: Thread) -> dict[str, str]:
    """Every child the owner's turns name, by path: the thread id of the first
    `started` subAgentActivity at each path."""
    children: dict[str, str] = {}
    for turn in owner_thread.turns:
        for item in turn.items:
            if (
                isinstance(item, SubAgentActivity)
                and item.kind == "started"
                and item.agentPath
                and item.agentThreadId
            ):
                children.setdefault(item.agentPath, item.agentThreadId)
    return children


def already_spawned(step: PublishedStep, failed: str) -> bool:
    """Whether a refused spawn's output says the step's child exists already (codex
    keeps one child per name: the step was taken twice)."""
    return failed.strip() == f"agent path `{agent_path(step_task_name(step))}` already exists"


def decide_failed_v2(step: PublishedStep, attempt: AttemptState, failed: str) -> Decision:
    """A `--failed` report on v2: the step's name taken already is no refused spawn
    (the run binds that child by its name); any other output is v1's spawn_failed."""
    if step.action == "spawn" and already_spawned(step, failed):
        path = agent_path(step_task_name(step))
        return Reply(
            "refused",
            f"{path} is the step's subagent, spawned already: report it with --agent {path}, "
            "or leave it: the run binds it by its task name",
        )
    return decide_failed(step, attempt, failed)


def decide_report_v2(
    run_id: str,
    owner: str,
    report: ReportLike,
    step: PublishedStep,
    record: CallRecord,
    attempt: AttemptState,
    pair: RolePair,
    agent_id: str | None,
    thread: Thread | None,
    host_error: str | None,
    *,
    after_turn: str | None = None,
    tasks: TaskTexts | None = None,
    unknown: bool = False,
    retries: int = 0,
) -> Decision:
    """The run's answer to a dispatch report on v2, while the call waits on `step`:
    `crw.engine.steps.bind.decide_report` with the bind by task name. `agent_id` is
    the thread the report's `--agent` names (its path `/root/<name>` looked up on
    the owner's thread), or the step's bound subagent; `thread` its read.

    Raises:
        ValueError: `thread` is not `agent_id`'s.
    """
    if report.run != run_id:
        return Reply("refused", "another run")  # DISP-10
    if (report.call, report.k, report.attempt) != (step.call, step.k, step.attempt):
        late = record if report.call == step.call else CallRecord()
        reply = decide_late(
            report.k,
            report.attempt,
            agent_id,
            late,
            report.failed,
            run=step.run,
            thread=thread,
            host_error=host_error,
        )
        return late_v2(reply, step.run, report, thread.agent_path if thread else None)
    if report.failed is not None:
        return decide_failed_v2(step, attempt, report.failed)
    return decide_bind_v2(
        owner, step, attempt, pair, agent_id, thread, host_error,
        after_turn=after_turn, tasks=tasks, unknown=unknown, retries=retries,
    )  # fmt: skip


def decide_bind_v2(
    owner: str,
    step: PublishedStep,
    attempt: AttemptState,
    pair: RolePair,
    agent_id: str | None,
    thread: Thread | None,
    host_error: str | None = None,
    *,
    after_turn: str | None = None,
    tasks: TaskTexts | None = None,
    unknown: bool = False,
    retries: int = 0,
) -> Decision:
    """Whether the child `thread` (`agent_id`'s, or the one the owner's thread names
    for the step's task name) binds to the published `step`.

    `after_turn`: for a send_input step (a follow-up), the turn id of the attempt's
    previous step on the child; its turn is the first one after it whose task is
    the step's or cannot be read. `tasks`: the child's tasks by turn, as its
    rollout holds them (`crw.engine.steps.task_text`): a spawn's readable task that
    is not the step's holds the call spawn_failed (the name is taken: the next
    attempt's is another).

    Raises:
        ValueError: `thread` is not `agent_id`'s.
    """
    decided = owners_subagent(
        owner, step, attempt, agent_id, thread, host_error,
        unknown=unknown, retries=retries, report="the step's subagent",
        host_give_up=_HOST_GIVE_UP,
    )  # fmt: skip
    if decided is not None:
        return decided
    assert thread is not None  # owners_subagent decides a thread not read
    refused = _not_the_steps_child(step, thread)
    if refused is not None:
        return refused
    turn = _step_turn(step, thread, after_turn, tasks or {})
    if turn is None:
        return _retry("the step's turn cannot be read yet", retries, _TURN_GIVE_UP)
    if step.action == "spawn":
        other = not_the_steps((tasks or {}).get(turn.id), step.marker, step.run, step.packet)
        if other is not None:
            return _wrong_task(step, thread.agent_path, other)
    turn_started = marker_turn_started(step, turn)
    if step.action == "send_input":
        return Bound(None, turn_started)  # BIND-7
    return bind_spawn(step, attempt, pair, thread, turn_started, agent_role=False)


def late_agent(run: str, report: ReportLike, record: CallRecord) -> str | None:
    """The subagent a report no call waits for names, as the call's rows know it:
    a path that is one of the reported attempt's task names (its spawn's, up to
    the report's k) stands for the child that attempt bound (one child an attempt
    on v2), whose thread id the rows hold; any other agent is itself. Without it a
    late report of the bound child by its path read as a second subagent, told to
    close: the owner interrupted the run's own turn."""
    agent = report.agent_id
    if agent is None or name_of_path(agent) is None:
        return agent
    names = {
        agent_path(task_name(run, marker(report.call, k, report.attempt)))
        for k in range(1, max(report.k, 1) + 1)
    }
    bound = [thread for (attempt, _), thread in record.turns.items() if attempt == report.attempt]
    return bound[0] if agent in names and bound else agent


def late_v2(reply: Reply, run: str, report: ReportLike, path: str | None) -> Reply:
    """A late report's `close` refused when the child at `path` carries a task name
    of another run (DISP-10: an owner that obeyed would close that run's subagent):
    the reported call's attempt in `run` spawned none of that name, at any of its
    turns up to the report's. A path that is no crw name (a v1 subagent) keeps it."""
    if reply.kind != "close" or name_of_path(path) is None:
        return reply
    names = {
        agent_path(task_name(run, marker(report.call, k, report.attempt)))
        for k in range(1, max(report.k, 1) + 1)
    }
    if path in names:
        return reply
    return Reply("refused", f"the subagent {path} carries another run's task name")


def _not_the_steps_child(step: PublishedStep, thread: Thread) -> Reply | None:
    """A spawn step's child is at its task name's path; a follow-up's is the bound
    child (checked above), spawned under a crw name. The digest in the name is the
    run's, so a child of another run's step has another path (DISP-10)."""
    path = thread.agent_path
    if step.action == "spawn" and path == agent_path(step_task_name(step)):
        return None
    if step.action == "send_input" and name_of_path(path) is not None:
        return None
    if name_of_path(path) is not None:
        return Reply("refused", f"the subagent {path} carries another step or run's task name")
    return Reply(
        "refused",
        f"the subagent ({path or 'no path'}) was not spawned with a task name of the run: "
        "spawn again with the step's task_name and message",
    )


def _step_turn(
    step: PublishedStep, thread: Thread, after_turn: str | None, tasks: TaskTexts
) -> Turn | None:
    """A spawn's turn is the child's first; a follow-up's the first after
    `after_turn` whose task is the step's or cannot be read (`tasks`)."""
    if step.action == "spawn":
        return thread.turns[0] if thread.turns else None
    ids = [turn.id for turn in thread.turns]
    if after_turn is None or after_turn not in ids:
        return None
    later = thread.turns[ids.index(after_turn) + 1 :]
    return next(
        (t for t in later if not_the_steps(tasks.get(t.id), step.marker, step.run, None) is None),
        None,
    )


def _wrong_task(step: PublishedStep, path: str | None, other: str) -> SpawnFailed:
    """The child at the step's task name was given another task: the call is held
    spawn_failed, and a retry spawns the next attempt under its own name."""
    error = (
        f"the child {path} at the step's task name was given another task ({other}): "
        "codex keeps one child a name, so the step cannot be spawned again; answer "
        f"--retry to spawn attempt {step.attempt + 1} under a new task name, with the "
        "step's message"
    )
    return SpawnFailed(Held(call=step.call, reason=SPAWN_FAILED, error=error), error)
