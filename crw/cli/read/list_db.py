"""The runs of a PostgreSQL database in `crw flow list --db URL` (or $CRW_DB): each
with the machine its writer last ran on, and whether this machine has its run
directory (the run's bus, packets and workspaces are on the machine that runs it:
`status` and the others need that directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crw.engine.run.rundir import RunDir
from crw.errors import RefusedError
from crw.journal.stores import check_db_url


def database_section(url: str, state_dir: Path) -> dict[str, Any]:
    """`--json`'s `database`: {where, runs: [{run, machine, lease_until, held,
    last_seq, here}]}.

    Raises:
        InputError: not a PostgreSQL URL.
        RefusedError: the database cannot be read.
    """
    check_db_url(url)
    from crw.journal.pg_runs import database_runs
    from crw.journal.postgres import where

    try:
        runs = database_runs(url)
    except OSError as err:
        fix = "start the database or fix --db / CRW_DB"
        raise RefusedError(f"{err.strerror or err}; {fix}") from err
    return {
        "where": where(url),
        "runs": [
            {
                "run": run.run,
                "machine": run.machine,
                "lease_until": run.lease_until,
                "held": run.held,
                "last_seq": run.last_seq,
                "here": RunDir.of(state_dir, run.run).run_json.is_file(),
            }
            for run in runs
        ],
    }


def database_lines(section: dict[str, Any]) -> list[str]:
    """The section for a person: a line a run, its machine, lease and whether it is here."""
    runs = section["runs"]
    if not runs:
        return [f"no runs in the {section['where']}"]
    lines = [f"runs in the {section['where']}:"]
    width = max(len(run["run"]) for run in runs)
    machines = max(len(run["machine"] or "-") for run in runs)
    for run in runs:
        machine = run["machine"] or "-"
        lease = f"held until {run['lease_until']}" if run["held"] else "not held"
        here = "" if run["here"] else "  (no run directory on this machine)"
        lines.append(
            f"  {run['run']:<{width}}  {machine:<{machines}}  {lease}  {run['last_seq']} rows{here}"
        )
    return lines
