"""`crw flow call RUN CALL` on real runs: the demo's finished session run (a
repair and a review round), and an App Server run on a simulated host that stays
up, whose answer holds rich markup and an escape sequence. Every process is a
real one, reaped by pid at teardown."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from crw.cli.demo.demo_git import BUILD_WRITES, FIX_WRITES
from crw.cli.read.call_transcript import transcript
from crw.host.sim.process import launch_sim, stop_sim
from tests.cli.conftest import Crw, Result
from tests.cli.test_hostile_text import hostile_run

pytestmark = pytest.mark.xdist_group("test_call")
"""One xdist worker runs the whole module: its tests share the module's runs."""

HOSTILE = "[bold red]BOOM[/] \u001b[31mred [link=http://x]y[/link]"
SCHEMA = {"type": "object", "required": ["note"], "properties": {"note": {"type": "string"}}}
WORKFLOW = (
    'name = "one"\n\n[[node]]\nid = "a"\nrole = "explorer"\ntask = "Say."\nschema = "s.json"\n'
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Crw, str]]:
    """The demo's session run, ended: its Crw and run id."""
    root = tmp_path_factory.mktemp("demo")
    (root / "tmp").mkdir()
    crw = Crw(root / "state", root / "tmp")
    try:
        done = crw("flow", "demo", "--state", str(crw.state), "--json")
        assert done.code == 0, done.stderr
        crw.pids.append(done.json()["host_pid"])
        yield crw, done.json()["run"]
    finally:
        crw.reap()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Crw, str]]:
    """An ended App Server run of one call on a simulated host that still serves,
    the call's answer HOSTILE: its Crw and run id."""
    root = tmp_path_factory.mktemp("served")
    (root / "tmp").mkdir()
    crw = Crw(root / "state", root / "tmp")
    (crw.state / "codex-home").mkdir(parents=True)
    (root / "wf.toml").write_text(WORKFLOW)
    (root / "s.json").write_text(json.dumps(SCHEMA))
    socket = root / "host.sock"
    host = launch_sim(socket, crw.state / "codex-home", root / "host.log")
    try:
        behaviour = {"text": json.dumps({"note": HOSTILE}), "seconds": 0}
        scripted = crw(
            "host", "sim", "script", "--socket", str(socket), "a.1", json.dumps(behaviour)
        )
        assert scripted.code == 0, scripted.stderr
        started = crw.start(
            str(root / "wf.toml"), "--backend", "app-server", "--host", f"unix:{socket}"
        )
        assert started.code == 0, started.stderr
        run = started.json()["run"]
        ended = crw("flow", "wait", run, "--state", str(crw.state), "--timeout", "120")
        assert ended.code == 0, ended.stdout + ended.stderr
        yield crw, run
    finally:
        stop_sim(host)
        crw.reap()


def call(crw: Crw, run: str, *args: str) -> Result:
    return crw("flow", "call", run, *args, "--state", str(crw.state))


def test_a_repaired_call_of_the_session_demo_as_json(demo: tuple[Crw, str]) -> None:
    """spec: CMD-START-1 (read from the run directory), STEP-14, STEP-17."""
    crw, run = demo
    done = call(crw, run, "build.1", "--json")
    assert done.code == 0, done.stderr
    view = done.json()
    assert (view["call"], view["backend"], view["state"], view["turns"]) == (
        "build.1",
        "session",
        "completed",
        2,
    )
    (attempt,) = view["attempts"]
    first, repair = attempt["steps"]
    assert first["packet"].endswith("steps/build.1/packet-t1-a1.md")
    assert first["packet_text"].startswith("# Task packet: build.1")
    assert (repair["action"], repair["repair"]) == ("send_input", True)
    assert [t["outcome"] for t in attempt["turns"]] == ["repair", "answered"]
    (fixed,) = view["repairs"]
    assert fixed["invalid_answer"] == '{"__invalid__": true}'
    assert fixed["errors"] and fixed["repaired_answer"] == view["answer"]["result"]
    turn_totals = sum(t["tokens"]["total"] for t in attempt["turns"])
    assert turn_totals == view["tokens"]["total"] > 0
    assert view["schema"]["source"] == "file"
    assert view["schema"]["path"].endswith("schemas/build.json")
    assert view["workspace"]["kind"] == "directory"
    assert [row["seq"] for row in view["rows"]] == sorted(row["seq"] for row in view["rows"])


