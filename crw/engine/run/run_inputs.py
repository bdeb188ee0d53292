"""A run's inputs kept in its directory: what the start records, what a task reads.

The start writes each file input's text to the run's `inputs/NAME` before run.json
names it; every process of the run reads the values from run.json and those
copies, never from the command line or the file the start read, so a resume
renders the same task text as the first process did.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from crw.engine.config.inputs import RunInput
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec
from crw.errors import InputError, RefusedError


def write_inputs(run: RunDir, inputs: Mapping[str, RunInput]) -> dict[str, Any] | None:
    """Copy each file input's text into the run; the values run.json records (None:
    no inputs).

    Raises:
        RefusedError: a copy cannot be written.
    """
    if not inputs:
        return None
    for name, given in inputs.items():
        if given.text is None:
            continue
        try:
            run.inputs.mkdir(mode=0o700, exist_ok=True)
            with open(run.inputs / name, "x", encoding="utf-8") as out:
                out.write(given.text)
                out.flush()
                os.fsync(out.fileno())
        except OSError as err:
            raise RefusedError(
                f"cannot write {run.inputs / name}: {err.strerror or err}; "
                "make the run's directory writable and start again"
            ) from err
    return {name: given.recorded() for name, given in inputs.items()}


def task_inputs(spec: RunSpec, run: RunDir) -> dict[str, Any]:
    """What `{inputs.NAME}` stands for in the run's tasks: each recorded value, a file
    input's text read from the run's copy.

    Raises:
        InputError: a copy is missing or is not the file the start recorded.
    """
    return {
        name: given.text if given.path is not None else given.value
        for name, given in run_inputs(spec, run).items()
    }


def run_inputs(spec: RunSpec, run: RunDir) -> dict[str, RunInput]:
    """The run's inputs as the start filled them: a file input's text read from the
    run's copy (what a rerun takes by default).

    Raises:
        InputError: a copy is missing or is not the file the start recorded.
    """
    out: dict[str, RunInput] = {}
    for name, recorded in (spec.inputs or {}).items():
        if not isinstance(recorded, dict):
            out[name] = RunInput(value=recorded)
            continue
        copy = run.inputs / name
        try:
            data = copy.read_bytes()
        except OSError as err:
            raise InputError(
                f"run {spec.id}: cannot read its input {name} ({copy}: "
                f"{err.strerror or err}); restore the file the run was started with there"
            ) from None
        if "sha256:" + hashlib.sha256(data).hexdigest() != recorded.get("digest"):
            raise InputError(
                f"run {spec.id}: its input {name} ({copy}) is not the file it was started "
                f"with ({recorded.get('digest')}); restore that file there"
            )
        text = data.decode("utf-8", errors="replace")
        out[name] = RunInput(path=recorded.get("path"), digest=recorded.get("digest"), text=text)
    return out
