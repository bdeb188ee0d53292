"""`crw flow ui` in a real browser: Debian's chromium, headless, driven by
Selenium through Debian's chromedriver, on runs of the simulated host.

The host (`crw host sim serve`) is scripted with `crw host sim script`, the run
started with `crw flow start --backend app-server`, the view served by `crw flow
ui --port 0 --json` (its URL read off its first line). Every process is reaped
by pid at teardown: the host and each run process (the drill's `reap`), the
view, and chromedriver with the browser it started (its own session, killed
whole). Without chromium or chromedriver the tests skip; under CI they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import REPO, Result
from tests.cli.test_sim_script import serve_unscripted
from tests.deadlines import LOADED
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import drill_at, kill, served
from tests.web.runs import COMPLETED, HOSTILE, call_rows, started, write_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1000", "--force-device-scale-factor=1",
         "--hide-scrollbars"]  # fmt: skip
STATE_FILL = {"completed": (0xE2, 0xF3, 0xE2), "held": (0xF8, 0xDC, 0xDC)}
"""The fill of a call's state cell (crw/web/static/ui.css), looked for in the screenshot."""

pytestmark = pytest.mark.xdist_group("test_web_browser")
"""One xdist worker runs the module: its tests share one browser."""


def _need_browser() -> None:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {', '.join(missing)} is missing: .ci/run runs make chromium")
    pytest.skip(f"{', '.join(missing)} missing (make chromium installs them); CI runs these tests")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless chromium under Selenium; chromedriver in a session of its own,
    killed whole at teardown."""
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    root = tmp_path_factory.mktemp("browser")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={root / 'profile'}"]:
        options.add_argument(flag)
    service = Service(
        executable_path=str(CHROMEDRIVER),
        log_output=str(root / "chromedriver.log"),
        popen_kw={"start_new_session": True},
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(root)},
    )
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(LOADED)
    pid = service.process.pid if service.process is not None else None
    try:
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


class UiDrill(AppDrill):
    """An App Server run of the drill's chain on a host scripted by the command."""

    def serve(self) -> None:
        serve_unscripted(self)

    def script(self, target: str, behaviour: dict[str, Any]) -> None:
        out = self.crw("host", "sim", "script", "--socket", str(self.socket), target,
                       json.dumps(behaviour))  # fmt: skip
        assert out.code == 0, out.stderr

    def status(self) -> dict[str, Any]:
        assert self.run is not None
        out = self.crw("flow", "status", self.run.id, "--state", str(self.crw.state), "--json")
        assert out.code == 0, out.stderr
        return out.json()


@dataclass
class Served:
    """A `crw flow ui` process: its URL with the token, its origin, its token."""

    process: subprocess.Popen[bytes]
    url: str
    origin: str
    token: str


