"""`crw host sim script` with real processes: a `crw host sim serve` host, the
script command, then a run whose call shows the behaviour scripted (a repair, a
review round, a lost attempt). Every process is reaped at teardown by pid (the
drill's `reap`: the host, the owner, each run process its started row names)."""

from __future__ import annotations

import json
import socket as socket_module
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.host.sim.keys import BEHAVIOURS
from tests.cli.conftest import Result
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import Drill, drill_at, served, wait_until

REVIEWED = """
name = "try"
pool = 1

[[node]]
id = "build"
role = "executor"
task = "Fix it."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
review = { role = "reviewer", rounds = 1 }
"""


def _listens(path: Path) -> bool:
    probe = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def serve_unscripted(drill: Drill) -> None:
    """The drill's host, serving, with no script set (the drill's own set some)."""
    drill.spawn("crw", "host", "sim", "serve", "--socket", str(drill.socket),
                "--codex-home", str(drill.root / "sim-home"))  # fmt: skip
    wait_until("the sim host listens", lambda: _listens(drill.socket))


def script(drill: Drill, *args: str) -> Result:
    return drill.crw("host", "sim", "script", "--socket", str(drill.socket), *args)


def listed(drill: Drill) -> list[dict[str, Any]]:
    out = script(drill, "--list", "--json")
    assert out.code == 0, out.stderr
    scripts: list[dict[str, Any]] = out.json()["scripts"]
    return scripts


class AppTry(AppDrill):
    """An App Server run of REVIEWED on a host scripted only by the command."""

    def serve(self) -> None:
        self.workflow.write_text(REVIEWED)
        serve_unscripted(self)


class SessionTry(Drill):
    """A session run of the drill's chain, its owner the drill's owner process."""

    def serve(self) -> None:
        serve_unscripted(self)
        self.owner_thread = str(self.host("sim/startOwner", {})["threadId"])


@pytest.fixture
def app(tmp_path: Path) -> Iterator[AppTry]:
    with served(drill_at(AppTry, tmp_path / "run")) as made:
        yield made


@pytest.fixture
def session(tmp_path: Path) -> Iterator[SessionTry]:
    with served(drill_at(SessionTry, tmp_path / "run")) as made:
        yield made


def calls(rows: list[dict[str, Any]], call: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("call") == call]


def test_invalid_first_repairs_and_reject_runs_a_review_round(app: AppTry) -> None:
    """build.1's first answer breaks its schema: the run repairs it (a send_input
    step, repair true); its review build.2 rejects with the finding scripted: the
    fix build.3 runs and its review build.4 accepts (spec: HARV-9; docs/review.md)."""
    for target, behaviour in [
        ("*", {"seconds": 0.1}),
        ("build.1", {"invalidFirst": True, "seconds": 0.1}),
        ("build.2", {"reject": "name the files you changed", "seconds": 0.1}),
    ]:
        out = script(app, target, json.dumps(behaviour), "--json")
        assert out.code == 0, out.stderr
        assert out.json()["behaviour"] == behaviour
    assert [s["match"] for s in listed(app)] == [
        {},
        {"marker": "build.1/*"},
        {"marker": "build.2/*"},
    ]
    app.start(crash_after=None)
    rows = app.finish()
    assert rows[-1]["status"] == "completed"
    steps = [r for r in calls(rows, "build.1") if r["row"] == "step_published"]
    assert [(s["k"], s["action"], s.get("repair", False)) for s in steps] == [
        (1, "spawn", False),
        (2, "send_input", True),
    ]
    ends = {r["call"]: r for r in rows if r["row"] == "completed"}
    assert ends["build.2"]["result"] == {
        "verdict": "reject",
        "findings": ["name the files you changed"],
    }
    assert ends["build.4"]["result"]["verdict"] == "accept"
    assert "build.3" in ends and not calls(rows, "build.5")


