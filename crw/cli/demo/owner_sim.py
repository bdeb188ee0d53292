"""`crw host sim owner start|spawn|send|close`: play the owner thread by hand on
the simulated host (`crw host sim serve --socket S`).

`start` opens an owner thread (`sim/startOwner`) and prints its id, the id a
session run is started with (`crw flow start WORKFLOW --owner ID --host unix:S`).
`spawn`, `send` and `close` make one step's host call as that owner (`--owner`,
else $CRW_OWNER_THREAD, else the owner the step's run records), the way the
demo's scripted owner does (`crw.cli.demo.scripted_owner.take_on_host`), and print the subagent
and the exact `crw flow dispatched` command that reports it. A step is read from
STEP, a file or `-` (stdin): a step file of the run directory
(`steps/<call>/t<k>-a<n>.json`, or a close step `close-a<n>-<agent>.json`), one
item of the `steps` of `crw flow next RUN --json`, or that whole answer (then
`--call` picks the step when it holds more than one of the action).
"""

from __future__ import annotations

import json as json_module
import os
import sys
from pathlib import Path
from typing import Any, Literal

from crw.cli.output import emit
from crw.cli.shell import shell_word
from crw.errors import InputError, RefusedError

Action = Literal["spawn", "send", "close"]
_STEP_ACTION = {"spawn": "spawn", "send": "send_input", "close": "close"}
_VERB = {"spawn": "spawn", "send_input": "send", "close": "close"}
OWNER_ENV = "CRW_OWNER_THREAD"


def owner_start_command(*, socket: str, json: bool) -> int:
    """Open an owner thread on the simulated host on `socket`; print its id."""
    import trio

    async def start() -> str:
        async with connect_sim(socket) as client:
            return str((await client.request("sim/startOwner", {}))["threadId"])

    thread = trio.run(start)
    host = f"unix:{Path(socket).absolute()}"
    then = f"crw flow start WORKFLOW --owner {thread} --host {shell_word(host)}"
    emit(
        json,
        {"thread_id": thread, "host": host, "then": then},
        f"{thread}\nstart a session run on it: {then}",
    )
    return 0


def owner_step_command(
    action: Action, step: str, *, socket: str, owner: str | None, call: str | None, json: bool
) -> int:
    """Make the host call of the step STEP names (`action` must be its action)."""
    import trio

    from crw.cli.demo.scripted_owner import take_on_host

    taken, then = _read_step(step, action, call)
    thread = owner or os.environ.get(OWNER_ENV) or ""
    v2 = taken["host_call"].get("namespace") == "collaboration"  # every v2 tool is the owner's
    if (action == "spawn" or v2) and not thread:
        thread = _run_owner(taken)

    async def take() -> str:
        async with connect_sim(socket) as client:
            return await _refused(socket, take_on_host(client, thread, taken))

    agent = trio.run(take)
    command = then.replace("<agent_id>", agent) if then else None
    payload = {
        "action": taken["action"],
        "call": taken["call"],
        "k": taken.get("k"),
        "attempt": taken["attempt"],
        "agent_id": agent,
        "dispatched": command,
    }
    emit(json, payload, _line(taken, agent, command))
    return 0


def _run_owner(step: dict[str, Any]) -> str:
    """The owner thread the step's run records (run.json of the run directory its
    packet is in, `<state>/flow/<run>/steps/<call>/packet-…`).

    Raises:
        InputError: the step names no run directory whose run.json names an owner.
    """
    from crw.engine.run.runspec import read_run_spec

    run_json = Path(str(step.get("packet"))).parents[2] / "run.json"
    try:
        owner = read_run_spec(run_json).owner if run_json.is_file() else None
    except InputError:
        owner = None
    if not owner:
        raise InputError(
            f"spawn needs the owner thread and {run_json} names none: pass --owner ID "
            f"(the id `crw host sim owner start` printed) or set ${OWNER_ENV}"
        )
    return owner


def _line(step: dict[str, Any], agent: str, command: str | None) -> str:
    if step["action"] == "close":
        return f"closed {agent} (call {step['call']} attempt {step['attempt']})"
    done = "spawned" if step["action"] == "spawn" else "sent input to"
    where = f"{step['call']}/t{step['k']}-a{step['attempt']}"
    return f"{done} {agent} for {where}\nreport it: {command}"


