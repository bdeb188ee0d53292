"""A scripted owner thread as a process, for the crash drill.

`python -m tests.drill.owner RUN --state S --socket PATH --owner THREAD --control DIR`
plays what Codex's owner thread does, with the owner's commands: it runs
`crw flow next RUN --json --wait 1`, takes each step once through the simulated
host (`sim/spawnAgent`, `sim/sendInput`), reports it with `crw flow dispatched …
--json`, closes the subagents of close steps (and of `close` replies), and exits 0
once the run has ended. Before it spawns a subagent it reads the step's packet as
a subagent would, and notes its digest (`took`, `packet_digest`: null when the
packet is missing or not text). It outlives the run processes, so it remembers the steps
it took: a step the files show again is not taken twice. On a run that speaks
multi-agent v2 (its steps' host calls name the `collaboration` namespace) it makes
each step's host call as given (`sim/v2/spawnAgent`, `sim/v2/followupTask`,
`sim/v2/interruptAgent`) and reports the child's path.

The drill pauses it around a resume: while `<control>/pause` exists the owner
starts no command and says so by writing `<control>/paused`. A pause that says
`cut next` (the drill holds the run lock of a run whose process died) also ends a
`crw flow next` the owner has in flight, forked from the worker's server: that
next reads a run no process holds but the drill as starting, again and again
for 15 s whatever its --wait (CMD-NEXT-28), to answer `starting` with no step, so
the owner sees no step either way. Every command it ran and every host call it
made goes to `<control>/owner.jsonl`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import trio

from crw.engine.answers.answer import digest
from crw.host.client import HostClient
from crw.host.connect import connect_host
from crw.host.uri import parse_host_uri
from tests import zygote

NEXT_WAIT = "1"
DISPATCHED_WAIT = "2"
RETRY_AFTER = 0.2
PAUSE_POLL = 0.02
CUT_NEXT = "cut next"
"""What `<control>/pause` says when the drill asks an in-flight next to be ended."""
V2_NAMESPACE = "collaboration"
V2_METHODS = {
    "spawn_agent": "sim/v2/spawnAgent",
    "followup_task": "sim/v2/followupTask",
    "interrupt_agent": "sim/v2/interruptAgent",
}
"""The simulated host's method for each multi-agent v2 tool a step names."""