@contextlib.contextmanager
def serving(drill: UiDrill) -> Iterator[Served]:
    with (drill.root / "ui.stderr").open("ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "crw", "flow", "ui", "--state", str(drill.crw.state), "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=drill.crw.env,
            cwd=REPO,
            start_new_session=True,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("crw flow ui: http://127.0.0.1:"), (
            drill.root / "ui.stderr"
        ).read_text()
        told = json.loads(process.stdout.readline())
        url = line.removeprefix("crw flow ui: ").strip()
        assert told["url"] == url and url.endswith(f"/?token={told['token']}")
        yield Served(process, url, f"http://127.0.0.1:{told['port']}", told["token"])
    finally:
        stop(process)
        if process.stdout is not None:
            process.stdout.close()


def stop(process: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM `process` and wait for its exit code (SIGKILL it if it does not
    exit within the deadline: None)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=LOADED)
    except subprocess.TimeoutExpired:
        kill(process.pid)
        process.wait()
        return None


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[UiDrill]:
    with served(drill_at(UiDrill, tmp_path / "run")) as made:
        made.script("*", {"seconds": 0.1})
        yield made


def _wait(browser: Any, what: str, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, LOADED, poll_frequency=0.05).until(
        lambda _: condition(), message=f"timed out waiting until {what}"
    )


def _cell(browser: Any, call: str, field: str) -> str | None:
    """The text of a call's cell in the run page's calls table (None: no row yet)."""
    found = browser.execute_script(
        "for (const tr of document.querySelectorAll('#calls tbody tr')) {"
        "  if (tr.dataset.call === arguments[0]) {"
        "    return tr.querySelector('[data-field=' + arguments[1] + ']').textContent; } }"
        "return null;",
        call,
        field,
    )
    return None if found is None else str(found).strip()


def _run_state(browser: Any) -> str:
    state = browser.execute_script(
        "const s = document.getElementById('run-state'); return s ? s.textContent : ''"
    )
    return str(state).strip()


def _open_run(browser: Any, ui: Served, run: str) -> None:
    browser.get(ui.url)  # the token's URL first: its cookie lets the run page show it
    browser.get(f"{ui.origin}/runs/{urllib.parse.quote(run)}")
    _wait(browser, "the page's event stream is open", lambda: browser.execute_script(
        "return document.body.dataset.live === 'open'"))  # fmt: skip
    browser.execute_script("window.crwNotReloaded = true")


def _seqs(browser: Any) -> list[int]:
    """The seqs of the rows the run page lists."""
    seqs = browser.execute_script(
        "return [...document.querySelectorAll('#rows-body tr')].map(tr => Number(tr.dataset.seq))"
    )
    return [int(seq) for seq in seqs]


def _not_reloaded(browser: Any) -> bool:
    return bool(browser.execute_script("return window.crwNotReloaded === true"))


def test_a_call_goes_from_running_to_completed_on_the_page_without_a_reload(
    browser: Any, drill: UiDrill
) -> None:
    """The run's page follows its journal (SSE woken by the append): explore.1's
    state cell turns from running to completed while the page stays loaded."""
    drill.script("explore.1", {"seconds": 10})
    with serving(drill) as ui:
        browser.get(ui.url)  # the view is up and the browser warm before the run starts
        drill.start(crash_after=None)
        assert drill.run is not None
        _open_run(browser, ui, drill.run.id)
        _wait(browser, "explore.1 is running",
              lambda: _cell(browser, "explore.1", "state") == "running")  # fmt: skip
        _wait(browser, "explore.1 completed",
              lambda: _cell(browser, "explore.1", "state") == "completed")  # fmt: skip
        _wait(browser, "the run ended", lambda: _run_state(browser) == "ended")
        # Its rows followed too: each of the journal's once, in order.
        written = [row["seq"] for row in drill.rows()]
        _wait(browser, "every row is listed", lambda: _seqs(browser) == written)
        assert _not_reloaded(browser)
    drill.finish()


def test_a_held_call_is_answered_retry_by_the_button_and_the_run_completes(
    browser: Any, drill: UiDrill
) -> None:
    """explore.1's first subagent vanishes: the call is held host_failure. The
    page's retry button, once confirmed, runs `crw flow answer RUN explore.1
    --retry` and shows it; the run then completes (spec: the same rows the
    command writes, as it is the command)."""
    drill.script("explore.1/t1-a1", {"vanish": "notLoaded", "seconds": 0.1})
    drill.start(crash_after=None)
    assert drill.run is not None
    run = drill.run.id
    with serving(drill) as ui:
        _open_run(browser, ui, run)
        retry = '[data-action="answer-retry"][data-call="explore.1"]'
        _wait(browser, "the retry button is pressed", lambda: _pressed(browser, retry))
        command = f"crw flow answer {run} explore.1 --retry --state {drill.crw.state} --json"
        _wait(browser, "the confirmation", lambda: browser.find_elements("id", "confirm"))
        assert browser.find_element("id", "command").text == command
        browser.find_element("id", "confirm").click()
        _wait(browser, "the command's output", lambda: browser.find_elements("id", "code"))
        assert browser.find_element("id", "command").text == command
        assert browser.find_element("id", "code").text == "0", browser.page_source
        browser.find_element("id", "back").click()
        _wait(
            browser,
            "the run ended",
            lambda: _run_state(browser) == "ended",
        )
        assert _cell(browser, "explore.1", "state") == "completed"
        _screenshot_shows_each_call_completed(browser, drill.root)
    rows = drill.finish()
    assert rows[-1]["status"] == "completed"
    decisions = [r for r in rows if r["row"] == "decision"]
    assert [(d["call"], d["choice"]) for d in decisions] == [("explore.1", "retry")]


def _screenshot_shows_each_call_completed(browser: Any, root: Path) -> None:
    """The page drawn: each call's state cell has the completed fill at its place
    (checked by pixels, as the timeline's test does). With CRW_UI_SCREENSHOT set
    the picture is kept there (docs/ui-run.png is made so)."""
    from PIL import Image

    png = root / "run-page.png"
    browser.execute_script("document.getElementById('calls').scrollIntoView()")
    assert browser.save_screenshot(str(png))
    cells = browser.execute_script(
        "return [...document.querySelectorAll('#calls td[data-field=state]')].map(td => {"
        "  const r = td.getBoundingClientRect(); return [r.left, r.top]; })"
    )
    assert len(cells) == 3  # explore.1, build.1, review.1
    with Image.open(png) as picture:
        image = picture.convert("RGB")
        for left, top in cells:
            assert image.getpixel((int(left) + 2, int(top) + 2)) == STATE_FILL["completed"]
    if os.environ.get("CRW_UI_SCREENSHOT"):
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(os.environ["CRW_UI_SCREENSHOT"])


def _post(ui: Served, path: str, form: dict[str, str], headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        ui.origin + path, data=urllib.parse.urlencode(form).encode(), headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=LOADED) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_post_without_the_token_is_refused_403_and_nothing_runs(drill: UiDrill) -> None:
    held = {"row": "held", "reason": "host_failure", "error": "gone"}
    write_run(drill.crw.state, "chain-20261201-000000-aaaa",
              [started(), *call_rows("build.1", "build", end=held)])  # fmt: skip
    with serving(drill) as ui:
        path = "/runs/chain-20261201-000000-aaaa/do"
        form = {"verb": "cancel", "confirmed": "yes"}
        same = {"Origin": ui.origin}
        assert _post(ui, path, form, same) == 403
        assert _post(ui, path, form | {"token": ui.token}, {"Origin": "http://evil.example"}) == 403
        assert _post(ui, path, form, same | {"X-Crw-Token": ui.token[::-1]}) == 403
    out = drill.crw("flow", "status", "chain-20261201-000000-aaaa", "--state",
                    str(drill.crw.state), "--json")  # fmt: skip
    assert out.json()["state"] == "waiting_decision"  # no cancel ran


def test_a_hostile_node_id_and_answer_are_shown_as_text_in_the_browser(
    browser: Any, drill: UiDrill
) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    run = "evil-20261201-000000-cccc"
    call = f"{HOSTILE}.1"
    end = COMPLETED | {"result": {"summary": HOSTILE}, "raw_text": HOSTILE}
    null = {
        "row": "null_model",
        "reason": "schema_invalid_after_repair",
        "errors": [f"answer: {HOSTILE}"],
    }
    rows = [started(), *call_rows(call, HOSTILE, end=end), *call_rows("fix.1", "fix", end=null)]
    write_run(drill.crw.state, run, [*rows, {"row": "ended", "status": "failed"}])
    with serving(drill) as ui:
        browser.get(ui.url)
        browser.get(f"{ui.origin}/runs/{run}")
        assert _cell(browser, call, "state") == "completed"
        node = browser.execute_script(
            "return document.querySelector('#calls tbody tr').children[1].textContent"
        )
        assert node == HOSTILE
        # The null_model call's schema error quotes the answer: as status prints it.
        assert f"answer: {HOSTILE}" in (_cell(browser, "fix.1", "reason_text") or "")
        assert browser.find_elements("css selector", "main img, main script") == []
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.accept()  # the markup's alert() never ran
        browser.get(f"{ui.origin}/runs/{run}/calls/{urllib.parse.quote(call, safe='')}")
        assert HOSTILE in browser.find_element("tag name", "h1").text
        # The call page's answer, pretty JSON in a <pre>: the characters it holds.
        assert json.loads(browser.find_element("id", "answer").text) == {"summary": HOSTILE}
        assert browser.find_elements("css selector", "main img, main script") == []
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.accept()
        browser.get(f"{ui.origin}/runs/{run}/calls/fix.1")
        state = browser.find_element("id", "call-state").text
        assert "schema_invalid_after_repair" in state and f"answer: {HOSTILE}" in state


def test_sigterm_stops_the_view_cleanly_with_an_event_stream_open(drill: UiDrill) -> None:
    with serving(drill) as ui:
        request = urllib.request.Request(ui.origin + "/events")
        with urllib.request.urlopen(request, timeout=LOADED) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stop(ui.process) == 0


def test_ui_refuses_a_bad_port_in_one_line(drill: UiDrill) -> None:
    out: Result = drill.crw("flow", "ui", "--port", "70000", "--state", str(drill.crw.state))
    assert out.code == 2 and "--port 70000 is no port" in out.stderr


def _pressed(browser: Any, css: str) -> bool:
    """Whether the element `css` names was found and clicked: the live run page
    redraws its parts as rows come, so an element found may be gone by its click
    (stale), or not drawn yet; then it is looked up again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        browser.find_element("css selector", css).click()
    except (NoSuchElementException, StaleElementReferenceException):
        return False
    return True


def _decide(browser: Any, action: str, command: str) -> str:
    """Press the run page's `action` button, check the confirmation shows
    `command`, run it, and check the command ran as shown and exited 0; back to
    the run's page. The command's output."""
    button = f'[data-action="{action}"]'
    _wait(browser, f"the {action} button is pressed", lambda: _pressed(browser, button))
    _wait(browser, "the confirmation", lambda: browser.find_elements("id", "confirm"))
    assert browser.find_element("id", "command").text == command
    browser.find_element("id", "confirm").click()
    _wait(browser, "the command's output", lambda: browser.find_elements("id", "code"))
    assert browser.find_element("id", "command").text == command
    assert browser.find_element("id", "code").text == "0", browser.page_source
    output = str(browser.find_element("id", "stdout").text)
    browser.find_element("id", "back").click()
    _wait(browser, "the page's event stream is open", lambda: browser.execute_script(
        "return document.body.dataset.live === 'open'"))  # fmt: skip
    return output


def _kinds(rows: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(row["row"], row.get("call")) for row in rows]


def _running(browser: Any, ui: Served, drill: UiDrill) -> str:
    """Start the drill's run (explore.1's first turn scripted long) and open its
    page once explore.1 is running; the run's id."""
    drill.script("explore.1/t1-a1", {"seconds": 600})
    drill.start(crash_after=None)
    assert drill.run is not None
    _open_run(browser, ui, drill.run.id)
    _wait(browser, "explore.1 is running",
          lambda: _cell(browser, "explore.1", "state") == "running")  # fmt: skip
    return drill.run.id