async def _refused(socket: str, call: Any) -> str:
    """The host call's agent; a refusal of the host as one line naming the socket."""
    from crw.host.errors import HostRequestError

    try:
        return str(await call)
    except HostRequestError as err:
        raise RefusedError(
            f"the simulated host on unix:{socket} refused {err.method}: {err.message}; "
            "check --owner (the id owner start printed) and the step (from crw flow next)"
        ) from None


def connect_sim(socket: str) -> Any:
    """A client of the simulated host on `socket` (a missing socket: refused, naming
    the command that starts one)."""
    from crw.host.connect import connect_host
    from crw.host.uri import parse_host_uri

    if not Path(socket).exists():
        raise RefusedError(
            f"no simulated host on unix:{socket} (no such socket); start one with: "
            f"crw host sim serve --socket {shell_word(socket)}"
        )
    # Requests only: the host sends this client no notification.
    return connect_host(parse_host_uri(f"unix:{Path(socket).absolute()}"), follows=frozenset())


def _read_step(source: str, action: Action, call: str | None) -> tuple[dict[str, Any], str | None]:
    """The step STEP holds, as an item of next's `steps` (with its `host_call`),
    and the dispatched command that reports it (None for a close).

    Raises:
        InputError: no such file, no JSON step, or a step of another action.
    """
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        data = json_module.loads(text)
    except (OSError, ValueError) as err:
        raise InputError(
            f"cannot read a step from {where}: {getattr(err, 'strerror', None) or err}; "
            "pass a step file of the run directory, or what crw flow next RUN --json printed"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("steps"), list):
        data = _pick(data["steps"], action, call, where)
    step = _as_next_item(data, where, None if source == "-" else Path(source))
    if step["action"] != _STEP_ACTION[action]:
        verb = _VERB[step["action"]]
        raise InputError(
            f"the step in {where} is a {step['action']} step, not {_STEP_ACTION[action]}; "
            f"take it with: crw host sim owner {verb} {source} --socket S"
        )
    return step, step["host_call"].get("then")


def _pick(steps: list[Any], action: Action, call: str | None, where: str) -> Any:
    """The step of `action` (and `call`) among next's `steps`: exactly one."""
    found = [
        s
        for s in steps
        if isinstance(s, dict)
        and s.get("action") == _STEP_ACTION[action]
        and (call is None or s.get("call") == call)
    ]
    if len(found) == 1:
        return found[0]
    calls = sorted({str(s.get("call")) for s in found})
    if found:
        raise InputError(
            f"{where} holds {len(found)} {_STEP_ACTION[action]} steps ({', '.join(calls)}); "
            "pick one with --call CALL"
        )
    of = f" of call {call}" if call else ""
    raise InputError(
        f"{where} holds no {_STEP_ACTION[action]} step{of}; ask again with crw flow next RUN --json"
    )


def _as_next_item(data: Any, where: str, path: Path | None) -> dict[str, Any]:
    """An item of next's `steps`: as given, or made from a step file or close step file."""
    from crw.engine.steps.step_file import CloseStep, StepFile

    if isinstance(data, dict) and isinstance(data.get("host_call"), dict):
        return data
    try:
        if isinstance(data, dict) and data.get("action") == "close":
            close = CloseStep.from_json(data)
            host_call = {"tool": "close_agent", "arguments": {"target": close.agent_id}}
            return close.to_json() | {"host_call": host_call}
        step = StepFile.from_json(data)
    except ValueError as err:
        raise InputError(
            f"{where} holds no step ({err}); pass a step file of the run directory, "
            "or what crw flow next RUN --json printed"
        ) from None
    from crw.engine.owner.next_view import tool_call

    call = tool_call(step) | {"then": _dispatched(step, path)}
    return step.to_json() | {"host_call": call}


def _dispatched(step: Any, path: Path | None) -> str:
    """`crw flow dispatched RUN CALL --agent <agent_id> --k K --attempt N --state S`
    for a step file at `path` (`<state>/flow/<run>/steps/<call>/t<k>-a<n>.json`)."""
    root = path.absolute().parents[2] if path is not None else None
    if root is None or not (root / "run.json").is_file():
        where = path if path is not None else "a step file read from stdin"
        raise InputError(
            f"{where} is not in a run directory (<state>/flow/<run>/steps/<call>/); pass the "
            "step file where the run wrote it, or what crw flow next RUN --json printed"
        )
    agent = step.agent_id or "<agent_id>"
    return (
        f"crw flow dispatched {root.name} {step.call} --agent {agent} --k {step.k} "
        f"--attempt {step.attempt} --state {shell_word(root.parents[1])}"
    )
