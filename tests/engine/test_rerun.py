"""A rerun's reuse decided from the source's rows (`plan_reuse`) and its inputs
(`refill_inputs`): pure, no process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crw.engine.answers.answer import digest
from crw.engine.config.inputs import RunInput, refill_inputs
from crw.engine.config.workflow import Workflow, load_workflow
from crw.engine.run.rerun import plan_reuse
from crw.errors import InputError
from crw.journal.rows import Completed, Reused, dump_row

FILES = 'schema = { type = "object", required = ["files"] }'
WORKFLOW = f"""
name = "w"
pool = 2

[inputs.issue]
[inputs.tries]
type = "int"
default = 2

[[node]]
id = "explore"
role = "explorer"
task = "Find {{inputs.issue}}."
{FILES}

[[node]]
id = "build"
role = "executor"
needs = ["explore"]
task = "Fix {{explore.files}}."
schema = {{ type = "object", required = ["summary"] }}
review = {{ role = "reviewer", rounds = 2 }}

[[node]]
id = "docs"
role = "explorer"
task = "Write docs."
{FILES}

[[node]]
id = "ship"
role = "explorer"
needs = ["build"]
task = "Ship {{build.summary}}."
{FILES}
"""

FIX = "crw flow rerun src"


def _load(tmp_path: Path, text: str = WORKFLOW) -> Workflow:
    path = tmp_path / "w.toml"
    path.write_text(text)
    return load_workflow(path)


def _call(call: str, role: str, result: Any, tokens: int, **prepared: Any) -> list[dict[str, Any]]:
    node = call.rpartition(".")[0]
    return [
        {"row": "prepared", "call": call, "node": node, "role": role, **prepared},
        {"row": "completed", "call": call, "result": result, "result_digest": digest(result),
         "tokens": {"total": tokens}, "attempt": 1, "k": 1},
    ]  # fmt: skip


ACCEPT = {"verdict": "accept", "findings": []}
# explore completed; build held, restarted as build.2, which its review build.3
# accepted; docs ended null_model; ship never ran.
ROWS: list[dict[str, Any]] = [
    {"row": "started", "backend": "app-server"},
    *_call("explore.1", "explorer", {"files": ["a.py"]}, 10),
    {"row": "prepared", "call": "build.1", "node": "build", "role": "executor"},
    {"row": "held", "call": "build.1", "reason": "host_failure", "tokens": {"total": 3}},
    {"row": "decision", "call": "build.1", "choice": "restart", "by": "build.2"},
    {"row": "superseded", "call": "build.1", "by": "build.2"},
    *_call("build.2", "executor", {"summary": "fixed"}, 20),
    *_call("build.3", "reviewer", ACCEPT, 5, review="build.2"),
    {"row": "prepared", "call": "docs.1", "node": "docs", "role": "explorer"},
    {"row": "null_model", "call": "docs.1", "reason": "empty_answer", "tokens": {"total": 1}},
    {"row": "ended", "status": "failed", "state": {}},
]


def test_a_rerun_reuses_each_completed_node_the_from_node_does_not_lead_to(
    tmp_path: Path,
) -> None:
    """A reviewed node's rounds are reused in order from <node>.1, whatever the
    source numbered them (build restarted as build.2); a node that did not
    complete and that the from node does not need (docs) runs again."""
    reuse = plan_reuse("src", ROWS, _load(tmp_path), "ship", FIX)
    assert (reuse.nodes, reuse.afresh) == (("explore", "build"), ("docs", "ship"))
    rows = [dump_row(row) for row in reuse.rows]
    assert [(r["row"], r["call"], r.get("source_call")) for r in rows] == [
        ("reused", "explore.1", "explore.1"),
        ("completed", "explore.1", None),
        ("reused", "build.1", "build.2"),
        ("completed", "build.1", None),
        ("reused", "build.2", "build.3"),
        ("completed", "build.2", None),
    ]
    assert rows[4] == dump_row(
        Reused(call="build.2", node="build", role="reviewer", source_run="src",
               source_call="build.3", result_digest=digest(ACCEPT),
               saved_tokens={"total": 5}, review="build.1")
    )  # fmt: skip
    assert rows[3] == dump_row(
        Completed(call="build.1", result={"summary": "fixed"},
                  result_digest=digest({"summary": "fixed"}), attempt=1, k=1)
    )  # fmt: skip


def test_a_rerun_from_a_node_reuses_only_what_it_does_not_lead_to(tmp_path: Path) -> None:
    reuse = plan_reuse("src", ROWS, _load(tmp_path), "build", FIX)
    assert (reuse.nodes, reuse.afresh) == (("explore",), ("build", "docs", "ship"))


NEEDS_DOCS = WORKFLOW.replace('needs = ["build"]', 'needs = ["build", "docs"]')


@pytest.mark.parametrize(
    ("start_from", "text", "says"),
    [
        ("deploy", WORKFLOW, "--from deploy: no node deploy in "),
        (
            "ship",
            NEEDS_DOCS,
            "run src: node docs, which ship needs, ended null_model and has no answer to "
            f"reuse; rerun from it instead: {FIX} --from docs",
        ),
    ],
)
def test_refusals_name_the_node_and_the_rerun_to_take(
    tmp_path: Path, start_from: str, text: str, says: str
) -> None:
    with pytest.raises(InputError) as refused:
        plan_reuse("src", ROWS, _load(tmp_path, text), start_from, FIX)
    assert says in str(refused.value)


def test_an_edited_schema_that_refuses_a_reused_answer_is_refused(tmp_path: Path) -> None:
    stricter = WORKFLOW.replace('required = ["summary"]', 'required = ["summary", "risk"]')
    with pytest.raises(InputError) as refused:
        plan_reuse("src", ROWS, _load(tmp_path, stricter), "ship", FIX)
    assert str(refused.value) == (
        f"run src: node build's answer does not pass its schema in {tmp_path / 'w.toml'} "
        f"($: 'risk' is a required property); rerun from it instead: {FIX} --from build"
    )


def test_a_reruns_inputs_are_the_sources_unless_given_anew(tmp_path: Path) -> None:
    workflow = _load(tmp_path)
    source = {
        "issue": RunInput(value="bug 7"),
        "tries": RunInput(value=5),
        "gone": RunInput(value=1),
    }
    kept = refill_inputs("w.toml", workflow.inputs, workflow.input_lines, source, {}, {}, tmp_path)
    assert kept == {"issue": RunInput(value="bug 7"), "tries": RunInput(value=5)}
    anew = refill_inputs(
        "w.toml", workflow.inputs, workflow.input_lines, source, {"tries": "3"}, {}, tmp_path
    )
    assert anew == {"issue": RunInput(value="bug 7"), "tries": RunInput(value=3)}
    with pytest.raises(InputError, match="no input 'nope' is declared; use one of: issue, tries"):
        refill_inputs("w.toml", workflow.inputs, workflow.input_lines, source, {"nope": "1"}, {},
                      tmp_path)  # fmt: skip
    with pytest.raises(InputError, match="input 'issue': is required"):
        refill_inputs("w.toml", workflow.inputs, workflow.input_lines, {}, {}, {}, tmp_path)


def test_a_rerun_of_a_rerun_takes_the_reused_answers_with_the_tokens_first_spent(
    tmp_path: Path,
) -> None:
    """A rerun's own reused calls are reused again: the source named is the rerun,
    the tokens not spent again those its source first counted."""
    workflow = _load(tmp_path)
    first = plan_reuse("src", ROWS, workflow, "ship", FIX)
    rows = [{"row": "started"}, *(dump_row(row) for row in first.rows)]
    again = plan_reuse("rerun1", rows, workflow, "ship", FIX)
    assert again.nodes == first.nodes
    reused = [dump_row(row) for row in again.rows if row.row == "reused"]
    assert [(r["source_run"], r["source_call"], r["saved_tokens"]) for r in reused] == [
        ("rerun1", "explore.1", {"total": 10}),
        ("rerun1", "build.1", {"total": 20}),
        ("rerun1", "build.2", {"total": 5}),
    ]
    assert reused[2]["review"] == "build.1"