class Owner:
    def __init__(self, args: argparse.Namespace, client: HostClient) -> None:
        self.run, self.state, self.thread = args.run, args.state, args.owner
        self.control = Path(args.control)
        self.zygote = Path(args.zygote) if args.zygote else None
        self.client = client
        self.taken: dict[tuple[str, int, int], str] = {}
        self.unanswered: list[tuple[dict[str, Any], str]] = []
        self.log = (self.control / "owner.jsonl").open("a", buffering=1)

    def note(self, **entry: Any) -> None:
        self.log.write(json.dumps(entry) + "\n")

    async def crw(self, *args: str) -> tuple[int, dict[str, Any]]:
        """Run one owner's command, after any pause the drill asked for: forked from
        the worker's server when named (tests/zygote.py), in the drill's directory
        (where the drill's reap finds one still in flight), else a fresh process."""
        await self.obey_pause()
        argv = ["flow", *args, "--state", self.state, "--json"]
        done: Any
        if self.zygote is not None:
            env, cwd = dict(os.environ), self.control.parent
            async with trio.open_nursery() as nursery:
                if args[0] == "next":
                    nursery.start_soon(self.cut_when_asked, _boot_ticks())
                done = await trio.to_thread.run_sync(zygote.ask, self.zygote, argv, env, cwd, 60)
                nursery.cancel_scope.cancel()
        else:
            cold = [sys.executable, "-m", "crw", *argv]
            done = await trio.run_process(
                cold, capture_stdout=True, capture_stderr=True, check=False
            )
        out = _answer(done.stdout)
        self.note(cmd=args[0], args=list(args[1:]), code=done.returncode, out=out)
        return done.returncode, out

    async def cut_when_asked(self, asked: int) -> None:
        """Once the drill's pause says `cut next`, SIGKILL the next in flight: the
        command the worker's server forked in the drill's directory since `asked`
        (clock ticks since boot)."""
        pause = self.control / "pause"
        while True:
            with contextlib.suppress(OSError):
                if pause.read_text() == CUT_NEXT:
                    for pid in _forked_in(self.control.parent, asked):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
            await trio.sleep(PAUSE_POLL)

    async def obey_pause(self) -> None:
        pause, paused = self.control / "pause", self.control / "paused"
        while pause.exists():
            paused.touch()
            await trio.sleep(PAUSE_POLL)
        paused.unlink(missing_ok=True)

    async def play(self) -> None:
        while True:
            for step, agent in self.unanswered[:]:
                self.unanswered.remove((step, agent))
                await self.report(step, agent)
            _, view = await self.crw("next", self.run, "--wait", NEXT_WAIT)
            for step in view.get("steps", []):
                await self.take(step)
            if view.get("state") == "ended":
                self.note(ended=view.get("ended_status"))
                return

    async def take(self, step: dict[str, Any]) -> None:
        if step["host_call"].get("namespace") == V2_NAMESPACE:
            await self.take_v2(step)
            return
        if step["action"] == "close":
            await self.host("sim/closeAgent", {"target": step["agent_id"]})
            return
        key = (step["call"], step["k"], step["attempt"])
        if key in self.taken:
            return
        if step["action"] == "send_input":
            params = {"target": step["agent_id"], "message": step["message"]}
            await self.host("sim/sendInput", params)
            agent = str(step["agent_id"])
        else:
            marker = f"{step['call']}/t{step['k']}-a{step['attempt']}"
            self.note(took=marker, packet_digest=_packet_digest(step.get("packet")))
            params = {
                "parentThreadId": self.thread,
                "agentType": step["agent_type"],
                "message": step["message"],
            }
            params |= {"model": step["model"]} if step.get("model") else {}
            effort = step.get("reasoning_effort")
            params |= {"reasoningEffort": effort} if effort else {}
            agent = str((await self.host("sim/spawnAgent", params))["agentId"])
        self.taken[key] = agent
        await self.report(step, agent)

    async def take_v2(self, step: dict[str, Any]) -> None:
        """The step's v2 host call, its arguments as given (a close: interrupt_agent)."""
        call = step["host_call"]
        params = {"parentThreadId": self.thread, **call["arguments"]}
        if step["action"] == "close":
            await self.host(V2_METHODS[call["tool"]], params)
            return
        key = (step["call"], step["k"], step["attempt"])
        if key in self.taken:
            return
        if step["action"] == "spawn":
            marker = f"{step['call']}/t{step['k']}-a{step['attempt']}"
            self.note(took=marker, packet_digest=_packet_digest(step.get("packet")))
        answer = await self.host(V2_METHODS[call["tool"]], params)
        agent = str(answer.get("task_name") or call["arguments"]["target"])
        self.taken[key] = agent
        await self.report(step, agent)

    async def report(self, step: dict[str, Any], agent: str) -> None:
        _, reply = await self.crw(
            "dispatched",
            self.run,
            step["call"],
            "--agent",
            agent,
            "--k",
            str(step["k"]),
            "--attempt",
            str(step["attempt"]),
            "--wait",
            DISPATCHED_WAIT,
        )
        kind = reply.get("reply")
        if kind == "retry":
            await trio.sleep(RETRY_AFTER)
            self.unanswered.append((step, agent))
        elif kind == "close" and step["host_call"].get("namespace") == V2_NAMESPACE:
            params = {"parentThreadId": self.thread, "target": agent}
            await self.host("sim/v2/interruptAgent", params)
        elif kind == "close":
            await self.host("sim/closeAgent", {"target": agent})

    async def host(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.request(method, params)
        self.note(host=method, params={k: v for k, v in params.items() if k != "message"})
        return result


def _answer(stdout: str) -> dict[str, Any]:
    """A command's --json answer; {} for none (a next the drill cut short)."""
    try:
        out = json.loads(stdout)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def _boot_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/PID/stat gives a start in."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _forked_in(where: Path, since: int) -> list[int]:
    """The processes working in `where`, started at `since` (clock ticks since
    boot) or later, whose parent is a fork server (`python -m tests.zygote`): the
    owner's command in flight (the drill's own commands wait while it pauses the
    owner)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            if os.readlink(entry / "cwd") != str(where):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            ppid, started = fields[1], int(fields[19])
            if started < since:
                continue
            if b"tests.zygote" in Path(f"/proc/{ppid}/cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _packet_digest(packet: str | None) -> str | None:
    """The digest of the packet's text as its row names it, or None when there is
    no packet to read."""
    try:
        return digest(Path(packet).read_bytes().decode()) if packet else None
    except (OSError, UnicodeDecodeError):
        return None


async def main(args: argparse.Namespace) -> None:
    async with connect_host(parse_host_uri(f"unix:{args.socket}")) as client:
        await Owner(args, client).play()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tests.drill.owner")
    parser.add_argument("run")
    parser.add_argument("--state", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--zygote", help="the socket of a fork server (tests/zygote.py)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    trio.run(main, parse(sys.argv[1:]))
