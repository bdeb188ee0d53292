"""The git demo's run process SIGKILLed again and again, with real processes.

`crw flow demo --git` runs as a user runs it (its own simulated host, its run
process and its scripted owner). The drill SIGKILLs each new run process the
moment the first dispatch report of a step lands in the run's inbox (often
before the run binds it), or 20 ms to 250 ms after its `started` row, KILLS
(20) times, and resumes the run at once with `crw flow resume RUN --detach`,
racing the owner's `crw flow next`, which resumes a run no process holds too;
then it lets the demo end. The kills land all along the run, on its first
process and on the processes of its resumes (the drill takes 15-50 s on 2 cores).
A demo that ends before its twentieth kill (a fast machine) is followed by
another git demo, killed the kills left, and so on, up to MAX_DEMOS.
Every process whose command line names the drill's directory is reaped by pid
at teardown.

It asserts of each demo that no marker was spawned twice on the host (the
subagents' first messages in the simulated host's rollouts), that the journal has
no `several_spawns` warning, and that the run completes with the results and the
node's branch of the same demo run undisturbed.

On multi-agent v2 (`CRW_MULTI_AGENT=v2` for the demo's start, `[features]
multi_agent_v2 = true` in its host's config.toml, so its owner has v2's tools and
takes next's v2 host calls) the same, KILLS_V2 times: each child is spawned by
task name (a second spawn of one is refused by the host) and its task is the first
agent message of its rollout. Fewer kills: what v2 changes is each resumed
process's bind by task name through the owner's thread, which a few kills on
either side of a report reach; the race of the resumes is v1's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.journal.stores import read_run_journal
from tests.cli.conftest import REPO, Crw
from tests.drill.test_crash_drill import alive, kill, results, wait_until

KILLS = 20
KILLS_V2 = 8
"""The kills on multi-agent v2 (one demo, 10-20 s)."""
DELAYS = (0.25, 0.02, 0.05, 0.02, 0.1, 0.02)
"""The longest a run process lives after its `started` row, in turn (seconds): it
is SIGKILLed sooner the moment the first report of a step lands in the inbox."""
MAX_DEMOS = 8
"""The demos the kills may take: one nearly always on a quiet machine; more when
the first ends before its twentieth kill, a fast machine or a loaded one (under a
CPU hog the resumes come slowly and a demo ends after 4-6 kills). A bound, so a
drill that can kill no process ends."""
DEMO_DEADLINE = 180.0
"""Seconds the killed demo may take to its end."""


def pids_naming(root: Path) -> list[int]:
    """The processes whose command line names `root` (the demo, its host, its runs)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if str(root).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return found


@pytest.fixture
def crw(tmp_path: Path) -> Iterator[Crw]:
    (tmp_path / "tmp").mkdir()
    runner = Crw(tmp_path / "state", tmp_path / "tmp")
    try:
        yield runner
    finally:
        for pid in pids_naming(tmp_path):
            kill(pid)


def demo(crw: Crw, state: Path, v2: bool = False) -> subprocess.Popen[bytes]:
    """The git demo in `state`; `v2`: its run and its host's owner on multi-agent v2."""
    argv = [sys.executable, "-m", "crw", "flow", "demo", "--git", "--state", str(state), "--json"]
    env = crw.env
    if v2:
        (state / "codex-home").mkdir(parents=True)
        (state / "codex-home" / "config.toml").write_text("[features]\nmulti_agent_v2 = true\n")
        env = env | {"CRW_MULTI_AGENT": "v2"}
    with (state.parent / f"{state.name}.out").open("wb") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, cwd=REPO,
        )  # fmt: skip


