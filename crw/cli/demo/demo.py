"""`crw flow demo`: a whole run, end to end, on the simulated host.

It starts the simulated host (`crw host sim serve`) in a state directory, scripts
every turn to take SIM_SECONDS, one call to answer against its schema first (so
the run sends its repair turn) and the first review of `build` to reject (so one
review round runs: a fix continues build.1, a second review accepts), runs
`crw/examples/demo.toml`, stops the host and prints a summary table and the round.

- session (the default): an owner thread on the host (`sim/startOwner`) and a
  session run bound to it; a scripted owner (`crw.cli.demo.scripted_owner`) takes the steps as
  a Codex owner would, with `crw flow next` and `crw flow dispatched`, and the
  demo prints each step and the run's reply.
- app-server: the detached run process opens a thread per call (the fix a fork
  of build.1's thread); the demo prints the run's rows as they are committed.

It runs in `--state` or $CRW_STATE (kept), else in a new temporary directory that
it removes when it ends, whatever the end, unless `--keep`. `--git` runs the git
variant instead (`crw.cli.demo.demo_git`): an executor under review editing a sample
repository, and the node's branch that holds the result.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.cli import output
from crw.cli.demo.demo_summary import detail, reviews, summary
from crw.cli.examples import example
from crw.cli.output import emit
from crw.cli.read.status import status_payload
from crw.cli.run.start import start_run
from crw.cli.run.start_report import StartOutcome
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from crw.errors import InputError, RefusedError
from crw.host.sim.process import launch_sim, stop_sim
from crw.journal.replay import replay
from crw.journal.stores import read_run_journal
from crw.private import make_dirs

REPAIRED_CALL = "build.1"
REVIEW_CALL = "build.2"
"""The first review of the reviewed node `build`: it rejects, so a fix runs."""
REJECTION = {
    "verdict": "reject",
    "findings": ["the summary does not name the files the change touched"],
}
RUN_TIMEOUT = 120.0
SIM_SECONDS = 0.2
"""How long each simulated turn takes (the simulator's default is 1 s)."""
NEXT_WAIT = 5.0
"""The owner's `crw flow next --wait`: it answers as soon as a step comes."""
EXIT_WAIT = 5.0
"""How long the demo waits for the run process to exit once the run is over."""

Say = Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    """What the demo runs: its workflow, the scripts of its turns and the lines
    that say what will happen."""

    workflow: Path
    script: Callable[[Any], Awaitable[None]]
    intro: tuple[str, ...]


def _plain() -> Variant:
    return Variant(
        demo_workflow(),
        _script,
        (
            f"{REPAIRED_CALL} will need a repair",
            f"{REVIEW_CALL} (the review of build) will reject it once: one fix round",
        ),
    )


def _git(state_dir: Path, say: Say) -> tuple[Variant, Any]:
    from crw.cli.demo import demo_git

    sample = demo_git.make_sample(state_dir / demo_git.SAMPLE_DIR)
    workflow = demo_git.git_workflow(state_dir)
    say(f"  sample repository {sample.path} (main at {sample.start[:12]})")
    variant = Variant(
        workflow,
        lambda client: demo_git.script(client, SIM_SECONDS),
        (
            f"{demo_git.BUILD_CALL} (executor) writes {', '.join(demo_git.BUILD_WRITES)}",
            f"{demo_git.REVIEW_CALL} (reviewer) rejects it once; the fix "
            f"{demo_git.FIX_CALL} writes {', '.join(demo_git.FIX_WRITES)}",
        ),
    )
    return variant, sample


def demo_workflow() -> Path:
    """crw's examples/demo.toml (package data: a checkout and a wheel alike)."""
    return example("demo.toml")


def demo_command(
    *,
    state: str | None,
    json: bool,
    backend: str = "session",
    host: str = "sim",
    keep: bool = False,
    git: bool = False,
) -> int:
    """Run the demo in `state` (else $CRW_STATE, else a new temporary directory,
    removed when the demo ends, whatever its end, unless `keep`); `git`: its git
    variant."""
    if git and host == "codex":
        raise InputError(
            "--git runs on the simulated host only (its scripted subagents write the "
            "files); drop --host codex"
        )
    if host == "codex" and backend != "app-server":
        raise InputError(
            "--host codex runs a private codex child, which only the app-server "
            "backend can use; add --backend app-server"
        )
    chosen = state or os.environ.get("CRW_STATE")
    state_dir = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="crw-demo-"))
    where = {"state_dir": str(state_dir), "kept": bool(chosen) or keep}
    try:
        make_dirs(state_dir)
        if host == "codex":
            return _codex_demo(state_dir, json, where)
        return _sim_demo(state_dir, json, backend, where, git)
    finally:
        if not chosen and not keep:
            shutil.rmtree(state_dir, ignore_errors=True)
            if not json:
                output.say(f"  removed the demo's state {state_dir} (keep it with --keep)")