def test_the_human_form_is_in_sections(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    done = call(crw, run, "build.1")
    assert done.code == 0, done.stderr
    for heading in ("call build.1 of run", "attempt 1", "tokens", "repair (turn 2", "answer"):
        assert heading in done.stdout
    assert "schema: file:" in done.stdout and "reasoning_output" in done.stdout


def test_a_review_call_shows_its_verdict(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    view = call(crw, run, "build.2", "--json").json()
    assert view["review"] == {"of": "build.1", "verdict": "reject", "findings": 1}
    assert view["schema"]["source"] == "review"


def test_answer_only_prints_the_answer(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    done = call(crw, run, "build.1", "--answer-only")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout) == call(crw, run, "build.1", "--json").json()["answer"]["result"]
    one_line = call(crw, run, "build.1", "--answer-only", "--json")
    assert one_line.json() == {"result": json.loads(done.stdout)}


def test_a_call_the_run_does_not_have_names_the_runs_calls(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    done = call(crw, run, "nope.1")
    assert done.code == 2
    assert done.stderr.count("\n") == 1
    assert '"nope.1"' in done.stderr and "plan.1" in done.stderr and "build.4" in done.stderr


def test_a_host_that_is_gone_gives_no_transcript_in_one_line(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    done = call(crw, run, "plan.1", "--transcript")
    assert done.code == 0, done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("the host cannot give it")]
    assert "cannot reach the host" in line and line.rstrip().endswith(")?")  # not wrapped
    view = call(crw, run, "plan.1", "--transcript", "--json").json()
    assert view["transcript"]["items"] == [] and view["transcript"]["error"]


def test_an_app_server_call_and_its_transcript_from_the_host(served: tuple[Crw, str]) -> None:
    crw, run = served
    done = call(crw, run, "a.1", "--transcript", "--json")
    assert done.code == 0, done.stderr
    view: dict[str, Any] = done.json()
    assert (view["backend"], view["state"]) == ("app-server", "completed")
    (turn,) = view["attempts"][0]["turns"]
    transcript = view["transcript"]
    assert transcript["error"] is None and transcript["turn_id"] == turn["turn_id"]
    kinds = [item["type"] for item in transcript["items"]]
    assert kinds[0] == "userMessage" and "agentMessage" in kinds
    assert view["answer"]["result"] == {"note": HOSTILE}
    (step,) = view["attempts"][0]["steps"]
    assert step["packet"] is None and step["input"].startswith("crw-flow-op: a.1/t1-a1")


def test_hostile_answer_text_is_printed_as_text(served: tuple[Crw, str]) -> None:
    """Rich markup in an answer is printed as the characters it is, and the escape
    sequence as its escape: nothing reaches the terminal it would obey."""
    crw, run = served
    done = call(crw, run, "a.1", "--transcript")
    assert done.code == 0, done.stderr
    assert "[bold red]BOOM[/]" in done.stdout and "[link=http://x]y[/link]" in done.stdout
    assert "\x1b" not in done.stdout


def test_an_executor_on_git_shows_its_crw_commit_and_the_files_it_changed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The git demo's build and fix calls: each one's crw.commit and the files it
    changed from the commit before it, read from the run's repository after the
    run released the worktree (spec: HARV-54)."""
    root = tmp_path_factory.mktemp("git")
    (root / "tmp").mkdir()
    crw = Crw(root / "state", root / "tmp")
    try:
        done = crw(
            "flow", "demo", "--git", "--backend", "app-server", "--json", "--state", str(crw.state)
        )
        assert done.code == 0, done.stderr
        crw.pids.append(done.json()["host_pid"])
        run = done.json()["run"]
        for name, writes in (("build.1", BUILD_WRITES), ("build.3", FIX_WRITES)):
            view = call(crw, run, name, "--json").json()
            workspace = view["workspace"]
            assert workspace["kind"] == "worktree" and workspace["branch"].endswith("/build.1")
            assert re.fullmatch("[0-9a-f]{40}", workspace["commit"]["commit"])
            assert workspace["commit"]["node_ref"].endswith("/nodes/build")
            assert workspace["changed_error"] is None
            assert {f["path"] for f in workspace["changed_files"]} == set(writes)
        human = call(crw, run, "build.3")
        assert "crw.commit: " in human.stdout and "tests/test_greet.py" in human.stdout
    finally:
        crw.reap()


def test_answer_only_of_a_call_with_no_answer_says_why(crw: Crw) -> None:
    run = hostile_run(crw)
    done = call(crw, run.id, "build.1", "--answer-only")
    assert done.code == 1
    assert (
        done.stdout.startswith("call build.1 of run nasty-")
        and "held (host_failure)" in done.stdout
    )
    error = call(crw, run.id, "build.1", "--answer-only", "--json").json()
    assert (error["state"], error["fix"]) == (
        "held",
        f"see why with: crw flow call {run.id} build.1 --state {crw.state}",
    )


def test_a_private_host_or_no_turn_gives_no_transcript_without_asking() -> None:
    assert transcript("codex", "th", "tu").error == (
        "the run's host was its own codex child, which ends with its process"
    )
    assert transcript("unix:/x.sock", None, None).error == "the call took no turn the rows name"
    gone = transcript("unix:/nonexistent/host.sock", "th", "tu")
    assert gone.items == () and gone.error is not None and "cannot reach the host" in gone.error
