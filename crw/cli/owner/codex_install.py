"""`crw flow codex install [--codex-home DIR] [--host URI] [--state DIR] [--yes] [--json]`.

Sets a CODEX_HOME up for an owner thread in one step: the spawn hook in config.toml
(as `crw flow hook install` writes it), an `[agents.<type>]` table for each agent
type of the role store (`<state>/roles.toml`) codex does not know, and the owner's
skill at `skills/crw-flow/SKILL.md`. It shows what it will write first and writes
only with `--yes` or a `y` at the prompt; then, through the app-server (`--host`,
else the codex daemon's socket when it is there), it records the hook's trust and
has the host read its skills again, so the skill reaches threads started from then
on. Idempotent: what is there already is not written again.

Exit 0 once all is there, the hook trusted and the skill listed by the host; 1 when
it is not (the warnings say why), when nothing was written for want of a yes, or a
file cannot be written (when config.toml cannot take an entry, the TOML to add by
hand on stdout); 2 when config.toml or the role store cannot be read (one line,
nothing changed).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli
import trio

from crw.binding.codex_setup import (
    SKILL_NAME,
    installed_skill,
    missing_agent_types,
    role_agent_types,
    skill_path,
    skill_text,
    with_agent_tables,
)
from crw.binding.install import (
    ByHand,
    Config,
    crw_command,
    read_config,
    spawn_hooks,
    with_command,
    with_hook,
    write_config,
)
from crw.cli.output import emit, say
from crw.cli.owner.hook_install import Installed, trust, unanswered
from crw.host.uri import HostUri, default_session_host, parse_host_uri


@dataclass
class Plan:
    """What an install would write: config.toml's new text (None: unchanged) and
    the skill's (None: the same text is there)."""

    home: Path
    roles: Path
    hook: Installed
    agent_types: dict[str, list[str]]
    config_text: str | None
    appended: str
    skill: Path
    skill_change: str | None
    """"added", "updated", or None (there as shipped)."""

    @property
    def changes(self) -> bool:
        return self.config_text is not None or self.skill_change is not None


def plan_install(home: Path, state: str | None, roles: Path) -> Plan:
    """Raises InputError (config.toml or the role store unreadable), ByHand and
    RefusedError (an edit that would not read back); nothing is written."""
    from crw.engine.config.roles import load_roles

    config = read_config(home / "config.toml")
    pairs = load_roles(roles).role_pairs()
    hook = Installed(config.path, crw_command(state))
    present = spawn_hooks(config.data)
    hook.replaced = list(dict.fromkeys(c for c in present if c != hook.command))
    text = config.text
    if not present:
        text, hook.added = with_hook(config, hook.command), True
    elif hook.replaced:
        text = with_command(config, hook.replaced, hook.command)
    types = missing_agent_types(role_agent_types(pairs), config.data)
    if types:
        text = with_agent_tables(Config(config.path, text, tomli.loads(text)), types)
    ours = skill_path(home)
    there = installed_skill(ours)
    change = "added" if there is None else "updated" if there != skill_text() else None
    head = config.text if text.startswith(config.text) else ""
    return Plan(
        home=home,
        roles=roles,
        hook=hook,
        agent_types=types,
        config_text=text if text != config.text else None,
        appended=text[len(head) :] if text != config.text else "",
        skill=ours,
        skill_change=change,
    )


def install_command(
    *, codex_home: str | None, host: str | None, state: str | None, yes: bool, json: bool
) -> int:
    from crw.engine.run.rundir import resolve_state

    home = Path(codex_home or os.environ.get("CODEX_HOME") or Path.home() / ".codex").absolute()
    uri = parse_host_uri(host) if host else default_session_host({"CODEX_HOME": str(home)})
    roles = resolve_state(state, os.environ, Path.cwd()) / "roles.toml"
    try:
        plan = plan_install(home, state, roles)
    except ByHand as refused:
        if not json:
            say(refused.entry)
        refused.members = {"config": str(home / "config.toml"), "entry": refused.entry}
        raise
    view = _view(plan, uri)
    if plan.changes and not yes:
        asked = not json and sys.stdin.isatty()
        if not (asked and _confirmed(view)):
            said = "nothing written" if asked else f"{view}\nnothing written: run again with --yes"
            emit(json, _payload(plan, written=False), said)
            return 1
    if plan.config_text is not None:
        written = write_config(plan.hook.config, plan.config_text)
        plan.hook.target = written if plan.hook.config.is_symlink() else None
    if plan.skill_change is not None:
        write_config(plan.skill, skill_text())
    listed = _settle(plan, uri, given_host=host is not None)
    payload = _payload(plan, written=plan.changes) | {"skill_listed": listed}
    emit(json, payload, _report(plan, view, listed))
    return 0 if plan.hook.trusted and listed else 1


