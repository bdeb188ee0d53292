"""What `crw flow demo` prints of a run: each row as it comes, the summary table
and the review round, read back from the run's rows."""

from __future__ import annotations

from typing import Any

from crw.journal.replay import replay


def detail(row: dict[str, Any]) -> str:
    kind = row["row"]
    if kind == "turn_started":
        return f"k {row.get('k')} turn {row.get('turn_id')}"
    if kind == "thread_started":
        return f"thread {row.get('thread_id')}"
    if kind in ("completed", "null_model", "held"):
        tokens = (row.get("tokens") or {}).get("total", 0)
        return f"{row.get('reason') or ''} tokens {tokens}".strip()
    if kind == "ended":
        return str(row.get("status"))
    return ""


def summary(rows: list[dict[str, Any]]) -> str:
    run = replay(rows)
    begun = {r["call"]: r["at"] for r in rows if r["row"] == "prepared"}
    ended = {
        r["call"]: r["at"]
        for r in rows
        if r.get("call") and r["row"] in ("completed", "null_model", "held")
    }
    head = ("call", "role", "state", "attempts", "turns", "tokens", "time")
    lines = ["", "{:<12} {:<10} {:<10} {:>8} {:>5} {:>7} {:>7}".format(*head)]
    for call in run.calls.values():
        seconds = _seconds(begun.get(call.call), ended.get(call.call))
        lines.append(
            f"{call.call:<12} {call.role or '-':<10} {call.state:<10} {call.attempt or 1:>8} "
            f"{call.turns:>5} {call.tokens['total']:>7} {seconds:>6.2f}s"
        )
    for review in reviews(rows):
        lines.append(_review_line(review))
    lines.append(f"run {run.state}: {run.ended_status}; tokens {run.spent['total']}")
    return "\n".join(lines)


def reviews(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each review call's verdict, and each fix call and the call it continued, in
    the order they were prepared: [{node, call, kind, verdict, findings, resume}]."""
    ends = {r["call"]: r for r in rows if r.get("call") and r["row"] in ("completed", "held")}
    shown: list[dict[str, Any]] = []
    for row in rows:
        if row["row"] != "prepared":
            continue
        result = (ends.get(row["call"]) or {}).get("result")
        if row.get("resume"):
            shown.append(
                {"node": row["node"], "call": row["call"], "kind": "fix", "resume": row["resume"]}
            )
        elif isinstance(result, dict) and "verdict" in result and row["call"] != f"{row['node']}.1":
            verdict = {
                "kind": "review",
                "verdict": result["verdict"],
                "findings": result.get("findings"),
            }
            shown.append({"node": row["node"], "call": row["call"]} | verdict)
    return shown


def _review_line(review: dict[str, Any]) -> str:
    """`review build.2: reject (1 finding)` or `fix build.3: continues build.1`."""
    if review["kind"] == "fix":
        return f"fix {review['call']}: continues {review['resume']} on a new subagent"
    count = len(review["findings"] or [])
    return (
        f"review {review['call']}: {review['verdict']} ({count} finding{'s' if count != 1 else ''})"
    )


def _seconds(start: str | None, end: str | None) -> float:
    from datetime import datetime

    if not start or not end:
        return 0.0
    parse = datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()
