"""A workflow over the default 1 MiB file limit, started with `$CRW_MAX_FILE_BYTES`
raised: every process of the run reads it with the limit its start recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit, waiting_for_no_host


def _big(tmp_path: Path) -> Path:
    """examples/fix-issue.toml with host_wait 0, padded past 1 MiB with comments."""
    path = waiting_for_no_host(tmp_path)
    path.write_text("# padding\n" * 110_000 + path.read_text())
    shutil.copytree(EXAMPLES / "schemas", tmp_path / "schemas", dirs_exist_ok=True)
    return path


def test_a_raised_limit_is_recorded_and_a_resume_without_it_reads_the_workflow(
    crw: Crw, tmp_path: Path
) -> None:
    workflow = _big(tmp_path)
    size = workflow.stat().st_size
    refused = crw.start(str(workflow), "--backend", "app-server", "--host", "unix:/nowhere.sock")
    assert refused.code == 2
    assert refused.json()["fix"].endswith(f"set CRW_MAX_FILE_BYTES={size} (bytes) or more")
    raised = crw.env | {"CRW_MAX_FILE_BYTES": str(size)}
    host = f"unix:{tmp_path / 'h.sock'}"
    result = crw.start(str(workflow), "--backend", "app-server", "--host", host, env=raised)
    assert result.code == 0, result.stderr
    run = RunDir(Path(result.json()["run_dir"]))
    assert json.loads(run.run_json.read_text())["max_file_bytes"] == size
    wait_for_exit(run.root)
    assert [r["row"] for r in read_journal(run.journal).rows] == ["started", "paused"]
    # A resume from a shell without the variable: its check and its run process read
    # the workflow with the recorded limit (its host is still away: paused again).
    resumed = crw("flow", "resume", result.json()["run"], "--state", str(crw.state), "--json")
    assert "larger than" not in resumed.stderr, resumed.stderr
    wait_for_exit(run.root)
    rows = read_journal(run.journal).rows
    assert [r["row"] for r in rows] == ["started", "paused", "started", "paused"]
