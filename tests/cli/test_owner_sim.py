"""`crw host sim owner start|spawn|send|close`: the owner played by hand on the
simulated host, with real processes (the host, the run's process, each command),
as docs/session.md walks through it: start an owner, start a session run on it,
then `next`, the step's host call, the `dispatched` command it prints, until the
run ends.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import trio

from crw.journal.log import read_journal
from tests.cli.conftest import Crw, Result, wait_for_exit
from tests.cli.test_resume_env import sim as sim
from tests.deadlines import LOADED

WORKFLOW = """\
name = "hand"
pool = 1

[[node]]
id = "explore"
role = "explorer"
task = "List the modules that handle configuration."

[node.schema]
type = "object"
required = ["modules"]
properties = { modules = { type = "array", items = { type = "string" } } }
"""
VERB = {"spawn": "spawn", "send_input": "send", "close": "close"}


def _script(socket: Path, behaviour: dict[str, Any]) -> None:
    """Every turn of the simulated host behaves so (`sim/script`)."""
    from crw.host.connect import connect_host
    from crw.host.uri import parse_host_uri

    async def script() -> None:
        async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
            await client.request("sim/script", {"match": {}, "behaviour": behaviour})

    trio.run(script)


def _owner(crw: Crw, *args: str) -> Result:
    return crw("host", "sim", "owner", *args)


def _report(crw: Crw, printed: str) -> Result:
    """Run the `crw flow dispatched …` command the owner command printed, as printed."""
    line = printed.splitlines()[-1]
    assert line.startswith("report it: crw flow dispatched "), printed
    words = shlex.split(line.removeprefix("report it: "))
    return crw(*words[1:], "--json")


def bound(reply: Result) -> str:
    """A report's reply, "bound" too when the run had bound the subagent by its
    marker (DISP-25) before the report came: on a loaded machine a turn can end
    before its report, and `dispatched` then answers `close` ("already bound by its
    marker and answered") or, once that was the run's last call, `refused` (the run
    has ended completed), each exit 1 (DISP-13). Any other reply but bound fails."""
    answer = reply.json()
    reason = str(answer.get("reason", ""))
    if answer["reply"] == "close" and reason.startswith("already bound by its marker"):
        return "bound"
    if answer["reply"] == "refused" and reason.startswith("the run has ended (completed)"):
        return "bound"
    assert reply.code == 0, reply.stdout + reply.stderr
    return str(answer["reply"])


def test_owner_played_by_hand_takes_every_step_until_the_run_ends(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: GEN-1, STEP-27: the owner's commands alone (owner start, flow start, next,
    owner spawn/send/close and the dispatched each prints) run a session run to its
    end on the simulated host, the repair going to the open subagent as a send_input."""
    # Turns of 5 s (each report comes before its turn ends); explore.1's first answer
    # breaks its schema (a send_input repair).
    _script(sim, {"seconds": 5, "invalidFirst": True})
    workflow = tmp_path / "hand.toml"
    workflow.write_text(WORKFLOW)
    started = _owner(crw, "start", "--socket", str(sim))
    assert started.code == 0, started.stderr
    owner, hint = started.stdout.splitlines()
    assert hint == (
        f"start a session run on it: crw flow start WORKFLOW --owner {owner} --host unix:{sim}"
    )
    start = crw.start(str(workflow), "--owner", owner, "--host", f"unix:{sim}")
    assert start.code == 0, start.stderr
    run = start.json()["run"]
    taken: list[tuple[str, str, str]] = []
    deadline = time.monotonic() + 90
    state = ""
    while state != "ended":
        assert time.monotonic() < deadline, f"the run did not end: {taken}"
        answer = crw("flow", "next", run, "--wait", "10", "--state", str(crw.state), "--json")
        assert answer.code == 0, answer.stderr
        (tmp_path / "next.json").write_text(answer.stdout)
        state = answer.json()["state"]
        for step in answer.json()["steps"]:
            verb = VERB[step["action"]]
            args = [verb, str(tmp_path / "next.json"), "--call", step["call"]]
            done = _owner(crw, *args, "--socket", str(sim))  # as the owner the run records
            assert done.code == 0, done.stderr
            if verb == "close":
                assert done.stdout.strip() == (
                    f"closed {step['agent_id']} (call {step['call']} attempt {step['attempt']})"
                )
                taken.append((step["call"], verb, "closed"))
                continue
            taken.append((step["call"], verb, bound(_report(crw, done.stdout))))
    assert answer.json()["ended_status"] == "completed"
    assert taken == [
        ("explore.1", "spawn", "bound"),
        ("explore.1", "send", "bound"),
        ("explore.1", "close", "closed"),
    ]
    rows = read_journal(crw.state / "flow" / run / "journal.jsonl").rows
    turns = [r["k"] for r in rows if r["row"] == "turn_started"]
    assert turns == [1, 2]  # the spawn's turn, then the repair sent to the same subagent
    assert [r["status"] for r in rows if r["row"] == "ended"] == ["completed"]
    run_dir = crw.state / "flow" / run
    wait_for_exit(run_dir)
    # The end cleans the bus: no reply and no handled report stays; outbox and steps do.
    assert sorted(p.name for p in (run_dir / "replies").iterdir()) == []
    assert sorted(p.name for p in (run_dir / "inbox").iterdir()) == []
    assert (run_dir / "steps" / "explore.1" / "packet-t1-a1.md").is_file()
    # and keeps its step index: a later read lists the calls whose closes may wait
    assert (run_dir / "steps" / ".ended").read_text() in ("", "+explore.1\n")


