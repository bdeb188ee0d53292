"""The owner's multi-agent v2 tools on the simulated host, as codex gives them.

An owner started with multi-agent v2 (`sim/startOwner {multiAgentV2: true}`, or
`[features] multi_agent_v2 = true` in the host's config.toml, as codex's owner
gets it) has the `collaboration` tools instead of v1's (docs/host.md,
"Multi-agent v2", what codex 0.163.0 and 0.169.0 showed):

- `sim/v2/spawnAgent {parentThreadId, task_name, message, model?,
  reasoning_effort?, fork_turns?}` answers `{"task_name": "/root/<name>"}` and no
  thread id. It refuses a name outside `[a-z0-9_]`, a model its catalog does not
  serve, a name the owner's tree holds already (also after a restart),
  `fork_context` and a `fork_turns` codex does not take, each in codex's words,
  and makes no thread then. The child is a thread
  with `agent_path` and no agent role, never in `thread/list`; its task reaches it
  as an inter-agent message, no user message in `thread/read`. The owner's turn
  gets a `subAgentActivity` item of kind `started` naming the child.
- `sim/v2/followupTask {parentThreadId, target, message}` starts a turn on an
  idle child (`target` its task name, path or thread id), a `subAgentActivity`
  `interacted` on the owner; `sim/v2/interruptAgent` stops its turn.
- `sim/v2/waitAgent {parentThreadId, timeout_ms}` answers at once: whether a
  child's turn ended since the last wait (the sim never blocks a request).

The v1 method `sim/spawnAgent` is refused for a v2 owner, and these for a v1
owner, as codex gives an owner one set (`unsupported call: …`).
"""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crw.host.sim.catalog import Catalog
from crw.host.sim.items import new_id
from crw.host.sim.state import SimState, Thread, Turn, invalid_request
from crw.host.sim.turns import Turns

ROOT = "/root"
_NAME = re.compile(r"[a-z0-9_]+")
_FORK_TURNS = re.compile(r"none|all|[1-9][0-9]*")

SPAWN = "collaborationspawn_agent"


def unsupported(tool: str) -> Exception:
    """Codex's answer to a tool the owner was not given."""
    return invalid_request(f"unsupported call: {tool}")


def config_v2(codex_home: Path) -> bool:
    """`[features] multi_agent_v2` of the host's config.toml (off unless true)."""
    try:
        with (codex_home / "config.toml").open("rb") as file:
            features = tomllib.load(file).get("features")
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(features, dict) and features.get("multi_agent_v2") is True