def test_pause_then_resume_by_the_buttons_and_the_run_completes(
    browser: Any, drill: UiDrill
) -> None:
    """Pause, confirmed, runs `crw flow pause RUN`: explore.1's turn interrupted,
    the call held paused, the run paused (the page shows it, and offers resume).
    Resume, confirmed, runs `crw flow resume RUN --detach`: a new process goes on
    with explore.1 in place and the run completes, seen on the page without a
    reload (spec: the rows the commands write, as they are the commands)."""
    state = drill.crw.state
    with serving(drill) as ui:
        run = _running(browser, ui, drill)
        out = _decide(browser, "pause", f"crw flow pause {run} --state {state} --json")
        assert json.loads(out)["state"] == "paused"
        rows = drill.rows()
        paused = max(n for n, row in enumerate(rows) if row["row"] == "interrupt_requested")
        assert _kinds(rows[paused:]) == [
            ("interrupt_requested", "explore.1"), ("held", "explore.1"), ("paused", None),
        ]  # fmt: skip
        assert rows[paused]["reason"] == rows[paused + 1]["reason"] == "paused"
        _wait(browser, "the run is paused", lambda: _run_state(browser) == "paused")
        assert not browser.find_elements("css selector", '[data-action="pause"]')
        browser.execute_script("window.crwNotReloaded = true")

        _decide(browser, "resume", f"crw flow resume {run} --detach --state {state} --json")
        browser.execute_script("window.crwNotReloaded = true")
        _wait(browser, "the run ended", lambda: _run_state(browser) == "ended")
        assert _cell(browser, "explore.1", "state") == "completed"
        assert _not_reloaded(browser)
    rows = drill.finish()
    after = _kinds(rows[paused + 3 :])
    assert after[0] == ("started", None)
    explore = [kind for kind, call in after if call == "explore.1"]
    assert explore[-2:] == ["turn_started", "completed"]
    assert after[-1] == ("ended", None) and rows[-1]["status"] == "completed"
    assert sum(1 for row in rows if row["row"] == "paused") == 1


def test_cancel_by_the_button_ends_the_run_cancelled(browser: Any, drill: UiDrill) -> None:
    """Cancel, confirmed, runs `crw flow cancel RUN`: explore.1's turn interrupted,
    the call held cancelled, the run cancelled then ended cancelled; the page
    shows it ended and offers no decision."""
    state = drill.crw.state
    with serving(drill) as ui:
        run = _running(browser, ui, drill)
        _decide(browser, "cancel", f"crw flow cancel {run} --state {state} --json")
        _wait(browser, "the run ended", lambda: _run_state(browser) == "ended")
        assert not browser.find_elements("css selector", "[data-action]")
    rows = drill.finish()
    stopped = max(n for n, row in enumerate(rows) if row["row"] == "interrupt_requested")
    assert _kinds(rows[stopped:]) == [
        ("interrupt_requested", "explore.1"), ("held", "explore.1"), ("cancelled", None),
        ("ended", None),
    ]  # fmt: skip
    assert rows[stopped]["reason"] == rows[stopped + 1]["reason"] == "cancelled"
    assert rows[-1]["status"] == "cancelled"
