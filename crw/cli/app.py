"""The command tree of `crw` (cyclopts).

Only cyclopts and the standard library are imported here; each command imports
what it needs when it runs, so `crw flow status --json` does not pay for pydantic
or Trio. Exit codes: 0 ok, 1 refused or failed, 2 input error (`entry.py`). The
plain command lines of `next` and `status` run without this tree (`hot.py`): a
change of their parameters here is a change there too.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from cyclopts import App, Parameter, Token

from crw.cli.entry import one_line, run_command

_WHOLE = re.compile(r"[0-9]+")


def _whole_number(type_: Any, tokens: Sequence[Token]) -> int:
    """An integer written as digits: `1.5`, `1e3` and `0x1` are refused, never rounded."""
    text = tokens[0].value
    if _WHOLE.fullmatch(text) is None:
        raise ValueError(f"{text} is not a whole number; copy the step's")
    return int(text)


def _seconds(type_: Any, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{value:g} is not a number of seconds; pass a finite number >= 0")


def _one_line(type_: Any, value: str | None) -> None:
    if value is not None and one_line(value) != value:
        raise ValueError(
            "It holds a control character (a newline, a NUL, a bidi override, ...); "
            "copy the id as is"
        )


Whole = Annotated[int, Parameter(converter=_whole_number)]
Seconds = Annotated[float, Parameter(validator=_seconds)]
Id = Annotated[str, Parameter(validator=_one_line)]

Json = Annotated[bool, Parameter(name="--json", negative="", help="Print one JSON object.")]
AllCalls = Annotated[
    bool,
    Parameter(
        name="--all",
        negative="",
        help="List every call (a run of many calls is summarised; --json lists every call).",
    ),
]
State = Annotated[
    str | None,
    Parameter(
        name="--state",
        help="The state directory (default: $CRW_STATE, else .crw/ at the repository root).",
    ),
]

app = App(
    name="crw",
    help="crw: durable agent workflows.",
    exit_on_error=False,
    print_error=False,
    help_on_error=False,
    version_flags=["--version"],
)
flow = App(name="flow", help="Start, step and inspect workflow runs.")
schema = App(name="schema", help="Print the JSON Schemas crw writes by.")
host = App(name="host", help="Hosts that speak the Codex app-server protocol.")
sim = App(name="sim", help="The simulated host (tests and the demo).")
app.command(flow)
app.command(host)
host.command(sim)
flow.command(schema)
flow.command("crw.cli.hook_app:hook")


@flow.command
def start(
    workflow: str,
    /,
    *,
    backend: Literal["session", "app-server"] = "session",
    owner: Annotated[str | None, Parameter(validator=_one_line)] = None,
    host: str | None = None,
    codex_bin: str | None = None,
    trace: Annotated[bool, Parameter(negative="")] = False,
    state: State = None,
    json: Json = False,
) -> int:
    """Start a run of WORKFLOW in a detached run process.

    Parameters
    ----------
    workflow
        The workflow TOML file.
    backend
        session (the owner thread's subagents run the calls) or app-server (the run
        opens a thread per call).
    owner
        The owner thread of a session run (default: $CRW_OWNER_THREAD, else
        $CODEX_THREAD_ID, which Codex sets in a thread's shell).
    host
        The host URI: unix:PATH, ws://127.0.0.1:PORT, or codex (app-server backend
        only). A session run defaults to the codex daemon's control socket.
    codex_bin
        The codex binary of a private codex host (default: the one the
        openai-codex-cli-bin package installs, else codex on PATH).
    trace
        SessionConfig.Trace: digest P, the owner's checkout and the run's shared
        state at each bind and harvest, and warn when a call wrote where its role
        should not (as [settings] trace = true; docs/workspaces.md).
    """
    from crw.cli.start import start_command

    return start_command(
        workflow,
        backend=backend,
        owner=owner,
        host=host,
        codex_bin=codex_bin,
        state=state,
        json=json,
        trace=trace,
    )


@flow.command
def status(
    run: str,
    /,
    *,
    state: State = None,
    json: Json = False,
    all_calls: AllCalls = False,
    results: Annotated[bool, Parameter(negative="")] = False,
) -> int:
    """Show a run's outcome, each call's state, attempt, turns, tokens and time,
    why a call did not complete, and what to do next.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    results
        Show each completed call's answer too (reads the whole journal).
    """
    from crw.cli.status import status_command

    return status_command(run, state=state, json=json, all_calls=all_calls, results=results)


@flow.command(name="next")
def next_(run: str, /, *, wait: Seconds = 0, state: State = None, json: Json = False) -> int:
    """Answer a run's state, its steps and the host call each takes, the slots, the
    spawn formats and a hint; resume a run no process holds.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    wait
        Wait up to this many seconds for a step or a change of the run's state.
    """
    from crw.cli.next import next_command

    return next_command(run, wait=wait, state=state, json=json)


@flow.command
def dispatched(
    run: str,
    call: Id,
    /,
    *,
    k: Whole,
    attempt: Whole,
    agent: Id | None = None,
    failed: str | None = None,
    wait: Seconds = 120.0,
    state: State = None,
    json: Json = False,
) -> int:
    """Report the subagent dispatched for a step, or that the host refused its
    spawn, and print the run's reply.

    Exit 0 when the run bound it, or held the call for a refused spawn; 1 on any
    other reply (queued included).

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    call
        The step's call id (the step's `call`).
    agent
        The subagent's id (the agent_id spawn_agent answered).
    failed
        The tool's output of a spawn_agent the host refused (no subagent): the
        call is held spawn_failed until the role's pair is fixed and it is answered.
    k
        The step's turn k.
    attempt
        The step's attempt n.
    wait
        Seconds to wait for the run's reply; then the report is answered queued.
    """
    from crw.cli.dispatched import dispatched_command

    return dispatched_command(
        run,
        call,
        agent=agent,
        failed=failed,
        k=k,
        attempt=attempt,
        wait=wait,
        state=state,
        json=json,
    )


@flow.command
def resume(run: str, /, *, detach: bool = False, state: State = None, json: Json = False) -> int:
    """Go on with a run from its journal, on the backend its started row records.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    detach
        Launch the run process in the background instead of running it here.
    """
    from crw.cli.resume import resume_command

    return resume_command(run, detach=detach, state=state, json=json)


@flow.command
def pause(run: str, /, *, wait: Seconds = 120.0, state: State = None, json: Json = False) -> int:
    """Pause a run: interrupt its calls' running turns and hold each call (paused).

    Exit 0 once the run is paused (or was), 1 when it ended or did not answer.
    `crw flow resume RUN` goes on: the held calls run again.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    wait
        Seconds to wait for the run process to answer.
    """
    from crw.cli.pause import pause_command

    return pause_command(run, wait=wait, state=state, json=json)


@flow.command
def cancel(run: str, /, *, wait: Seconds = 120.0, state: State = None, json: Json = False) -> int:
    """Cancel a run: interrupt its calls' running turns, hold each call (cancelled)
    and end the run (cancelled); the owner closes the subagents.

    Exit 0 once the run is cancelled, 1 when it had ended or did not answer.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    wait
        Seconds to wait for the run process to answer.
    """
    from crw.cli.cancel import cancel_command

    return cancel_command(run, wait=wait, state=state, json=json)


@flow.command
def answer(
    run: str,
    call: Id,
    /,
    *,
    retry: Annotated[bool, Parameter(negative="")] = False,
    skip: Annotated[bool, Parameter(negative="")] = False,
    abort: Annotated[bool, Parameter(negative="")] = False,
    restart: Annotated[bool, Parameter(negative="")] = False,
    no_resume: Annotated[bool, Parameter(name="--no-resume", negative="")] = False,
    wait: Seconds = 60.0,
    state: State = None,
    json: Json = False,
) -> int:
    """Answer a held call of a run waiting_decision, then resume the run.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    call
        The held call's id (as status and next name it).
    retry
        The call goes on in place: a new attempt takes its turn again.
    skip
        The call's node ends skipped, without a result; the nodes that need it never run.
    abort
        The run ends (aborted).
    restart
        The call's node runs again in a new call, once the call's subagents run
        nothing; an open call of a run no process holds restarts too.
    no_resume
        Record the answer only; resume the run later with crw flow resume RUN --detach.
    wait
        Seconds to wait for a run process that still runs other calls to end.
    """
    from crw.cli.answer import answer_command, one_choice

    return answer_command(
        run,
        call,
        choice=one_choice(retry=retry, skip=skip, abort=abort, restart=restart),
        resume=not no_resume,
        wait=wait,
        state=state,
        json=json,
    )


DemoState = Annotated[
    str | None,
    Parameter(
        name="--state",
        help="The state directory to run in, kept (default: $CRW_STATE, else a new "
        "temporary directory, removed when the demo ends unless --keep).",
    ),
]


@flow.command
def demo(
    *,
    backend: Literal["session", "app-server"] = "session",
    host: Literal["sim", "codex"] = "sim",
    state: DemoState = None,
    keep: Annotated[bool, Parameter(negative="")] = False,
    git: Annotated[bool, Parameter(negative="")] = False,
    json: Json = False,
) -> int:
    """Run the demo end to end: a workflow started, run and read back.

    Parameters
    ----------
    backend
        session (a scripted owner takes the steps) or app-server (the run opens a
        thread per call).
    host
        sim (the simulated host) or codex (the real codex app-server as a private
        child, offline against crw's mock model; app-server backend only).
    keep
        Keep the temporary state directory the demo made (its path is printed).
    git
        The git variant: an executor under review edits a sample git repository
        the demo makes; the node's branch holds the result (simulated host only).
    """
    from crw.cli.demo import demo_command

    return demo_command(state=state, json=json, backend=backend, host=host, keep=keep, git=git)


@flow.command(name="list")
def list_(
    *,
    state: State = None,
    json: Json = False,
    all_runs: Annotated[bool, Parameter(name="--all", negative="")] = False,
) -> int:
    """List the runs under the state directory, newest first: each one's backend,
    state with its reason, calls done/total, tokens, start, last row and whether a
    process holds it.

    Parameters
    ----------
    all_runs
        List every run (by default an ended run whose last row is over 7 days old
        is left out).
    """
    from crw.cli.list import list_command

    return list_command(state=state, json=json, all_runs=all_runs)


@flow.command(name="_run", show=False)
def run_process(run: str, /, *, state: State = None) -> int:
    """The detached run process (started by `start` and `resume`)."""
    from crw.cli.resume import run_and_wait

    return run_and_wait(run, state=state)


# show and watch: the run's history, and its live view.


@flow.command
def show(
    run: str,
    /,
    *,
    call: Id | None = None,
    follow: Annotated[bool, Parameter(negative="")] = False,
    state: State = None,
    json: Annotated[
        bool,
        Parameter(name="--json", negative="", help="Print each row as one JSON object a line."),
    ] = False,
) -> int:
    """Show a run's history: one line per journal row (time, seq, call, kind, key fields).

    Exit 0; with --follow, 0 once the run ends, 1 when no process runs it (paused,
    crashed, waiting for an answer).

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    call
        Show only this call's rows.
    follow
        Go on printing the rows the run commits until the run ends.
    """
    from crw.cli.show import show_command

    return show_command(run, call=call, follow_run=follow, state=state, json=json)


@flow.command
def watch(
    run: str,
    /,
    *,
    state: State = None,
    json: Annotated[
        bool,
        Parameter(name="--json", negative="", help="Print the view as one JSON object a line."),
    ] = False,
) -> int:
    """Watch a run live: calls done of all, the calls in flight, tokens, the last rows.

    A terminal gets a live view; a pipe gets the new rows as plain lines. It ends
    with the run: exit 0 once the run ends, 1 when no process runs it.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    """
    from crw.cli.watch import watch_command

    return watch_command(run, state=state, json=json)


@flow.command
def shadow(run: str, /, *, state: State = None, json: Json = False) -> int:
    """Replay a run from its journal and run directory (no host) through the run's
    own decisions, name its recorded backend, and report each point where they
    differ from the recorded rows.

    Exit 0 equal, 1 differ, 2 input error.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    """
    from crw.cli.shadow import shadow_command

    return shadow_command(run, state=state, json=json)


@schema.command
def rows(*, json: Json = False) -> int:
    """Print the JSON Schema of every row kind of the journal.

    The schema is JSON either way; --json is accepted for symmetry.
    """
    import json as json_module

    from crw.journal.rows import rows_json_schema

    print(json_module.dumps(rows_json_schema(), indent=2))
    return 0


@sim.command
def serve(*, socket: str, codex_home: str | None = None, models: str | None = None) -> int:
    """Serve the simulated host over WebSocket on a unix socket, until interrupted.

    Parameters
    ----------
    socket
        The unix socket path to listen on; crw reaches it as --host unix:PATH.
    codex_home
        Where its rollout files go (default: a new temporary directory).
    models
        Its model catalog, comma-separated (gpt-5,gpt-5-mini): model/list lists
        them and a spawn of another model, or of an agent_type that is neither
        built in (default, explorer, worker) nor an [agents.<name>] table of its
        config.toml, is refused with codex's words. Without it: any model.
    """
    from pathlib import Path

    from crw.host.sim.serve import serve_command

    return serve_command(Path(socket), Path(codex_home) if codex_home else None, models)


@flow.command
def timeline(
    run: str,
    /,
    *,
    out: str,
    state: State = None,
    json: Json = False,
    all_calls: Annotated[
        bool,
        Parameter(
            name="--all",
            negative="",
            help="A lane for every call (a run of more than 100 shows 100 and counts the rest).",
        ),
    ] = False,
) -> int:
    """Draw a run's timeline: a lane per call, its attempts and turns as bars on a
    time axis, repairs, losses, interrupts, holds and reviews marked, tokens per turn.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    out
        The file to write: FILE.svg, or FILE.html (a page that shows the SVG).
    """
    from crw.cli.timeline import timeline_command

    return timeline_command(run, out=out, state=state, json=json, all_calls=all_calls)


# -- the simulated host's owner played by hand, and housekeeping of runs

sim.command(
    "crw.cli.owner_sim_app:owner", help="Play the owner thread by hand on the simulated host."
)


@flow.command
def rm(run: str, /, *, state: State = None, json: Json = False) -> int:
    """Remove a run's directory; a live run (a process holds it) is refused.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    """
    from crw.cli.housekeeping import rm_command

    return rm_command(run, state=state, json=json)


@flow.command
def gc(
    *,
    ended_before: str,
    dry_run: Annotated[bool, Parameter(name="--dry-run", negative="")] = False,
    state: State = None,
    json: Json = False,
) -> int:
    """Remove the runs that ended before a date; live runs are skipped.

    Parameters
    ----------
    ended_before
        YYYY-MM-DD or an ISO 8601 time (UTC unless it names a zone).
    dry_run
        List what would be removed; remove nothing.
    """
    from crw.cli.housekeeping import gc_command

    return gc_command(ended_before=ended_before, dry_run=dry_run, state=state, json=json)


def run(argv: list[str] | None = None) -> None:
    """Parse `argv`, run the command, and exit with its code."""
    from cyclopts import CycloptsError

    def command() -> object:
        try:
            return app(sys.argv[1:] if argv is None else argv, result_action="return_value")
        except CycloptsError as err:
            print(f"crw: error: {one_line(str(err).strip())} (see --help)", file=sys.stderr)
            sys.exit(2)

    run_command(command)