class MultiAgentV2:
    """The `sim/v2/*` methods of one simulated host."""

    def __init__(
        self,
        state: SimState,
        turns: Turns,
        wall: Callable[[], float] = time.time,
        catalog: Catalog | None = None,
    ):
        self.state = state
        self.turns = turns
        self.catalog = catalog
        self._wall = wall
        self._waited: dict[str, set[str]] = {}
        """Per owner, the children's turns a wait answered already."""

    def methods(self) -> dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]]:
        return {
            "sim/v2/spawnAgent": self.spawn_agent,
            "sim/v2/followupTask": self.followup_task,
            "sim/v2/interruptAgent": self.interrupt_agent,
            "sim/v2/waitAgent": self.wait_agent,
        }

    def _owner(self, params: dict[str, Any], tool: str) -> Thread:
        owner = self.state.loaded(str(params.get("parentThreadId")))
        if not owner.multi_agent_v2:
            raise unsupported(tool)
        return owner

    def spawn_agent(self, conn: Any, params: dict[str, Any]) -> dict[str, Any]:
        owner = self._owner(params, SPAWN)
        name = str(params.get("task_name", ""))
        if not _NAME.fullmatch(name):
            raise invalid_request(
                "agent_name must use only lowercase letters, digits, and underscores"
            )
        if "fork_context" in params:
            raise invalid_request(
                "fork_context is not supported in MultiAgentV2; use fork_turns instead"
            )
        fork = params.get("fork_turns")
        if fork is not None and not _FORK_TURNS.fullmatch(str(fork).strip()):
            raise invalid_request("fork_turns must be `none`, `all`, or a positive integer string")
        if self.catalog is not None:  # v2 asks for no agent type: the model alone
            self.catalog.check_spawn(params.get("model"), None)
        path = f"{ROOT}/{name}"
        if self.child(owner, path) is not None:
            raise invalid_request(f"agent path `{path}` already exists")
        settings = {
            "model": params.get("model"),
            "effort": params.get("reasoning_effort"),
            "cwd": params.get("cwd"),  # a test's subagent elsewhere; default the owner's
        }
        child = self.turns.new_thread(settings, parent=owner)
        child.agent_path = path
        self._activity(owner, child, "started")
        self.turns.start_turn(child, str(params.get("message", "")), task_from=ROOT)
        return {"task_name": path}

    def followup_task(self, conn: Any, params: dict[str, Any]) -> dict[str, Any]:
        owner = self._owner(params, "collaborationfollowup_task")
        child = self._target(owner, params)
        if child.status == "notLoaded":  # codex reaches an old child after a restart too
            self.turns.set_status(child, "idle")
        self._activity(owner, child, "interacted")
        self.turns.start_turn(child, str(params.get("message", "")), task_from=ROOT)
        return {}

    def interrupt_agent(self, conn: Any, params: dict[str, Any]) -> dict[str, Any]:
        owner = self._owner(params, "collaborationinterrupt_agent")
        child = self._target(owner, params)
        previous = "running" if child.active_turn() is not None else _status(child)
        turn = self.turns.live_turn(child)
        if turn is not None:
            self.turns.interrupt(child, turn)
        return {"previous_status": previous}

    def wait_agent(self, conn: Any, params: dict[str, Any]) -> dict[str, Any]:
        owner = self._owner(params, "collaborationwait_agent")
        waited = self._waited.setdefault(owner.id, set())
        ended = {
            turn.id
            for child in self.state.threads.values()
            if child.parent_thread_id == owner.id and child.agent_path is not None
            for turn in child.turns
            if turn.status != "inProgress"
        }
        new = ended - waited
        waited |= new
        if new:
            return {"message": "Wait completed.", "timed_out": False}
        return {"message": "Wait timed out.", "timed_out": True}

    def child(self, owner: Thread, path: str) -> Thread | None:
        """The owner's child at `path`, loaded or not."""
        return next(
            (
                t
                for t in self.state.threads.values()
                if t.parent_thread_id == owner.id and t.agent_path == path
            ),
            None,
        )

    def _target(self, owner: Thread, params: dict[str, Any]) -> Thread:
        target = str(params.get("target", ""))
        path = target if target.startswith(f"{ROOT}/") else f"{ROOT}/{target}"
        found = self.child(owner, path)
        if found is None:
            thread = self.state.threads.get(target)
            if thread is not None and thread.parent_thread_id == owner.id:
                found = thread
        if found is None:
            raise invalid_request(f"agent `{target}` not found")
        return found

    def _activity(self, owner: Thread, child: Thread, kind: str) -> None:
        """The owner's `subAgentActivity` item for `child`, in its running turn
        (a turn of its own, ended, when the owner has none running)."""
        turn = owner.active_turn()
        if turn is None:
            turn = Turn(id=new_id(), started_at=int(self._wall()), status="completed")
            turn.completed_at, turn.duration_ms = turn.started_at, 0
            owner.turns.append(turn)
        item = {
            "type": "subAgentActivity",
            "id": new_id(),
            "kind": kind,
            "agentThreadId": child.id,
            "agentPath": child.agent_path,
            "model": child.model,
            "reasoningEffort": child.reasoning_effort,
        }
        turn.items.append(item)
        self.turns.item("item/started", owner, turn, item)
        self.turns.item("item/completed", owner, turn, item)


def _status(child: Thread) -> Any:
    last = child.turns[-1] if child.turns else None
    if last is None:
        return "pending_init"
    if last.status == "interrupted":
        return "interrupted"
    answers = [i.get("text") for i in last.items if i.get("type") == "agentMessage"]
    return {"completed": answers[-1] if answers else None}
