"""`crw flow timeline RUN --out FILE.svg|.html` on real runs on the simulated host:
the demo run (finished: a repair and a review round), and a run that is running,
then crashed (its process killed), then paused. The demo run's picture is drawn
by headless Chromium and its screenshot must show each lane's bars in their
colours at their rows.

Chromium is Debian's `chromium` (`.ci/run` installs it). Without it the browser
test is skipped, unless CI is set: then it fails. The browser runs in its own
session with a new profile and a timeout, and its process group is killed at
the end whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from crw.cli.read.timeline import COLOURS
from crw.engine.run.locks import run_is_live
from crw.engine.views.timeline import (
    AXIS_H,
    HEADER_H,
    LABEL_W,
    LANE_H,
    MARGIN,
    PLOT_W,
    TURN_H,
    TURN_KINDS,
    TURN_Y,
    Timeline,
    layout,
)
from crw.journal.log import read_journal
from tests.cli.conftest import Crw
from tests.cli.test_pause_cancel import drill as drill  # the fixture: a run whose turn hangs
from tests.drill.test_crash_drill import CALL, Drill, kill, wait_until

SVG = "{http://www.w3.org/2000/svg}"
BROWSER_TIMEOUT = 60.0


pytestmark = pytest.mark.xdist_group("test_timeline")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Crw, dict[str, Any]]]:
    """The demo's run, ended: `crw flow demo --json`'s output."""
    root = tmp_path_factory.mktemp("demo")
    (root / "tmp").mkdir()
    crw = Crw(root / "state", root / "tmp")
    try:
        done = crw("flow", "demo", "--state", str(crw.state), "--json")
        assert done.code == 0, done.stderr
        crw.pids.append(done.json()["host_pid"])
        yield crw, done.json()
    finally:
        crw.reap()


def timeline(crw: Crw, run: str, out: Path, *args: str) -> dict[str, Any]:
    done = crw(
        "flow", "timeline", run, "--state", str(crw.state), "--out", str(out), "--json", *args
    )
    assert done.code == 0, done.stderr
    return done.json()


def laid_out(run_dir: str) -> Timeline:
    """The layout the command drew for the ended run (its rows, no `now`)."""
    return layout(read_journal(Path(run_dir) / "journal.jsonl").rows, run=Path(run_dir).name)


def test_the_timeline_of_the_demo_run_draws_a_lane_per_call_and_json_says_what_it_wrote(
    demo: tuple[Crw, dict[str, Any]], tmp_path: Path
) -> None:
    crw, ran = demo
    out = timeline(crw, ran["run"], tmp_path / "demo.svg")
    calls = [call["call"] for call in ran["calls"]]
    assert out == {
        "run": ran["run"],
        "out": str(tmp_path / "demo.svg"),
        "format": "svg",
        "bytes": (tmp_path / "demo.svg").stat().st_size,
        "width": out["width"],
        "height": out["height"],
        "calls": 7,
        "lanes": calls,
        "note": "one lane per call; hover a bar or mark for its details",
        "live": False,
    }
    root = ET.parse(tmp_path / "demo.svg").getroot()
    assert (root.get("width"), root.get("height")) == (f"{out['width']:g}", f"{out['height']:g}")
    rects = [(r.get("fill"), (r.findtext(f"{SVG}title") or "")) for r in root.iter(f"{SVG}rect")]
    bars = [(fill, title.split(";")[0]) for fill, title in rects if title]  # not the legend's
    turns = [title for fill, title in bars if fill == COLOURS["turn"]]
    repairs = [title for fill, title in bars if fill == COLOURS["repair_turn"]]
    assert turns == [f"{call} turn 1 (attempt 1)" for call in calls]
    assert repairs == ["build.1 turn 2 (attempt 1) repair"]
    circles = [c.findtext(f"{SVG}title") for c in root.iter(f"{SVG}circle")]
    circles = [title for title in circles if title]  # not the legend's
    assert circles == [
        "build.2: review: reject (1 finding)",
        "build.4: review: accept (0 findings)",
    ]  # critique.1, a critic node whose answer has a verdict, reviews no call
    tokens = {call["call"]: call["tokens"]["total"] for call in ran["calls"]}
    shown = laid_out(ran["run_dir"])
    per_turn = [(s.title.split(" ")[0], s.tokens) for s in shown.shapes if s.kind in TURN_KINDS]
    for call, total in tokens.items():  # the turns' tokens add up to the call's
        assert sum((t or {}).get("total", 0) for c, t in per_turn if c == call) == total > 0

    # Each session bind records when the host started the turn: its bar starts there.
    rows = read_journal(Path(ran["run_dir"]) / "journal.jsonl").rows
    bound = [r for r in rows if r["row"] == "turn_started"]
    assert len(bound) == 8
    for r in bound:
        at = datetime.fromisoformat(r["at"]).timestamp()
        assert isinstance(r["host_started_at"], int) and at - 60 < r["host_started_at"] <= at

    page = timeline(crw, ran["run"], tmp_path / "demo.html")
    assert page["format"] == "html" and page["lanes"] == calls
    assert (tmp_path / "demo.html").read_text().startswith("<!DOCTYPE html>")


def test_an_out_that_is_neither_svg_nor_html_or_whose_directory_is_missing_is_refused(
    demo: tuple[Crw, dict[str, Any]], tmp_path: Path
) -> None:
    crw, ran = demo
    png = crw("flow", "timeline", ran["run"], "--state", str(crw.state), "--out", "t.png")
    assert (png.code, png.stdout) == (2, "")
    assert png.stderr == (
        "crw: error: --out t.png: name a .svg or .html file (the suffix picks the format)\n"
    )
    gone = tmp_path / "no" / "t.svg"
    missing = crw("flow", "timeline", ran["run"], "--state", str(crw.state), "--out", str(gone))
    assert missing.code == 2
    assert missing.stderr == (
        f"crw: error: --out {gone}: the directory {gone.parent} does not exist; make it\n"
    )


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_the_picture_gets_the_users_umask_like_any_file_the_user_asks_for(
    demo: tuple[Crw, dict[str, Any]], tmp_path: Path, umask: int, mode: int
) -> None:
    """The file is the user's, not one of the run's own (those stay 0600)."""
    crw, ran = demo
    out = tmp_path / "t.svg"
    command = ["flow", "timeline", ran["run"], "--state", str(crw.state), "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "crw", *command],
        env=crw.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        umask=umask,
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == ["t.svg"]  # no temporary file left


def test_a_running_then_crashed_then_paused_run_has_its_timeline(
    drill: Drill, tmp_path: Path
) -> None:
    drill.start(crash_after=None)
    assert drill.run is not None
    run, rows = drill.run.id, drill.rows
    turn = {"row": "turn_started", "call": CALL}
    wait_until("build's turn runs", lambda: any(r.items() >= turn.items() for r in rows()))
    running = timeline(drill.crw, run, tmp_path / "running.svg")
    assert running["live"] is True and running["lanes"] == ["explore.1", CALL]
    (bar,) = [  # the open turn runs up to now, the plot's right end, past the last row
        r
        for r in ET.parse(tmp_path / "running.svg").iter(f"{SVG}rect")
        if (r.findtext(f"{SVG}title") or "").startswith(f"{CALL} turn 1")
    ]
    left, width = float(bar.get("x", 0)), float(bar.get("width", 0))
    assert width > 10 and left + width == pytest.approx(MARGIN + LABEL_W + PLOT_W, abs=0.2)

    drill.pause_owner()  # its next would resume the run
    (pid,) = [r["pid"] for r in rows() if r["row"] == "started"]
    kill(pid)
    wait_until("the run is let go", lambda: not run_is_live(drill.run))
    crashed = timeline(drill.crw, run, tmp_path / "crashed.svg")
    assert crashed["live"] is False and crashed["lanes"] == ["explore.1", CALL]
    rects = ET.parse(tmp_path / "crashed.svg").iter(f"{SVG}rect")
    spans = [r.findtext(f"{SVG}title") for r in rects if r.get("fill") == COLOURS["span_running"]]
    assert [title.split(";")[0] for title in spans if title] == [  # not the legend's
        f"{CALL}: executor, node build, running"  # open when its process died
    ]

    paused = drill.crw("flow", "pause", run, "--state", str(drill.crw.state))
    drill.unpause_owner()
    assert paused.code == 0, paused.stderr
    timeline(drill.crw, run, tmp_path / "paused.svg")
    root = ET.parse(tmp_path / "paused.svg").getroot()
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert f"{CALL}: interrupt requested: paused" in titles
    assert f"{CALL}: held: paused: the run was paused (crw flow pause)" in titles
    first, here = [r["pid"] for r in rows() if r["row"] == "started"]  # the pause's own process
    assert first == pid
    assert [t for t in titles if t and t.startswith(("process started", "paused"))] == [
        f"process started (pid {pid})",
        f"process started (pid {here})",
        "paused by crw flow pause",
    ]


def chromium() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("CI is set and chromium is missing: .ci/run installs it (apt-get install)")
    pytest.skip("chromium is not installed (apt-get install -y chromium); CI installs and runs it")


def screenshot(page: Path, width: int, height: int, tmp_path: Path) -> Path:
    """`page` drawn by headless Chromium in a window of its size, as a PNG."""
    png = tmp_path / f"{page.name}.png"
    argv = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
        "--force-device-scale-factor=1", "--force-color-profile=srgb",
        f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri(),
    ]  # fmt: skip
    with (tmp_path / "chromium.log").open("ab") as log:
        browser = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        )
    try:
        browser.wait(timeout=BROWSER_TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()
    assert png.is_file(), (tmp_path / "chromium.log").read_text()
    return png


@pytest.mark.parametrize("suffix", ["svg", "html"])
def test_headless_chromium_shows_each_lane_of_the_demo_run_with_its_bars_at_its_row(
    demo: tuple[Crw, dict[str, Any]], tmp_path: Path, suffix: str
) -> None:
    from PIL import Image

    crw, ran = demo
    out = timeline(crw, ran["run"], tmp_path / f"demo.{suffix}")
    png = screenshot(tmp_path / f"demo.{suffix}", int(out["width"]), int(out["height"]), tmp_path)
    with Image.open(png) as opened:
        image = opened.convert("RGB")
    assert image.size == (out["width"], out["height"])

    def colour(x: float, y: float) -> str:
        red, green, blue = image.getpixel((int(x), int(y)))  # type: ignore[misc]
        return f"#{red:02x}{green:02x}{blue:02x}"

    shown = laid_out(ran["run_dir"])
    assert shown.lanes == out["lanes"]
    first = MARGIN + HEADER_H + AXIS_H + TURN_Y
    for n, call in enumerate(shown.lanes):
        bars = [s for s in shown.shapes if s.kind in TURN_KINDS and s.title.startswith(f"{call} ")]
        assert bars, call
        for bar in bars:  # each turn, in its colour, in its lane's row (above its tokens)
            assert (bar.y, bar.h) == (first + n * LANE_H, TURN_H)
            assert colour(bar.x + bar.w / 2, bar.y + 1.5) == COLOURS[bar.kind], (call, bar.title)
        assert colour(bar.x + bar.w / 2, bar.y - TURN_Y + LANE_H + 1) != COLOURS[bar.kind]
    reject = next(s for s in shown.shapes if s.kind == "review_reject")
    assert colour(reject.x, reject.y) == COLOURS["review_reject"]
