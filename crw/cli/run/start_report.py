"""What `crw flow start` and `crw flow rerun` print of the run they started: its
lines (or `--json` object), and with `--wait` its outcome as `crw flow wait`
reports it, by whose exit code the command exits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crw.cli.output import emit, say
from crw.cli.read.status_text import input_lines
from crw.cli.run.preview import Preview
from crw.cli.shell import shell_word
from crw.engine.run.rerun import Reuse
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec


@dataclass
class StartOutcome:
    """What a start made: the run, its spec, its process, what it found on the way."""

    run: RunDir
    spec: RunSpec
    pid: int | None = None
    started: bool = False
    warnings: list[str] = field(default_factory=list)
    preview: Preview = field(default_factory=Preview)
    reuse: Reuse | None = None
    """A rerun's: what it takes from its source (`crw flow rerun`)."""


def report_start(outcome: StartOutcome, *, json: bool, wait: bool, timeout: float | None) -> int:
    """What `start` (and `rerun`) print of the run they started, then with `wait` its
    outcome as `crw flow wait` reports it; the exit code."""
    state = f"--state {shell_word(outcome.run.root.parents[1])}"
    steps = None
    if outcome.spec.backend == "session":
        steps = f"crw flow next {outcome.spec.id} --wait 30 {state}"
    payload: dict[str, Any] = {
        "run": outcome.spec.id,
        "run_dir": str(outcome.run.root),
        "backend": outcome.spec.backend,
        "pool": outcome.spec.pool,
        "owner": outcome.spec.owner,
        "host": outcome.spec.host,
        "pid": outcome.pid,
        "started": outcome.started,
        "warnings": outcome.warnings,
        "inputs": outcome.spec.inputs,
        "rerun": _rerun_json(outcome.reuse),
        **outcome.preview.to_json(),
        "next": steps,
    }
    verb = "started" if outcome.started else "is starting"
    lines = [
        f"run {outcome.spec.id} {verb} ({outcome.spec.backend} backend, pool {outcome.spec.pool})"
    ]
    lines.append(f"  run directory: {outcome.run.root}")
    lines += _rerun_lines(outcome.reuse)
    lines += input_lines(outcome.spec.inputs)
    lines += outcome.preview.lines()
    lines += [f"  warning: {warning}" for warning in outcome.warnings]
    lines.append(f"  its process (pid {outcome.pid}) runs the calls on host {outcome.spec.host}")
    if steps is not None:
        lines.append(f"  take its steps with: {steps}")
    lines.append(f"  see it with: crw flow status {outcome.spec.id} {state}")
    if wait:  # `crw flow wait`'s progress and outcome after the start's lines
        return start_and_wait(outcome.run, payload, lines, json=json, timeout=timeout)
    emit(json, payload, "\n".join(lines))
    return 0


def _rerun_json(reuse: Reuse | None) -> dict[str, Any] | None:
    if reuse is None:
        return None
    return {
        "run": reuse.source,
        "node": reuse.start_from,
        "reused": list(reuse.nodes),
        "afresh": list(reuse.afresh),
    }


def _rerun_lines(reuse: Reuse | None) -> list[str]:
    if reuse is None:
        return []
    taken = ", ".join(reuse.nodes) or "nothing"
    return [
        f"  rerun of {reuse.source} from {reuse.start_from}: reuses {taken}; "
        f"runs {', '.join(reuse.afresh)} afresh"
    ]


def start_and_wait(
    run: RunDir, payload: dict[str, Any], lines: list[str], *, json: bool, timeout: float | None
) -> int:
    """`start --wait`: the start's lines, then wait for the run's outcome and exit
    by it; with --json one object, the start's with `wait` (`crw flow wait --json`'s)."""
    from crw.cli.read.wait import wait_run

    if not json:
        say("\n".join(lines))
    code, waited, line = wait_run(run, timeout=timeout, state=str(run.root.parents[1]), json=json)
    emit(json, payload | {"wait": waited}, line)
    return code
