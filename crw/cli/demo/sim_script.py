"""`crw host sim script`: script the simulated host from the command line.

`crw host sim script --socket S TARGET BEHAVIOUR` sends one `sim/script` to the
host `crw host sim serve --socket S` serves: the turns TARGET names (a call's, a
marker glob's, every turn's) behave as BEHAVIOUR says. BEHAVIOUR is checked here
by the host's own checks (`crw.host.sim.checks`) before anything is sent: an
unknown key or a bad value is one line naming it and what it takes (exit 2).
`--list` shows the scripts set (`sim/scripts`), `--clear TARGET` removes those
of TARGET (`sim/unscript`).
"""

from __future__ import annotations

import json as json_module
from pathlib import Path
from typing import Any

from crw.cli.demo.owner_sim import connect_sim
from crw.cli.output import emit, json_text
from crw.cli.shell import shell_word
from crw.errors import InputError, RefusedError

EXAMPLE = """'{"invalidFirst": true}'"""
HELP = "see crw host sim script --help"


def script_command(
    target: str | None,
    behaviour: str | None,
    *,
    socket: str,
    role: str | None,
    list_: bool,
    clear: bool,
    json: bool,
) -> int:
    """Set, list or clear the scripts of the simulated host on `socket`.

    Raises:
        InputError: a missing or extra argument, a TARGET or BEHAVIOUR the host
            would refuse (nothing is sent).
        RefusedError: no host on `socket`, or it refused the request.
    """
    if list_:
        if target is not None or clear or role is not None:
            raise InputError(f"--list takes no TARGET, --role or --clear; {HELP}")
        scripts = _request(socket, "sim/scripts", {})["scripts"]
        emit(json, {"socket": _where(socket), "scripts": scripts}, lambda: _listed(scripts))
        return 0
    if target is None:
        raise InputError(
            f"TARGET is missing: a call (build.1), a turn marker or glob, or *; e.g. "
            f"crw host sim script --socket {shell_word(socket)} build.1 {EXAMPLE}"
        )
    match = match_of(target, role)
    if clear:
        if behaviour is not None:
            raise InputError(f"--clear takes no BEHAVIOUR: it removes the scripts of {target}")
        return _clear(socket, match, json)
    params = {"match": match, "behaviour": parse_behaviour(behaviour, target)}
    _, listed = _requests(socket, ("sim/script", params), ("sim/scripts", {}))
    older = [s["match"] for s in listed["scripts"][:-1]]
    hidden = [m for i, m in enumerate(older) if shadows(match, m) and m not in older[:i]]
    payload = {"socket": _where(socket), **params, "shadows": hidden}
    emit(json, payload, lambda: _set(params, hidden, socket))
    return 0


def shadows(new: dict[str, str], old: dict[str, str]) -> bool:
    """Whether a script of match `new` decides every turn one of match `old`, set
    before it, would (the newest script that matches decides a turn)."""
    from fnmatch import fnmatchcase

    if "role" in new and new.get("role") != old.get("role"):
        return False
    if "marker" not in new:
        return True
    return "marker" in old and fnmatchcase(old["marker"], new["marker"])


def match_of(target: str, role: str | None) -> dict[str, str]:
    """The `match` of TARGET: `*` every turn, a call `c` its turns (`c/*`), anything
    with a `/` a marker glob as it is; `role` narrows it to that role's turns.

    Raises:
        InputError: an empty TARGET or ROLE, or one with white space.
    """
    for what, value in (("TARGET", target), ("--role", role)):
        if value is not None and (not value or value.split() != [value]):
            raise InputError(
                f"{what} {value!r} must be one word: a call (build.1), a turn marker or "
                f"glob (build.1/t1-a1), or *; {HELP}"
            )
    match: dict[str, str] = {}
    if target != "*":
        match["marker"] = target if "/" in target else f"{target}/*"
    if role is not None:
        match["role"] = role
    return match


def parse_behaviour(text: str | None, target: str) -> dict[str, Any]:
    """BEHAVIOUR read as JSON and checked as the host checks it.

    Raises:
        InputError: missing, not JSON, or refused by the host's checks.
    """
    from crw.host.sim.behaviour import Behaviour
    from crw.host.sim.state import RpcError

    if text is None:
        raise InputError(
            f"BEHAVIOUR is missing: a JSON object such as {EXAMPLE} for {target}; {HELP}"
        )
    try:
        value = json_module.loads(text)
    except ValueError as err:
        raise InputError(f"BEHAVIOUR is not JSON ({err}); write it as {EXAMPLE}") from None
    try:
        Behaviour.from_wire(value)
    except RpcError as err:
        reason = err.message.removeprefix("sim/script: ")
        raise InputError(f"BEHAVIOUR refused: {reason}; {HELP}") from None
    assert isinstance(value, dict)  # from_wire took it
    return value


def _clear(socket: str, match: dict[str, str], json: bool) -> int:
    removed = int(_request(socket, "sim/unscript", {"match": match})["removed"])
    if not removed:
        raise RefusedError(
            f"no script is set for {_target(match)}; list them: "
            f"crw host sim script --socket {shell_word(socket)} --list"
        )
    payload = {"socket": _where(socket), "match": match, "removed": removed}
    many = "script" if removed == 1 else "scripts"
    emit(json, payload, f"cleared {removed} {many} of {_target(match)}")
    return 0


def _request(socket: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return _requests(socket, (method, params))[0]


def _requests(socket: str, *requests: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The results of `requests`, made in order on one connection.

    Raises:
        RefusedError: no host on `socket`, or it refused one (the rest are not made).
    """
    import trio

    from crw.host.errors import HostRequestError

    async def call() -> list[dict[str, Any]]:
        async with connect_sim(socket) as client:
            return [dict(await client.request(method, params)) for method, params in requests]

    try:
        return trio.run(call)
    except HostRequestError as err:
        raise RefusedError(
            f"the simulated host on unix:{socket} refused {err.method}: {err.message}"
        ) from None


def _where(socket: str) -> str:
    return f"unix:{Path(socket).absolute()}"


def _target(match: dict[str, Any]) -> str:
    marker = match.get("marker", "every turn")
    return f"{marker} (role {match['role']})" if "role" in match else str(marker)


def _set(params: dict[str, Any], hidden: list[dict[str, str]], socket: str) -> str:
    lines = [f"scripted {_target(params['match'])}: {json_text(params['behaviour'])}"]
    if hidden:
        names = ", ".join(_target(m) for m in hidden)
        lines.append(
            f"it decides the turns of the older scripts of {names} now (the newest that "
            f"matches wins): script those again to have them win; list them: "
            f"crw host sim script --socket {shell_word(socket)} --list"
        )
    return "\n".join(lines)


def _listed(scripts: list[dict[str, Any]]) -> str:
    if not scripts:
        return "no script set: each turn answers a valid instance of its schema after 1 s"
    lines = [f"{_target(s['match'])}: {json_text(s['behaviour'])}" for s in scripts]
    return "\n".join(["scripts, oldest first (the newest that matches a turn decides it):", *lines])