def test_owner_spawn_of_a_step_file_prints_the_dispatched_command_with_its_state(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """A step file of the run directory is taken as it lies: the printed command names
    the run, the step's call, k and attempt, and the run's state directory."""
    _script(sim, {"seconds": 10})  # the report comes before the turn ends
    workflow = tmp_path / "hand.toml"
    workflow.write_text(WORKFLOW)
    owner = _owner(crw, "start", "--socket", str(sim), "--json").json()["thread_id"]
    run = crw.start(str(workflow), "--owner", owner, "--host", f"unix:{sim}").json()["run"]
    step = crw.state / "flow" / run / "steps" / "explore.1" / "t1-a1.json"
    deadline = time.monotonic() + LOADED
    while not step.exists():
        assert time.monotonic() < deadline, "no step file"
        time.sleep(0.05)
    done = _owner(crw, "spawn", str(step), "--socket", str(sim), "--owner", owner, "--json")
    assert done.code == 0, done.stderr
    out: dict[str, Any] = done.json()
    agent = out["agent_id"]
    assert out == {
        "action": "spawn",
        "call": "explore.1",
        "k": 1,
        "attempt": 1,
        "agent_id": agent,
        "dispatched": f"crw flow dispatched {run} explore.1 --agent {agent} --k 1 --attempt 1 "
        f"--state {crw.state}",
    }
    reply = crw(*shlex.split(out["dispatched"])[1:], "--json")
    assert reply.json()["reply"] == "bound", reply.stdout


def test_owner_commands_refuse_in_one_line_and_change_nothing(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """Errors are one line naming what, where and how to fix it; exit 2 for input,
    1 for a refusal (no socket, a host that does not know the owner)."""
    answer = {"steps": [{"call": "a.1", "action": "close", "attempt": 1, "agent_id": "x"}]}
    (tmp_path / "next.json").write_text(json.dumps(answer))
    spawn = ["spawn", str(tmp_path / "next.json"), "--socket", str(sim), "--owner", "o"]
    wrong = _owner(crw, *spawn)
    assert (wrong.code, wrong.stdout) == (2, "")
    assert wrong.stderr == (
        f"crw: error: {tmp_path / 'next.json'} holds no spawn step; "
        "ask again with crw flow next RUN --json\n"
    )
    missing = _owner(crw, "start", "--socket", str(tmp_path / "none.sock"))
    assert missing.code == 1
    assert missing.stderr == (
        f"crw: error: no simulated host on unix:{tmp_path / 'none.sock'} (no such socket); "
        f"start one with: crw host sim serve --socket {tmp_path / 'none.sock'}\n"
    )
    step = {"call": "a.1", "action": "spawn", "attempt": 1, "k": 1, "packet": "/p/s/a.1/p.md"}
    step["host_call"] = {"tool": "spawn_agent", "arguments": {"agent_type": "x", "message": "m"}}
    (tmp_path / "step.json").write_text(json.dumps(step))
    no_owner = _owner(crw, "spawn", str(tmp_path / "step.json"), "--socket", str(sim))
    assert (no_owner.code, no_owner.stderr) == (
        2,
        "crw: error: spawn needs the owner thread and /p/run.json names none: pass --owner ID "
        "(the id `crw host sim owner start` printed) or set $CRW_OWNER_THREAD\n",
    )
    unknown = _owner(
        crw, "spawn", str(tmp_path / "step.json"), "--socket", str(sim), "--owner", "o"
    )
    assert unknown.code == 1
    assert unknown.stderr.startswith(
        f"crw: error: the simulated host on unix:{sim} refused sim/spawnAgent: thread not found: o;"
    )
    assert unknown.stderr.count("\n") == 1
