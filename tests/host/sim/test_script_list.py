"""`sim/script`'s checks name the key and what it takes; `reject` answers a review
that rejects; `sim/scripts` lists the scripts set and `sim/unscript` removes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio.testing

from crw.host.sim.behaviour import Behaviour
from crw.host.sim.checks import REJECTED
from crw.host.sim.keys import BEHAVIOURS
from crw.host.sim.state import RpcError
from tests.host.sim.support import RpcFailure, answer_of, connected, task_text, text_input

REVIEW = {
    "type": "object",
    "required": ["verdict", "findings"],
    "properties": {
        "verdict": {"enum": ["accept", "reject"]},
        "findings": {"type": "array", "items": {"type": "string"}},
    },
}


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        ({"invalidfirst": True}, "unknown behaviour key 'invalidfirst'; known: answer, text,"),
        ([], "behaviour must be an object of known: answer,"),
        ({"invalidFirst": 1}, "invalidFirst must be true or false, not 1"),
        ({"hang": "yes"}, "hang must be true or false, not 'yes'"),
        ({"text": 3}, "text must be a string, not 3"),
        ({"fail": 5}, 'fail must be a codexErrorInfo: a name such as "usageLimitExceeded"'),
        ({"fail": {"a": 1, "b": 2}}, "fail must be a codexErrorInfo"),
        ({"reject": False}, "reject must be true, a finding or a non-empty list of findings"),
        ({"reject": []}, "reject must be true, a finding or a non-empty list of findings"),
        ({"reject": True, "answer": {}}, "reject is an answer of its own"),
        ({"tokens": {"input": "9"}}, "tokens.input must be an integer >= 0"),
    ],
)
def test_a_bad_behaviour_is_refused_naming_the_key_and_what_it_takes(
    behaviour: Any, says: str
) -> None:
    with pytest.raises(RpcError) as refused:
        Behaviour.from_wire(behaviour)
    assert refused.value.code == -32600
    assert says in refused.value.message
    if "known:" in says:
        assert refused.value.message.endswith(", ".join(BEHAVIOURS))


@pytest.mark.parametrize(
    ("reject", "findings"),
    [(True, [REJECTED]), ("no tests", ["no tests"]), (["a", "b"], ["a", "b"])],
)
async def test_reject_answers_a_review_that_rejects(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, reject: Any, findings: list[str]
) -> None:
    async with connected(tmp_path) as (_, client):
        script = {"match": {"marker": "build.2/*"}, "behaviour": {"reject": reject}}
        await client.request("sim/script", script)
        thread_id = (await client.request("thread/start", {"cwd": "/w"}))["thread"]["id"]
        text = task_text("build.2/t1-a1", "reviewer", REVIEW)
        started = await client.request(
            "turn/start", {"threadId": thread_id, "input": text_input(text)}
        )
        turn = await client.turn_completed(started["turn"]["id"])
    assert answer_of(turn) == {"verdict": "reject", "findings": findings}


async def test_scripts_are_listed_as_sent_and_unscript_removes_those_of_a_match(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    every = {"match": {}, "behaviour": {"seconds": 0.1}}
    build = {"match": {"marker": "build.1/*"}, "behaviour": {"invalidFirst": True}}
    review = {"match": {"marker": "build.2/*", "role": "reviewer"}, "behaviour": {"reject": True}}
    async with connected(tmp_path) as (host, client):
        for script in (every, build, review, build):
            await client.request("sim/script", script)
        listed = await client.request("sim/scripts", {})
        removed = await client.request("sim/unscript", {"match": {"marker": "build.1/*"}})
        none = await client.request("sim/unscript", {"match": {"marker": "build.9/*"}})
        after = await client.request("sim/scripts", {})
        with pytest.raises(RpcFailure) as refused:
            await client.request("sim/unscript", {"match": {"call": "build.1"}})
        with pytest.raises(RpcFailure):
            await client.request("sim/script", {"match": {}, "behaviour": {"hang": 1}})
        kept = await client.request("sim/scripts", {})
    assert listed == {"scripts": [every, build, review, build]}
    assert (removed, none) == ({"removed": 2}, {"removed": 0})
    assert after == kept == {"scripts": [every, review]}
    assert len(host.turns.scripts) == 2
    assert refused.value.message == "sim/script: match takes only marker and role"