def test_vanish_loses_the_attempt_and_the_next_one_completes(session: SessionTry) -> None:
    """build.1's first subagent vanishes (notLoaded): its attempt is lost
    (session_attempt_lost) and attempt 2 completes the call (spec: ATT-2, ATT-3, STEP-24)."""
    out = script(session, "*", '{"seconds": 0.1}')
    assert out.code == 0, out.stderr
    out = script(session, "build.1/t1-a1", '{"vanish": "notLoaded", "seconds": 0.1}')
    assert out.code == 0, out.stderr
    assert out.stdout.startswith('scripted build.1/t1-a1: {"vanish": "notLoaded"')
    session.start(crash_after=None)
    rows = session.finish()
    assert rows[-1]["status"] == "completed"
    lost = [r for r in calls(rows, "build.1") if r["row"] == "session_attempt_lost"]
    assert [(r["attempt"], r["host_status"]) for r in lost] == [(1, "notLoaded")]
    done = next(r for r in calls(rows, "build.1") if r["row"] == "completed")
    assert done["attempt"] == 2


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        ('{"invalidfirst": true}', "unknown behaviour key 'invalidfirst'; known: answer, "),
        ('{"invalidFirst": "yes"}', "invalidFirst must be true or false, not 'yes'"),
        ('{"vanish": "gone"}', 'vanish must be "notLoaded" or "systemError", not "gone"'),
        ('{"reject": []}', "reject must be true, a finding or a non-empty list of findings"),
        ("{invalidFirst: true}", "BEHAVIOUR is not JSON"),
    ],
)
def test_a_bad_behaviour_is_one_line_and_nothing_is_sent(
    app: AppTry, behaviour: str, says: str
) -> None:
    out = script(app, "build.1", behaviour)
    assert out.code == 2 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and says in out.stderr
    if "known:" in says:
        assert ", ".join(BEHAVIOURS) in out.stderr
    assert listed(app) == []


def test_clear_removes_a_targets_scripts_and_a_newer_script_says_what_it_decides(
    app: AppTry,
) -> None:
    assert script(app, "build.1", '{"hang": true}').code == 0
    assert script(app, "build.2", '{"reject": true}', "--role", "reviewer").code == 0
    wide = script(app, "build.*/*", '{"seconds": 2}', "--json")
    assert wide.json()["shadows"] == [
        {"marker": "build.1/*"},
        {"marker": "build.2/*", "role": "reviewer"},
    ]
    narrow = script(app, "build.1/t9-*", '{"hang": true}', "--role", "critic", "--json")
    assert narrow.json()["shadows"] == []
    cleared = script(app, "--clear", "build.1", "--json")
    assert cleared.code == 0, cleared.stderr
    assert cleared.json()["removed"] == 1
    assert [s["match"] for s in listed(app)] == [
        {"marker": "build.2/*", "role": "reviewer"},
        {"marker": "build.*/*"},
        {"marker": "build.1/t9-*", "role": "critic"},
    ]
    again = script(app, "--clear", "build.1")
    assert again.code == 1
    assert "no script is set for build.1/*; list them: crw host sim script" in again.stderr
    text = script(app, "--list")
    assert text.stdout.splitlines()[1:] == [
        'build.2/* (role reviewer): {"reject": true}',
        'build.*/*: {"seconds": 2}',
        'build.1/t9-* (role critic): {"hang": true}',
    ]


def test_no_host_on_the_socket_is_refused_naming_the_serve_command(tmp_path: Path) -> None:
    made = drill_at(AppTry, tmp_path / "run")
    out = script(made, "build.1", '{"hang": true}')
    assert out.code == 1
    assert f"start one with: crw host sim serve --socket {made.socket}" in out.stderr


def test_help_names_each_behaviour_with_its_line(tmp_path: Path) -> None:
    made = drill_at(AppTry, tmp_path / "run")
    listing = made.crw("host", "sim", "--help")
    assert "script  Script how the simulated host's turns behave" in listing.stdout
    out = made.crw("host", "sim", "script", "--help")
    assert out.code == 0, out.stderr
    text = " ".join(out.stdout.split())
    for key, line in BEHAVIOURS.items():
        assert f"{key}: {line}" in text
