"""Errors under --json are JSON: `{"error": what, "fix": how}` on stdout, nothing on
stderr, the exit code a person gets; and a missing value names its parameter and
what it means. Real `crw` processes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from crw.cli.app import app
from crw.cli.output import error_parts
from crw.journal.rows import Ended, Started
from tests.cli.conftest import Crw
from tests.cli.test_fault_views import commit
from tests.cli.test_next import RUN, new_run


def _json_commands(tree: object = app, chain: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the tree that takes --json."""
    for name in tree:  # type: ignore[attr-defined]
        sub = tree[name]  # type: ignore[index]
        if name.startswith("-") or sub is tree:
            continue
        if sub.default_command is not None:
            names = [n for argument in sub.assemble_argument_collection() for n in argument.names]
            if "--json" in names:
                yield (*chain, name)
        yield from _json_commands(sub, (*chain, name))


JSON_COMMANDS = sorted(_json_commands())


def _error(result: object) -> dict[str, object]:
    assert result.stderr == "", result.stderr  # type: ignore[attr-defined]
    value = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert isinstance(value, dict) and set(value) == {"error", "fix"}, value
    return value


def test_the_tree_has_the_commands_that_take_json() -> None:
    assert {("flow", "pause"), ("flow", "dispatched"), ("flow", "gc")} <= set(JSON_COMMANDS)


@pytest.mark.parametrize("chain", JSON_COMMANDS, ids=" ".join)
def test_a_command_line_error_under_json_is_a_json_object(crw: Crw, chain: tuple[str, ...]) -> None:
    result = crw(*chain, "--json", "--no-such-option")
    assert result.code == 2
    error = _error(result)
    assert error["error"] and f"crw {' '.join(chain)} --help" in str(error["fix"])


@pytest.mark.parametrize(
    "verb", ["pause", "cancel", "resume", "status", "next", "show", "watch", "shadow", "rm"]
)
def test_a_refusal_under_json_is_a_json_object_with_its_exit_code(crw: Crw, verb: str) -> None:
    """`status` and `next` run without the command tree (`crw.cli.hot`): the same."""
    result = crw("flow", verb, "nope", "--state", str(crw.state), "--json")
    assert result.code == 2
    assert _error(result) == {
        "error": f'run "nope" not found under {crw.state}/flow',
        "fix": f"list the runs with: crw flow list --state {crw.state}",
    }
    person = crw("flow", verb, "nope", "--state", str(crw.state))
    assert person.code == 2 and person.stdout == ""
    assert person.stderr == (
        f'crw: error: run "nope" not found under {crw.state}/flow; '
        f"list the runs with: crw flow list --state {crw.state}\n"
    )


def test_a_missing_flag_says_which_and_what_it_means(crw: Crw) -> None:
    result = crw("flow", "dispatched", "run-1", "build.1", "--attempt", "1")
    assert result.code == 2
    assert result.stderr == (
        "crw: error: crw flow dispatched: --k is missing (the step's turn k); "
        "pass --k K (see crw flow dispatched --help)\n"
    )
    empty = crw("flow", "dispatched", "run-1", "build.1", "--attempt", "1", "--k", "--json")
    assert empty.code == 2
    assert _error(empty) == {
        "error": "crw flow dispatched: --k needs a value (the step's turn k)",
        "fix": "pass --k K (see crw flow dispatched --help)",
    }
    no_run = crw("flow", "next")
    assert no_run.stderr == (
        "crw: error: crw flow next: RUN is missing (the run id, or the path of its run "
        "directory); pass it (see crw flow next --help)\n"
    )


@pytest.mark.parametrize(
    ("line", "parts"),
    [
        (
            "run r has ended (completed); there is nothing to pause; see it with: crw flow status",
            (
                "run r has ended (completed); there is nothing to pause",
                "see it with: crw flow status",
            ),
        ),
        ("no fix here", ("no fix here", None)),
        ("trailing; ", ("trailing; ", None)),
        (
            "run r has ended; start a new run: crw flow start w.toml --input 'n=x; y'",
            ("run r has ended", "start a new run: crw flow start w.toml --input 'n=x; y'"),
        ),
        ("no file '/tmp/a b'; check the path", ("no file '/tmp/a b'", "check the path")),
        ("the step's k; pass --k K", ("the step's k", "pass --k K")),
    ],
)
def test_an_error_line_splits_at_its_last_semicolon(
    line: str, parts: tuple[str, str | None]
) -> None:
    assert error_parts(line) == parts


def test_resume_of_an_ended_run_gives_an_action_as_its_fix(crw: Crw) -> None:
    """An ended run is refused (exit 1), and its `--json` fix is a command to run."""
    commit(new_run(crw), Started(backend="session", pid=1), Ended(status="completed"))
    state = str(crw.state)
    refused = crw("flow", "resume", RUN, "--state", state, "--json")
    assert refused.code == 1 and refused.stderr == ""
    assert refused.json() == {
        "error": f"run {RUN} ended (completed) and resumes no more",
        "fix": f"see its outcome with crw flow result {RUN} --state {state}, or run it "
        f"again from a node with crw flow rerun {RUN} --from NODE --state {state}",
    }
