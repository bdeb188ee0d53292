"""`crw flow cancel RUN [--wait S] [--json]`: interrupt the run's calls and end it.

As `crw flow pause` does (`crw.cli.run.pause`), but every call the run stops is held
cancelled and the run ends: `cancelled`, then `ended` with status cancelled. Each
stopped call's subagent gets its close step, which the owner takes from `crw flow
next`. A run that ended already is refused (exit 1); a paused run is cancelled
without its host (its calls are held already).
"""

from __future__ import annotations

from crw.cli.run.pause import control_command


def cancel_command(run: str, *, wait: float, state: str | None, json: bool) -> int:
    return control_command("cancel", run, wait=wait, state=state, json=json)
