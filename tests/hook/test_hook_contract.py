"""The spawn hook's contract, through the real `crw flow hook spawn` process
(docs/codex.md, "What the hook promises"; no requirement names it): whatever it is
given it exits 0, prints valid JSON or nothing, keeps at most 4 MiB of stdin, and
says on stderr what it could not read; it denies only by the JSON Codex reads as
a denial. Codex runs it with no matcher, so an exit 2 would refuse every tool call
of every thread."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.hook.spawn_helpers import allow, bind, entry, hook_process, ledger_lines, spawn_input

INPUT_LIMIT = 4 * 1024 * 1024
"""The bound docs/codex.md states (`crw.binding.hook_input.INPUT_LIMIT`)."""
MESSAGE = "crw-flow-op: build.1/t2-a3\nCRW-ROLE: explorer\n\nDo the task."
DECIDED = {"model": "gpt-explore", "reasoning_effort": "low"}
UNDECIDED = "; the tool call goes ahead undecided"


def strict_json(text: bytes) -> Any:
    """`text` read as JSON codex reads: UTF-8, no NaN or Infinity."""

    def refuse(name: str) -> None:
        raise ValueError(name)

    return json.loads(text.decode("utf-8"), parse_constant=refuse)


def warning(done: subprocess.CompletedProcess[bytes]) -> str:
    """The one warning line the hook wrote on stderr (without its prefix)."""
    err = done.stderr.decode()
    assert err.startswith("crw: warning: ") and err.count("\n") == 1, err
    return err.removeprefix("crw: warning: ").rstrip("\n")


def with_token(call: dict[str, Any], token: bytes) -> bytes:
    """`call` as JSON with its tool_input's `x` written as `token`, as is."""
    sent = call | {"tool_input": call["tool_input"] | {"x": "@@"}}
    return json.dumps(sent).encode().replace(b'"@@"', token)


@pytest.mark.parametrize(
    ("args", "env_state", "named"),
    [
        (["--stat", "/x"], True, "--stat /x (--stat: did you mean --state?)"),
        (["--json"], True, "--json"),
        (["--state", "{state}", "--json"], False, "--json"),
    ],
)
def test_an_argument_the_hook_does_not_take_is_a_warning_and_the_call_is_decided(
    tmp_path: Path, args: list[str], env_state: bool, named: str
) -> None:
    """A typo in the hook's command (`--stat`) or an option it does not take
    (`--json`) is no input error (exit 2 would refuse every tool call): the hook
    says what to fix and decides the call with the state directory it finds."""
    bind(tmp_path)
    call = spawn_input(MESSAGE)
    argv = [arg.format(state=tmp_path) for arg in args]
    env = {"CRW_STATE": str(tmp_path)} if env_state else {}
    done = hook_process(json.dumps(call).encode(), *argv, env=env)
    assert done.returncode == 0
    assert strict_json(done.stdout) == allow(call["tool_input"] | DECIDED)
    assert ledger_lines(tmp_path) == [entry(op="build.1/t2")]
    said = warning(done)
    assert said.startswith(f"crw flow hook spawn ignores {named}: it takes one --state DIR only")
    assert "config.toml" in said


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"[" * 100_000, id="array-100000-deep"),
        pytest.param(b'{"a":' * 50_000, id="object-50000-deep"),
        pytest.param(
            with_token(spawn_input(MESSAGE), b"[" * 150 + b"]" * 150), id="spawn-150-deep"
        ),
    ],
)
def test_input_nested_too_deep_goes_ahead_undecided(tmp_path: Path, raw: bytes) -> None:
    bind(tmp_path)
    done = hook_process(raw, "--state", str(tmp_path))
    assert (done.returncode, done.stdout, ledger_lines(tmp_path)) == (0, b"", [])
    assert warning(done).endswith(UNDECIDED)


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(b'"\\ud800"', id="lone-surrogate"),
        pytest.param(b'"\xff\xfe"', id="invalid-utf8"),
        pytest.param(b"1" * 5000, id="5000-digit-integer"),
        pytest.param(b"NaN", id="NaN"),
        pytest.param(b"Infinity", id="Infinity"),
        pytest.param(b"-Infinity", id="minus-Infinity"),
        pytest.param(b"1e999", id="out-of-range"),
    ],
)
def test_a_spawn_it_cannot_read_goes_ahead_undecided(tmp_path: Path, token: bytes) -> None:
    """A bound owner's spawn the hook cannot read strictly, or could not write back
    as JSON codex reads, is neither decided nor recorded: no traceback, no reply
    with NaN in it, one warning."""
    bind(tmp_path)
    done = hook_process(with_token(spawn_input(MESSAGE), token), "--state", str(tmp_path))
    assert (done.returncode, done.stdout, ledger_lines(tmp_path)) == (0, b"", [])
    assert warning(done).endswith(UNDECIDED)


