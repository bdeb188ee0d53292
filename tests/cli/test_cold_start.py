"""The owner's commands start cold in a fresh process on every call: `crw flow next`
and `crw flow status` import what they need, and the command lines they take
without the command tree mean what they mean to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crw.cli.app import app
from crw.cli.hot import parse, parse_serve
from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import UnknownRow
from tests.cli.conftest import EXAMPLES, Crw, imported, wait_for_exit

NOT_NEEDED = (
    "cyclopts",
    "pydantic",
    "jsonschema",
    "trio",
    "crw.host",
    "pygit2",
    "filelock",
    "secrets",
    "uuid",
)
"""What reading a run no process holds needs none of: the command tree, the row
models, the schema validator, the event loop, the host client, git, file locks,
the makers of fresh ids (secrets loads OpenSSL for hmac)."""


def ended_run(crw: Crw) -> RunDir:
    """A run of fix-issue.toml that paused (no host) and then ended: the journal
    holds its started, paused and ended rows; no process holds it."""
    out = crw.start(str(EXAMPLES / "fix-issue.toml"), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    last = len(run.journal.read_bytes().splitlines())
    body = encode_body(UnknownRow.model_validate({"row": "ended", "status": "completed"}))
    with open(run.journal, "ab") as journal:
        journal.write(encode_batch(last + 1, "2026-11-30T00:00:00.000000Z", [body]))
    return run


@pytest.mark.parametrize("command", ["next", "status"])
def test_reading_an_ended_run_imports_neither_the_command_tree_nor_models_nor_host(
    crw: Crw, command: str
) -> None:
    """`next` and `status` of a finished run answer it (CMD-NEXT-1) without the
    command tree (cyclopts), pydantic, jsonschema, Trio or the host client."""
    run = ended_run(crw)
    result, modules = imported(crw, "flow", command, run.id, "--state", str(crw.state), "--json")
    assert result.code == 0
    answer = json.loads(result.stdout)
    assert answer["state"] == "ended" and answer["run"] == run.id
    assert [m for m in modules if m.startswith(NOT_NEEDED)] == []


def test_status_of_an_ended_run_reads_no_step_bus_and_lists_no_runs(crw: Crw) -> None:
    """`status` reads the journal and run.json only: it imports none of the step bus
    (`next`'s), the owner's inbox or `list`'s table (a big run's cold status pays
    for every module it loads)."""
    run = ended_run(crw)
    result, modules = imported(crw, "flow", "status", run.id, "--state", str(crw.state), "--json")
    assert result.code == 0 and json.loads(result.stdout)["state"] == "ended"
    needless = ("crw.bus", "crw.cli.read.list", "crw.engine.next_")
    assert [m for m in modules if m.startswith(needless)] == []


def test_the_hot_path_takes_the_plain_command_lines() -> None:
    """The plain forms the owner types are taken without the command tree."""
    assert parse(["flow", "next", "r", "--wait", "30", "--json"]) == (
        "next",
        {"run": "r", "wait": 30.0, "state": None, "json": True},
    )
    assert parse(["flow", "status", "--json", "r", "--state", "s", "--all"]) == (
        "status",
        {"run": "r", "state": "s", "json": True, "all_calls": True, "results": False},
    )
    assert parse(["flow", "status", "r", "--results"]) == (
        "status",
        {"run": "r", "state": None, "json": False, "all_calls": False, "results": True},
    )
    assert parse(["flow", "_run", "r", "--state", "s"]) == ("_run", {"run": "r", "state": "s"})
    assert parse(["flow", "_run", "r"]) == ("_run", {"run": "r", "state": None})


def test_every_other_command_line_goes_to_the_command_tree() -> None:
    """Help, errors and other spellings are the command tree's (cyclopts) alone."""
    for argv in (
        ["flow", "next", "--help"],
        ["flow", "status", "r", "-h"],
        ["flow", "next", "r", "--wait", "-1"],
        ["flow", "next", "r", "--wait", "1e3"],
        ["flow", "next", "r", "--wait", "nan"],
        ["flow", "status", "r", "--wait", "1"],
        ["flow", "next", "r", "--all"],
        ["flow", "status", "r", "--json", "--json"],
        ["flow", "status", "r", "r2"],
        ["flow", "status", "--state", "s"],
        ["flow", "status", "r", "--state"],
        ["flow", "status", "r", "--state=s"],
        ["flow", "status", "--", "r"],
        ["flow", "_run", "r", "--json"],
        ["flow", "_run", "--state", "s"],
        ["flow", "start", "w.toml", "--dry-run"],
        ["flow", "start", "w.toml", "--input", "a=1"],
        ["flow", "start", "w.toml", "--backend", "other"],
        ["flow", "start", "w.toml", "--owner", "a\nb"],
        ["flow", "dispatched", "r", "c.1", "--failed", "out", "--k", "1", "--attempt", "1"],
        ["flow", "dispatched", "r", "c.1", "--agent", "a", "--k", "1"],
        ["flow", "dispatched", "r", "c.1", "--agent", "a", "--k", "1.0", "--attempt", "1"],
        ["flow", "resume", "r", "--no-detach"],
        ["flow", "answer", "r", "c.1", "--retry", "--retry"],
        ["flow", "list"],
        ["--version"],
    ):
        assert parse(argv) is None, argv


