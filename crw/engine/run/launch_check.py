"""Why a resume of the run would be refused now, read before anything changes.

The run's process refuses a workflow file that changed since the run started (its
digest is run.json's), a launch refuses a recorded TMPDIR that cannot be put in
place, a resume refuses a mixed backend; and a launch whose process stopped
before its started row left its line (`launch_record`). A command that records
an answer without resuming the run (`answer --no-resume`) names what stands in
the way instead of a resume that would be refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from crw.engine.run.launch_record import read_failure
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, check_backend
from crw.engine.run.tmploc import recorded_problem
from crw.errors import CrwError
from crw.journal.replay import RunState

if TYPE_CHECKING:
    from crw.engine.config.workflow import Workflow


def changed_workflow(spec: RunSpec, workflow: Workflow) -> str | None:
    """The line a run process refuses with when the workflow file is not the one
    the run started with (any edit, a comment too), or None."""
    if workflow.digest == spec.workflow.digest:
        return None
    return (
        f"run {spec.id}: the workflow {spec.workflow.path} changed since the run "
        "started; restore the file the run started with"
    )


def resume_blocker(run_dir: RunDir, spec: RunSpec, run: RunState) -> str | None:
    """Why a resume of the run would be refused now (what and the fix), or None:
    its recorded TMPDIR, a mixed backend, its workflow file, else the line of its
    last launch that stopped before its started row. The workflow's parser (and
    its schema checks) is imported here: only `answer --no-resume` asks, and
    `answer`'s other paths read no workflow."""
    from crw.engine.config.workflow import load_workflow

    problem = recorded_problem(spec.env_overrides())
    if problem is not None:
        return f"run_env_unusable: run {spec.id}: {problem}"
    try:
        check_backend(run, spec)
        with spec.file_limit():
            changed = changed_workflow(spec, load_workflow(Path(spec.workflow.path)))
    except CrwError as err:
        return str(err)
    if changed is not None:
        return changed
    failure = read_failure(run_dir)
    return failure.reason if failure is not None else None
