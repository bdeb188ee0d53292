"""The commands that read a run and change nothing, in the command tree: `status`,
`call`, `list`, `show`, `watch`, `wait`, `result`, `timeline`, `shadow`, and `crw schema rows`.

The plain command lines of `status`, `call` and `shadow` run without the tree
(`crw.cli.hot`): a change of their parameters here is a change there too. `crw.cli.app` wires them.
"""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter

from crw.cli.params import AllCalls, Count, Id, Json, MaybeSeconds, State


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
    from crw.cli.read.status import status_command

    return status_command(run, state=state, json=json, all_calls=all_calls, results=results)


def call(
    run: str,
    call: Id,
    /,
    *,
    state: State = None,
    json: Json = False,
    answer_only: Annotated[bool, Parameter(negative="")] = False,
    transcript: Annotated[bool, Parameter(negative="")] = False,
) -> int:
    """Show one call of a run: its state and reason, attempts and turns, the packet
    each step gave, the answer and its schema, the repair, tokens by part and turn,
    and its workspace (on git, crw.commit and the files it changed).

    Exit 2 for a call the run does not have (the line names its calls).

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    call
        The call, `<node>.<n>`, as `crw flow status` lists it.
    answer_only
        Print only the call's answer (exit 1 when it has none).
    transcript
        Ask the run's host for the newest turn's items (`thread/read`); one line
        says when the host cannot give them.
    """
    from crw.cli.read.call import call_command

    return call_command(
        run, call, state=state, json=json, answer_only=answer_only, transcript=transcript
    )


def list_(
    *,
    status: Annotated[list[str] | None, Parameter(negative="")] = None,
    workflow: str | None = None,
    since: str | None = None,
    limit: Count | None = None,
    state: State = None,
    json: Json = False,
    all_runs: Annotated[bool, Parameter(name="--all", negative="")] = False,
    db: str | None = None,
) -> int:
    """List the runs under the state directory, newest first: each one's id (which
    carries its start time), backend, state with its reason, calls done/total,
    tokens, the age of its last row and whether a process holds it (--json adds
    started_at, last_at and the pid). With a database, then its runs too.

    Parameters
    ----------
    status
        Only the runs in this state (running, waiting_session, waiting_decision,
        paused, ended, ...) or ended with this status (completed, failed, aborted,
        cancelled); repeat it, or give S,T, for either.
    workflow
        Only the runs of this workflow: its name (a run id's head) or its file.
    since
        Only the runs started since WHEN: YYYY-MM-DD, an ISO 8601 time, or an age
        such as 2h or 7d (then ended runs older than 7 days are listed too).
    limit
        Only the newest N runs of those the other filters leave.
    all_runs
        List every run (by default an ended run whose last row is over 7 days old
        is left out).
    db
        Also list the runs whose journals this PostgreSQL database keeps (without
        --db: $CRW_DB's, when set), each with the machine it last ran on and
        whether its run directory is on this machine; --db alone: $CRW_DB's, else
        the state directory's default (crw flow init --db).
    """
    from crw.cli.read.list import list_command

    return list_command(
        state=state,
        json=json,
        all_runs=all_runs,
        status=status or (),
        workflow=workflow,
        since=since,
        limit=limit,
        db=db,
    )


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
    from crw.cli.read.show import show_command

    return show_command(run, call=call, follow_run=follow, state=state, json=json)


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
    from crw.cli.read.watch import watch_command

    return watch_command(run, state=state, json=json)


def wait(
    run: str,
    /,
    *,
    timeout: MaybeSeconds = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Wait for a run's outcome, showing its progress, and exit by it.

    Exit 0 completed, 1 failed or aborted, 3 waiting for a decision (a held call),
    4 paused, 5 cancelled, 124 --timeout ran out. A run whose process died has not
    ended: it waits on until the run is resumed and ends, or the timeout.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    timeout
        Give up after this many seconds (exit 124); default: no limit.
    """
    from crw.cli.read.wait import wait_command

    return wait_command(run, timeout=timeout, state=state, json=json)


def result(run: str, /, *, call: Id | None = None, state: State = None, json: Json = False) -> int:
    """Print a run's final answers: each completed node's answer, each other node's end.

    Exit as wait would with no time to wait: 0 completed, 1 failed or aborted, 5
    cancelled; a run not ended says so, 3 waiting for a decision, 4 paused, 124
    still going. With --call, 0 when the call has an answer, 1 when it has none.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    call
        Print only this call's answer.
    """
    from crw.cli.read.result import result_command

    return result_command(run, call=call, state=state, json=json)


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
    from crw.cli.read.timeline import timeline_command

    return timeline_command(run, out=out, state=state, json=json, all_calls=all_calls)


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
    from crw.cli.read.shadow import shadow_command

    return shadow_command(run, state=state, json=json)


def rows(*, json: Json = False) -> int:
    """Print the JSON Schema of every row kind of the journal.

    The schema is JSON either way; --json is accepted for symmetry.
    """
    import json as json_module

    from crw.journal.rows import rows_json_schema

    print(json_module.dumps(rows_json_schema(), indent=2))
    return 0
