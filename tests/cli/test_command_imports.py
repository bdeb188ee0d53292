"""The commands an owner (and every test and drill) runs most start cold, each a fresh
process: each imports what it needs and none of the heavy packages it does not
(bench/startup.py measures what each costs; docs/performance.md, "Command start-up").

The plain command lines of `start`, `dispatched`, `resume`, `pause`, `cancel`,
`answer`, `shadow`, `call` and `wait` run without the command tree (`crw.cli.hot`):
cyclopts is some 60 ms of each. `dispatched` reads no workflow for a call its rows
name and waits for its reply without Trio; a start outside every git checkout
never loads git, and a start (or a run) whose host is not there never loads the
host's framing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crw.engine.config.repo import may_hold_repository
from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import RowModel, Started
from tests.cli.conftest import Crw, imported, wait_for_exit, waiting_for_no_host

TREE = ("cyclopts",)
DISPATCHED_NOT_NEEDED = (
    "cyclopts",
    "trio",
    "jsonschema",
    "crw.engine.config.workflow",
    "crw.engine.steps.replies",
    "crw.journal.rows",
    "pygit2",
    "wsproto",
)
"""What a report on a call its rows name needs none of: the command tree, the event
loop, the workflow's parser and its schema checks, the replies' rules and the row
models they read, git, the host's framing."""
START_NOT_NEEDED = (
    "cyclopts",
    "pygit2",
    "wsproto",
    "h11",
    "crw.host.client",
    "crw.host.websocket",
)
"""What a start outside every git checkout, whose host is not there, needs none of:
the command tree, git, the WebSocket framing and the host client."""


def paused_run(crw: Crw) -> RunDir:
    """A session run of fix-issue.toml paused host_unavailable (no host); its process
    exited."""
    out = crw.start(str(waiting_for_no_host(crw.state.parent)), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    return run


def test_a_report_on_a_call_its_rows_name_imports_neither_tree_nor_trio_nor_workflow(
    crw: Crw,
) -> None:
    """`dispatched` of a call the run's rows name, to a run no process holds, is
    answered queued (CMD-DISP-7) without any of DISPATCHED_NOT_NEEDED."""
    workflow = waiting_for_no_host(crw.state.parent)
    run = RunDir.of(crw.state, "r1")
    run.create()
    ref = WorkflowRef(path=str(workflow), digest=load_workflow(workflow).digest)
    write_run_spec(run.run_json, RunSpec(id="r1", workflow=ref, backend="session", pool=2))
    rows = [
        Started(backend="session"),
        RowModel.model_validate({"row": "prepared", "call": "build.1"}),
    ]
    with open(run.journal, "ab") as journal:
        journal.write(encode_batch(1, "2026-12-06T00:00:00Z", [encode_body(r) for r in rows]))
    report = ("build.1", "--agent", "a", "--k", "1", "--attempt", "1", "--wait", "0")
    result, modules = imported(
        crw, "flow", "dispatched", "r1", *report, "--state", str(crw.state), "--json"
    )
    assert result.code == 1 and json.loads(result.stdout)["reply"] == "queued", result.stderr
    assert [m for m in modules if m.startswith(DISPATCHED_NOT_NEEDED)] == []


def test_a_start_outside_every_checkout_and_host_loads_neither_tree_nor_git_nor_framing(
    crw: Crw,
) -> None:
    """A session start in plain directories whose host is not there (it pauses
    host_unavailable) imports none of START_NOT_NEEDED."""
    if may_hold_repository(crw.state.parent):
        pytest.skip("the test's directory is inside a git checkout")
    workflow = waiting_for_no_host(crw.state.parent)
    start = ("flow", "start", str(workflow), "--owner", "o", "--state", str(crw.state), "--json")
    result, modules = imported(crw, *start, cwd=crw.state.parent)
    out = result.json()
    assert result.code == 0 and out["started"] is True, result.stderr
    assert out["workspaces"]["repository"] is None
    wait_for_exit(Path(out["run_dir"]))
    assert [m for m in modules if m.startswith(START_NOT_NEEDED)] == []


@pytest.mark.parametrize(
    "command",
    [
        ("resume", "RUN", "--detach", "--json"),
        ("pause", "RUN", "--wait", "0", "--json"),
        ("cancel", "RUN", "--wait", "0"),
        ("answer", "RUN", "build.1", "--retry", "--json"),
        ("shadow", "RUN", "--json"),
        ("call", "RUN", "build.1", "--json"),
        ("wait", "RUN", "--timeout", "0"),
    ],
    ids=lambda command: command[0],
)
def test_the_plain_command_lines_of_a_runs_life_run_without_the_command_tree(
    crw: Crw, command: tuple[str, ...]
) -> None:
    """Each plain form runs (whatever it answers: a refusal included) without
    cyclopts, as the command tree would run it (test_cold_start.py)."""
    run = paused_run(crw)
    args = [run.id if arg == "RUN" else arg for arg in command]
    result, modules = imported(crw, "flow", *args, "--state", str(crw.state))
    assert "Traceback" not in result.stderr and result.code in (0, 1, 2, 4), (
        result.stderr
    )  # 4: wait, paused
    assert [m for m in modules if m.startswith(TREE)] == []
    wait_for_exit(run.root)


ANSWER_NOT_NEEDED = (
    "cyclopts",
    "trio",
    "jsonschema",
    "filelock",
    "crw.engine.config.workflow",
    "crw.actors.run_end",
    "crw.workspace",
)
"""What an answer that records nothing needs none of: the command tree, the event
loop, the workflow's parser and its schema checks (only `--no-resume` reads the
workflow, `launch_check.resume_blocker`; only a resume on a machine without the
run's directory, `resume_here`), and the end of an aborted run (its workspaces'
release and the owner's file lock)."""


def test_an_answer_refused_reads_no_workflow_and_ends_no_run(crw: Crw) -> None:
    """`answer` of a call that is not held (refused, exit 1) imports none of
    ANSWER_NOT_NEEDED."""
    run = paused_run(crw)
    answer = ("flow", "answer", run.id, "build.1", "--retry", "--state", str(crw.state), "--json")
    result, modules = imported(crw, *answer)
    assert result.code == 1 and "error" in result.json(), result.stderr
    assert [m for m in modules if m.startswith(ANSWER_NOT_NEEDED)] == []


NEXT_NOT_NEEDED = (
    "cyclopts",
    "pydantic",
    "trio",
    "jsonschema",
    "tomli",
    "shutil",
    "crw.cli.owner.hook",
    "crw.journal.rows",
    "crw.engine.config.workflow",
)
"""What `next` and `status` of a run need none of: the command tree, the row models,
the event loop, the workflow and its schema checks; the TOML parser while the Codex
home holds no config.toml (`crw.codex_config.read_config`), the holder's cleanup of
the step bus (`crw.bus.live.open_index`, shutil), the spawn hook's module."""


@pytest.mark.parametrize("verb", ["next", "status"])
def test_next_and_status_import_no_model_no_loop_no_parser_they_do_not_use(
    crw: Crw, verb: str
) -> None:
    """`next` and `status` of a paused run (each the owner's or a test's poll)
    import none of NEXT_NOT_NEEDED."""
    run = paused_run(crw)
    assert not (crw.state / "codex-home" / "config.toml").exists()
    result, modules = imported(crw, "flow", verb, run.id, "--state", str(crw.state), "--json")
    assert result.code == 0 and result.json()["run"] == run.id, result.stderr
    assert [m for m in modules if m.startswith(NEXT_NOT_NEEDED)] == []