def _sim_demo(
    state_dir: Path, json: bool, backend: str, where: dict[str, Any], git: bool = False
) -> int:
    socket = state_dir / "host.sock"
    say: Say = (lambda line: None) if json else output.say
    say(f"crw flow demo{' --git' if git else ''}: state {state_dir} ({backend} backend)")
    variant, sample = _git(state_dir, say) if git else (_plain(), None)
    sim = launch_sim(socket, state_dir / "codex-home", state_dir / "host.log")
    say(f"  simulated host pid {sim.pid} on unix:{socket}; {variant.intro[0]}")
    say(f"  {variant.intro[1]}")
    extra: dict[str, Any] = {}
    try:
        if backend == "session":
            outcome, extra = _session_demo(state_dir, socket, say, variant)
        else:
            outcome = _app_server_demo(state_dir, socket, say, variant)
        _await_exit(outcome.pid)
        _await_released(outcome.run)
    finally:
        stop_sim(sim)
    rows = read_run_journal(outcome.run.journal).rows
    run = replay(rows)
    payload: dict[str, Any] = status_payload(outcome.spec.id, run)
    payload |= {"run_dir": str(outcome.run.root), "pid": outcome.pid, "host_pid": sim.pid}
    text = summary(rows)
    if sample is not None:
        from crw.cli.demo import demo_git

        extra["git"] = demo_git.report(sample, outcome.spec.id, rows)
        text = "\n".join([text, *demo_git.report_lines(extra["git"])])
    emit(json, payload | extra | where | {"reviews": reviews(rows)}, text)
    return 0 if run.ended_status == "completed" else 1


def _session_demo(
    state_dir: Path, socket: Path, say: Say, variant: Variant
) -> tuple[StartOutcome, dict[str, Any]]:
    """Start a session run bound to a fresh owner thread and play its owner."""
    import trio

    from crw.cli.demo.scripted_owner import ScriptedOwner, Taken
    from crw.host.connect import connect_host
    from crw.host.uri import parse_host_uri

    taken: list[Taken] = []

    def show(step: Taken) -> None:
        taken.append(step)
        say(f"  {step.line()}")

    async def play() -> tuple[StartOutcome, str]:
        async with connect_host(parse_host_uri(f"unix:{socket}"), follows=frozenset()) as client:
            await variant.script(client)
            owner = str((await client.request("sim/startOwner", {}))["threadId"])
            outcome = await trio.to_thread.run_sync(
                lambda: _start(state_dir, socket, owner, variant)
            )
            say(f"  owner thread {owner}")
            say(f"  run {outcome.spec.id} (pid {outcome.pid}): {outcome.run.root}")
            player = ScriptedOwner(
                client, outcome.spec.id, owner, state=str(state_dir), wait=NEXT_WAIT
            )
            try:
                with trio.fail_after(RUN_TIMEOUT):
                    await player.play(show)
            except trio.TooSlowError:
                raise RefusedError(
                    f"the demo run did not end within {RUN_TIMEOUT:g} s; see {outcome.run.root}"
                ) from None
            return outcome, owner

    outcome, owner = trio.run(play)
    steps = [
        {
            "call": t.step["call"],
            "action": t.step["action"],
            "marker": f"{t.step['op']}-a{t.step['attempt']}" if "op" in t.step else None,
            "agent_id": t.agent,
            "reply": (t.reply or {}).get("reply"),
            "reported_again": t.again,
        }
        for t in taken
    ]
    return outcome, {"owner": owner, "steps": steps}


