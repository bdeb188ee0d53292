"""The demo and the simulated host in the command tree: `crw flow demo` and
`crw host sim serve`, and the help of `crw host sim script`. `crw.cli.app` wires them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from cyclopts import Parameter

from crw.cli.params import Json
from crw.host.sim.keys import BEHAVIOURS

DemoState = Annotated[
    str | None,
    Parameter(
        name="--state",
        help="The state directory to run in, kept (default: $CRW_STATE, else a new "
        "temporary directory, removed when the demo ends unless --keep).",
    ),
]


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
    from crw.cli.demo.demo import demo_command

    return demo_command(state=state, json=json, backend=backend, host=host, keep=keep, git=git)


def serve(*, socket: str, codex_home: str | None = None, models: str | None = None) -> int:
    """Serve the simulated host over WebSocket on a unix socket, until interrupted.

    Parameters
    ----------
    socket
        The unix socket path to listen on; crw reaches it as --host unix:PATH.
    codex_home
        Where its rollout files go (default: a new temporary directory, removed
        when it stops).
    models
        Its model catalog, comma-separated (gpt-5,gpt-5-mini): model/list lists
        them and a spawn of another model, or of an agent_type that is neither
        built in (default, explorer, worker) nor an [agents.<name>] table of its
        config.toml, is refused with codex's words. Without it: any model.
    """
    from pathlib import Path

    from crw.host.sim.serve import serve_command

    return serve_command(Path(socket), Path(codex_home) if codex_home else None, models)


SCRIPT_HELP = (
    """Script how the simulated host's turns behave: a repair, a rejected review, a lost attempt.

TARGET is a call (`build.1`: each of its turns), a turn marker or glob
(`build.1/t1-a1`, `build.*/*`), or `*` (every turn). BEHAVIOUR is a JSON object of
these keys. The newest script that matches a turn decides it; a turn no script
matches answers a valid instance of its schema after 1 s.

"""
    + "\n".join(f"- `{key}`: {line}" for key, line in BEHAVIOURS.items())
    + "\n"
)
"""`crw host sim script --help`: every behaviour the host knows, one line each."""
