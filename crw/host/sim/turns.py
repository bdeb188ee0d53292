"""The threads and turns of the simulated host as they live: a new thread and its
rollout, a turn started, acted out in the host's nursery by its plan (its items,
token counts, files, failures, retries), and ended once, as the real host ends
it; an interrupt, slow to stop under a `slowStop` script; a restart of the host's
process.

It decides nothing a script does not say (`crw.host.sim.behaviour` plans each
turn) and answers no request: `crw.host.sim.server` reads a request's params and
calls it; what it posts and records goes through `crw.host.sim.broadcast`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from crw.host.sim import files, rollout
from crw.host.sim.behaviour import (
    RETRY_GAPS,
    UNREACHABLE,
    WORK_TOKENS,
    Script,
    SlowStop,
    TurnPlan,
    call_of,
    choose,
    marker_of,
    output_schema,
    plan_turn,
    role_of,
    turn_error,
)
from crw.host.sim.broadcast import Broadcast
from crw.host.sim.connection import Connection
from crw.host.sim.items import agent_message, new_id, user_message
from crw.host.sim.state import (
    MODEL_CONTEXT_WINDOW,
    RpcError,
    SimState,
    Thread,
    Turn,
    Usage,
    invalid_request,
)


@dataclasses.dataclass
class _Stopping:
    """An interrupted turn of a `slowStop` script that runs on: the reads of its
    thread still to answer it running, and when (Trio's clock) it may stop."""

    thread: Thread
    turn: Turn
    reads: int
    at: float


class Turns:
    """The threads' and turns' life in one simulated host, and the scripts that
    plan its turns."""

    def __init__(
        self,
        state: SimState,
        broadcast: Broadcast,
        codex_home: Path,
        nursery: trio.Nursery,
        wall: Callable[[], float],
    ) -> None:
        self.state = state
        self.scripts: list[Script] = []
        self._broadcast = broadcast
        self._codex_home = codex_home
        self._nursery = nursery
        self._wall = wall
        self._answered_calls: set[str] = set()
        self._runners: dict[str, trio.CancelScope] = {}
        self._slow: dict[str, SlowStop] = {}
        """How each running turn of a `slowStop` script stops, by turn id."""
        self._stopping: dict[str, _Stopping] = {}
        """The turns interrupted that run on (`slowStop`), by turn id."""
        self._empty: dict[str, int] = {}
        """The reads each thread's rollout still reads empty to (`emptyRollout`), by id."""
        self._late: dict[str, str] = {}
        """The turns that live while they read interrupted with no error, by id:
        "start" (`lateStart`: not yet set running) or "end" (`lateEnd`: their end
        still to come)."""

    def set_status(self, thread: Thread, status: str) -> None:
        if thread.status != status:
            thread.status = status
            self._broadcast.notify(
                "thread/status/changed",
                {"threadId": thread.id, "status": thread.status_wire()},
                thread,
            )

    def new_thread(
        self, params: dict[str, Any], *, parent: Thread | None = None, role: str | None = None
    ) -> Thread:
        wall, thread_id = self._wall(), new_id()
        path = rollout.rollout_file(str(self._codex_home), thread_id, wall)
        defaults = {} if parent else {"cwd": str(self._codex_home)}
        params = defaults | {k: v for k, v in params.items() if v}
        thread = self.state.new_thread(
            thread_id, params, path=path, wall=wall, parent=parent, role=role
        )
        self._broadcast.record(thread, "session_meta", rollout.session_meta(thread), wall)
        return thread

    def started(self, conn: Connection | None, thread: Thread) -> dict[str, Any]:
        """Announce a new interactive thread; subscribe the caller, if any. The
        notification and the answer show the same `Thread` object, made once."""
        if conn is not None:
            self._broadcast.subscribe(conn, thread)
        wire = thread.wire()
        self._broadcast.notify("thread/started", {"thread": wire}, thread)
        return thread.result(wire=wire)

    def start_turn(
        self, thread: Thread, text: str, schema: Any = None, *, task_from: str | None = None
    ) -> Turn:
        """Open a turn whose user message is `text` and run it in the background.
        `task_from`: the path of the multi-agent v2 agent that sent `text` as a
        task, an inter-agent message: no thread item, a `response_item` in the
        rollout (docs/host.md, "Multi-agent v2")."""
        if self.live_turn(thread) is not None:
            raise invalid_request(f"thread {thread.id} already has an active turn")
        wall = self._wall()
        plan = self._plan(thread, text, schema)
        turn = Turn(id=new_id(), started_at=int(wall), started_clock=trio.current_time())
        thread.turns.append(turn)
        thread.updated_at = int(wall)
        if not plan.late_start:
            self.set_status(thread, "active")
        self._broadcast.notify(
            "turn/started", {"threadId": thread.id, "turn": turn.wire("notLoaded")}, thread
        )
        self._broadcast.record(
            thread, "event_msg", rollout.event("task_started", turn_id=turn.id), wall
        )
        if task_from is None:
            item = user_message(text)
            turn.items.append(item)
            self.item("item/started", thread, turn, item)
            self.item("item/completed", thread, turn, item)
            user = rollout.event("user_message", message=text, turn_id=turn.id)
            self._broadcast.record(thread, "event_msg", user, wall)
        else:
            thread.tasks.append(text)
            task = rollout.inter_agent_task(task_from, thread.agent_path or "", text, turn.id)
            self._broadcast.record(thread, "response_item", task, wall)
        if plan.late_start:
            turn.status = "interrupted"  # not yet set running: `_act_turn` does
            self._late[turn.id] = "start"
        scope = trio.CancelScope()
        self._runners[turn.id] = scope
        if plan.slow_stop is not None:
            self._slow[turn.id] = plan.slow_stop
        if plan.empty_rollout:
            self._empty[thread.id] = plan.empty_rollout
        workspace = files.workspace_of(_user_texts(thread), thread.cwd) if plan.files else None
        self._nursery.start_soon(self._run_turn, thread, turn, plan, scope, workspace)
        return turn

    def _plan(self, thread: Thread, text: str, schema: Any) -> TurnPlan:
        marker = marker_of(text)
        roles = {r for r in (role_of(text), thread.agent_role) if r}
        call = call_of(marker) if marker else thread.id
        plan = plan_turn(
            choose(self.scripts, marker, roles),
            text,
            schema if isinstance(schema, dict) else output_schema(text),
            first_of_call=call not in self._answered_calls,
        )
        if plan.messages:
            self._answered_calls.add(call)
        return plan

    async def _run_turn(
        self,
        thread: Thread,
        turn: Turn,
        plan: TurnPlan,
        scope: trio.CancelScope,
        workspace: Path | None = None,
    ) -> None:
        with scope:
            try:
                await self._act_turn(thread, turn, plan, workspace)
            finally:
                self._broadcast.write_records()

    async def _act_turn(
        self, thread: Thread, turn: Turn, plan: TurnPlan, workspace: Path | None
    ) -> None:
        """Act out `plan` (in `_run_turn`, which writes the rollout records of its
        last step); the records of a step that awaits after it are written first."""
        if plan.late_start:
            await trio.sleep(plan.late_start)
            del self._late[turn.id]
            turn.status = "inProgress"
            self.set_status(thread, "active")
        gap = plan.seconds / plan.responses
        for _ in range(plan.responses - 1):
            await trio.sleep(gap)
            self._work(thread, turn)
            self._broadcast.write_records()
        await trio.sleep(gap)
        if workspace is not None:
            try:
                files.apply(workspace, plan.files, self._wall())
            except files.FileEffectError as err:
                error = {"message": str(err), "codexErrorInfo": None, "additionalDetails": None}
                self.end_turn(thread, turn, "failed", error=error, thread_status="systemError")
                return
        if plan.vanish is not None:
            self.end_turn(thread, turn, "interrupted", thread_status=plan.vanish)
            return
        if plan.unreachable:
            await self._retry_forever(thread, turn)
        self._respond(thread, turn, plan)
        if plan.fail is not None:
            if plan.fail == "contextWindowExceeded":
                self._window_exceeded(thread, turn)
            error = turn_error(plan.fail)
            if plan.late_end:
                await self._fail_late(thread, turn, error, plan.late_end)
            told = plan.late_end > 0
            self.end_turn(
                thread, turn, "failed", error=error, thread_status="systemError", told=told
            )
            return
        if plan.hang:
            self._broadcast.write_records()
            await trio.sleep_forever()
        if plan.late_end:
            await self._complete_late(thread, turn, plan.late_end)
        self.end_turn(thread, turn, "completed")

    async def _retry_forever(self, thread: Thread, turn: Turn) -> None:
        """The turn's model cannot be reached: `error {willRetry: true}` at codex's
        growing intervals, until the turn is interrupted."""
        for gap in itertools.chain(RETRY_GAPS, itertools.repeat(RETRY_GAPS[-1])):
            params = {"error": UNREACHABLE, "willRetry": True}
            self._broadcast.notify(
                "error", params | {"threadId": thread.id, "turnId": turn.id}, thread
            )
            await trio.sleep(gap)

    async def _fail_late(
        self, thread: Thread, turn: Turn, error: dict[str, Any], seconds: float
    ) -> None:
        """A failing turn whose end lags its error, as codex 0.163.0's does until its
        rollout holds the error (docs/host-testing.md): the thread goes systemError
        and `error {willRetry: false}` is sent, then for `seconds` the turn reads
        interrupted with no error; `end_turn` ends it after."""
        self.set_status(thread, "systemError")
        params = {"error": error, "willRetry": False, "threadId": thread.id, "turnId": turn.id}
        self._broadcast.notify("error", params, thread)
        await self._end_late(turn, seconds)

    async def _complete_late(self, thread: Thread, turn: Turn, seconds: float) -> None:
        """A completing turn whose end lags its answer, as codex's does for a moment
        before `turn/completed` (docs/host-testing.md): its thread goes idle and for
        `seconds` the turn reads interrupted with no error, every item in it;
        `end_turn` ends it completed after."""
        self._broadcast.write_records()
        self.set_status(thread, "idle")
        await self._end_late(turn, seconds)

    async def _end_late(self, turn: Turn, seconds: float) -> None:
        """The turn reads interrupted with no error for `seconds`, its end still to
        come (`end_turn` ends it after; `turn/interrupt` leaves it to that end)."""
        turn.status = "interrupted"
        self._late[turn.id] = "end"
        await trio.sleep(seconds)
        del self._late[turn.id]
        turn.status = "inProgress"  # still to end: end_turn ends a turn in progress

    def _respond(self, thread: Thread, turn: Turn, plan: TurnPlan) -> None:
        """One model response: its messages, then its token count."""
        wall = self._wall()
        for text, phase in plan.messages:
            item = agent_message(text, phase)
            turn.items.append(item)
            self.item("item/started", thread, turn, item)
            self.item("item/completed", thread, turn, item)
            event = rollout.event("agent_message", message=text, phase=phase, turn_id=turn.id)
            self._broadcast.record(thread, "event_msg", event, wall)
        if plan.tokens is not None:
            self._count(thread, turn, plan.tokens, wall)

    def _work(self, thread: Thread, turn: Turn) -> None:
        """One working model response before the turn's last: a reasoning item,
        then its token count."""
        item = {"type": "reasoning", "id": new_id(), "summary": [], "content": []}
        turn.items.append(item)
        self.item("item/started", thread, turn, item)
        self.item("item/completed", thread, turn, item)
        self._count(thread, turn, WORK_TOKENS, self._wall())

    def _count(self, thread: Thread, turn: Turn, tokens: Usage, wall: float) -> None:
        """A model response's token count: the notification and the rollout's record."""
        thread.tokens = thread.tokens + tokens
        usage = {
            "total": thread.tokens.wire(),
            "last": tokens.wire(),
            "modelContextWindow": MODEL_CONTEXT_WINDOW,
        }
        params = {"threadId": thread.id, "turnId": turn.id, "tokenUsage": usage}
        self._broadcast.notify("thread/tokenUsage/updated", params, thread)
        self._broadcast.record(
            thread, "event_msg", rollout.token_count(thread.tokens, tokens), wall
        )

    def _window_exceeded(self, thread: Thread, turn: Turn) -> None:
        """codex 0.163 reports an exceeded context window as a token usage whose total
        and last are the whole window, every part 0 (docs/host-testing.md)."""
        window = {
            "totalTokens": MODEL_CONTEXT_WINDOW,
            "inputTokens": 0,
            "cachedInputTokens": 0,
            "outputTokens": 0,
            "reasoningOutputTokens": 0,
        }
        usage = {"total": window, "last": window, "modelContextWindow": MODEL_CONTEXT_WINDOW}
        params = {"threadId": thread.id, "turnId": turn.id, "tokenUsage": usage}
        self._broadcast.notify("thread/tokenUsage/updated", params, thread)

    def item(self, method: str, thread: Thread, turn: Turn, item: dict[str, Any]) -> None:
        """Post an item as it is now. An item is never changed once in a turn's items
        (a change puts a new dict in its place), so it goes out uncopied though the
        connections encode it later."""
        stamp = "startedAtMs" if method == "item/started" else "completedAtMs"
        params = {"item": item, "threadId": thread.id, "turnId": turn.id}
        self._broadcast.notify(method, params | {stamp: int(self._wall() * 1000)}, thread)

    def end_turn(
        self,
        thread: Thread,
        turn: Turn,
        status: str,
        *,
        error: dict[str, Any] | None = None,
        thread_status: str = "idle",
        told: bool = False,
    ) -> None:
        """End a turn in progress (once): the thread's status, then the error (unless
        `told`: sent already), then `turn/completed`, in the real host's order.
        Stops the turn's runner. A turn that reads interrupted while it lives
        (`lateStart`, `lateEnd`) ends so too."""
        if self._late.pop(turn.id, None) is not None:
            turn.status = "inProgress"
        if turn.status != "inProgress":
            return
        wall = self._wall()
        turn.status, turn.error = status, error
        turn.completed_at = int(wall)
        turn.duration_ms = math.floor((trio.current_time() - turn.started_clock) * 1000)
        thread.updated_at = int(wall)
        self.set_status(thread, thread_status)
        if error is not None and not told:
            params = {"error": error, "willRetry": False, "threadId": thread.id, "turnId": turn.id}
            self._broadcast.notify("error", params, thread)
        self._broadcast.notify(
            "turn/completed", {"threadId": thread.id, "turn": turn.wire("summary")}, thread
        )
        done = rollout.event("task_complete", turn_id=turn.id, status=status)
        self._broadcast.record(thread, "event_msg", done, wall)
        self._slow.pop(turn.id, None)
        self._stopping.pop(turn.id, None)
        runner = self._runners.pop(turn.id, None)
        if runner is not None:
            runner.cancel()

    def live_turn(self, thread: Thread) -> Turn | None:
        """The thread's turn that has not ended: in progress, or reading interrupted
        while it lives (`lateStart`, `lateEnd`)."""
        turn = thread.active_turn()
        if turn is None and thread.turns and thread.turns[-1].id in self._late:
            turn = thread.turns[-1]
        return turn

    def interrupt(self, thread: Thread, turn: Turn) -> None:
        """Interrupt a turn in progress (it keeps what it streamed), or one started
        and not yet running (`lateStart`); a turn that already ended, is stopping
        already, or whose end is on its way (`lateEnd`), is left as it is. A turn
        of a `slowStop` script stops working but ends only later (`_stop_slowly`)."""
        if turn.id in self._stopping or self._late.get(turn.id) == "end":
            return
        slow = self._slow.pop(turn.id, None)
        if slow is None or turn.status != "inProgress":
            self.end_turn(thread, turn, "interrupted")
        else:
            self._stop_slowly(thread, turn, slow)

    def _stop_slowly(self, thread: Thread, turn: Turn, slow: SlowStop) -> None:
        """The turn streams nothing more, and stays in progress (its thread active)
        until `slow.reads` thread/reads answered it so (`count_read`) and
        `slow.seconds` have passed (`_stop_when_due`)."""
        runner = self._runners.pop(turn.id, None)
        if runner is not None:
            runner.cancel()
        stop = _Stopping(thread, turn, slow.reads, trio.current_time() + slow.seconds)
        self._stopping[turn.id] = stop
        self._runners[turn.id] = scope = trio.CancelScope()
        self._nursery.start_soon(self._stop_when_due, stop, scope)

    async def _stop_when_due(self, stop: _Stopping, scope: trio.CancelScope) -> None:
        with scope:
            try:
                await trio.sleep_until(stop.at)
                if stop.reads == 0:
                    self.end_turn(stop.thread, stop.turn, "interrupted")
            finally:
                self._broadcast.write_records()

    def refuse_empty(self, thread_id: str, include_turns: bool) -> None:
        """Refuse a `thread/read` of a thread an `emptyRollout` script still reads
        empty, as codex 0.169 refuses one whose rollout file is made and its first
        line not yet written: "rollout at <path> is empty" with its turns, "failed
        to read session metadata ...: rollout at <path> is empty" without (-32603).
        Each refusal counts one of the script's reads."""
        left = self._empty.get(thread_id, 0)
        if not left:
            return
        if left == 1:
            del self._empty[thread_id]
        else:
            self._empty[thread_id] = left - 1
        path = self.state.threads[thread_id].path
        empty = f"rollout at {path} is empty"
        if not include_turns:
            empty = f"failed to read session metadata from {path}: {empty}"
        raise RpcError(-32603, empty)

    def count_read(self, thread_id: str) -> None:
        """A `thread/read` of `thread_id` was answered: a stopping turn (`slowStop`)
        counts it, and ends once it was the last read to show it running and its
        time has passed."""
        thread = self.state.threads.get(thread_id)
        turn = thread.active_turn() if thread is not None else None
        stop = self._stopping.get(turn.id) if turn is not None else None
        if stop is not None:
            stop.reads = max(stop.reads - 1, 0)
            if stop.reads == 0 and trio.current_time() >= stop.at:
                self.end_turn(stop.thread, stop.turn, "interrupted")

    def restart(self) -> None:
        """The host's process restarts: every thread notLoaded, without the config
        overrides it was loaded with; a turn that was running ends interrupted,
        with no error and no notification (the process that ran it is gone)."""
        for thread in self.state.threads.values():
            turn = self.live_turn(thread)
            if turn is not None:
                turn.status, turn.completed_at = "interrupted", int(self._wall())
                runner = self._runners.pop(turn.id, None)
                if runner is not None:
                    runner.cancel()
            thread.status = "notLoaded"
            thread.config = {}
        self._slow.clear()
        self._stopping.clear()
        self._late.clear()


def _user_texts(thread: Thread) -> list[str]:
    """The text of every user message of `thread` (a v2 child's tasks first),
    oldest first."""
    return thread.tasks + [
        part.get("text", "")
        for turn in thread.turns
        for item in turn.items
        if item.get("type") == "userMessage"
        for part in item.get("content", ())
    ]