def _codex_demo(state_dir: Path, json: bool, where: dict[str, Any]) -> int:
    """The app-server demo on the real codex app-server (a private child of the run
    process), offline: its model is crw's mock of the Responses API on 127.0.0.1."""
    import json as json_text

    from crw.host.mock_model import MockModel, write_codex_home
    from crw.host.mock_replies import invalid, text

    say: Say = (lambda line: None) if json else output.say
    with MockModel() as model:
        model.script(f"crw-flow-op: {REPAIRED_CALL}/t1-a1", invalid())
        model.script(f"crw-flow-op: {REVIEW_CALL}/t1-a1", text(json_text.dumps(REJECTION)))
        home = write_codex_home(state_dir / "codex-home", model.url)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
        say(f"crw flow demo: state {state_dir} (app-server backend, real codex)")
        say(f"  mock model on {model.url}; CODEX_HOME {home}; {REPAIRED_CALL} will need a repair")
        say(f"  {REVIEW_CALL} (the review of build) will reject it once: one fix round")
        outcome = start_run(
            demo_workflow(),
            backend="app-server",
            owner=None,
            host="codex",
            state=str(state_dir),
            environ=environ | {"CODEX_HOME": str(home)},
        )
        say(f"  run {outcome.spec.id} (pid {outcome.pid}): {outcome.run.root}")
        _follow(outcome.run.journal, say)
        _await_exit(outcome.pid)
    rows = read_run_journal(outcome.run.journal).rows
    run = replay(rows)
    payload: dict[str, Any] = status_payload(outcome.spec.id, run)
    payload |= {
        "run_dir": str(outcome.run.root),
        "pid": outcome.pid,
        "requests": len(model.requests),
        "reviews": reviews(rows),
    }
    emit(json, payload | where, summary(rows))
    return 0 if run.ended_status == "completed" else 1


def _app_server_demo(state_dir: Path, socket: Path, say: Say, variant: Variant) -> StartOutcome:
    """Start an app-server run and print its rows as the run commits them."""
    import trio

    from crw.host.connect import connect_host
    from crw.host.uri import parse_host_uri

    async def script() -> None:
        async with connect_host(parse_host_uri(f"unix:{socket}"), follows=frozenset()) as client:
            await variant.script(client)

    trio.run(script)
    outcome = _start(state_dir, socket, None, variant)
    say(f"  run {outcome.spec.id} (pid {outcome.pid}): {outcome.run.root}")
    _follow(outcome.run.journal, say)
    return outcome


def _start(state_dir: Path, socket: Path, owner: str | None, variant: Variant) -> StartOutcome:
    return start_run(
        variant.workflow,
        backend="session" if owner else "app-server",
        owner=owner,
        host=f"unix:{socket}",
        state=str(state_dir),
        environ=os.environ,
    )


async def _script(client: Any) -> None:
    """Every turn takes SIM_SECONDS; REPAIRED_CALL's first answer breaks its schema;
    REVIEW_CALL rejects (the later review accepts, the simulator's first verdict)."""
    fast = {"seconds": SIM_SECONDS}
    await client.request("sim/script", {"match": {}, "behaviour": fast})
    repair = fast | {"invalidFirst": True}
    await client.request(
        "sim/script", {"match": {"marker": f"{REPAIRED_CALL}/*"}, "behaviour": repair}
    )
    reject = fast | {"answer": REJECTION}
    await client.request(
        "sim/script", {"match": {"marker": f"{REVIEW_CALL}/*"}, "behaviour": reject}
    )


def _await_exit(pid: int | None) -> None:
    """Wait (a while) for the run process, a child of this one, to exit; reap it."""
    deadline = time.monotonic() + EXIT_WAIT
    while pid is not None and time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.02)


def _await_released(run: RunDir) -> None:
    """Wait (a while) until no process holds the run: the process that ended it,
    which need not be the one the demo started (a resume launched by `next`, or by
    a person, may have ended it), has then released what the run held (its end:
    `crw.actors.run_end`), and the worktrees the report reads are as it left them."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while run_is_live(run) and time.monotonic() < deadline:
        time.sleep(0.02)


def _follow(journal: Path, say: Say) -> list[dict[str, Any]]:
    """Print each row as the run commits it, until the run leaves running."""
    deadline = time.monotonic() + RUN_TIMEOUT
    shown = 0
    while True:
        rows = read_run_journal(journal).rows
        for row in rows[shown:]:
            say(f"  {row['seq']:>3} {row.get('call') or '':<12} {row['row']:<15} {detail(row)}")
        shown = len(rows)
        if replay(rows).state in ("ended", "paused", "waiting_decision"):
            return rows
        if time.monotonic() > deadline:
            raise RefusedError(f"the demo run did not end within {RUN_TIMEOUT:g} s; see {journal}")
        time.sleep(0.05)