def _confirmed(view: str) -> bool:
    """The view shown, then a `y` at the prompt."""
    print(view)
    try:
        return input("write them? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _settle(plan: Plan, uri: HostUri, *, given_host: bool) -> bool | None:
    """Trust the hook and reload the host's skills; whether it lists the skill (None:
    no host was asked)."""
    if not given_host and not Path(uri.target).exists():
        plan.hook.warnings.append(unanswered(uri, plan.home))
        return None
    answers: list[dict[str, Any]] = []

    async def reload(client: Any) -> None:
        from crw.host.errors import HostRequestError

        try:
            answers.append(
                await client.request(
                    "skills/list", {"cwds": [str(Path.cwd())], "forceReload": True}
                )
            )
        except HostRequestError as err:
            plan.hook.warnings.append(f"the host {uri} does not list skills: {err}")

    trio.run(trust, plan.hook, uri, plan.home, reload)
    if not answers:
        return False
    ours = os.path.realpath(plan.skill)  # codex lists the canonical path
    found = any(
        skill.get("name") == SKILL_NAME and os.path.realpath(str(skill.get("path"))) == ours
        for entry in answers[0].get("data", [])
        for skill in entry.get("skills", [])
    )
    if not found:
        plan.hook.warnings.append(
            f"the host {uri} does not list the skill {plan.skill}; is it running on {plan.home}?"
        )
    return found


def _view(plan: Plan, uri: HostUri) -> str:
    """What the install writes, as the user reads it before it does."""
    if not plan.changes:
        return (
            f"nothing to write: the spawn hook, the agent types and the {SKILL_NAME} skill "
            f"are in {plan.home} already"
        )
    then = f"then trusts the hook and reloads the skills through {uri}"
    return "\n".join(["crw flow codex install writes:", *_files(plan), then])


def _files(plan: Plan) -> list[str]:
    lines = []
    if plan.config_text is not None:
        lines.append(f"  {plan.hook.config}:")
        lines += [f"    the spawn hook's command was: {old}" for old in plan.hook.replaced]
        if plan.hook.replaced:
            lines.append(f"    is now: {plan.hook.command}")
        if plan.agent_types and plan.roles.exists():
            lines.append(f"    agent types of the role store {plan.roles}")
        elif plan.agent_types:
            lines.append(f"    agent types of the six roles (no role store at {plan.roles})")
        lines += [f"    + {line}" if line else "    +" for line in plan.appended.splitlines()]
    if plan.skill_change is not None:
        what = "new" if plan.skill_change == "added" else "replacing the one there"
        lines.append(f"  {plan.skill}: the {SKILL_NAME} skill ({what})")
    return lines


def _payload(plan: Plan, *, written: bool) -> dict[str, Any]:
    hook = plan.hook
    return {
        "codex_home": str(plan.home),
        "config": str(hook.config),
        "written": written,
        "hook": {"command": hook.command, "added": hook.added, "replaced": hook.replaced},
        "agent_types": list(plan.agent_types),
        "roles": str(plan.roles),
        "appended": plan.appended,
        "skill": {"path": str(plan.skill), "change": plan.skill_change},
        "target": str(hook.target) if hook.target else None,
        "key": hook.key,
        "trusted": hook.trusted,
        "warnings": hook.warnings,
    }


def _report(plan: Plan, view: str, listed: bool | None) -> str:
    lines = ["crw flow codex install wrote:", *_files(plan)] if plan.changes else [view]
    if plan.hook.target is not None:
        lines.append(f"  written through the link to {plan.hook.target}")
    trusted = "yes" if plan.hook.trusted else "no"
    skill = "not asked" if listed is None else "yes" if listed else "no"
    lines.append(f"  hook trusted: {trusted}; skill listed by the host: {skill}")
    lines += [f"  warning: {warning}" for warning in plan.hook.warnings]
    return "\n".join(lines)
