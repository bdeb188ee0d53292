"""The crw-flow skill reaches a real codex 0.163 owner's model once `crw flow codex
install` has run against its running app-server (offline, the mock model), and not
before, and the agent types it adds are ones that host spawns; the skill names only
commands crw has; docs/codex.md shows it in full."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from crw.binding.codex_setup import skill_text
from crw.host.connect import connect_host
from crw.host.mock_model import MockModel, write_codex_home
from crw.host.mock_replies import FunctionCall, calls, text
from crw.host.uri import HostUri
from tests.host.codex_env import shared_app_server

ROOT = Path(__file__).resolve().parents[2]
ASKED = 60.0
"""A turn's first model request comes in well under a second here."""


def front_matter() -> dict[str, str]:
    """The front matter's `key: value` lines (plain scalars: the skill uses no other)."""
    head = skill_text().split("---\n")[1]
    return dict(line.split(": ", 1) for line in head.splitlines())


def skills_listed(body: dict[str, object]) -> str:
    """The request's developer text that lists the skills (codex's `<skills_instructions>`)."""
    for item in body.get("input") or []:  # type: ignore[attr-defined]
        for part in item.get("content") or []:
            text = part.get("text") or ""
            if "<skills_instructions>" in text:
                return str(text)
    return ""


async def first_request(model: MockModel, socket: Path, cwd: Path) -> dict[str, object]:
    """Start a new thread and a turn on it; the model request of that turn."""
    seen = len(model.requests)
    async with connect_host(HostUri("unix", str(socket))) as client:
        thread = (await client.request("thread/start", {"cwd": str(cwd)}))["thread"]["id"]
        turn = {"threadId": thread, "input": [{"type": "text", "text": "hello"}]}
        await client.request("turn/start", turn)
        with trio.fail_after(ASKED):
            while True:
                if len(model.requests) > seen:
                    return model.requests[seen].body
                await trio.sleep(0.05)


def install(home: Path, state: Path, cwd: Path, host: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "crw",
            "flow",
            "codex",
            "install",
            "--host",
            host,
            "--yes",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env | {"CODEX_HOME": str(home), "CRW_STATE": str(state)},
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed: dict[str, object] = json.loads(done.stdout)
    assert (installed["trusted"], installed["skill_listed"]) == (True, True)
    return installed


async def listed_names(socket: Path, cwd: Path) -> list[str]:
    """The skills the app-server lists for `cwd` (as codex's TUI asks when it attaches)."""
    async with connect_host(HostUri("unix", str(socket))) as client:
        answer = await client.request("skills/list", {"cwds": [str(cwd)]})
    return [skill["name"] for entry in answer["data"] for skill in entry["skills"]]


@pytest.mark.codex
@pytest.mark.parametrize("before", ["thread", "list"])
async def test_the_skill_reaches_the_owners_model_after_the_install_and_not_before(
    tmp_path: Path, before: str
) -> None:
    """Its name and description are in the skills list of a thread started after the
    install on the running app-server. `thread`: a thread started before the install
    has none of it. `list`: before the install a client only listed the skills (no
    thread yet), which leaves codex caching the list without the skill: the new
    thread has it only because the install has the host read them again
    (`skills/list` with forceReload)."""
    matter = front_matter()
    line = f"- {matter['name']}: {matter['description']} (file: "
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    with MockModel() as model:
        home = write_codex_home(tmp_path / "codex-home", model.url)
        with tempfile.TemporaryDirectory(prefix="crw-sock-", dir="/tmp") as short:
            socket = Path(short) / "app-server.sock"
            with shared_app_server(home, socket, tmp_path / "app-server.log"):
                if before == "thread":
                    earlier = await first_request(model, socket, work)
                    assert "<skills_instructions>" in skills_listed(earlier)
                    assert matter["name"] not in json.dumps(earlier)
                else:
                    assert matter["name"] not in await listed_names(socket, work)
                install(home, state, work, f"unix:{socket}")
                after = await first_request(model, socket, work)
    assert line in skills_listed(after)


async def spawn_output(model: MockModel, socket: Path, cwd: Path, key: str) -> str:
    """The tool output of an owner's spawn_agent of agent type `architect` (a new
    thread whose model spawns once, then ends its turn)."""
    spawn = {"agent_type": "architect", "message": "Look around.", "fork_context": False}
    model.script(
        key, calls(FunctionCall("spawn_agent", spawn, namespace="multi_agent_v1")), text("done")
    )
    async with connect_host(HostUri("unix", str(socket))) as client:
        thread = (await client.request("thread/start", {"cwd": str(cwd)}))["thread"]["id"]
        turn = {"threadId": thread, "input": [{"type": "text", "text": key}]}
        await client.request("turn/start", turn)
    with trio.fail_after(ASKED):
        while True:
            for request in model.requests:
                if key not in request.user_text:
                    continue
                for item in request.body.get("input") or []:
                    if item.get("type") == "function_call_output":
                        return str(item.get("output"))
            await trio.sleep(0.05)


@pytest.mark.codex
async def test_the_agent_types_it_adds_are_ones_the_running_host_spawns(tmp_path: Path) -> None:
    """Before the install codex refuses a spawn of the architect role's agent type;
    after it (its `[agents.architect]` table), a new thread's spawn makes a subagent."""
    work = tmp_path / "work"
    work.mkdir()
    with MockModel() as model:
        home = write_codex_home(tmp_path / "codex-home", model.url)
        with tempfile.TemporaryDirectory(prefix="crw-sock-", dir="/tmp") as short:
            socket = Path(short) / "app-server.sock"
            with shared_app_server(home, socket, tmp_path / "app-server.log"):
                before = await spawn_output(model, socket, work, "spawn-before")
                assert before == "unknown agent_type 'architect'"
                install(home, tmp_path / "state", work, f"unix:{socket}")
                after = await spawn_output(model, socket, work, "spawn-after")
    assert json.loads(after)["agent_id"]


def test_the_skill_is_package_data_with_the_front_matter_codex_reads() -> None:
    """codex 0.163 takes a skill with a `name` (at most 64 characters) and a
    one-line `description` (at most 1024)."""
    matter = front_matter()
    assert matter["name"] == "crw-flow"
    assert 0 < len(matter["description"]) <= 1024
    assert "\n" not in matter["description"]
    assert len(skill_text().split()) < 700


def test_every_command_the_skill_names_exists_with_its_flags() -> None:
    """Each `crw flow <command> ...` the skill quotes (in backquotes or a code block)
    is a command of crw's, and each of its `--flags` is one that command takes (its
    --help lists it)."""
    text = skill_text()
    spans = re.findall(r"`(crw flow [^`]+)`", text) + re.findall(r"^ {4}(crw flow .+)$", text, re.M)
    commands: dict[str, set[str]] = {}
    for span in spans:
        words = span.split()
        commands.setdefault(words[2], set()).update(re.findall(r"--[a-z-]+", span))
    assert {"start", "next", "resume", "answer", "status"} <= set(commands)
    for command, flags in commands.items():
        helped = subprocess.run(
            [sys.executable, "-m", "crw", "flow", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert flags <= set(re.findall(r"--[a-z-]+", helped.stdout)), command


def test_docs_codex_md_shows_the_shipped_skill_in_full() -> None:
    doc = (ROOT / "docs" / "codex.md").read_text()
    shown = re.search(r"<!-- skill -->\n````markdown\n(.*?)````\n", doc, re.DOTALL)
    assert shown is not None, "docs/codex.md: no ````markdown block after <!-- skill -->"
    assert shown.group(1) == skill_text()
