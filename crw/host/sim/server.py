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

This module owns the requests: the method table, each method's params read and
answered (a refusal worded as the real host words it). The turns' life is
`crw.host.sim.turns`', who hears what `crw.host.sim.broadcast`'s, a client's
connection `crw.host.sim.connection`'s.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from crw.host.sim import rollout
from crw.host.sim.behaviour import Script, match_of
from crw.host.sim.broadcast import Broadcast
from crw.host.sim.catalog import Catalog, model_list, sim_catalog
from crw.host.sim.connection import Connection
from crw.host.sim.items import new_id, spawn_call
from crw.host.sim.multi_agent_v2 import MultiAgentV2, config_v2, unsupported
from crw.host.sim.state import (
    RpcError,
    SimState,
    Thread,
    Turn,
    fork_turns,
    invalid_request,
    list_loaded,
    list_threads,
    list_turns,
    read_thread,
)
from crw.host.sim.turns import Turns

_Method = Callable[[Connection, dict[str, Any]], dict[str, Any]]


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
        multi_agent_v2: bool | None = None,
    ) -> None:
        self.codex_home = codex_home
        self.multi_agent_v2 = multi_agent_v2
        """Whether an owner gets multi-agent v2's tools (None: as the host's
        config.toml says when the owner starts, `[features] multi_agent_v2`)."""
        self.catalog = catalog
        """The models served and agent types known (None: any, none listed)."""
        self.nursery = nursery
        """Where its turns and its in-memory connections run."""
        self.state = SimState()
        self.broadcast = Broadcast(wall)
        self.turns = Turns(self.state, self.broadcast, codex_home, nursery, wall)
        self._wall = wall
        self.v2 = MultiAgentV2(self.state, self.turns, wall, catalog)
        self.served: dict[str, int] = {}
        """Requests served, by method (answered with a result or an error)."""
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
            "sim/catalog": self._catalog,
            "sim/startOwner": self._start_owner,
            "sim/spawnAgent": self._spawn_agent,
            "sim/sendInput": self._send_input,
            "sim/closeAgent": self._close_agent,
            "sim/script": self._script,
            "sim/scripts": self._scripts,
            "sim/unscript": self._unscript,
            "sim/stats": self._stats,
            "sim/restart": self._restart,
            **self.v2.methods(),
        }

    def _read(self, answer: Callable[[SimState, dict[str, Any]], dict[str, Any]]) -> _Method:
        return lambda conn, params: answer(self.state, params)

    def connect(self) -> Connection:
        return self.broadcast.connect()

    def disconnect(self, conn: Connection) -> None:
        self.broadcast.disconnect(conn)

    def receive(self, conn: Connection, message: dict[str, Any]) -> None:
        """Answer one request, then send what it caused; a client notification
        (`initialized`) or a response needs nothing."""
        if "id" not in message or "method" not in message:
            return
        self.broadcast.hold()
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
            held = self.broadcast.release()
        self.broadcast.deliver_held(held)

    def _call(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        method, params = message["method"], message.get("params") or {}
        handler = self._methods.get(method)
        if handler is None:
            raise invalid_request(f"Invalid request: unknown variant `{method}`")
        if not conn.initialized and method != "initialize":
            raise invalid_request("Not initialized")
        if not isinstance(params, dict):
            raise invalid_request(f"Invalid request: params of {method} must be an object")
        return handler(conn, params)

    # -- the app-server methods

    def _initialize(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
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

    def _thread_start(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        return self.turns.started(conn, self.turns.new_thread(params))

    def _thread_resume(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """Subscribe; a notLoaded thread is loaded with the config overrides the
        resume carries, and only those (the host rebuilds it from its own
        configuration); a loaded thread keeps its own, whatever the resume carries
        (codex 0.163.0, tests/host/test_codex_real.py)."""
        thread_id = str(params.get("threadId"))
        thread = self.state.find(thread_id, f"no rollout found for thread id {thread_id}")
        self.broadcast.subscribe(conn, thread)
        if thread.status == "notLoaded":
            thread.config = dict(params.get("config") or {})
            self.turns.set_status(thread, "idle")
        return thread.result(include_turns=not params.get("excludeTurns"))

    def _thread_fork(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """A new thread with the source's ended turns and the config overrides the
        fork carries, and only those: the source's are not inherited (codex
        0.163.0), so a fork carries the leaf keys itself (STEP-58). Its token
        usage goes on from the source's total, as codex 0.163.0 counts a fork."""
        thread_id = str(params.get("threadId"))
        source = self.state.find(thread_id, f"no rollout found for thread id {thread_id}")
        fork = self.turns.new_thread({"cwd": source.cwd, "model": source.model} | params)
        fork.forked_from_id = source.id
        fork.turns = fork_turns(source, params.get("lastTurnId"))
        fork.tokens = source.tokens  # never changed in place: a turn replaces it
        return self.turns.started(conn, fork)

    def _thread_unsubscribe(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self.state.threads.get(str(params.get("threadId")))
        if thread is None or thread.status == "notLoaded":
            return {"status": "notLoaded"}
        if not self.broadcast.unsubscribe(conn, thread):
            return {"status": "notSubscribed"}
        return {"status": "unsubscribed"}

    def _turn_start(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self.state.loaded(str(params.get("threadId")))
        inputs = params.get("input") or []
        text = "\n".join(i.get("text", "") for i in inputs if i.get("type") == "text")
        thread.model = params.get("model") or thread.model
        thread.reasoning_effort = params.get("effort") or thread.reasoning_effort
        turn = self.turns.start_turn(thread, text, params.get("outputSchema"))
        return {"turn": turn.wire("notLoaded")}

    def _turn_interrupt(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """Interrupt a turn in progress (`Turns.interrupt`: a turn that already
        ended, or is stopping already, is left as it is)."""
        thread = self.state.loaded(str(params.get("threadId")))
        turn = thread.turn(str(params.get("turnId")))
        if turn is not None:
            self.turns.interrupt(thread, turn)
        return {}

    def _thread_read(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """`thread/read`; a stopping turn (`slowStop`) counts it (`Turns.count_read`),
        a thread not yet written (`emptyRollout`) refuses it (`Turns.refuse_empty`)."""
        thread_id = str(params.get("threadId"))
        if thread_id in self.state.threads:
            self.turns.refuse_empty(thread_id, bool(params.get("includeTurns")))
        answer = read_thread(self.state, params)
        self.turns.count_read(thread_id)
        return answer

    # -- the sim/* control methods

    def _catalog(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        owner = self.state.threads.get(str(params.get("owner")))
        tools = None
        if owner is not None:
            tools = "multi_agent_v2" if owner.multi_agent_v2 else "multi_agent_v1"
        return sim_catalog(self.catalog, self.codex_home, tools)

    def _start_owner(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """An owner thread; `multiAgentV2` gives it v2's tools, else the host's setting."""
        thread = self.turns.new_thread({"cwd": params.get("cwd")})
        v2 = params.get("multiAgentV2", self.multi_agent_v2)
        thread.multi_agent_v2 = config_v2(self.codex_home) if v2 is None else bool(v2)
        self.turns.started(None, thread)
        return {"threadId": thread.id}

    def _spawn_agent(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The owner's spawn_agent: a subagent whose first turn starts at once, and
        the owner's collabAgentToolCall item that names it."""
        owner = self.state.loaded(str(params.get("parentThreadId")))
        if owner.multi_agent_v2:
            raise unsupported("spawn_agent")
        if self.catalog is not None:
            self.catalog.check_spawn(params.get("model"), params.get("agentType"))
        message = str(params.get("message", ""))
        settings = {"model": params.get("model"), "effort": params.get("reasoningEffort")}
        settings["cwd"] = params.get("cwd")  # a test's subagent elsewhere; default the owner's
        child = self.turns.new_thread(settings, parent=owner, role=params.get("agentType"))
        self._record_spawn(owner, child, message)
        self.turns.start_turn(child, message)
        return {"agentId": child.id}

    def _record_spawn(self, owner: Thread, child: Thread, message: str) -> None:
        turn = owner.active_turn()
        if turn is None:
            turn = Turn(id=new_id(), started_at=int(self._wall()), status="completed")
            turn.completed_at, turn.duration_ms = turn.started_at, 0
            owner.turns.append(turn)
        item = spawn_call(owner.id, message, child.model, child.reasoning_effort)
        turn.items.append(item)
        self.turns.item("item/started", owner, turn, item)
        states = {child.id: {"status": "pendingInit", "message": None}}
        item = item | {"status": "completed", "receiverThreadIds": [child.id]}
        turn.items[-1] = item | {"agentsStates": states}
        self.turns.item("item/completed", owner, turn, turn.items[-1])

    def _send_input(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        thread = self.state.loaded(str(params.get("target")))
        return {"turnId": self.turns.start_turn(thread, str(params.get("message", ""))).id}

    def _close_agent(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """close_agent: a running turn is interrupted; the thread stays readable."""
        thread_id = str(params.get("target"))
        thread = self.state.find(thread_id, f"thread not found: {thread_id}")
        turn = self.turns.live_turn(thread)
        if turn is not None:
            self.turns.end_turn(thread, turn, "interrupted")
        self.turns.set_status(thread, "notLoaded")
        self.broadcast.write_records()
        rollout.close(thread.path)
        return {}

    def _script(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        self.turns.scripts.append(Script.from_wire(params))
        return {}

    def _scripts(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The scripts set, oldest first, each `{match, behaviour}` as it was sent
        (the newest one that matches a turn decides it)."""
        return {"scripts": [script.wire for script in self.turns.scripts]}

    def _unscript(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """Remove every script whose match is exactly `match`; how many went."""
        match = match_of(params)
        kept = [s for s in self.turns.scripts if s.wire["match"] != match]
        removed = len(self.turns.scripts) - len(kept)
        self.turns.scripts[:] = kept
        return {"removed": removed}

    def _restart(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The host process restarts on the same CODEX_HOME, as host-protocol.md
        says a new app-server process sees its threads: each one notLoaded and
        rebuilt from its rollout (a turn that was running ends interrupted, with no
        error and no notification: the process that ran it is gone), without the
        config overrides its thread/start or thread/resume carried (the host
        rebuilds it from its own configuration), and nobody subscribed to it.
        thread/read still answers it; turn/start needs a thread/resume first."""
        self.turns.restart()
        self.broadcast.unsubscribe_all()
        self.broadcast.write_records()
        rollout.close()
        return {}

    def _stats(self, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
        """The requests served so far, by method, this one included, and the
        notifications posted to connections, by method: what a bench divides by
        its calls."""
        return {"requests": dict(self.served), "notifications": dict(self.broadcast.posted)}


@asynccontextmanager
async def open_sim_host(
    codex_home: Path,
    *,
    wall: Callable[[], float] = time.time,
    catalog: Catalog | None = None,
    multi_agent_v2: bool | None = None,
) -> AsyncIterator[SimHost]:
    """A simulated host whose turns run until the block ends; `wall` is its clock
    of creation times (a test passes one the Trio clock drives); `catalog`, the
    models it serves and the agent types it knows (None: any, `crw.host.sim.catalog`);
    `multi_agent_v2`, whether its owners get v2's tools (None: as its config.toml says).

    An error of the block is raised as itself, not inside an ExceptionGroup of the
    host's nursery, so a caller catches what it raised.
    """
    try:
        async with trio.open_nursery() as nursery:
            host = SimHost(
                codex_home, nursery, wall=wall, catalog=catalog, multi_agent_v2=multi_agent_v2
            )
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
