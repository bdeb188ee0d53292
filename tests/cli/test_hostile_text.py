"""Every read command prints any text a run's journal holds: a lone surrogate (an
answer's `"\\ud800"`), a bidi override, ESC, NUL, whatever the locale. JSON stays
JSON a strict reader reads, a terminal gets no control character it would obey,
and a timeline stays well-formed XML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import UnknownRow
from tests.cli.conftest import Crw, Result

NASTY = "a\ud800b csi\x9b1m \u202eevil\u202c \x1b[31mred\x1b[0m nul\x00 bel\x07 cr\r é ✓"
"""What a host may answer: a lone surrogate, a bidi override and its end, ESC
sequences, NUL, BEL, CR, and Unicode a terminal shows as it is."""
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""What terminal text never holds raw (tab and newline are text)."""
LOCALES = {
    "utf-8": {},
    "C": {"LANG": "C"},
    "ascii": {"LC_ALL": "C", "PYTHONUTF8": "0"},
}
"""The environments a command runs in: the test's own (UTF-8), the C locale (Python's
UTF-8 mode, surrogateescape) and plain ASCII (UTF-8 mode off)."""


def hostile_run(crw: Crw) -> RunDir:
    """An ended session run whose call completed with NASTY in its result and its
    raw text, and whose other call was held with NASTY in its error; its rows
    stamped in the last seconds, so a plain `list` shows it whatever today's date."""
    run = RunDir.of(crw.state, "nasty-20261201-000000-abcd")
    run.create()
    rows = [
        {"row": "started", "backend": "session", "pid": 1},
        {"row": "prepared", "call": "explore.1", "node": "explore", "role": "explorer"},
        {
            "row": "completed",
            "call": "explore.1",
            "result": {"summary": NASTY, NASTY: [NASTY]},
            "raw_text": NASTY,
            "tokens": {"input": 9, "output": 3, "total": 12},
        },
        {"row": "prepared", "call": "build.1", "node": "build", "role": "builder"},
        {"row": "held", "call": "build.1", "reason": "host_failure", "error": NASTY},
        {"row": "ended", "status": "failed"},
    ]
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=len(rows))
    with open(run.journal, "ab") as journal:
        for seq, row in enumerate(rows, start=1):
            body = encode_body(UnknownRow.model_validate(row))
            stamp = first + timedelta(seconds=seq)
            journal.write(encode_batch(seq, f"{stamp:%Y-%m-%dT%H:%M:%S}.000000Z", [body]))
    return run


def read(crw: Crw, locale: str, *args: str) -> Result:
    """`crw flow ARGS --state S` in `locale`, PYTHONIOENCODING unset; its output
    read as the UTF-8 bytes it must be."""
    import subprocess
    import sys

    env = {k: v for k, v in crw.env.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG")}
    done = subprocess.run(
        [sys.executable, "-m", "crw", "flow", *args, "--state", str(crw.state)],
        env=env | LOCALES[locale],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        cwd=crw.state.parent,
    )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def strict_json(line: str) -> object:
    """`line` as JSON, refusing what is not JSON (NaN, Infinity)."""

    def refuse(constant: str) -> object:
        raise ValueError(constant)

    return json.loads(line, parse_constant=refuse)


def ended_failed(command: tuple[str, ...]) -> int:
    """The exit code of `command` on the hostile run: `wait` and `result` exit 1 by
    its outcome (failed), but for a call's answer; every other command 0."""
    return 1 if command[0] in ("wait", "result") and "--call" not in command else 0


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(
    "command",
    [
        ("status",),
        ("status", "--results"),
        ("show",),
        ("show", "--call", "explore.1"),
        ("watch",),
        ("wait",),
        ("result",),
        ("result", "--call", "explore.1"),
        ("list",),
        ("next",),
        ("call", "explore.1"),
        ("call", "build.1"),
    ],
)
def test_terminal_text_escapes_what_a_terminal_would_obey(
    crw: Crw, locale: str, command: tuple[str, ...]
) -> None:
    run = hostile_run(crw)
    args = command if command[0] == "list" else (command[0], run.id, *command[1:])
    result = read(crw, locale, *args)
    assert result.code == ended_failed(command), result.stderr
    assert run.id in result.stdout or command[-1] == "explore.1"  # a call's answer alone
    if command[0] == "call":
        assert "a\\ud800b" in result.stdout  # the answer is shown, escaped
    assert RAW.findall(result.stdout + result.stderr) == []


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(
    "command",
    [
        ("status", "--json"),
        ("status", "--results", "--json"),
        ("show", "--json"),
        ("watch", "--json"),
        ("wait", "--json"),
        ("result", "--json"),
        ("result", "--call", "explore.1", "--json"),
        ("list", "--json"),
        ("next", "--json"),
        ("call", "explore.1", "--json"),
        ("call", "build.1", "--json"),
    ],
)
def test_json_output_is_json_a_strict_reader_reads(
    crw: Crw, locale: str, command: tuple[str, ...]
) -> None:
    run = hostile_run(crw)
    args = command if command[0] == "list" else (command[0], run.id, *command[1:])
    result = read(crw, locale, *args)
    assert result.code == ended_failed(command), result.stderr
    values = [strict_json(line) for line in result.stdout.splitlines()]
    assert values
    if command[:2] == ("status", "--results"):
        (status,) = values
        assert isinstance(status, dict)
        explore = status["calls"][0]
        assert explore["result"] == {"summary": NASTY, NASTY: [NASTY]}
    if command[:2] == ("call", "explore.1"):
        (view,) = values
        assert isinstance(view, dict)
        assert view["answer"]["result"] == {"summary": NASTY, NASTY: [NASTY]}
        assert view["answer"]["raw_text"] == NASTY
    if command[0] == "show":
        completed = next(v for v in values if isinstance(v, dict) and v["row"] == "completed")
        assert isinstance(completed, dict) and completed["raw_text"] == NASTY


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("suffix", [".svg", ".html"])
def test_the_timeline_is_well_formed_xml(
    crw: Crw, tmp_path: Path, locale: str, suffix: str
) -> None:
    run = hostile_run(crw)
    out = tmp_path / f"run{suffix}"
    result = read(crw, locale, "timeline", run.id, "--out", str(out))
    assert result.code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    svg = text[text.index("<svg") : text.index("</svg>") + len("</svg>")]
    ET.fromstring(svg if suffix == ".html" else text)
    assert RAW.findall(text.replace("\n", "")) == []
    result = read(crw, locale, "timeline", run.id, "--out", str(out), "--json")
    assert result.code == 0, result.stderr
    assert isinstance(strict_json(result.stdout), dict)


@pytest.mark.parametrize("locale", LOCALES)
def test_an_error_quoting_what_the_user_typed_shows_it_escaped(
    crw: Crw, tmp_path: Path, locale: str
) -> None:
    """An error is one line: a bidi control or a C1 control in what the user typed
    is shown as its escape, whatever the locale."""
    run = hostile_run(crw)
    missing = tmp_path / "no\u202edir\x9b" / "run.svg"
    for args in (
        ("timeline", run.id, "--out", str(missing)),
        ("show", run.id, "--call", "explore\u202e.1"),
    ):
        result = read(crw, locale, *args)
        assert result.code == 2, result.stderr
        assert result.stdout == "" and result.stderr.startswith("crw: error: ")
        assert result.stderr.count("\n") == 1
        assert RAW.findall(result.stderr.replace("\n", "")) == []
