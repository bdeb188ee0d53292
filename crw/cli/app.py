"""The command tree of `crw` (cyclopts): the apps and the commands wired into them.

Each group of commands has its module (`run_commands`, `owner_commands`,
`read_commands`, `demo_commands`, `hook_app`, `owner_sim_app`); this module only
wires them. Only cyclopts and the standard library are imported by the tree;
each command imports what it needs when it runs, so `crw flow status --json` does
not pay for pydantic or Trio. Exit codes: 0 ok, 1 refused or failed, 2 input
error (`entry.py`). The plain command lines of `next`, `status`, `dispatched`,
`start`, `resume`, `pause`, `cancel`, `answer`, `shadow`, `call`, `_run` and `host
sim serve` run without this tree (`hot.py`): a change of their parameters is a
change there too (tests/cli/test_cold_start.py compares the two).
"""

from __future__ import annotations

import sys

from cyclopts import App

from crw.cli.demo import commands as demo_commands
from crw.cli.entry import run_command
from crw.cli.owner import commands as owner_commands
from crw.cli.read import commands as read_commands
from crw.cli.run import commands as run_commands
from crw.cli.run import move_commands

# The distribution that installs the package `crw` (pyproject.toml, `name`).
DISTRIBUTION = "crw-flow"


def installed_version() -> str:
    """What `crw --version` prints: the version of the installed crw-flow."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return f"unknown ({DISTRIBUTION} is not installed: pip install crw-flow)"


app = App(
    name="crw",
    help="crw: durable agent workflows.",
    exit_on_error=False,
    print_error=False,
    help_on_error=False,
    version=installed_version,
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
flow.command(
    "crw.cli.owner.hook_app:hook",
    help="The spawn hook Codex runs before the owner's tool calls: install it, or run it.",
)
flow.command("crw.cli.owner.codex_app:codex", help="Set up Codex to own crw flow runs.")

flow.command(run_commands.start)
flow.command(run_commands.validate)
flow.command(run_commands.rerun)
flow.command(read_commands.status)
flow.command(read_commands.call)
flow.command(owner_commands.next_, name="next")
flow.command(owner_commands.dispatched)
flow.command(run_commands.resume)
flow.command(run_commands.pause)
flow.command(run_commands.cancel)
flow.command(run_commands.answer)
flow.command(demo_commands.demo)
flow.command(read_commands.list_, name="list")
flow.command(run_commands.run_process, name="_run", show=False)
flow.command(read_commands.show)
flow.command(read_commands.watch)
flow.command(read_commands.wait)
flow.command(read_commands.result)
flow.command(read_commands.shadow)
schema.command(read_commands.rows)
sim.command(demo_commands.serve)
flow.command(read_commands.timeline)
sim.command(
    "crw.cli.demo.owner_sim_app:owner", help="Play the owner thread by hand on the simulated host."
)
sim.command("crw.cli.demo.sim_script_app:script", help=demo_commands.SCRIPT_HELP)
flow.command(owner_commands.init)
flow.command(run_commands.rm)
flow.command(run_commands.gc)
flow.command(move_commands.export)
flow.command(move_commands.import_, name="import")
flow.command(
    "crw.web.command:ui", help="Serve a local web view of the runs, live, with their decisions."
)


def run(argv: list[str] | None = None) -> None:
    """Parse `argv`, run the command, and exit with its code."""
    from cyclopts import CycloptsError

    from crw.cli.output import wants_json

    tokens = sys.argv[1:] if argv is None else argv
    if "--db" in tokens:  # list's `--db` alone names the database chosen for it
        from crw.cli.read.list_url import bare_db

        tokens = bare_db(tokens)

    def command() -> object:
        from crw.errors import InputError

        try:
            return app(tokens, result_action="return_value")
        except CycloptsError as err:
            raise InputError(usage_error(err)) from None

    run_command(command, as_json=wants_json(tokens))


def usage_error(err: Exception) -> str:
    """The one line a command line cyclopts cannot bind gets: for a missing value,
    which parameter and what it means (from the command's docstring), and always
    where the command's help is."""
    from cyclopts import CycloptsError, MissingArgumentError

    assert isinstance(err, CycloptsError)
    chain = " ".join(["crw", *(err.command_chain or ())])
    missing = err.argument if isinstance(err, MissingArgumentError) else None
    if missing is None or missing.token_count()[0] != 1:
        return f"{str(err).strip().rstrip('.')}; see {chain} --help"
    assert isinstance(err, MissingArgumentError)
    name = err.keyword or missing.name
    meaning = _meaning(err, missing.name)
    if missing.field_info.is_keyword:
        what = f"{name} needs a value" if err.keyword else f"{name} is missing"
        value = missing.parameter.metavar or missing.name.lstrip("-").upper().replace("-", "_")
        how = f"pass {name} {value}"
    else:
        what, how = f"{name} is missing", "pass it"
    return f"{chain}: {what}{f' ({meaning})' if meaning else ''}; {how} (see {chain} --help)"


def _meaning(err: Exception, name: str) -> str:
    """What the parameter `name` of the command `err` names is, as its docstring
    says it ("the step's turn k"); "" when it says nothing."""
    from cyclopts import CycloptsError

    assert isinstance(err, CycloptsError)
    if err.app is None:
        return ""
    for argument in err.app.assemble_argument_collection(parse_docstring=True):
        if argument.name == name and argument.parameter.help:
            text = " ".join(argument.parameter.help.split()).rstrip(".")
            return text[:1].lower() + text[1:] if text[1:2].islower() else text
    return ""
