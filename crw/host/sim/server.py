"""The simulated host as a server: one `SimHost`, any number of connections.

It answers the app-server methods crw uses the way `codex app-server` 0.163.0
does (host-protocol.md: results, error codes and words, notification order and
who gets them) and adds the `sim/*` control methods that play the owner and
script its subagents (ARCHITECTURE.md, The host). Every delay is a `trio.sleep`,
so one `MockClock` drives the client and the host in tests.

Requests are answered in the connection's task without a checkpoint between the
state change, the response and the notifications it causes, so a client always
gets the response first, as from the real host. Turns run in the host's nursery:
a client that disconnects mid-turn does not stop them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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
from crw.host.sim.catalog import Catalog, model_list
from crw.host.sim.state import (
    MODEL_CONTEXT_WINDOW,
    RpcError,
    SimState,
    Thread,
    Turn,
    Usage,
    agent_message,
    fork_turns,
    invalid_request,
    list_loaded,
    list_threads,
    list_turns,
    new_id,
    read_thread,
    spawn_call,
    user_message,
)
from crw.host.transport import HostUnavailable, JsonLinesTransport, Transport, encode
from crw.host.websocket import websocket_server
from crw.private import PRIVATE_FILE

OUTBOX = 4096
"""Messages a connection may fall behind by before the host drops it (a client
that stopped reading must not stall the turns of the others)."""

_TO_ALL = frozenset({"thread/started", "thread/status/changed"})


class _Connection:
    """One client: its outbox of encoded messages, drained to its transport by its
    own task."""

    def __init__(self) -> None:
        self.outbox, self.outgoing = trio.open_memory_channel[str](OUTBOX)
        self.initialized = False
        self.opted_out: frozenset[str] = frozenset()
        """The notification methods this client asked at `initialize` not to be
        sent (`capabilities.optOutNotificationMethods`, exact names)."""

    def post(self, message: dict[str, Any]) -> None:
        self.post_encoded(encode(message))

    def post_encoded(self, text: str) -> None:
        try:
            self.outbox.send_nowait(text)
        except trio.WouldBlock:
            self.outbox.close()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


_Method = Callable[[_Connection, dict[str, Any]], dict[str, Any]]


@dataclasses.dataclass
class _Stopping:
    """An interrupted turn of a `slowStop` script that runs on: the reads of its
    thread still to answer it running, and when (Trio's clock) it may stop."""

    thread: Thread
    turn: Turn
    reads: int
    at: float


class SimHost:
    """The state, scripts and CODEX_HOME of one simulated host, shared by all its
    connections. Made by `open_sim_host`, which owns the nursery its turns run in."""

    def __init__(
        self,
        codex_home: Path,
        nursery: trio.Nursery,
        *,
        wall: Callable[[], float] = time.time,
        catalog: Catalog | None = None,
    ) -> None:
        self.codex_home = codex_home
        self.catalog = catalog
        """The models served and agent types known (None: any, none listed)."""
        self.state = SimState()
        self.scripts: list[Script] = []
        self._nursery = nursery
        self._wall = wall
        self._connections: set[_Connection] = set()
        self._subscribers: dict[str, set[_Connection]] = {}
        self._answered_calls: set[str] = set()
        self._runners: dict[str, trio.CancelScope] = {}
        self._slow: dict[str, SlowStop] = {}
        """How each running turn of a `slowStop` script stops, by turn id."""
        self._stopping: dict[str, _Stopping] = {}
        """The turns interrupted that run on (`slowStop`), by turn id."""
        self._held: list[tuple[set[_Connection], dict[str, Any]]] | None = None
        self._records: dict[str, list[rollout.Record]] = {}
        """Rollout records of this step not written yet, by file (`_write_records`)."""
        self.served: dict[str, int] = {}
        """Requests served, by method (answered with a result or an error)."""
        self.posted: dict[str, int] = {}
        """Notifications posted, by method: one a connection sent it."""
        self._methods: dict[str, _Method] = {
            "initialize": self._initialize,
            "thread/start": self._thread_start,
            "thread/read": self._thread_read,
            "thread/list": self._read(list_threads),
            "thread/loaded/list": self._read(list_loaded),
            "thread/turns/list": self._read(list_turns),
            "thread/resume": self._thread_resume,
            "thread/fork": self._thread_fork,
            "thread/unsubscribe": self._thread_unsubscribe,
            "turn/start": self._turn_start,
            "turn/interrupt": self._turn_interrupt,
            "model/list": lambda conn, params: model_list(self.catalog, params),
            "sim/startOwner": self._start_owner,
            "sim/spawnAgent": self._spawn_agent,
            "sim/sendInput": self._send_input,
            "sim/closeAgent": self._close_agent,
            "sim/script": self._script,
            "sim/stats": self._stats,
            "sim/restart": self._restart,
        }

    def _read(self, answer: Callable[[SimState, dict[str, Any]], dict[str, Any]]) -> _Method:
        return lambda conn, params: answer(self.state, params)

    # -- connections and notifications

    def _connect(self) -> _Connection:
        conn = _Connection()
        self._connections.add(conn)
        return conn

    def _disconnect(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        for subscribers in self._subscribers.values():
            subscribers.discard(conn)
        conn.outbox.close()

    def _receive(self, conn: _Connection, message: dict[str, Any]) -> None:
        """Answer one request, then send what it caused; a client notification
        (`initialized`) or a response needs nothing."""
        if "id" not in message or "method" not in message:
            return
        self._held = []
        method = str(message["method"])
        self.served[method] = self.served.get(method, 0) + 1
        try:
            conn.post({"id": message["id"], "result": self._call(conn, message)})
        except RpcError as err:
            conn.post({"id": message["id"], "error": {"code": err.code, "message": err.message}})
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            # Malformed params (a list where an object goes, …): the host answers
            # "Invalid request" and serves on, as the real one does.
            error = {"code": -32600, "message": f"Invalid request: {err!r}"}
            conn.post({"id": message["id"], "error": error})
        finally:
            held, self._held = self._held, None
            self._write_records()
        for targets, notification in held:
            self._deliver(targets, notification)

    def _call(self, conn: _Connection, message: dict[str, Any]) -> dict[str, Any]:
        method, params = message["method"], message.get("params") or {}
        handler = self._methods.get(method)
        if handler is None:
            raise invalid_request(f"Invalid request: unknown variant `{method}`")
        if not conn.initialized and method != "initialize":
            raise invalid_request("Not initialized")
        if not isinstance(params, dict):
            raise invalid_request(f"Invalid request: params of {method} must be an object")
        return handler(conn, params)

    def _notify(self, method: str, params: dict[str, Any], thread: Thread) -> None:
        """Send a notification to whom the real host sends it: thread/started and
        status changes to all, a subagent's events to all (as in 0.163.0), the
        others to the thread's subscribers."""
        message = {"method": method, "params": params, "emittedAtMs": int(self._wall() * 1000)}
        if method in _TO_ALL or thread.is_subagent:
            targets = set(self._connections)
        else:
            targets = set(self._subscribers.get(thread.id, ()))
        if self._held is not None:
            self._held.append((targets, message))
        else:
            self._deliver(targets, message)

    def _deliver(self, targets: set[_Connection], message: dict[str, Any]) -> None:
        """Post `message` to each of `targets` still connected that did not opt out
        of its method, encoded once for all."""
        text: str | None = None
        method = message["method"]
        for conn in targets & self._connections:
            if method in conn.opted_out:
                continue
            if text is None:
                text = encode(message)
            conn.post_encoded(text)
            self.posted[method] = self.posted.get(method, 0) + 1

    def _record(self, thread: Thread, kind: str, payload: dict[str, Any], wall: float) -> None:
        """Add a record to the thread's rollout at the end of this step (`_write_records`)."""
        self._records.setdefault(thread.path, []).append((kind, payload, wall))

    def _write_records(self) -> None:
        """Write the records of this step, one write a rollout. Called before the
        step's end (no checkpoint in between): a client that reads a rollout after
        the response or notification of a step finds its records there."""
        records, self._records = self._records, {}
        for path, lines in records.items():
            rollout.append_all(path, lines)

    def _subscribe(self, conn: _Connection, thread: Thread) -> None:
        self._subscribers.setdefault(thread.id, set()).add(conn)

    def _set_status(self, thread: Thread, status: str) -> None:
        if thread.status != status:
            thread.status = status
            self._notify(
                "thread/status/changed",
                {"threadId": thread.id, "status": thread.status_wire()},
                thread,
            )

    # -- threads

    def _new_thread(
        self, params: dict[str, Any], *, parent: Thread | None = None, role: str | None = None
    ) -> Thread:
        wall, thread_id = self._wall(), new_id()
        path = rollout.rollout_file(str(self.codex_home), thread_id, wall)
        defaults = {} if parent else {"cwd": str(self.codex_home)}
        params = defaults | {k: v for k, v in params.items() if v}
        thread = self.state.new_thread(
            thread_id, params, path=path, wall=wall, parent=parent, role=role
        )
        self._record(thread, "session_meta", rollout.session_meta(thread), wall)
        return thread

    def _started(self, conn: _Connection | None, thread: Thread) -> dict[str, Any]:
        """Announce a new interactive thread; subscribe the caller, if any. The
        notification and the answer show the same `Thread` object, made once."""
        if conn is not None:
            self._subscribe(conn, thread)
        wire = thread.wire()
        self._notify("thread/started", {"thread": wire}, thread)
        return thread.result(wire=wire)

    # -- turns

    def _start_turn(self, thread: Thread, text: str, schema: Any = None) -> Turn:
        """Open a turn whose user message is `text` and run it in the background."""
        if thread.active_turn() is not None:
            raise invalid_request(f"thread {thread.id} already has an active turn")
        wall = self._wall()
        turn = Turn(id=new_id(), started_at=int(wall), started_clock=trio.current_time())
        item = user_message(text)
        turn.items.append(item)
        thread.turns.append(turn)
        thread.updated_at = int(wall)
        self._set_status(thread, "active")
        self._notify(
            "turn/started", {"threadId": thread.id, "turn": turn.wire("notLoaded")}, thread
        )
        self._item("item/started", thread, turn, item)
        self._item("item/completed", thread, turn, item)
        self._record(thread, "event_msg", rollout.event("task_started", turn_id=turn.id), wall)
        user = rollout.event("user_message", message=text, turn_id=turn.id)
        self._record(thread, "event_msg", user, wall)
        plan = self._plan(thread, text, schema)
        scope = trio.CancelScope()
        self._runners[turn.id] = scope
        if plan.slow_stop is not None:
            self._slow[turn.id] = plan.slow_stop
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
                self._write_records()

    async def _act_turn(
        self, thread: Thread, turn: Turn, plan: TurnPlan, workspace: Path | None
    ) -> None:
        """Act out `plan` (in `_run_turn`, which writes the rollout records of its
        last step); the records of a step that awaits after it are written first."""
        gap = plan.seconds / plan.responses
        for _ in range(plan.responses - 1):
            await trio.sleep(gap)
            self._work(thread, turn)
            self._write_records()
        await trio.sleep(gap)
        if workspace is not None:
            try:
                files.apply(workspace, plan.files, self._wall())
            except files.FileEffectError as err:
                error = {"message": str(err), "codexErrorInfo": None, "additionalDetails": None}
                self._end_turn(thread, turn, "failed", error=error, thread_status="systemError")
                return
        if plan.vanish is not None:
            self._end_turn(thread, turn, "interrupted", thread_status=plan.vanish)
            return
        if plan.unreachable:
            await self._retry_forever(thread, turn)
        self._respond(thread, turn, plan)
        if plan.fail is not None:
            if plan.fail == "contextWindowExceeded":
                self._window_exceeded(thread, turn)
            error = turn_error(plan.fail)
            self._end_turn(thread, turn, "failed", error=error, thread_status="systemError")
            return
        if plan.hang:
            self._write_records()
            await trio.sleep_forever()
        self._end_turn(thread, turn, "completed")

    async def _retry_forever(self, thread: Thread, turn: Turn) -> None:
        """The turn's model cannot be reached: `error {willRetry: true}` at codex's
        growing intervals, until the turn is interrupted."""
        for gap in itertools.chain(RETRY_GAPS, itertools.repeat(RETRY_GAPS[-1])):
            params = {"error": UNREACHABLE, "willRetry": True}
            self._notify("error", params | {"threadId": thread.id, "turnId": turn.id}, thread)
            await trio.sleep(gap)

    def _respond(self, thread: Thread, turn: Turn, plan: TurnPlan) -> None:
        """One model response: its messages, then its token count."""
        wall = self._wall()
        for text, phase in plan.messages:
            item = agent_message(text, phase)
            turn.items.append(item)
            self._item("item/started", thread, turn, item)
            self._item("item/completed", thread, turn, item)
            event = rollout.event("agent_message", message=text, phase=phase, turn_id=turn.id)
            self._record(thread, "event_msg", event, wall)
        if plan.tokens is not None:
            self._count(thread, turn, plan.tokens, wall)

    def _work(self, thread: Thread, turn: Turn) -> None:
        """One working model response before the turn's last: a reasoning item,
        then its token count."""
        item = {"type": "reasoning", "id": new_id(), "summary": [], "content": []}
        turn.items.append(item)
        self._item("item/started", thread, turn, item)
        self._item("item/completed", thread, turn, item)
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
        self._notify("thread/tokenUsage/updated", params, thread)
        self._record(thread, "event_msg", rollout.token_count(thread.tokens, tokens), wall)

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
        self._notify("thread/tokenUsage/updated", params, thread)

    def _item(self, method: str, thread: Thread, turn: Turn, item: dict[str, Any]) -> None:
        """Post an item as it is now. An item is never changed once in a turn's items
        (a change puts a new dict in its place), so it goes out uncopied though the
        connections encode it later."""
        stamp = "startedAtMs" if method == "item/started" else "completedAtMs"
        params = {"item": item, "threadId": thread.id, "turnId": turn.id}
        self._notify(method, params | {stamp: int(self._wall() * 1000)}, thread)

    def _end_turn(
        self,
        thread: Thread,
        turn: Turn,
        status: str,
        *,
        error: dict[str, Any] | None = None,
        thread_status: str = "idle",
    ) -> None:
        """End a turn in progress (once): the thread's status, then the error, then
        `turn/completed`, in the real host's order. Stops the turn's runner."""
        if turn.status != "inProgress":
            return
        wall = self._wall()
        turn.status, turn.error = status, error
        turn.completed_at = int(wall)
        turn.duration_ms = math.floor((trio.current_time() - turn.started_clock) * 1000)
        thread.updated_at = int(wall)
        self._set_status(thread, thread_status)
        if error is not None:
            params = {"error": error, "willRetry": False, "threadId": thread.id, "turnId": turn.id}
            self._notify("error", params, thread)
        self._notify(
            "turn/completed", {"threadId": thread.id, "turn": turn.wire("summary")}, thread
        )
        done = rollout.event("task_complete", turn_id=turn.id, status=status)
        self._record(thread, "event_msg", done, wall)
        self._slow.pop(turn.id, None)
        self._stopping.pop(turn.id, None)
        runner = self._runners.pop(turn.id, None)
        if runner is not None:
            runner.cancel()

    # -- the app-server methods

    def _initialize(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        capabilities = params.get("capabilities") or {}
        opt_out = (
            capabilities.get("optOutNotificationMethods")
            if isinstance(capabilities, dict)
            else None
        )
        if opt_out is not None and not (
            isinstance(opt_out, list) and all(isinstance(m, str) for m in opt_out)
        ):
            raise invalid_request(
                "Invalid request: capabilities.optOutNotificationMethods must be a list of strings"
            )
        conn.opted_out = frozenset(opt_out or ())
        conn.initialized = True
        return {
            "userAgent": "crw-sim/0.163.0",
            "codexHome": str(self.codex_home),
            "platformFamily": "unix",
            "platformOs": "linux",
        }

    def _thread_start(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        return self._started(conn, self._new_thread(params))

    def _thread_resume(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """Subscribe; a notLoaded thread is loaded with the config overrides the
        resume carries, and only those (the host rebuilds it from its own
        configuration); a loaded thread keeps its own, whatever the resume carries
        (codex 0.163.0, tests/host/test_codex_real.py)."""
        thread_id = str(params.get("threadId"))
        thread = self.state.find(thread_id, f"no rollout found for thread id {thread_id}")
        self._subscribe(conn, thread)
        if thread.status == "notLoaded":
            thread.config = dict(params.get("config") or {})
            self._set_status(thread, "idle")
        return thread.result(include_turns=not params.get("excludeTurns"))

    def _thread_fork(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """A new thread with the source's ended turns and the config overrides the
        fork carries, and only those: the source's are not inherited (codex
        0.163.0), so a fork carries the leaf keys itself (STEP-58). Its token
        usage goes on from the source's total, as codex 0.163.0 counts a fork."""
        thread_id = str(params.get("threadId"))
        source = self.state.find(thread_id, f"no rollout found for thread id {thread_id}")
        fork = self._new_thread({"cwd": source.cwd, "model": source.model} | params)
        fork.forked_from_id = source.id
        fork.turns = fork_turns(source, params.get("lastTurnId"))
        fork.tokens = source.tokens  # never changed in place: a turn replaces it
        return self._started(conn, fork)

    def _thread_unsubscribe(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self.state.threads.get(str(params.get("threadId")))
        if thread is None or thread.status == "notLoaded":
            return {"status": "notLoaded"}
        subscribers = self._subscribers.get(thread.id, set())
        if conn not in subscribers:
            return {"status": "notSubscribed"}
        subscribers.discard(conn)
        return {"status": "unsubscribed"}

    def _turn_start(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self.state.loaded(str(params.get("threadId")))
        inputs = params.get("input") or []
        text = "\n".join(i.get("text", "") for i in inputs if i.get("type") == "text")
        thread.model = params.get("model") or thread.model
        thread.reasoning_effort = params.get("effort") or thread.reasoning_effort
        turn = self._start_turn(thread, text, params.get("outputSchema"))
        return {"turn": turn.wire("notLoaded")}

    def _turn_interrupt(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """Interrupt a turn in progress (it keeps what it streamed); a turn that
        already ended, or is stopping already, is left as it is. A turn of a
        `slowStop` script stops working but ends only later (`_stop_slowly`)."""
        thread = self.state.loaded(str(params.get("threadId")))
        turn = thread.turn(str(params.get("turnId")))
        if turn is None or turn.id in self._stopping:
            return {}
        slow = self._slow.pop(turn.id, None)
        if slow is None or turn.status != "inProgress":
            self._end_turn(thread, turn, "interrupted")
        else:
            self._stop_slowly(thread, turn, slow)
        return {}

    def _stop_slowly(self, thread: Thread, turn: Turn, slow: SlowStop) -> None:
        """The turn streams nothing more, and stays in progress (its thread active)
        until `slow.reads` thread/reads answered it so (`_thread_read`) and
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
                    self._end_turn(stop.thread, stop.turn, "interrupted")
            finally:
                self._write_records()

    def _thread_read(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """`thread/read`; a stopping turn (`slowStop`) counts it, and ends once it
        was the last read to show it running and its time has passed."""
        answer = read_thread(self.state, params)
        thread = self.state.threads.get(str(params.get("threadId")))
        turn = thread.active_turn() if thread is not None else None
        stop = self._stopping.get(turn.id) if turn is not None else None
        if stop is not None:
            stop.reads = max(stop.reads - 1, 0)
            if stop.reads == 0 and trio.current_time() >= stop.at:
                self._end_turn(stop.thread, stop.turn, "interrupted")
        return answer

    # -- the sim/* control methods

    def _start_owner(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self._new_thread({"cwd": params.get("cwd")})
        self._started(None, thread)
        return {"threadId": thread.id}

    def _spawn_agent(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The owner's spawn_agent: a subagent whose first turn starts at once, and
        the owner's collabAgentToolCall item that names it."""
        owner = self.state.loaded(str(params.get("parentThreadId")))
        if self.catalog is not None:
            self.catalog.check_spawn(params.get("model"), params.get("agentType"))
        message = str(params.get("message", ""))
        settings = {"model": params.get("model"), "effort": params.get("reasoningEffort")}
        settings["cwd"] = params.get("cwd")  # a test's subagent elsewhere; default the owner's
        child = self._new_thread(settings, parent=owner, role=params.get("agentType"))
        self._record_spawn(owner, child, message)
        self._start_turn(child, message)
        return {"agentId": child.id}

    def _record_spawn(self, owner: Thread, child: Thread, message: str) -> None:
        turn = owner.active_turn()
        if turn is None:
            turn = Turn(id=new_id(), started_at=int(self._wall()), status="completed")
            turn.completed_at, turn.duration_ms = turn.started_at, 0
            owner.turns.append(turn)
        item = spawn_call(owner.id, message, child.model, child.reasoning_effort)
        turn.items.append(item)
        self._item("item/started", owner, turn, item)
        states = {child.id: {"status": "pendingInit", "message": None}}
        item = item | {"status": "completed", "receiverThreadIds": [child.id]}
        turn.items[-1] = item | {"agentsStates": states}
        self._item("item/completed", owner, turn, turn.items[-1])

    def _send_input(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self.state.loaded(str(params.get("target")))
        return {"turnId": self._start_turn(thread, str(params.get("message", ""))).id}

    def _close_agent(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """close_agent: a running turn is interrupted; the thread stays readable."""
        thread_id = str(params.get("target"))
        thread = self.state.find(thread_id, f"thread not found: {thread_id}")
        turn = thread.active_turn()
        if turn is not None:
            self._end_turn(thread, turn, "interrupted")
        self._set_status(thread, "notLoaded")
        self._write_records()
        rollout.close(thread.path)
        return {}

    def _script(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        self.scripts.append(Script.from_wire(params))
        return {}

    def _restart(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The host process restarts on the same CODEX_HOME, as host-protocol.md
        says a new app-server process sees its threads: each one notLoaded and
        rebuilt from its rollout (a turn that was running ends interrupted, with no
        error and no notification: the process that ran it is gone), without the
        config overrides its thread/start or thread/resume carried (the host
        rebuilds it from its own configuration), and nobody subscribed to it.
        thread/read still answers it; turn/start needs a thread/resume first."""
        for thread in self.state.threads.values():
            turn = thread.active_turn()
            if turn is not None:
                turn.status, turn.completed_at = "interrupted", int(self._wall())
                runner = self._runners.pop(turn.id, None)
                if runner is not None:
                    runner.cancel()
            thread.status = "notLoaded"
            thread.config = {}
        self._slow.clear()
        self._stopping.clear()
        self._subscribers.clear()
        self._write_records()
        rollout.close()
        return {}

    def _stats(self, conn: _Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The requests served so far, by method, this one included, and the
        notifications posted to connections, by method: what a bench divides by
        its calls."""
        return {"requests": dict(self.served), "notifications": dict(self.posted)}


def _user_texts(thread: Thread) -> list[str]:
    """The text of every user message of `thread`, oldest first."""
    return [
        part.get("text", "")
        for turn in thread.turns
        for item in turn.items
        if item.get("type") == "userMessage"
        for part in item.get("content", ())
    ]


BATCH = 64
"""The most messages a connection's drain writes at once."""


def _queued(first: str, outgoing: trio.MemoryReceiveChannel[str]) -> list[str]:
    """`first` and the messages queued behind it (up to BATCH), in order: what one
    host step posted (a turn's start brings five or more) goes out in one write,
    and the client reads it in one go."""
    texts = [first]
    while len(texts) < BATCH:
        try:
            texts.append(outgoing.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    return texts


async def serve_connection(host: SimHost, transport: Transport) -> None:
    """Serve one client until it goes away; then close its transport. The turns it
    started go on in the host's nursery."""
    conn = host._connect()

    async def drain(cancel: trio.CancelScope) -> None:
        async with conn.outgoing:
            async for text in conn.outgoing:
                try:
                    await transport.send_encoded(_queued(text, conn.outgoing))
                except HostUnavailable:
                    break
        cancel.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, nursery.cancel_scope)
            while True:
                try:
                    message = await transport.receive()
                except HostUnavailable:
                    break
                host._receive(conn, message)
            nursery.cancel_scope.cancel()
    finally:
        host._disconnect(conn)
        with trio.move_on_after(1, shield=True):
            await transport.aclose()


@asynccontextmanager
async def open_sim_host(
    codex_home: Path, *, wall: Callable[[], float] = time.time, catalog: Catalog | None = None
) -> AsyncIterator[SimHost]:
    """A simulated host whose turns run until the block ends; `wall` is its clock
    of creation times (a test passes one the Trio clock drives); `catalog`, the
    models it serves and the agent types it knows (None: any, `crw.host.sim.catalog`).

    An error of the block is raised as itself, not inside an ExceptionGroup of the
    host's nursery, so a caller catches what it raised.
    """
    try:
        async with trio.open_nursery() as nursery:
            host = SimHost(codex_home, nursery, wall=wall, catalog=catalog)
            try:
                yield host
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        rollout.close()  # its turns are over: nothing appends after this


async def connect_in_memory(host: SimHost) -> Transport:
    """A client transport to `host` over an in-memory stream (JSON lines), served
    in the host's nursery: the same Trio clock drives both sides."""
    import trio.testing  # tests only: it imports pytest, which a serving host never needs

    client, server = trio.testing.memory_stream_pair()
    host._nursery.start_soon(serve_connection, host, JsonLinesTransport(server, name="a client"))
    await trio.lowlevel.checkpoint()
    return JsonLinesTransport(client, name="the simulated host")


async def serve_unix(
    host: SimHost, path: Path, *, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve `host` as WebSocket over a unix socket at `path`, like a shared
    app-server (`trio.serve_listeners`, each connection upgraded by
    `websocket_server`). Reports `path` once listening; removes the socket file when
    it stops."""
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await sock.bind(str(path))
        os.chmod(path, PRIVATE_FILE)  # before it listens: nobody else connects meanwhile
        sock.listen(64)
    except BaseException:
        sock.close()
        raise

    async def handle(stream: trio.SocketStream) -> None:
        try:
            transport = await websocket_server(stream, name="a client")
        except HostUnavailable:
            await stream.aclose()
            return
        await serve_connection(host, transport)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, handle, [trio.SocketListener(sock)])
            task_status.started(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
