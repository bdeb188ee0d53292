"""The commands of a run's life in the command tree: `crw flow start`, `resume`,
`pause`, `cancel`, `answer`, `rm`, `gc` and the run process `_run`.

Each parses its command line (cyclopts reads the signature and the docstring) and
imports what it needs only when it runs; `crw.cli.app` wires them. The plain
command lines of `start`, `resume`, `pause`, `cancel`, `answer` and `_run` run
without the tree (`crw.cli.hot`): a change of their parameters is a change there
too (tests/cli/test_cold_start.py compares the two).
"""

from __future__ import annotations

from typing import Annotated, Literal

from cyclopts import Parameter

from crw.cli.params import Id, Json, MaybeSeconds, Seconds, State, one_line_id

Inputs = Annotated[
    list[str] | None,
    Parameter(name="--input", negative="", consume_multiple=False, metavar="NAME=VALUE"),
]
InputFiles = Annotated[
    list[str] | None,
    Parameter(name="--input-file", negative="", consume_multiple=False, metavar="NAME=PATH"),
]


def start(
    workflow: str,
    /,
    *,
    backend: Literal["session", "app-server"] = "session",
    owner: Annotated[str | None, Parameter(validator=one_line_id)] = None,
    host: str | None = None,
    codex_bin: str | None = None,
    trace: Annotated[bool, Parameter(negative="")] = False,
    inputs: Inputs = None,
    input_files: InputFiles = None,
    dry_run: Annotated[bool, Parameter(name="--dry-run", negative="")] = False,
    wait: Annotated[bool, Parameter(negative="")] = False,
    timeout: MaybeSeconds = None,
    db: str | None = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Start a run of WORKFLOW in a detached run process.

    With --wait, wait for its outcome and exit by it, as crw flow wait does.

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
        Record where each call writes: warn in the run's rows when a call changed
        files its role may not (a reviewer that edits, an executor that writes in
        your checkout instead of its worktree). Nothing is blocked; each turn costs
        a git status or two. As [settings] trace = true; docs/workspaces.md.
    inputs
        The value of the workflow's input NAME (a string, int or bool input);
        repeat it for each input.
    input_files
        The file of the workflow's file input NAME; repeat it for each.
    dry_run
        Make every check of the start and show the plan as crw flow validate does;
        start nothing.
    wait
        Then wait for the run's outcome, showing its progress (crw flow wait).
    timeout
        With --wait: give up waiting after this many seconds (exit 124).
    db
        Keep the run's journal in this PostgreSQL database
        (postgresql://USER@HOST/DATABASE; default: $CRW_DB, else the state's
        default from crw flow init --db, else the run's journal file). The run
        remembers it; docs/postgres.md.
    """
    if dry_run and (wait or timeout is not None):
        from crw.errors import InputError

        raise InputError(
            "--dry-run starts no run, so there is nothing to --wait for: drop --wait "
            "(and --timeout), or drop --dry-run"
        )
    if dry_run:
        from crw.cli.run.validate import validate_command

        return validate_command(
            workflow,
            backend=backend,
            owner=owner,
            host=host,
            codex_bin=codex_bin,
            state=state,
            json=json,
            trace=trace,
            inputs=inputs,
            input_files=input_files,
            dry_run=True,
        )
    from crw.cli.run.start import start_command

    return start_command(
        workflow,
        backend=backend,
        owner=owner,
        host=host,
        codex_bin=codex_bin,
        state=state,
        json=json,
        trace=trace,
        inputs=inputs,
        input_files=input_files,
        wait=wait,
        timeout=timeout,
        db=db,
    )


def rerun(
    run: str,
    /,
    *,
    start_from: Annotated[str, Parameter(name="--from", metavar="NODE", validator=one_line_id)],
    workflow: Annotated[str | None, Parameter(metavar="WF")] = None,
    inputs: Inputs = None,
    input_files: InputFiles = None,
    wait: Annotated[bool, Parameter(negative="")] = False,
    timeout: MaybeSeconds = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Start a new run that takes RUN's answers up to a node and runs the node afresh.

    Every node the --from node does not lead to takes the answer it completed with
    in RUN (recorded as reused, its tokens not spent again); the node and every node
    that needs it run afresh, on RUN's backend, host and owner. Then as crw flow start.

    Parameters
    ----------
    run
        The run to take the answers from (its id, or its directory).
    start_from
        The first node to run afresh: every node it needs must have completed in RUN.
    workflow
        An edited workflow to run (default: the file RUN was started with, unchanged);
        each reused answer must still pass its node's schema in it.
    inputs
        The value of the workflow's input NAME, instead of RUN's; repeat it for each.
    input_files
        The file of the workflow's file input NAME, instead of RUN's; repeat it for each.
    wait
        Then wait for the run's outcome, showing its progress (crw flow wait).
    timeout
        With --wait: give up waiting after this many seconds (exit 124).
    """
    from crw.cli.run.rerun import rerun_command

    return rerun_command(
        run,
        start_from=start_from,
        workflow=workflow,
        inputs=inputs,
        input_files=input_files,
        wait=wait,
        timeout=timeout,
        state=state,
        json=json,
    )


def validate(
    workflow: str,
    /,
    *,
    backend: Literal["session", "app-server"] = "session",
    owner: Annotated[str | None, Parameter(validator=one_line_id)] = None,
    host: str | None = None,
    codex_bin: str | None = None,
    inputs: Inputs = None,
    input_files: InputFiles = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Check WORKFLOW as crw flow start would, and show the run it would make;
    start nothing, ask no host.

    Exit 0 when the start would be taken, 2 with the one line that refuses it.

    Parameters
    ----------
    workflow
        The workflow TOML file.
    backend
        session or app-server, as crw flow start takes it.
    owner
        The owner thread of a session run, as crw flow start takes it.
    host
        The host URI, as crw flow start takes it (it is not asked).
    codex_bin
        The codex binary of a private codex host, as crw flow start takes it.
    inputs
        The value of the workflow's input NAME; repeat it for each input.
    input_files
        The file of the workflow's file input NAME; repeat it for each.
    """
    from crw.cli.run.validate import validate_command

    return validate_command(
        workflow,
        backend=backend,
        owner=owner,
        host=host,
        codex_bin=codex_bin,
        state=state,
        json=json,
        inputs=inputs,
        input_files=input_files,
    )


def resume(
    run: str, /, *, detach: bool = False, db: str | None = None, state: State = None,
    json: Json = False,
) -> int:  # fmt: skip
    """Go on with a run from its journal, on the backend its started row records.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    detach
        Launch the run process in the background instead of running it here.
    db
        Where to look up a run this state directory has no directory of (another
        machine's, its lease lapsed): postgresql://USER@HOST/DATABASE (default:
        $CRW_DB, else the state's default from crw flow init --db).
    """
    from crw.cli.run.resume import resume_command

    return resume_command(run, detach=detach, state=state, json=json, db=db)


def pause(run: str, /, *, wait: Seconds = 120.0, state: State = None, json: Json = False) -> int:
    """Pause a run: interrupt its calls' running turns and hold each call (paused).

    Exit 0 once the run is paused (or was), 1 when it ended or did not answer.
    `crw flow resume RUN --detach` goes on: the held calls run again.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    wait
        Seconds to wait for the run process to answer.
    """
    from crw.cli.run.pause import pause_command

    return pause_command(run, wait=wait, state=state, json=json)


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
    from crw.cli.run.cancel import cancel_command

    return cancel_command(run, wait=wait, state=state, json=json)


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
    from crw.cli.run.answer import answer_flags_command

    return answer_flags_command(
        run,
        call,
        retry=retry,
        skip=skip,
        abort=abort,
        restart=restart,
        no_resume=no_resume,
        wait=wait,
        state=state,
        json=json,
    )


def rm(run: str, /, *, db: str | None = None, state: State = None, json: Json = False) -> int:
    """Remove a run's directory; a live run (a process holds it) is refused.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    db
        Where to look up a run this state directory has no directory of (its
        machine is gone): its rows are removed there, unless a writer's lease holds
        it. postgresql://USER@HOST/DATABASE (default: $CRW_DB, else the state's
        default from crw flow init --db).
    """
    from crw.cli.run.housekeeping import rm_command

    return rm_command(run, state=state, json=json, db=db)


def gc(
    *,
    ended_before: str | None = None,
    older_than: str | None = None,
    refs: Annotated[bool, Parameter(negative="")] = False,
    repo: str | None = None,
    yes: Annotated[bool, Parameter(negative="")] = False,
    dry_run: Annotated[bool, Parameter(name="--dry-run", negative="")] = False,
    db: str | None = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Remove the runs that ended before a date or longer ago than an age (live
    runs are skipped); with --refs, list the refs of runs that no longer exist
    (--yes deletes them).

    Parameters
    ----------
    ended_before
        YYYY-MM-DD or an ISO 8601 time (UTC unless it names a zone).
    older_than
        An age such as 7d, 12h or 1h30m: the runs that ended longer ago than that.
    refs
        List the refs refs/crw/flow/RUN/... of the runs that no longer exist in the
        state directory (after the runs this gc removes); delete nothing without --yes.
    repo
        The checkout whose refs --refs prunes (default: the one that holds the
        state directory).
    yes
        Delete the refs --refs lists.
    dry_run
        List what would be removed; remove nothing.
    db
        Also remove the ended runs of this database (postgresql://USER@HOST/DATABASE)
        that no directory here holds (their machine is gone); a run a writer's lease
        holds is skipped.
    """
    from crw.cli.run.housekeeping import gc_command

    return gc_command(
        ended_before=ended_before,
        older_than=older_than,
        refs=refs,
        repo=repo,
        yes=yes,
        dry_run=dry_run,
        state=state,
        json=json,
        db=db,
    )


def run_process(run: str, /, *, state: State = None) -> int:
    """The detached run process (started by `start` and `resume`)."""
    from crw.cli.run.resume import run_and_wait

    return run_and_wait(run, state=state)
