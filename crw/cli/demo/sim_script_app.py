"""`crw host sim script` in the command tree (`app.py` registers it lazily, with
`crw.cli.demo.commands.SCRIPT_HELP` as its help): script how the simulated host's
turns behave (`crw.cli.demo.sim_script`)."""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter

from crw.cli.params import Json


def script(
    target: Annotated[
        str | None,
        Parameter(help="A call (build.1), a turn marker or glob (build.1/t1-a1), or * for all."),
    ] = None,
    behaviour: Annotated[
        str | None,
        Parameter(help="""A JSON object of the keys above, e.g. '{"invalidFirst": true}'."""),
    ] = None,
    /,
    *,
    socket: Annotated[str, Parameter(name="--socket", help="The simulated host's unix socket.")],
    role: Annotated[
        str | None,
        Parameter(help="Match only the turns of this role (CRW-ROLE: reviewer, executor, …)."),
    ] = None,
    list_: Annotated[
        bool, Parameter(name="--list", negative="", help="List the scripts set, oldest first.")
    ] = False,
    clear: Annotated[
        bool,
        Parameter(negative="", help="Remove the scripts set for TARGET (and --role), not add one."),
    ] = False,
    json: Json = False,
) -> int:
    from crw.cli.demo.sim_script import script_command

    return script_command(
        target, behaviour, socket=socket, role=role, list_=list_, clear=clear, json=json
    )