def ended(crw: Crw, state: Path, child: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Wait for the demo to exit; its --json object."""
    child.wait(timeout=DEMO_DEADLINE)
    text = (state.parent / f"{state.name}.out").read_text()
    assert child.returncode == 0, text
    out: dict[str, Any] = json.loads(text)
    return out


def journal(state: Path) -> Path | None:
    found = list((state / "flow").glob("*/journal.jsonl"))
    return found[0] if found else None


def kill_runs(crw: Crw, state: Path, child: subprocess.Popen[bytes], kills: int) -> int:
    """SIGKILL each new run process of the demo in `state`, `kills` of them, while
    the demo runs, and resume the run at once as a person would (or the owner's
    next does, whichever launches first); how many were killed."""
    killed: set[int] = set()
    reports: set[tuple[str, int, int]] = set()
    deadline = time.monotonic() + DEMO_DEADLINE
    while len(killed) < kills and child.poll() is None and time.monotonic() < deadline:
        path = journal(state)
        rows = read_run_journal(path).rows if path else []
        if path is None or (rows and rows[-1]["row"] == "ended"):
            time.sleep(0.01)
            continue
        fresh = [r["pid"] for r in rows if r["row"] == "started" and r["pid"] not in killed]
        if not fresh or not alive(fresh[-1]):
            time.sleep(0.01)
            continue
        pid = fresh[-1]
        until = time.monotonic() + DELAYS[len(killed) % len(DELAYS)]
        while time.monotonic() < until and not new_reports(path.parent / "inbox", reports):
            time.sleep(0.002)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended by itself meanwhile (its run ended): no kill
            continue
        killed.add(pid)
        wait_until("the killed process is gone", lambda: not alive(pid))  # noqa: B023
        resume(crw, state, path.parent.name)
    return len(killed)


def new_reports(inbox: Path, seen: set[tuple[str, int, int]]) -> bool:
    """Whether the inbox holds a dispatch report of a step (call, k, attempt) not in
    `seen` (then in `seen`)."""
    steps = set()
    for path in inbox.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(path.read_bytes())
            steps.add((report["call"], report["k"], report["attempt"]))
    fresh = steps - seen
    seen |= fresh
    return bool(fresh)


def resume(crw: Crw, state: Path, run: str) -> None:
    """`crw flow resume RUN --detach`; refused when the owner's next resumed it first."""
    crw("flow", "resume", run, "--detach", "--state", str(state), "--json")


def spawns(state: Path) -> Counter[str]:
    """How many subagents the simulated host spawned for each marker: the marker
    of each subagent rollout's first user message (on v2 its first agent message,
    the task)."""
    counts: Counter[str] = Counter()
    for rollout in (state / "codex-home" / "sessions").rglob("rollout-*.jsonl"):
        lines = [json.loads(line) for line in rollout.read_text().splitlines()]
        meta = lines[0]["payload"]
        if not meta.get("parent_thread_id"):
            continue  # the owner thread
        first = next(text for e in lines if (text := _message(e["payload"])) is not None)
        counts[first.split("\n", 1)[0].removeprefix("crw-flow-op: ")] += 1
    return counts


def _message(payload: dict[str, Any]) -> str | None:
    """The text of a rollout record that gives a subagent its work: a user message
    (v1), a v2 task (an agent message); None for any other record."""
    if payload.get("type") == "user_message":
        return str(payload["message"])
    if payload.get("type") == "agent_message" and isinstance(payload.get("content"), list):
        return str(payload["content"][1]["encrypted_content"])
    return None


@pytest.mark.parametrize("multi_agent", ["v1", "v2"])
def test_the_git_demo_spawns_no_marker_twice_across_kills_of_its_run_process(
    crw: Crw, tmp_path: Path, multi_agent: str, found: dict[str, Any]
) -> None:
    """spec: CMD-NEXT-18, ATT-16, ATT-18; on either multi-agent protocol"""
    v2 = multi_agent == "v2"
    kills_asked = KILLS_V2 if v2 else KILLS
    reference_state = tmp_path / "reference"
    reference = ended(crw, reference_state, demo(crw, reference_state, v2))
    reference_path = journal(reference_state)
    assert reference_path is not None
    killed = 0
    for n in range(1, MAX_DEMOS + 1):
        if killed >= kills_asked:
            break
        state = tmp_path / f"state{n}"
        child = demo(crw, state, v2)
        kills = kill_runs(crw, state, child, kills_asked - killed)
        killed += kills
        out = ended(crw, state, child)
        path = journal(state)
        assert path is not None
        rows = read_run_journal(path).rows
        twice = {marker: n for marker, n in spawns(state).items() if n > 1}
        assert twice == {}, f"markers spawned more than once: {twice}"
        warned = [r for r in rows if r["row"] == "session_host_warning"]
        assert [r for r in warned if "several_spawns" in r.get("warnings", [])] == []
        assert sum(r["row"] == "started" for r in rows) >= kills  # the last may have ended it
        assert (out["state"], out["ended_status"]) == ("ended", "completed")
        assert results(rows) == results(read_run_journal(reference_path).rows)
        assert out["git"]["branch"]["files"] == reference["git"]["branch"]["files"]
        protocols = {r["multi_agent"] for r in rows if r["row"] == "started"}
        assert protocols == {"multi_agent_v2" if v2 else "multi_agent_v1"}
    assert killed == kills_asked, f"{MAX_DEMOS} demos ended after {killed} kills"
    found |= {"point": "git demo", "stop": f"kill x{kills_asked}", "end": "completed, same results"}
