"""`crw flow validate WORKFLOW` (and `crw flow start --dry-run`): every check a start
makes (`crw.cli.run.start.check_start`, the same code), with no run and no host.

It shows what the start would run: the nodes by level (the nodes of one level can
run at once), each node's role and the pair it runs on, its schema, review and the
inputs it needs, the inputs' values, the spawn formats of a session run and the
warnings: the facts a start judges without its host, and the workspaces'. A
refusal is the start's own one line (exit 2); nothing is written either way.
"""

from __future__ import annotations

import datetime as _dt
import json as json_module
import os
from pathlib import Path
from typing import Any

from crw import codex_config
from crw.cli.output import emit
from crw.cli.run.preview import SessionStart, app_server_facts, session_facts, workspaces
from crw.cli.run.start import StartPlan, check_start
from crw.cli.shell import shell_join
from crw.engine.config.inputs import INPUTS
from crw.engine.config.workflow_graph import levels
from crw.engine.config.workflow_nodes import Node
from crw.engine.owner import multi_agent
from crw.engine.owner.next_view import spawn_formats
from crw.engine.run.rundir import RunDir, new_run_id


def validate_command(
    workflow: str,
    *,
    backend: str,
    owner: str | None,
    host: str | None,
    codex_bin: str | None,
    state: str | None,
    json: bool,
    trace: bool = False,
    inputs: list[str] | None = None,
    input_files: list[str] | None = None,
    dry_run: bool = False,
) -> int:
    """Exit 0: the start would be taken; a refusal raises its InputError (exit 2)."""
    plan = check_start(
        Path(workflow),
        backend=backend,
        owner=owner,
        host=host,
        state=state,
        environ=os.environ,
        codex_bin=codex_bin,
        trace=trace,
        inputs=inputs or (),
        input_files=input_files or (),
    )
    payload = plan_payload(plan)
    words = ["crw", "flow", "start", workflow]
    if backend != "session":
        words += ["--backend", backend]
    for flag, value in (("--owner", owner), ("--host", host), ("--codex-bin", codex_bin)):
        words += [flag, value] if value is not None else []
    words += ["--trace"] if trace else []
    for given in inputs or ():
        words += ["--input", given]
    for given in input_files or ():
        words += ["--input-file", given]
    words += ["--state", state] if state is not None else []
    again = None if dry_run else shell_join(words)
    emit(json, payload, lambda: "\n".join(plan_lines(payload, again, dry_run=dry_run)))
    return 0


def plan_payload(plan: StartPlan) -> dict[str, Any]:
    """What `validate --json` prints: the plan of the run a start would make."""
    workflow = plan.workflow
    pairs = plan.roles.role_pairs()
    if plan.backend == "session":
        run = RunDir(plan.state_dir / "flow" / new_run_id(workflow.name, _dt.datetime.now(_dt.UTC)))
        start = SessionStart(
            plan.state_dir,
            run,
            plan.owner,
            plan.uri,
            plan.roles,
            workflow,
            plan.pool,
            plan.repository.path,
            os.environ,
            plan.repository.head,
        )
        config = codex_config.read_config(codex_config.codex_home(os.environ))
        judged = session_facts(start, config)
        v2 = multi_agent.run_protocol(config, os.environ) == multi_agent.V2
        formats = spawn_formats(pairs, v2=v2)
    else:
        judged, formats = app_server_facts(workflow), []
    where = workspaces(plan.repository.path, plan.repository.head)
    warnings = list(plan.warnings)
    warnings += [f"{fact.name}: {problem}" for fact in judged for problem in fact.problems]
    warnings += [where["warning"]] if where.get("warning") else []
    return {
        "valid": True,
        "workflow": {"name": workflow.name, "path": str(workflow.path), "digest": workflow.digest},
        "backend": plan.backend,
        "host": str(plan.uri),
        "owner": plan.owner,
        "pool": plan.pool,
        "inputs": {
            name: {
                "type": decl.type,
                "required": decl.needed,
                "default": decl.default,
                "description": decl.description,
                "value": plan.inputs[name].recorded() if name in plan.inputs else None,
            }
            for name, decl in workflow.inputs.items()
        },
        "levels": levels(workflow.graph(), workflow.nodes),
        "nodes": [_node(node, pairs) for node in workflow.nodes],
        "spawn_formats": formats,
        "facts": [fact.to_json() for fact in judged],
        "workspaces": where,
        "warnings": warnings,
    }


def _node(node: Node, pairs: dict[str, dict[str, str]]) -> dict[str, Any]:
    schema = node.output_schema
    properties = schema.get("properties")
    return {
        "id": node.id,
        "role": node.role,
        "pair": pairs.get(node.role, {}),
        "needs": list(node.needs),
        "inputs": sorted({p.path[0] for p in node.placeholders() if p.node == INPUTS}),
        "schema": {
            "type": schema.get("type"),
            "properties": list(properties) if isinstance(properties, dict) else [],
            "required": list(schema.get("required") or []),
        },
        "review": node.review.model_dump() if node.review else None,
        "timeout": node.timeout,
        "qa": node.qa,
    }


def plan_lines(payload: dict[str, Any], again: str | None, *, dry_run: bool) -> list[str]:
    """The plan for a person: what `validate` prints without --json."""
    head = "dry run: nothing was started; " if dry_run else ""
    nodes, layers = payload["nodes"], payload["levels"]
    out = [
        f"{head}workflow {payload['workflow']['name']} is valid: {len(nodes)} nodes "
        f"on {len(layers)} levels ({payload['backend']} backend, pool {payload['pool']}, "
        f"host {payload['host']})"
    ]
    if payload["inputs"]:
        out.append("  inputs:")
        for name, given in payload["inputs"].items():
            value = given["value"]
            if isinstance(value, dict):
                shown = f"{value['path']} ({value['digest'][:19]})"
            else:
                shown = _show(value)
            about = f"  {given['description']}" if given["description"] else ""
            out.append(f"    {name} ({given['type']}) = {shown}{about}")
    out.append("  levels (the nodes of a level can run at once):")
    out += [f"    {n + 1}: {', '.join(ids)}" for n, ids in enumerate(layers)]
    out.append("  nodes:")
    for node in nodes:
        pair = ", ".join(f"{key}={value}" for key, value in node["pair"].items())
        out.append(f"    {node['id']}: {node['role']} ({pair or 'pair undecided'})")
        required = set(node["schema"]["required"])
        fields = [f"{key}{'*' if key in required else ''}" for key in node["schema"]["properties"]]
        out.append(f"      schema: {node['schema']['type'] or 'any'} {{{', '.join(fields)}}}")
        if node["needs"]:
            out.append(f"      needs: {', '.join(node['needs'])}")
        if node["inputs"]:
            out.append(f"      inputs: {', '.join(node['inputs'])}")
        if node["review"]:
            review = node["review"]
            out.append(f"      review: {review['role']}, up to {review['rounds']} round(s)")
    if payload["spawn_formats"]:
        out.append("  spawn formats (the owner's spawn_agent of each role):")
        out += [f"    {f['role']:<12} {f['format']}" for f in payload["spawn_formats"]]
    out += [f"  warning: {warning}" for warning in payload["warnings"]]
    if again is not None:
        out.append(f"  start it with: {again}")
    return out


def _show(value: Any) -> str:
    """An input's value on its line: a string as JSON, as status shows it (a newline
    in it does not break the line)."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return json_module.dumps(value, ensure_ascii=False)
    return str(value).lower() if isinstance(value, bool) else str(value)
