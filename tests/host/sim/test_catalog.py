"""The simulated host's model catalog: `model/list` as codex answers it, and the
spawns codex refuses with its own words (host-protocol.md, What a real owner
thread meets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from crw.host.sim.catalog import SPAWN_REFUSED, Catalog
from crw.host.sim.server import open_sim_host
from tests.host.sim.support import RawClient, RpcFailure, client_of

MODELS = ("gpt-5", "gpt-5-mini", "gpt-5-nano")


@asynccontextmanager
async def _host(home: Path, catalog: bool = True) -> AsyncIterator[tuple[RawClient, str]]:
    async with open_sim_host(home, catalog=Catalog.of(MODELS, home) if catalog else None) as host:
        client = await client_of(host)
        owner = (await client.request("sim/startOwner", {"cwd": "/repo"}))["threadId"]
        yield client, str(owner)
        await client.transport.aclose()


def _spawn(owner: str, **more: str) -> dict[str, str]:
    return {"parentThreadId": owner, "agentType": "worker", "message": "m"} | more


async def test_model_list_answers_the_catalog_as_codex_does(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _host(tmp_path / "home") as (client, _):
        whole = await client.request("model/list", {})
        first = await client.request("model/list", {"limit": 2})
        rest = await client.request("model/list", {"cursor": first["nextCursor"]})
    assert [m["model"] for m in whole["data"]] == list(MODELS) and whole["nextCursor"] is None
    assert [m["id"] for m in first["data"] + rest["data"]] == list(MODELS)
    assert rest["nextCursor"] is None
    model = whole["data"][0]
    assert (model["isDefault"], model["hidden"], model["defaultReasoningEffort"]) == (
        True,
        False,
        "medium",
    )
    efforts = [e["reasoningEffort"] for e in model["supportedReasoningEfforts"]]
    assert efforts == ["low", "medium", "high"]


async def test_a_spawn_of_a_model_outside_the_catalog_is_refused_with_codexs_words(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _host(tmp_path / "home") as (client, owner):
        with pytest.raises(RpcFailure) as refused:
            await client.request("sim/spawnAgent", _spawn(owner, model="gpt-5.4-mini"))
        loaded = await client.request("thread/loaded/list", {})
    assert refused.value.code == SPAWN_REFUSED
    assert refused.value.message == (
        "Unknown model `gpt-5.4-mini` for spawn_agent. Available models: "
        "gpt-5, gpt-5-mini, gpt-5-nano"
    )
    assert loaded["data"] == [owner]  # no child


async def test_a_spawn_of_an_unknown_agent_type_is_refused_with_codexs_words(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[agents.critic]\ndescription = "reviews"\n')
    async with _host(home) as (client, owner):
        with pytest.raises(RpcFailure) as refused:
            await client.request("sim/spawnAgent", _spawn(owner, agentType="architect"))
        for known in ("worker", "explorer", "default", "critic"):
            spawned = await client.request("sim/spawnAgent", _spawn(owner, agentType=known))
            assert spawned["agentId"]
    assert (refused.value.code, refused.value.message) == (
        SPAWN_REFUSED,
        "unknown agent_type 'architect'",
    )


async def test_the_model_is_checked_before_the_agent_type(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _host(tmp_path / "home") as (client, owner):
        spawn = _spawn(owner, agentType="architect", model="gpt-9")
        with pytest.raises(RpcFailure, match="Unknown model `gpt-9`"):
            await client.request("sim/spawnAgent", spawn)


async def test_a_host_without_a_catalog_lists_no_models_and_refuses_no_spawn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _host(tmp_path / "home", catalog=False) as (client, owner):
        listed = await client.request("model/list", {})
        spawn = _spawn(owner, agentType="architect", model="gpt-5.4-mini")
        spawned = await client.request("sim/spawnAgent", spawn)
    assert listed == {"data": [], "nextCursor": None}
    assert spawned["agentId"]


async def test_sim_catalog_says_what_the_host_takes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """What the start's facts and `crw flow init` read of a simulated host: the
    catalog's models and agent types (built in and its config.toml's tables), or
    null for a host that takes any; the model a thread without one gets; the
    multi-agent tools of the owner the request names."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[agents.critic]\ndescription = "reviews"\n')
    async with _host(home) as (client, _):
        strict = await client.request("sim/catalog", {})
        owner = (await client.request("sim/startOwner", {"multiAgentV2": True}))["threadId"]
        of_owner = await client.request("sim/catalog", {"owner": owner})
    async with _host(tmp_path / "any", catalog=False) as (client, _):
        any_ = await client.request("sim/catalog", {})
    assert of_owner["ownerMultiAgent"] == "multi_agent_v2"
    assert strict == {
        "ownerMultiAgent": None,
        "models": list(MODELS),
        "agentTypes": ["critic", "default", "explorer", "worker"],
        "defaultModel": "gpt-5",
        "config": str(home / "config.toml"),
    }
    assert any_ == {
        "ownerMultiAgent": None,
        "models": None,
        "agentTypes": None,
        "defaultModel": "sim-model",
        "config": str(tmp_path / "any" / "config.toml"),
    }
