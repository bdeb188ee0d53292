"""A real Codex owner thread on a shared `codex app-server --listen unix://PATH`,
offline, its model and its subagents' the mock Responses API under `Policies`.

What a user's setup has, made fresh per test: a CODEX_HOME whose config names the
mock provider and an `[agents.<type>]` table for each agent type of the role store
codex does not build in; a state directory with `roles.toml`; the spawn hook
installed and trusted (`crw flow hook install --host unix:PATH`); `crw` on the
app-server's PATH and `CRW_STATE` in its environment (so the owner's shell and the
hook find the state). The test starts the owner thread and its first turn; the
owner's model starts the run from the thread's shell.

The `crw` commands, the test's own (`OwnedRun.crw`) and those the owner's shell
runs, are forked from the worker's fork server (tests/zygote.py): the owner's
shell finds owner_shell.py's script first on its PATH. So is the spawn hook codex
runs before each of the owner's tool calls, a score a test: once the real `crw
flow hook install` has written and trusted the hook, its command is pointed at the
script (`fork_the_hook`, trusted again as the install trusts), whose child runs
`crw flow hook spawn` as the installed `crw` does; a cold hook was ~0.17 s of
every tool call's wall. The command as the install writes it runs on the real
host in tests/hook (test_codex_hook.py, test_codex_hook_v2.py).

Every process is reaped at teardown, the moment the test is done: the app-server
by pid (SIGKILL to its group: under SIGTERM codex would first finish the owner's
turn, which goes on running commands), each run process the owner's commands
started (their `pid` and `resumed_pid`, read off the shell outputs the mock saw)
or the test resumed, then whatever still names the test's directory (a command
the killed server's shell was running, a run process it resumed:
tests/processes.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from crw.binding.install import SPAWN_ARGS, read_config, spawn_hooks, with_command, write_config
from crw.cli.owner.hook_install import Installed, trust
from crw.engine.run.rundir import find_run, list_runs
from crw.host.connect import connect_host
from crw.host.mock_model import CODEX_MODEL, MockModel, write_codex_home
from crw.host.uri import HostUri
from crw.journal.log import read_journal
from tests import zygote
from tests.actors.test_app_server_run import CHAIN
from tests.codex_owner import owner_shell
from tests.codex_owner.policy import START_KEY, Policies, shell_json
from tests.codex_owner.story import owner_story
from tests.host.codex_env import SharedServer, kill, shared_app_server
from tests.processes import processes_naming, reap_naming

PLAN = """
[[node]]
id = "plan"
role = "explorer"
task = "Plan the change."
schema.type = "object"
schema.required = ["steps"]
schema.properties.steps = { type = "array", items = { type = "string" } }
"""
WORKFLOW = CHAIN.replace('needs = ["explore"]', 'needs = ["explore", "plan"]') + PLAN
"""explore and plan (explorer), then build (executor), then review (reviewer)."""

PAIRS = {
    "explorer": ("explorer", CODEX_MODEL, "low"),
    "executor": ("executor", CODEX_MODEL, "high"),
    "reviewer": ("reviewer", CODEX_MODEL, "low"),
}
"""role: (agent_type, model, effort) of the test's role store."""
AGENT_TYPES = ("executor", "reviewer")
"""Agent types codex 0.163 does not build in: config.toml gives each a table."""
RUN_LIMIT = 150.0
"""A whole owned run takes seconds here; a hang fails the test well before the
test's own timeout."""
TERMINAL = frozenset({"completed", "null_model", "held"})


def roles_toml(pairs: dict[str, tuple[str, str, str]]) -> str:
    return "".join(
        f'[{role}]\nagent_type = "{kind}"\nmodel = "{model}"\neffort = "{effort}"\n'
        for role, (kind, model, effort) in pairs.items()
    )


def started_pids(answer: dict[str, Any]) -> list[int]:
    """The run processes a command's JSON answer reports starting."""
    return [answer[k] for k in ("pid", "resumed_pid") if isinstance(answer.get(k), int)]