def test_a_huge_integer_is_not_read_whatever_pythons_own_limit(tmp_path: Path) -> None:
    """The hook bounds an integer's digits itself (4300): with Python's own limit
    lifted (PYTHONINTMAXSTRDIGITS=0 in codex's environment) a long integer would
    cost time quadratic in its digits, on every tool call."""
    bind(tmp_path)
    raw = with_token(spawn_input(MESSAGE), b"9" * 4301)
    done = hook_process(raw, "--state", str(tmp_path), env={"PYTHONINTMAXSTRDIGITS": "0"})
    assert (done.returncode, done.stdout, ledger_lines(tmp_path)) == (0, b"", [])
    assert warning(done).endswith(UNDECIDED)


def test_no_stdin_is_a_warning(tmp_path: Path) -> None:
    """A hook run with its stdin closed reads nothing and says so."""
    bind(tmp_path)
    done = hook_process(None, "--state", str(tmp_path))
    assert (done.returncode, done.stdout, ledger_lines(tmp_path)) == (0, b"", [])
    assert warning(done).startswith("cannot read the hook's input")


def test_an_error_of_its_own_is_a_warning_and_the_call_goes_ahead(tmp_path: Path) -> None:
    """What goes wrong on the hook's side (here: a `cwd` with a NUL, which the
    repository lookup for the state directory refuses) is no traceback."""
    bind(tmp_path)
    call = spawn_input(MESSAGE) | {"cwd": "/x\u0000y"}
    done = hook_process(json.dumps(call).encode())
    assert (done.returncode, done.stdout, ledger_lines(tmp_path)) == (0, b"", [])
    assert warning(done).startswith("the spawn hook failed (ValueError: ")


@pytest.mark.parametrize("tool_input", [[1, 2], "spawn", None, 3])
def test_a_spawn_whose_tool_input_is_no_object_goes_ahead_as_sent(
    tmp_path: Path, tool_input: object
) -> None:
    """No reply: an "allow" would replace what was sent by model and effort alone."""
    bind(tmp_path)
    call = spawn_input(MESSAGE) | {"tool_input": tool_input}
    done = hook_process(json.dumps(call).encode(), "--state", str(tmp_path))
    assert (done.returncode, done.stdout, ledger_lines(tmp_path)) == (0, b"", [])
    assert "tool_input is" in warning(done)


@pytest.mark.parametrize(
    ("fork_context", "denied"),
    [("true", True), (1, True), ("false", True), ({}, True), (None, False), (False, False)],
)
def test_fork_context_other_than_false_is_refused_as_a_full_history_fork(
    tmp_path: Path, fork_context: object, denied: bool
) -> None:
    """spec: HOOK-3 (codex takes only a boolean: a "true" must not slip through)"""
    bind(tmp_path)
    call = spawn_input(MESSAGE, fork_context=fork_context)
    done = hook_process(json.dumps(call).encode(), "--state", str(tmp_path))
    assert (done.returncode, done.stderr) == (0, b"")
    reply = strict_json(done.stdout)["hookSpecificOutput"]
    assert reply["permissionDecision"] == ("deny" if denied else "allow")
    (line,) = ledger_lines(tmp_path)
    assert line["refusal"] == ("full_history_fork_refused" if denied else None)


@pytest.mark.parametrize(("size", "decided"), [(INPUT_LIMIT, True), (INPUT_LIMIT + 1, False)])
def test_input_over_the_bound_goes_ahead_undecided(
    tmp_path: Path, size: int, decided: bool
) -> None:
    """The hook keeps 4 MiB of stdin; a larger input is read to its end and
    dropped (codex is not cut off mid-write), and the call goes ahead."""
    bind(tmp_path)
    call = spawn_input(MESSAGE)
    pad = size - len(json.dumps(call | {"pad": ""}).encode())
    raw = json.dumps(call | {"pad": "p" * pad}).encode()
    assert len(raw) == size
    done = hook_process(raw, "--state", str(tmp_path))
    assert done.returncode == 0
    if decided:
        assert done.stderr == b""
        assert strict_json(done.stdout) == allow(call["tool_input"] | DECIDED)
        assert ledger_lines(tmp_path) == [entry(op="build.1/t2")]
    else:
        assert (done.stdout, ledger_lines(tmp_path)) == (b"", [])
        assert warning(done) == f"the hook's input is over {INPUT_LIMIT} bytes{UNDECIDED}"
