"""The start preview's facts: pure judgements, what was read in, warnings out.

A fact is a warning, never a refusal (FACTS-1): `crw flow start` prints each one
and starts the run whatever they say. A session run is judged on all eight:

- owner_bound: the owner can be bound (a thread id, a readable binding, no other
  live run holding the owner's line);
- role_models: the six pairs, a role without a model or an effort, a model the
  host does not serve (its `model/list`), an effort that model does not take, an
  agent_type the host does not know (codex: its built-in types and the
  `[agents.<name>]` tables of config.toml; a simulated host made without a
  catalog knows any), a reviewed node whose review runs on the pair that wrote
  the answer (same-thread review); on multi-agent v2, whose spawn takes a model
  and an effort but no agent type, the models and efforts alike, and instead of
  the unknown types the roles given a type of their own that v2 cannot apply;
- owner_state_writable: the run directory, the flow-bound directory, the host's
  socket and the repository;
- subagent_slots: agents.max_threads leaves a slot for a call;
- multi_agent: the multi-agent protocol the run speaks and the version of the
  owner's tools (`crw.engine.owner.multi_agent`), warned when they differ;
- verifier_prerequisites: the go of `[verifier] go_root` is there;
- spawn_hook: `crw flow hook spawn` is installed in config.toml and trusted;
- host_reachable: the host answers and the owner thread is on it.

An app-server run has no owner and no hook: it is judged on verifier_prerequisites,
"judged for every run" (FACTS-10), and host_reachable: a shared host answers its
handshake; a private `codex` host is the binary its start found (a start that
finds none is refused, since nothing would ever start that host).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.config.role_names import ROLES, default_agent_type
from crw.engine.owner.multi_agent import MultiAgent, OwnerTools, owner_has
from crw.engine.owner.multi_agent import problems as multi_agent_problems
from crw.host.probe import HostModel

CODEX_INSTALL = "crw flow codex install"
"""The command that writes the `[agents.<type>]` tables of the six roles into
config.toml."""

SESSION_FACTS = (
    "owner_bound",
    "role_models",
    "owner_state_writable",
    "subagent_slots",
    "multi_agent",
    "verifier_prerequisites",
    "spawn_hook",
    "host_reachable",
)


@dataclass(frozen=True)
class Fact:
    """One fact: ok, else its problems, each what is wrong, what it does, the fix."""

    name: str
    problems: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def warning(self) -> str | None:
        """The problems in one line, or None when the fact holds."""
        return "; ".join(self.problems) if self.problems else None

    def to_json(self) -> dict[str, Any]:
        head = {"name": self.name, "ok": self.ok, "warning": self.warning}
        return head | {"problems": list(self.problems)} | self.detail


def _fact(name: str, problems: Sequence[str], **detail: Any) -> Fact:
    return Fact(name, tuple(problems), dict(detail))


@dataclass(frozen=True)
class OwnerRead:
    """What the owner's binding reads: the thread id, the run its last line holds
    open (and whether that run is live), or why the binding cannot be read."""

    owner: str | None
    run_id: str
    open_run: str | None = None
    open_run_live: bool = False
    unreadable: str | None = None


def owner_bound(read: OwnerRead) -> Fact:
    """FACTS-2..4: a thread id, a readable binding, no other live run on it."""
    if not read.owner:
        return _fact(
            "owner_bound",
            [
                "no owner thread id: the run starts unbound (no pairs for the owner's spawns, "
                "no wakes); pass --owner THREAD, set CRW_OWNER_THREAD or start it from the "
                "owner's shell (CODEX_THREAD_ID)"
            ],
        )
    problems = []
    if read.unreadable is not None:
        problems.append(
            f"the binding of owner thread {read.owner} cannot be read ({read.unreadable}); "
            "the hook reads it as no binding: make the file the user's own and readable"
        )
    elif read.open_run not in (None, read.run_id) and read.open_run_live:
        problems.append(
            f"owner thread {read.owner} holds the line of live run {read.open_run}: this run "
            f"starts unbound; wait for {read.open_run} to end, then resume this run to bind it"
        )
    return _fact("owner_bound", problems, owner=read.owner)


@dataclass(frozen=True)
class RoleRead:
    """What role_models judges: the role store's decided parts of each role, the
    host's models (None or none: not known) and agent types (None: it takes any),
    the workflow's reviews as (node id, the node's role, the review's role), the
    config.toml whose `[agents.<name>]` tables the host knows, and whether the run
    speaks multi-agent v2 (its spawns name no agent type)."""

    pairs: Mapping[str, Mapping[str, str]]
    models: Sequence[HostModel] | None
    agent_types: frozenset[str] | None
    reviews: Sequence[tuple[str, str, str]] = ()
    config: str = "config.toml"
    v2: bool = False


def role_models(read: RoleRead) -> Fact:
    """FACTS-5, FACTS-6, and what the host refuses: a model it does not serve, an
    effort that model does not take, an agent_type it does not know; on v2, whose
    spawn_agent takes no agent type, a type roles.toml gives that no child gets."""
    pairs = {role: dict(read.pairs.get(role) or {}) for role in ROLES}
    undecided = [role for role in ROLES if not pairs[role].get("model")]
    no_effort = [
        role for role in ROLES if pairs[role].get("model") and not pairs[role].get("effort")
    ]
    problems = []
    if undecided:
        problems.append(
            f"no model for {', '.join(undecided)}: their spawns keep what the owner sends; "
            "set model and effort under [<role>] in roles.toml"
        )
    if no_effort:
        problems.append(
            f"no effort for {', '.join(no_effort)}: set effort under [<role>] in roles.toml"
        )
    if read.models:  # a host that lists none (or was not asked) leaves models unchecked
        problems += _served(pairs, {model.model: model for model in read.models})
    if read.v2:  # no spawn names a type: none is refused, none is applied
        problems += _types_not_applied(pairs)
    elif read.agent_types is not None:  # a host that takes any type refuses none
        problems += _agent_types(pairs, read.agent_types, read.config)
    for node, role, reviewer in read.reviews:
        if _same_pair(pairs[role], pairs[reviewer]):
            problems.append(
                f"node {node} is reviewed by {reviewer} on the pair that wrote it ({role}'s): "
                f"a same-thread review; give [{reviewer}] another model or effort"
            )
    return _fact("role_models", problems, pairs=pairs, models_checked=bool(read.models))


def _served(pairs: Mapping[str, Mapping[str, str]], served: Mapping[str, HostModel]) -> list[str]:
    """A model the host does not serve, an effort its model does not take."""
    problems = []
    listed = ", ".join(served) or "none"
    for role in ROLES:
        model, effort = pairs[role].get("model"), pairs[role].get("effort")
        if model and model not in served:
            problems.append(
                f"{role}'s model {model} is not served by the host (model/list: {listed}): "
                f"its spawns fail; set [{role}] model to one it serves"
            )
        elif model and effort and served[model].efforts and effort not in served[model].efforts:
            problems.append(
                f"{role}'s effort {effort} is not one {model} takes "
                f"({', '.join(served[model].efforts)}): set [{role}] effort to one of them"
            )
    return problems


def _agent_types(
    pairs: Mapping[str, Mapping[str, str]], known: frozenset[str], config: str
) -> list[str]:
    """The agent types the host does not know, in one problem: each with its roles,
    and the one fix (the tables in the host's config.toml) for all of them."""
    unknown: dict[str, list[str]] = {}
    for role in ROLES:
        agent_type = pairs[role].get("agent_type")
        if agent_type and agent_type not in known:
            unknown.setdefault(agent_type, []).append(role)
    if not unknown:
        return []
    types = ", ".join(f"{name} ({', '.join(roles)})" for name, roles in unknown.items())
    tables = ", ".join(f"[agents.{name}]" for name in unknown)
    return [
        f"agent type{'s' if len(unknown) > 1 else ''} {types} "
        f"{'are' if len(unknown) > 1 else 'is'} unknown to the host, which "
        f"knows {', '.join(sorted(known))}: their spawns fail; add {tables} with a "
        f"description to {config} ({CODEX_INSTALL} writes them), or give the roles a "
        "type it knows"
    ]


def _types_not_applied(pairs: Mapping[str, Mapping[str, str]]) -> list[str]:
    """On v2: the agent types roles.toml gives roles in place of their own (a
    type is each role's own unless roles.toml names another), in one problem; v2's
    children have no agent type at all, so a role's own type is no news."""
    given: dict[str, list[str]] = {}
    for role in ROLES:
        agent_type = pairs[role].get("agent_type")
        if agent_type and agent_type != default_agent_type(role):
            given.setdefault(agent_type, []).append(role)
    if not given:
        return []
    types = ", ".join(f"{name} ({', '.join(roles)})" for name, roles in given.items())
    several = len(given) > 1
    return [
        f"agent type{'s' if several else ''} {types} {'are' if several else 'is'} not applied: "
        "the run speaks multi_agent_v2, whose spawn_agent takes no agent type, so no "
        f"child gets {'them' if several else 'it'} or {'their' if several else 'its'} "
        "[agents.<type>] settings; start the run with CRW_MULTI_AGENT=v1 to have them, or "
        "leave agent_type out of those roles in roles.toml"
    ]


def _same_pair(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return bool(a.get("model")) and dict(a) == dict(b)


def owner_state_writable(unwritable: Mapping[str, str], distrusted: str | None = None) -> Fact:
    """FACTS-7: `unwritable` names each of the run directory, the flow-bound
    directory, the host's socket and the repository that is not writable, with why;
    `distrusted`, why the flow-bound directory cannot be trusted (the hook and the
    bind read it as no binding)."""
    problems = [
        f"the {what} is not writable ({why}): the run cannot keep its state there"
        for what, why in unwritable.items()
    ]
    if distrusted is not None:
        problems.append(
            f"the flow-bound directory cannot be trusted ({distrusted}): the owner is not "
            "bound and the hook reads no binding; make it a directory of the user's own, "
            "mode 700, not a symbolic link"
        )
    return _fact("owner_state_writable", problems)


def subagent_slots(max_threads: int) -> Fact:
    """FACTS-8: the owner keeps a slot, so a call needs agents.max_threads >= 2."""
    problems = []
    if max_threads - 1 < 1:
        problems.append(
            f"agents.max_threads = {max_threads} leaves no slot for a call once the owner "
            "keeps one: set agents.max_threads to 2 or more in config.toml"
        )
    return _fact("subagent_slots", problems, max_threads=max_threads)


def multi_agent(protocol: MultiAgent, tools: OwnerTools) -> Fact:
    """FACTS-9: the protocol the run speaks (`protocol`) and the version of the
    owner's tools; a warning only when the owner cannot take the run's steps."""
    return _fact(
        "multi_agent",
        multi_agent_problems(protocol, tools),
        protocol=protocol,
        owner_tools=owner_has(tools),
    )


def verifier_prerequisites(go_root: str | None, go_missing: str | None) -> Fact:
    """FACTS-10: the go of `[verifier] go_root` (`<go_root>/bin/go`) is there and runs;
    `go_missing` says why not. A workflow without a verifier needs nothing."""
    problems = []
    if go_root is not None and go_missing is not None:
        problems.append(
            f"[verifier] go_root = {go_root}: {go_missing}; the packets tell the subagents "
            "to run it: install go there or fix go_root in the workflow"
        )
    return _fact("verifier_prerequisites", problems, go_root=go_root)


def spawn_hook(
    config: str,
    installed: bool,
    trust: str | None,
    unreadable: str | None,
    *,
    runs_hooks: bool = True,
) -> Fact:
    """The hook is in `config` (config.toml) and trusted: `trust` is the host's
    trustStatus, or "recorded" when only config.toml's trusted_hash says so (None:
    no trust at all). A host that runs no hooks (`runs_hooks` False: the simulated
    host, whose spawns are made as the step gives them) needs none: nothing to say
    of a config.toml it never reads."""
    if not runs_hooks:
        return _fact("spawn_hook", [], trust=None, hooks="not run by this host")
    problems = []
    if unreadable is not None:
        problems.append(f"cannot read {config} ({unreadable}); fix it, then crw flow hook install")
    elif not installed:
        problems.append(
            f"crw flow hook spawn is not in {config}: the owner's spawns keep what it sends, "
            "not their role's pair; run crw flow hook install"
        )
    elif trust not in ("trusted", "recorded"):
        problems.append(
            f"the spawn hook in {config} is not trusted ({trust or 'no trusted_hash'}): codex "
            "skips it silently; run crw flow hook install --host <the app-server>"
        )
    return _fact("spawn_hook", problems, trust=trust)


def host_reachable(
    host: str,
    error: str | None,
    owner: str | None,
    owner_error: str | None,
    codex_bin: str | None = None,
) -> Fact:
    """The host answers (`error`: why not) and the owner thread is on it
    (`owner_error`: why not; not asked without an owner); `codex_bin`: the binary
    of a private `codex` host, in the fact's detail."""
    problems = []
    if error is not None:
        problems.append(f"{error} (until it answers, the run pauses)")
    elif owner and owner_error is not None:
        problems.append(
            f"owner thread {owner} is not on the host {host} ({owner_error}): the run waits "
            "for an owner that never comes; pass the thread id codex shows (--owner)"
        )
    detail = {"codex_bin": codex_bin} if codex_bin is not None else {}
    return _fact("host_reachable", problems, host=host, **detail)