@dataclass
class OwnedRun:
    """The test's view of the setup: the state, the shared server, the owner."""

    tmp: Path
    state: Path
    home: Path
    model: MockModel
    policies: Policies
    server: SharedServer
    owner: str = ""
    pids: list[int] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"unix:{self.server.socket_path}"

    def crw(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`crw ARGS` from the test (the app-server's environment, the work dir); a
        run process it reports starting (`pid`, `resumed_pid`) is reaped at the end.
        Forked from the worker's fork server when it can (tests/zygote.py)."""
        env = dict(os.environ) | {"CODEX_HOME": str(self.home)}
        done = zygote.run(list(args), env, self.tmp / "work", 60)
        self.pids += started_pids(shell_json(done.stdout))
        return done

    async def begin(self, workflow: str = WORKFLOW) -> None:
        """Start the owner thread and its first turn: start the run from its shell."""
        (self.tmp / "owned.toml").write_text(workflow)
        start = f"crw flow start {self.tmp / 'owned.toml'} --host {self.host} --json"
        async with connect_host(HostUri("unix", str(self.server.socket_path))) as client:
            params = {"cwd": str(self.tmp / "work"), "sandbox": "danger-full-access"}
            self.owner = (await client.request("thread/start", params))["thread"]["id"]
            said = f"Own a crw flow run.\n{START_KEY}\n{start}\n"
            turn = {"threadId": self.owner, "input": [{"type": "text", "text": said}]}
            await client.request("turn/start", turn)

    def run_id(self) -> str:
        runs = list_runs(self.state)
        return runs[0] if len(runs) == 1 else ""

    def rows(self) -> list[dict[str, Any]]:
        run = self.run_id()
        if not run:
            return []
        return [dict(row) for row in read_journal(find_run(self.state, run).journal).rows]

    async def until_row(
        self, kind: str, where: Any = None, limit: float = RUN_LIMIT
    ) -> dict[str, Any]:
        """The first row of `kind` (that `where` takes), polling the journal; past
        `limit`, an AssertionError naming the rows there are (what the run did)."""
        with trio.move_on_after(limit):
            while True:
                for row in self.rows():
                    if row["row"] == kind and (where is None or where(row)):
                        return row
                await trio.sleep(0.1)
        seen = [(r["row"], r.get("call"), r.get("reason") or r.get("status")) for r in self.rows()]
        told = "\n  ".join(owner_story(self.model.requests))
        raise AssertionError(
            f"no {kind} row in {limit:.0f} s; the rows: {seen}\nthe owner's conversation:\n"
            f"  {told}\nthe run's log (its end):\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the run's log (run.log), or why there are none."""
        run = self.run_id()
        if not run:
            return "(no run)"
        try:
            text = find_run(self.state, run).log.read_text(errors="replace")
        except OSError as err:
            return f"({err})"
        return "\n".join(text.splitlines()[-lines:])

    async def owner_idle(self) -> dict[str, Any]:
        """The owner thread once its last turn has ended (read over the socket)."""
        with trio.fail_after(RUN_LIMIT):
            async with connect_host(HostUri("unix", str(self.server.socket_path))) as client:
                while True:
                    read = await client.request("thread/read", {"threadId": self.owner})
                    if read["thread"]["status"]["type"] == "idle":
                        thread: dict[str, Any] = read["thread"]
                        return thread
                    await trio.sleep(0.1)

    def keep_requests(self) -> None:
        """The mock model's requests, each with its reply, written to
        `model-requests.jsonl` beside the app-server's log (a failed test's)."""
        with (self.tmp / "model-requests.jsonl").open("w") as kept:
            for request in self.model.requests:
                said = {"path": request.path, "user_text": request.user_text[:200]}
                said["reply"] = repr(request.reply)
                kept.write(json.dumps(said | {"body": request.body}) + "\n")

    def run_pids(self) -> list[int]:
        """Every run process the owner's shell commands reported starting."""
        found = set(self.pids)
        for request in self.model.requests:
            for item in request.body.get("input") or []:
                if item.get("type") == "function_call_output":
                    found |= set(started_pids(shell_json(str(item.get("output")))))
        return sorted(found)

    def reap_runs(self) -> list[str]:
        """Each run process still alive gets SIGKILL (a finished one has exited):
        those the commands reported, then any other a `started` row of the run
        names (a process no answer the test saw reported); each of those is told."""
        reported = self.run_pids()
        for pid in reported:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
        rows, alive = self.rows(), processes_naming(self.tmp)  # a pid of ours, not reused
        unreported: list[str] = []
        for at, row in enumerate(rows):
            process = row.get("pid") if row["row"] == "started" else None
            if process not in alive or process in reported:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGKILL)
                before = [(r["row"], r.get("call")) for r in rows[max(0, at - 4) : at]]
                unreported.append(f"pid {process}, the run's started row {at} (after {before})")
        time.sleep(0.05)
        return unreported


def fork_the_hook(setup: OwnedRun, script: Path) -> None:
    """Point the installed spawn hook at `script` (owner_shell.py's, which has the
    fork server run `crw flow hook spawn`) and trust it as the install does
    (crw.cli.owner.hook_install.trust: the app-server's `hooks/list` hash), on a
    thread of its own (the test's Trio loop runs this block)."""
    config = read_config(setup.home / "config.toml")
    command = shlex.join([str(script), *SPAWN_ARGS])
    write_config(config.path, with_command(config, spawn_hooks(config.data), command))
    forked = Installed(config.path, command)
    uri = HostUri("unix", str(setup.server.socket_path))
    trusting = threading.Thread(target=trio.run, args=(trust, forked, uri, setup.home))
    trusting.start()
    trusting.join()
    assert forked.trusted, f"the forked hook is not trusted: {forked.warnings}"


@contextlib.contextmanager
def owned_run(
    tmp: Path,
    policies: Policies,
    pairs: dict[str, tuple[str, str, str]] = PAIRS,
    settings: str = "",
    retries: int = 0,
    multi_agent: str = "v1",
) -> Iterator[OwnedRun]:
    """The whole setup for the block; every process reaped after it. `retries`: the
    mock provider's request_max_retries and stream_max_retries. `multi_agent`: the
    owner's tools, `v1`, or `v2` (config.toml's `[features] multi_agent_v2 = true`,
    which the run's start reads to speak v2 too)."""
    state, work = tmp / "state", tmp / "work"
    state.mkdir()
    work.mkdir()
    (state / "roles.toml").write_text(roles_toml(pairs))
    forks = zygote.zygote()  # started (once a worker) before the environment names tmp
    saved = dict(os.environ)
    os.environ["CRW_STATE"] = str(state)
    os.environ["TMPDIR"] = str(tmp)
    path = [str(Path(sys.executable).parent), os.environ["PATH"]]
    script = None
    if forks is not None and forks.takes(dict(os.environ)):
        script = owner_shell.install(tmp / "bin", forks.path, forks.env)
        path.insert(0, str(script.parent))
    os.environ["PATH"] = os.pathsep.join(path)
    try:
        with MockModel(policies) as model:
            home = write_codex_home(tmp / "codex-home", model.url)
            toml = (home / "config.toml").read_text()
            for key in ("request_max_retries", "stream_max_retries"):
                toml = toml.replace(f"{key} = 0\n", f"{key} = {retries}\n")
            if multi_agent == "v2":
                toml = toml.replace("[features]\n", "[features]\nmulti_agent_v2 = true\n")
            (home / "config.toml").write_text(toml)
            with (home / "config.toml").open("a") as config:
                for kind in AGENT_TYPES:
                    config.write(f'\n[agents.{kind}]\ndescription = "The crw flow {kind} role."\n')
            with tempfile.TemporaryDirectory(prefix="crw-sock-", dir="/tmp") as short:
                socket = Path(short) / "app-server.sock"
                with shared_app_server(home, socket, tmp / "app-server.log") as server:
                    setup = OwnedRun(tmp, state, home, model, policies, server)
                    try:
                        installed = setup.crw(
                            "flow", "hook", "install", "--host", setup.host, "--json"
                        )
                        assert json.loads(installed.stdout)["trusted"] is True, installed.stderr
                        if script is not None:
                            fork_the_hook(setup, script)
                        yield setup
                    except BaseException:
                        setup.keep_requests()
                        raise
                    finally:
                        policies.subagent.release()
                        kill(server.process)
                        unreported = setup.reap_runs()
                        reap_naming(tmp)
                    told = "\n  ".join(owner_story(model.requests))
                    assert not unreported, (
                        f"run processes no answer the test saw reported (killed now): "
                        f"{unreported}\nthe owner's conversation:\n  {told}"
                    )
    finally:
        os.environ.clear()
        os.environ.update(saved)
