"""The crash drill: real processes, a run killed at each row of its repaired call.

A `crw host sim serve` process is the host; a session run is started with
`CRW_CRASH_AFTER=<row>@build.1[#n]` in the start's environment (the detached run
process inherits it and SIGKILLs itself right after that row is durable); the
process-level owner (`tests.drill.owner`) keeps playing with `crw flow next` and
`crw flow dispatched`. Once the run process is gone (its pid not alive, its
process lock not held) the drill resumes it with `crw flow resume RUN --detach`
and the owner goes on until the run ends. Every kill point must end as the
uninterrupted reference run does: completed, every call's result the same, and no
turn started twice for one marker on the host.

While the drill decides the resume it holds the run lock itself (taken the moment
the dead process's flock goes, in a blocked flock), and pauses the owner, so that
the owner's `crw flow next` never resumes the run first (CMD-NEXT-18 resumes a
run no process holds). A next the owner has in flight then reads the run as
starting (held, its process dead) and would answer `starting`, no step, only
after 15 s (CMD-NEXT-28): the pause ends it at once, and the owner, which sees no
step either way, pauses.

On multi-agent v2 (`DrillV2`: `[features] multi_agent_v2 = true` in the start's
and the host's config.toml) the owner takes each step's v2 host call and the run
binds by task name; the children are in no `thread/list` and their tasks in no
`thread/read`, so the drill finds them on the owner's thread and reads each
task's marker from the child's rollout, as docs/host.md says the text is there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from crw.bus import steps as bus
from crw.detach import Detached
from crw.engine.run.locks import held_process_tokens, is_launching, run_is_live
from crw.engine.run.rundir import RunDir
from crw.engine.steps.bind import turn_marker
from crw.host.client import HostClient
from crw.host.connect import connect_host
from crw.host.sim.behaviour import marker_of
from crw.host.transport import HostUnavailable
from crw.host.uri import parse_host_uri
from tests import zygote
from tests.actors.test_app_server_run import CHAIN
from tests.cli.conftest import REPO, Crw
from tests.deadlines import LOADED
from tests.drill.journal_tail import JournalTail
from tests.drill.owner import CUT_NEXT
from tests.drill.references import undisturbed
from tests.processes import reap_naming

CALL = "build.1"
WORKFLOW = CHAIN.replace('name = "chain"\npool = 2', 'name = "drill"\npool = 1')
SCRIPTS = [
    {"match": {"marker": "*"}, "behaviour": {"seconds": 0.1}},
    {"match": {"marker": f"{CALL}/*"}, "behaviour": {"seconds": 0.1, "invalidFirst": True}},
]
DEADLINE = LOADED
"""Seconds any one wait of the drill may take before it fails: a hang guard, not a
speed claim (20 s was a few Python starts on a machine at load 15)."""
RUN_DEADLINE = LOADED
"""Seconds a run may take to its end (one takes ~5)."""
RESUME_GUARD = "drill-holds-resumes"
"""The token of the process lock the drill holds to keep the owner from resuming a
killed run (`Drill.start`)."""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie no parent reaped yet does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(what: str, done: Any, timeout: float = DEADLINE, every: float = 0.02) -> None:
    """Call `done` every `every` seconds until it is true (`timeout`: a hang guard)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(every)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def _host(socket: Path, method: str, params: dict[str, Any]) -> Any:
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        return await client.request(method, params)


async def host_listens(socket: Path) -> bool:
    """Whether the host accepts a connection (its socket file exists before it listens)."""
    try:
        async with connect_host(parse_host_uri(f"unix:{socket}")):
            return True
    except HostUnavailable:
        return False


async def _subagent_turns(socket: Path, owner: str) -> tuple[Counter[str], dict[str, str]]:
    """The turns of the owner's subagents, counted by the marker of their first user
    message, and each subagent's status."""
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        counts: Counter[str] = Counter()
        status: dict[str, str] = {}
        for listed in await _subagents(client):
            if listed.parentThreadId != owner:
                continue
            thread = await client.thread_read(listed.id, include_turns=True)
            status[thread.id] = thread.status.type
            for turn in thread.turns:
                counts[turn_marker(turn) or "<none>"] += 1
        return counts, status


async def _subagents(client: HostClient) -> list[Any]:
    listed: list[Any] = []
    cursor: str | None = None
    while True:
        extra = {"cursor": cursor} if cursor else {}
        page, cursor = await client.thread_list(
            sourceKinds=["subAgentThreadSpawn"], limit=100, **extra
        )
        listed += page
        if not cursor:
            return listed