TOKENS = st.sampled_from(
    [
        *("r", "r 2", "start", "schema", "--json", "--all", "--results", "--state", "s"),
        "--wait",
        *("0", "007", "2.5", "1.", "-1", "1e3", "", "-h", "--help", "--version", "--"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["next", "status", "_run"]), st.lists(TOKENS, max_size=6))
def test_a_command_line_the_hot_path_takes_means_the_same_to_the_command_tree(
    verb: str, tokens: list[str]
) -> None:
    """Whatever the hot path takes, cyclopts parses to the same command and the same
    arguments, defaults included: the two cannot drift apart."""
    argv = ["flow", verb, *tokens]
    taken = parse(argv)
    if taken is None:
        return
    command, bound, _ = app.parse_args(argv, exit_on_error=False, print_error=False)
    bound.apply_defaults()
    name = {"run_process": "_run"}.get(command.__name__, command.__name__.rstrip("_"))
    assert (name, dict(bound.arguments)) == taken


VERBS = ("start", "dispatched", "resume", "pause", "cancel", "answer", "shadow", "call", "wait")
CHUNKS = st.sampled_from(
    [
        *(["r"], ["build.1"], ["w.toml"], ["a\u202eb"], ["-x"], [""], ["--"], ["--help"]),
        *(["--json"], ["--trace"], ["--wait"], ["--detach"], ["--no-detach"], ["--dry-run"]),
        *(["--retry"], ["--skip"], ["--abort"], ["--restart"], ["--no-resume"]),
        *(["--answer-only"], ["--transcript"], ["--state", "s"], ["--state"]),
        *(["--wait", "30"], ["--wait", "2.5"], ["--wait", "-1"], ["--wait", "1e3"]),
        *(["--agent", "t-7"], ["--agent", "a\nb"], ["--agent", ""], ["--failed", "no"]),
        *(["--k", "1"], ["--k", "0"], ["--k", "1.5"], ["--attempt", "2"], ["--attempt", "x"]),
        *(["--owner", "o"], ["--owner", "o\tp"], ["--backend", "session"]),
        *(["--backend", "app-server"], ["--backend", "codex"], ["--host", "unix:h.sock"]),
        *(["--codex-bin", "/bin/codex"], ["--db", "postgresql://u@h/d"], ["--input", "a=1"]),
        *(["--timeout", "3"], ["--timeout", "0.5"], ["--timeout", "-2"], ["--state=s"]),
    ]
)


BASE = {
    "start": [["w.toml"]],
    "dispatched": [["r"], ["build.1"], ["--agent", "t-7"], ["--k", "1"], ["--attempt", "2"]],
    "resume": [["r"]],
    "pause": [["r"]],
    "cancel": [["r"]],
    "answer": [["r"], ["build.1"], ["--retry"]],
    "shadow": [["r"]],
    "call": [["r"], ["build.1"]],
    "wait": [["r"]],
}
"""A plain form of each verb, which the drawn chunks are mixed into."""


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """`flow VERB ...`: the verb's plain form, a part of it left out now and then,
    and drawn chunks, in any order."""
    verb = draw(st.sampled_from(VERBS))
    base = [chunk for chunk in BASE[verb] if draw(st.integers(0, 9))]
    chunks = draw(st.permutations(base + draw(st.lists(CHUNKS, max_size=3))))
    return ["flow", verb, *(token for chunk in chunks for token in chunk)]


@settings(max_examples=600, deadline=None)
@given(command_lines())
def test_the_hot_forms_of_a_runs_life_mean_the_same_to_the_command_tree(
    argv: list[str],
) -> None:
    """`start`, `dispatched`, `resume`, `pause`, `cancel`, `answer`, `shadow`, `call`
    and `wait` as the hot path takes them bind as cyclopts binds them, defaults
    included; what it does not take is the tree's."""
    taken = parse(argv)
    if taken is None:
        return
    command, bound, _ = app.parse_args(argv, exit_on_error=False, print_error=False)
    bound.apply_defaults()
    assert (command.__name__, dict(bound.arguments)) == taken


def test_the_hot_path_takes_the_plain_forms_the_owner_and_the_tests_type() -> None:
    """The forms the owner's skill and the suite's helpers run are taken."""
    assert parse(["flow", "start", "w.toml", "--owner", "o", "--state", "s", "--json"]) == (
        "start",
        {
            "workflow": "w.toml",
            "backend": "session",
            "owner": "o",
            "host": None,
            "codex_bin": None,
            "trace": False,
            "inputs": None,
            "input_files": None,
            "dry_run": False,
            "wait": False,
            "timeout": None,
            "db": None,
            "state": "s",
            "json": True,
        },
    )
    report = ["r", "build.1", "--agent", "t-7", "--k", "1", "--attempt", "2", "--wait", "20"]
    assert parse(["flow", "dispatched", *report]) == (
        "dispatched",
        {
            "run": "r",
            "call": "build.1",
            "agent": "t-7",
            "failed": None,
            "k": 1,
            "attempt": 2,
            "wait": 20.0,
            "state": None,
            "json": False,
        },
    )
    assert parse(["flow", "resume", "r", "--detach", "--json"]) == (
        "resume",
        {"run": "r", "detach": True, "db": None, "state": None, "json": True},
    )
    assert parse(["flow", "answer", "r", "build.1", "--skip"]) is not None
    assert parse(["flow", "shadow", "r", "--json"]) is not None
    assert parse(["flow", "call", "r", "build.1"]) is not None
    assert parse(["flow", "pause", "r"]) is not None
    assert parse(["flow", "cancel", "r", "--wait", "5"]) is not None


SERVE_TOKENS = st.sampled_from(
    [
        *("--socket", "--codex-home", "--models", "s.sock", "home", "a,b", ""),
        *("-h", "--help", "--", "--socket=s", "--json", "x y"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(SERVE_TOKENS, max_size=7))
def test_a_serve_command_line_the_hot_path_takes_means_the_same_to_the_command_tree(
    tokens: list[str],
) -> None:
    """`host sim serve` as the hot path takes it binds as cyclopts binds it."""
    argv = ["host", "sim", "serve", *tokens]
    taken = parse_serve(argv)
    if taken is None:
        return
    command, bound, _ = app.parse_args(argv, exit_on_error=False, print_error=False)
    bound.apply_defaults()
    assert (command.__name__, dict(bound.arguments)) == ("serve", taken)


def test_the_hot_path_takes_the_plain_serve_command_lines() -> None:
    """The launcher's form is taken; help, errors and other spellings are not."""
    assert parse_serve(["host", "sim", "serve", "--socket", "s", "--codex-home", "h"]) == {
        "socket": "s",
        "codex_home": "h",
        "models": None,
    }
    assert parse_serve(["host", "sim", "serve", "--models", "a,b", "--socket", "s"]) == {
        "socket": "s",
        "codex_home": None,
        "models": "a,b",
    }
    for argv in (
        ["host", "sim", "serve"],
        ["host", "sim", "serve", "--help"],
        ["host", "sim", "serve", "--codex-home", "h"],
        ["host", "sim", "serve", "--socket"],
        ["host", "sim", "serve", "--socket", "s", "--socket", "t"],
        ["host", "sim", "serve", "--socket=s"],
        ["host", "sim", "serve", "--socket", "s", "--models", ""],
        ["host", "sim", "owner"],
        ["flow", "sim", "serve", "--socket", "s"],
    ):
        assert parse_serve(argv) is None, argv


def test_serving_the_simulated_host_imports_no_command_tree() -> None:
    """A simulated host's start (`crw host sim serve`, what `launch_sim` runs) takes
    the hot path: cyclopts is about a third of its start's CPU."""
    code = (
        "import sys; from crw.cli.hot import hot_command; "
        "command = hot_command(['host', 'sim', 'serve', '--socket', 's']); "
        "import crw.host.sim.serve; "
        "print(command is not None, sorted(m for m in sys.modules if m.startswith('cyclopts')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True []"
