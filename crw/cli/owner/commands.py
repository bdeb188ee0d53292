"""The owner's commands in the command tree: `crw flow next`, `crw flow dispatched`
and `crw flow init`.

The plain command lines of `next` and `dispatched` run without the tree
(`crw.cli.hot`): a change of their parameters here is a change there too. `crw.cli.app` wires them.
"""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter

from crw.cli.params import Id, Json, Seconds, State, Whole


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
    from crw.cli.owner.next import next_command

    return next_command(run, wait=wait, state=state, json=json)


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
    from crw.cli.owner.dispatched import dispatched_command

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


def init(
    *,
    host: str | None = None,
    model: str | None = None,
    force: Annotated[bool, Parameter(negative="")] = False,
    db: str | None = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Write the role store, roles.toml in the state directory: the six roles, each on a model the
    host serves and the effort its role asks for. Exit 1 when a store is there
    already (pass --force) or the host cannot be asked. With --db, set up the
    database first and record it as the state's default (a store there is kept).

    Parameters
    ----------
    host
        The host to ask its models (model/list): unix:PATH, ws://127.0.0.1:PORT, or
        codex (a private codex app-server). Default: the codex daemon's socket when
        it is there, else codex.
    model
        The model every role gets (default: config.toml's model when the host
        serves it, else the host's default model).
    force
        Replace a role store that is there.
    db
        A PostgreSQL database (postgresql://USER@HOST/DATABASE) for the runs'
        journals: checked (server version, synchronous_commit), its tables made
        where missing, and recorded in the state's db.toml, which start takes when
        neither --db nor $CRW_DB is given. Exit 2 for a URL that is not
        PostgreSQL's, 1 when the database is down or the role lacks a right.
    """
    from crw.cli.owner.init import init_command

    return init_command(host=host, model=model, state=state, force=force, json=json, db=db)
