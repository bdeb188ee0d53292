"""The `crw host sim owner` commands in the command tree (`app.py` registers the
group): play the owner thread by hand on the simulated host (`crw.cli.demo.owner_sim`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from cyclopts import App, Parameter

from crw.cli.params import Json, one_line_id

owner = App(name="owner", help="Play the owner thread by hand on the simulated host.")
Socket = Annotated[str, Parameter(name="--socket", help="The simulated host's unix socket.")]
OwnerThread = Annotated[
    str | None,
    Parameter(
        name="--owner",
        validator=one_line_id,
        help="The owner thread (the id owner start printed; default: $CRW_OWNER_THREAD, "
        "else the owner the step's run records).",
    ),
]
PickCall = Annotated[
    str | None,
    Parameter(name="--call", help="The step's call, when STEP holds next's whole answer."),
]


@owner.command(name="start")
def owner_start(*, socket: Socket, json: Json = False) -> int:
    """Open an owner thread on the simulated host and print its id."""
    from crw.cli.demo.owner_sim import owner_start_command

    return owner_start_command(socket=socket, json=json)


def _owner_step(action: Literal["spawn", "send", "close"]) -> Any:
    def command(
        step: str,
        /,
        *,
        socket: Socket,
        owner: OwnerThread = None,
        call: PickCall = None,
        json: Json = False,
    ) -> int:
        from crw.cli.demo.owner_sim import owner_step_command

        return owner_step_command(action, step, socket=socket, owner=owner, call=call, json=json)

    command.__doc__ = f"""{_OWNER_STEP_DOCS[action]}

    Parameters
    ----------
    step
        A step file of the run directory (steps/CALL/tK-aN.json, close-aN-AGENT.json),
        or a file (- for stdin) holding a step of crw flow next RUN --json, or its answer.
    """
    return command


_OWNER_STEP_DOCS = {
    "spawn": "spawn_agent for a spawn step as the owner; print the agent and its report.",
    "send": "send_input for a send_input step; print the dispatched command that reports it.",
    "close": "close_agent for a close step: the subagent's turn stops.",
}
for _action in ("spawn", "send", "close"):
    owner.command(_owner_step(_action), name=_action)
