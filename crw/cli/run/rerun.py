"""`crw flow rerun RUN --from NODE`: a new run that reuses RUN's answers up to NODE.

Every refusal comes before anything is written, as a start's do: a source run
that does not exist, a node that does not exist, a node NODE needs that did not
complete in RUN, an answer an edited workflow's schema refuses (`plan_reuse`), a
source workflow file that changed since RUN started (pass it as `--workflow`),
then every check `start` makes. The new run is started as `start` starts one
(`start_run`): on the source's backend, host, owner and codex binary, with the
source's inputs unless `--input`/`--input-file` give one anew; its run.json names
its source (`rerun`) and its reused.json keeps the rows its process commits first.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from crw.cli.run.start import start_run
from crw.cli.run.start_report import report_start
from crw.engine.config.workflow import load_workflow
from crw.engine.run.rerun import plan_reuse
from crw.engine.run.run_inputs import run_inputs
from crw.engine.run.rundir import find_run, resolve_state
from crw.engine.run.runspec import read_run_spec
from crw.errors import InputError
from crw.journal.stores import read_run_journal
from crw.settings import MAX_FILE_BYTES_ENV, file_limit, max_file_bytes


def rerun_command(
    run: str,
    *,
    start_from: str,
    workflow: str | None,
    inputs: list[str] | None,
    input_files: list[str] | None,
    wait: bool,
    timeout: float | None,
    state: str | None,
    json: bool,
) -> int:
    if timeout is not None and not wait:
        raise InputError("--timeout is how long --wait waits: pass --wait too, or drop --timeout")
    state_dir = resolve_state(state, os.environ, Path.cwd())
    source_dir = find_run(state_dir, run)
    source = read_run_spec(source_dir.run_json)
    fix = f"crw flow rerun {source.id}"
    if workflow is not None:
        fix += f" --workflow {shlex.quote(workflow)}"
    if state is not None:
        fix += f" --state {shlex.quote(state)}"
    path = Path(workflow) if workflow is not None else Path(source.workflow.path)
    # The source's raised file limit holds for its rerun unless the shell sets one.
    environ = dict(os.environ)
    if source.max_file_bytes is not None:
        environ.setdefault(MAX_FILE_BYTES_ENV, str(source.max_file_bytes))
    with file_limit(max_file_bytes(environ)):
        loaded = load_workflow(path)
    if workflow is None and loaded.digest != source.workflow.digest:
        raise InputError(
            f"run {source.id}: its workflow {path} changed since the run started; "
            f"rerun on the edited file: {fix} --workflow {shlex.quote(str(path))} "
            f"--from {start_from}"
        )
    rows = read_run_journal(source_dir.journal).rows
    reuse = plan_reuse(source.id, rows, loaded, start_from, fix)
    settings = source.settings or {}
    outcome = start_run(
        path,
        backend=source.backend,
        owner=source.owner,
        host=source.host,
        state=state,
        environ=environ,
        codex_bin=source.codex_bin,
        trace=bool(settings.get("trace")),
        inputs=inputs or (),
        input_files=input_files or (),
        source_inputs=run_inputs(source, source_dir),
        reuse=reuse,
        db=source.journal_db,  # the source's store (None: $CRW_DB, else a file)
    )
    return report_start(outcome, json=json, wait=wait, timeout=timeout)