async def _v2_turns(socket: Path, owner: str) -> tuple[Counter[str], dict[str, str]]:
    """`_subagent_turns` on v2: the owner's children from its subAgentActivity
    items, each task's marker from the child's rollout (`agent_message` records)."""
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        counts: Counter[str] = Counter()
        status: dict[str, str] = {}
        read = await client.request("thread/read", {"threadId": owner, "includeTurns": True})
        children = {
            item["agentThreadId"]
            for turn in read["thread"]["turns"]
            for item in turn["items"]
            if item["type"] == "subAgentActivity" and item["kind"] == "started"
        }
        for child in sorted(children):
            thread = await client.thread_read(child, include_turns=True)
            status[thread.id] = thread.status.type
            for line in (await trio.Path(str(thread.path)).read_text()).splitlines():
                record = json.loads(line)
                payload = record["payload"]
                if record["type"] == "response_item" and payload["type"] == "agent_message":
                    text = payload["content"][1]["encrypted_content"]
                    counts[marker_of(text) or "<none>"] += 1
        return counts, status


@dataclass
class Drill:
    """One run of the workflow on its own simulated host, with its owner process."""

    root: Path
    crw: Crw
    socket: Path = field(init=False)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    owner_thread: str = ""
    run: RunDir | None = None
    owner: subprocess.Popen[bytes] | None = None
    run_deadline: float = RUN_DEADLINE
    v2: bool = False
    """The owner has multi-agent v2's tools and the run speaks v2."""
    tail: JournalTail | None = field(default=None, init=False, repr=False)
    """The run's rows, read on as they come (tests/drill/journal_tail.py)."""
    resume_guard: int | None = field(default=None, init=False, repr=False)
    """The descriptor of the process lock that keeps the owner from resuming a
    killed run (`start`), while the drill holds it."""

    def __post_init__(self) -> None:
        self.socket = self.root / "h.sock"
        self.control = self.root / "control"
        self.control.mkdir()
        self.workflow = self.root / "drill.toml"
        self.workflow.write_text(WORKFLOW)

    def spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        with (self.root / f"{argv[0]}.stderr").open("ab") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-m", *argv],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=self.crw.env,
                cwd=REPO,
            )
        self.processes.append(child)
        return child

    def serve(self) -> None:
        if self.v2:  # the owner's config, as codex reads it, and the start's
            for home in (self.root / "sim-home", Path(self.crw.env["CODEX_HOME"])):
                home.mkdir(parents=True, exist_ok=True)
                (home / "config.toml").write_text("[features]\nmulti_agent_v2 = true\n")
        self.spawn("crw", "host", "sim", "serve", "--socket", str(self.socket),
                   "--codex-home", str(self.root / "sim-home"))  # fmt: skip
        wait_until("the sim host listens", lambda: trio.run(host_listens, self.socket))
        self.owner_thread = str(self.host("sim/startOwner", {})["threadId"])
        for script in SCRIPTS:
            self.host("sim/script", script)

    def host(self, method: str, params: dict[str, Any]) -> Any:
        return trio.run(_host, self.socket, method, params)

    def start(self, crash_after: str | None) -> None:
        """Start the run (killed right after `crash_after` when named) and its owner.
        With a kill point the drill holds a process lock of the run's from before
        the owner starts until it holds the run lock (`take_run_lock_once_released`)
        or pauses the owner, so that no `crw flow next` resumes the killed run first
        (next resumes only a run no process holds: CMD-NEXT-18). The run lock alone
        cannot: flock hands a released lock to whichever process asks first, not to
        the waiter that asked before, so on a loaded machine a next started in the
        instant after the kill took it before the drill's blocked take woke."""
        env = self.crw.env | ({"CRW_CRASH_AFTER": crash_after} if crash_after else {})
        out = self.crw.start(
            str(self.workflow), "--owner", self.owner_thread, "--host", f"unix:{self.socket}",
            env=env,
        )  # fmt: skip
        assert out.code == 0, out.stderr
        self.run = RunDir(Path(out.json()["run_dir"]))
        if crash_after:
            fd = os.open(self.run.process_lock(RESUME_GUARD),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)  # fmt: skip
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.resume_guard = fd
        server = zygote.path_for(self.crw.env)
        self.owner = self.spawn(
            "tests.drill.owner", self.run.id, "--state", str(self.crw.state),
            "--socket", str(self.socket), "--owner", self.owner_thread,
            "--control", str(self.control), *(["--zygote", str(server)] if server else []),
        )  # fmt: skip

    def rows(self) -> list[dict[str, Any]]:
        assert self.run is not None
        if self.tail is None or self.tail.journal != self.run.journal:
            if self.tail is not None:
                self.tail.close()
            self.tail = JournalTail(self.run.journal)
        return self.tail.rows()

    def finish(self) -> list[dict[str, Any]]:
        """Wait for the owner to see the run end; the run's rows."""
        assert self.owner is not None
        try:
            self.owner.wait(timeout=self.run_deadline)
        except subprocess.TimeoutExpired:
            tail = [(r["row"], r.get("call"), r.get("k"), r.get("action")) for r in self.rows()]
            raise AssertionError(f"the run did not end; its rows: {tail[-4:]}") from None
        assert self.owner.returncode == 0, (self.root / "tests.drill.owner.stderr").read_text()
        return self.rows()

    def subagent_turns(self) -> tuple[Counter[str], dict[str, str]]:
        turns = _v2_turns if self.v2 else _subagent_turns
        return trio.run(turns, self.socket, self.owner_thread)

    def reap(self) -> None:
        """Every process the drill started, by pid: the owner first (it starts
        commands), the host, then every process that names the drill's directory
        until none is left. A command the owner had in flight outlives the owner's
        kill, and a `crw flow next` that finds the run unheld (its run process just
        killed) resumes it (CMD-NEXT-18): the rounds kill that one too, and the run
        process it launched, which would otherwise wait an hour for its host."""
        for child in sorted(self.processes, key=lambda child: child is not self.owner):
            kill(child.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        self.let_resumes_go()
        run_pids = [r["pid"] for r in self.rows() if r["row"] == "started"] if self.run else []
        for pid in {*self.crw.pids, *run_pids}:
            kill(pid)
        reap_naming(self.root)
        if self.tail is not None:
            self.tail.close()

    def take_run_lock_once_released(self, timeout: float = DEADLINE) -> int:
        """Hold the run lock from the moment the run process lets it go (it died,
        within `timeout` seconds), before any `crw flow next` can see the run
        unheld; the lock's descriptor."""
        assert self.run is not None
        fd = os.open(self.run.run_lock, os.O_RDWR | os.O_CLOEXEC)
        taken = threading.Event()

        def take() -> None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            taken.set()

        threading.Thread(target=take, daemon=True).start()
        # On a timeout the descriptor stays open: the blocked thread still uses it.
        assert taken.wait(timeout), "the run process never let its run lock go"
        self.let_resumes_go()  # the run lock held keeps them off from here
        return fd

    def let_resumes_go(self) -> None:
        """Let go the process lock `start` took to keep the owner from resuming the
        killed run, if it is held; its file goes first, as a run process's does."""
        if self.resume_guard is not None and self.run is not None:
            self.run.process_lock(RESUME_GUARD).unlink(missing_ok=True)
            os.close(self.resume_guard)
            self.resume_guard = None

    def let_run_lock_go(self, fd: int) -> None:
        """Let go the run lock `take_run_lock_once_released` took, once the owner
        is paused (it has no command in flight) and no launch of the run is under
        way. A `next` that read the run unheld in the instant between its process's
        death and the drill's take may have launched a resume (CMD-NEXT-18) whose
        process holds the launch lock and polls the run lock for TAKE_GRACE: let
        go sooner, that process would take the run the drill means to resume."""
        assert self.run is not None
        run = self.run
        try:
            wait_until("no launch of the run waits for its lock", lambda: not is_launching(run))
        finally:
            os.close(fd)

    def pause_owner(self, *, cut_next: bool = False) -> None:
        """The owner starts no command until `unpause_owner`. `cut_next`: the drill
        holds the run lock of a run whose process died, so a `crw flow next` the
        owner has in flight would read the run as starting for 15 s (CMD-NEXT-28)
        to answer `starting`, no step: the owner ends it (tests/drill/owner.py)."""
        (self.control / "pause").write_text(CUT_NEXT if cut_next else "")
        wait_until("the owner pauses", (self.control / "paused").exists)
        self.let_resumes_go()  # a paused owner starts no next

    def unpause_owner(self) -> None:
        (self.control / "pause").unlink(missing_ok=True)


D = TypeVar("D", bound=Drill)


def results(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["call"]: r["result"] for r in rows if r["row"] == "completed"}


def drill_at(kind: type[D], root: Path, state: Path | None = None) -> D:
    """A `kind` drill in `root`: its commands' state in `state` (`root/state` unless
    named), their temporary files in `root/tmp`."""
    (root / "tmp").mkdir(parents=True)
    return kind(root, Crw(state or root / "state", root / "tmp"))


@contextlib.contextmanager
def served(made: D, reap: Callable[[D], None] | None = None) -> Iterator[D]:
    """`made` with its host serving; at the end every process it started is reaped
    by pid (by `reap` if named, else by the drill's own `reap`)."""
    try:
        made.serve()
        yield made
    finally:
        if reap is None:
            made.reap()
        else:
            reap(made)


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    with served(drill_at(Drill, tmp_path)) as made:
        yield made


pytestmark = pytest.mark.xdist_group("test_crash_drill")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


def _uninterrupted(root: Path) -> dict[str, Any]:
    with served(drill_at(Drill, root)) as ran:
        ran.start(crash_after=None)
        rows = ran.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert set(results(rows)) == {"explore.1", "build.1", "review.1"}
    return results(rows)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The results of the uninterrupted run of the same workflow (on the journal
    file), made once a session for every module that compares with it (the crash
    drill, the torn-step drill, the crash drill on PostgreSQL: tests/drill/references.py)."""
    return dict(undisturbed("crash", _uninterrupted, tmp_path_factory))


KILL_POINTS = [  # prepared is committed with the first step_published: one point
    pytest.param(f"step_published@{CALL}", id="step_published"),
    pytest.param(f"turn_started@{CALL}", id="turn_started"),
    pytest.param(f"step_published@{CALL}#2", id="step_published#2"),
    pytest.param(f"turn_started@{CALL}#2", id="turn_started#2"),
    pytest.param(f"completed@{CALL}", id="completed"),
]


def killed_and_resumed(
    drill: Drill, crash_after: str, meanwhile: Callable[[Drill], None] | None = None
) -> list[dict[str, Any]]:
    """Start the run with the kill point, resume it once its process is gone (after
    `meanwhile`, which may leave the run directory as a power loss would), and let
    the owner play to the end; the run's rows."""
    drill.start(crash_after)
    run = drill.run
    assert run is not None
    lock = drill.take_run_lock_once_released()
    try:
        dead = drill.rows()
        first = next(r for r in dead if r["row"] == "started")
        wait_until("the killed run process is gone", lambda: not alive(first["pid"]), 5)
        wait_until("its process lock is let go", lambda: held_process_tokens(run) == [], 5)
        assert dead[-1]["row"] != "ended", "the kill point never fired"
        kind = crash_after.split("@")[0]
        killed = crash_after.split("@")[1].split("#")[0]
        assert [r["row"] for r in dead if r.get("call") == killed][-1] == kind
        drill.pause_owner(cut_next=True)
        if meanwhile is not None:
            meanwhile(drill)
    finally:
        drill.let_run_lock_go(lock)
    try:
        resumed = drill.crw("flow", "resume", run.id, "--detach", "--state",
                            str(drill.crw.state), "--json")  # fmt: skip
        assert resumed.code == 0, resumed.stderr
        wait_until(
            "the resumed process records its started row",
            lambda: sum(r["row"] == "started" for r in drill.rows()) == 2,
        )
        assert run_is_live(run)
    finally:
        drill.unpause_owner()
    rows = drill.finish()
    assert [r["pid"] for r in rows if r["row"] == "started"][1] == resumed.json()["pid"]
    return rows


def racing_resume(launched: list[Detached]) -> Callable[[Drill], None]:
    """A `meanwhile` that launches a resume as a `next` launches one that read the
    run unheld in the instant before the drill took its run lock: its check passed
    then, so it is not made again; its process (put in `launched`) polls the run
    lock the drill holds for TAKE_GRACE."""
    from crw.engine.run.launch import launch_once
    from crw.engine.run.runspec import read_run_spec

    def launch(drill: Drill) -> None:
        run = drill.run
        assert run is not None
        spec = read_run_spec(run.run_json)
        env = drill.crw.env
        launched.append(
            launch_once(run, drill.crw.state, spec.env_overrides(), env, _no_check).child
        )

    return launch


def _no_check() -> None:
    pass


def assert_packets_whole(drill: Drill, rows: list[dict[str, Any]]) -> None:
    """Every step's packet is whole as its step_published row names it, and the
    owner spawned each subagent on a packet that was whole (it reads the packet
    before it spawns: `took`, `packet_digest` in its log)."""
    run = drill.run
    assert run is not None
    digests = {r["marker"]: r.get("packet_digest") for r in rows if r["row"] == "step_published"}
    for row in rows:
        if row["row"] == "step_published" and row.get("packet"):
            call, k, attempt = row["call"], row["k"], row["attempt"]
            whole = bus.packet_whole(run, call, k, attempt, row["packet_digest"])
            assert whole, f"the packet of {row['marker']} is not whole"
    log = drill.control / "owner.jsonl"
    took = [json.loads(line) for line in log.read_text().splitlines() if '"took"' in line]
    assert took, "the owner spawned nothing"
    spawned_on = {t["took"]: t["packet_digest"] for t in took}
    bad = {m: d for m, d in spawned_on.items() if d != digests.get(m)}
    assert bad == {}, f"subagents spawned on a packet that was not whole: {bad}"


def test_the_drill_resumes_a_killed_run_though_a_next_launched_a_resume_in_the_kills_instant(
    drill: Drill, reference: dict[str, Any]
) -> None:
    """The drill's own harness: it lets the run lock go only once no launch waits
    for it, so the resume it starts is the one that runs (a suite beside two CPU
    hogs met a `next`'s resume taking the lock the drill let go)."""
    launched: list[Detached] = []
    try:
        rows = killed_and_resumed(drill, f"step_published@{CALL}", racing_resume(launched))
        assert launched, "no resume raced the drill's"
        gave_up = launched[0].wait(timeout=DEADLINE)
    finally:
        for child in launched:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            child.wait(timeout=DEADLINE)
    assert gave_up != 0, "the racing resume's process ran the run"
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == reference


@pytest.mark.parametrize("crash_after", KILL_POINTS)
def test_a_run_killed_at_any_row_resumes_to_the_same_outcome(
    drill: Drill, reference: dict[str, Any], crash_after: str
) -> None:
    """Every subagent the run bound is closed, the build's after its terminal row
    too (`completed`). The kill at `step_published` is also the torn-step drill's
    case of a power loss that left neither file (tests/drill/test_torn_step_drill.py):
    every packet whole, no subagent spawned on a torn one. spec: ATT-16, ATT-17,
    ATT-19, ATT-20, ATT-21, ATT-26, ATT-27, HARV-21, HARV-23, HARV-56, STEP-21"""
    rows = killed_and_resumed(drill, crash_after)
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == reference
    turns, status = drill.subagent_turns()
    twice = {marker: n for marker, n in turns.items() if n > 1}
    assert twice == {}, f"turns started twice for one marker: {twice}"
    assert turns[f"{CALL}/t1-a1"] == 1 and turns[f"{CALL}/t2-a1"] == 1
    open_agents = {agent: s for agent, s in status.items() if s != "notLoaded"}
    assert open_agents == {}, f"subagents never closed (HARV-56): {open_agents}"
    bound = {r["thread_id"] for r in rows if r["row"] == "thread_started"}
    assert bound and bound <= set(status), f"bound subagents not on the host: {bound - set(status)}"
    assert_packets_whole(drill, rows)


@dataclass
class DrillV2(Drill):
    v2: bool = True


@pytest.mark.parametrize("crash_after", KILL_POINTS)
def test_on_multi_agent_v2_a_run_killed_at_any_row_resumes_to_the_same_outcome(
    tmp_path: Path, reference: dict[str, Any], crash_after: str
) -> None:
    """The crash drill on multi-agent v2: the same outcome, no marker's turn started
    twice, the run's started rows speak v2 (the resumed one read it from the
    journal). No close: an idle v2 child holds no slot. spec: ATT-16, ATT-17,
    ATT-19, ATT-20, ATT-21, ATT-26, ATT-27, HARV-21, HARV-23"""
    with served(drill_at(DrillV2, tmp_path)) as drill:
        rows = killed_and_resumed(drill, crash_after)
        turns, _ = drill.subagent_turns()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == reference
    assert [r["multi_agent"] for r in rows if r["row"] == "started"] == ["multi_agent_v2"] * 2
    twice = {marker: n for marker, n in turns.items() if n > 1}
    assert twice == {}, f"turns started twice for one marker: {twice}"
    assert turns[f"{CALL}/t1-a1"] == 1 and turns[f"{CALL}/t2-a1"] == 1
