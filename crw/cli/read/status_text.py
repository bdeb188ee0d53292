"""The human form of `crw flow status`, and what to do next.

Readable at 80 columns: the run's outcome on its first lines, one table row a
call (call, role, state, attempt, turns, tokens, time), under it why a call did
not complete (a null_model call's schema errors) and what a review decided, and
the exact commands of what to do next, each on its own line (a command is never
cut, so it can be copied whole).
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from typing import Any

from crw.cli.output import format_tokens
from crw.engine.held_reasons import paused_why
from crw.engine.views.durations import duration

SUMMARY_OVER = 40
"""A run of more calls is summarised in the human form (--all lists them all)."""
SHOWN = 10
"""How many calls of each kind a summary lists: the last ones, and those not completed."""
WIDTH = 80
ERRORS_SHOWN = 3
"""How many of a null_model call's errors the human form lists."""
CALL_WIDTH = 20
"""The call column's widest: a row of a longer call id and the longest role
(executor-t1) still fits WIDTH."""


def short_tokens(total: int) -> str:
    """`950`, `12.3k`, `4.1M`."""
    if total < 10_000:
        return str(total)
    if total < 1_000_000:
        return f"{total / 1000:.1f}k"
    return f"{total / 1_000_000:.1f}M"


def when(at: str | None) -> str:
    """A row's `at` to the second: `2026-11-30 17:41:24 UTC`; `-` for none."""
    return f"{at[:10]} {at[11:19]} UTC" if at and len(at) >= 19 else "-"


def command(verb: str, run: str, state_ref: str, *extra: str) -> str:
    """`crw flow VERB RUN EXTRA --state S`: a command as the user types it."""
    state = ("--state", state_ref) if state_ref else ()
    return " ".join(("crw", "flow", verb, run, *extra, *state))


def _item(do: str, cmd: str | None = None) -> dict[str, str | None]:
    return {"do": do, "command": cmd}


def todo(
    payload: dict[str, Any], state_ref: str, again: str | None, closes_left: bool
) -> list[dict[str, str | None]]:
    """What the owner or the user does next: [{do, command}] (command None when
    there is none to run). `again` is the start that runs an ended run's workflow
    again on its host and owner (`run_spec.start_again`)."""
    run, state = payload["run"], payload["state"]
    if state == "corrupt":
        return [_item(payload["corrupt"]["fix"])]
    if state == "ended":
        return _ended(payload, state_ref, again, closes_left)
    failed = payload["launch_failed"]
    if failed is not None:  # what a resume runs into until it is fixed
        held = [_answer(call) for call in payload["calls"] if "answer" in call]
        what = (
            f"its last process ({failed['pid']}) stopped after its started row"
            if failed.get("started")
            else f"its last resume did not start (process {failed['pid']} stopped before its "
            "started row)"
        )
        why = f"{what}: {failed['reason']}; fix that, then go on with"
        return [_item(why, command("resume", run, state_ref, "--detach")), *held]
    if state == "paused":
        return [_paused(payload, state_ref)]
    if state == "waiting_decision":
        return [_answer(call) for call in payload["calls"] if "answer" in call]
    if state == "crashed":
        why = (
            "its process exited before it started (see run.log)"
            if payload["rows_state"] == "starting"
            else "its process is gone (crashed or killed)"
        )
        return [_item(f"{why}; go on with", command("resume", run, state_ref, "--detach"))]
    if state == "starting":
        return [_item("its process is coming up; ask again", command("status", run, state_ref))]
    if payload["backend"] == "session":
        first = _item("the owner takes its steps", command("next", run, state_ref, "--wait 30"))
    else:
        first = _item("its process runs the calls; see them", command("status", run, state_ref))
    return [first, _item("to stop it", command("pause", run, state_ref))]


def _ended(
    payload: dict[str, Any], state_ref: str, again: str | None, closes_left: bool
) -> list[dict[str, str | None]]:
    items = []
    if closes_left:
        items.append(
            _item("the owner closes its last subagents", command("next", payload["run"], state_ref))
        )
    status = payload["ended_status"]
    if status == "completed":
        return [*items, _item("nothing more to do: every node completed")]
    why = f"the run is over ({status}): each call above says why; to run it again, start a new run"
    items.append(_item(why, again))
    failed = [node for node, end in payload["outcome"]["unfinished"].items() if end != "unrun"]
    if status == "failed" and failed:  # what completed before it need not run again
        node = failed[0]
        rerun = command("rerun", payload["run"], state_ref, f"--from {node}")
        fix = f"or fix node {node}'s task or schema and rerun from it, reusing the answers"
        items.append(
            _item(f"{fix} before it (an edited copy of the workflow: --workflow FILE)", rerun)
        )
    return items


def _paused(payload: dict[str, Any], state_ref: str) -> dict[str, str | None]:
    run, reason = payload["run"], payload["paused"]["reason"]
    resume = command("resume", run, state_ref, "--detach")
    if reason == "token_ceiling":
        return _item(
            "it reached its workflow's token_ceiling (a resume pauses again at once): "
            "read its answers, then start a new run with a higher ceiling for the rest",
            command("status", run, state_ref, "--results"),
        )
    if reason == "host_unavailable":
        waiter = payload.get("host_wait")
        if waiter is not None:
            return _item(
                f"its host could not be reached (above); process {waiter['pid']} waits for it "
                f"until {when(waiter['until'])} and the run goes on by itself when it answers; "
                "to go on now, start the host, then",
                resume,
            )
        return _item("its host could not be reached (above): start the host, then", resume)
    if reason == "write_failed":
        return _item("a file could not be written (above): free space or fix it, then", resume)
    return _item("go on with", resume)


def _answer(call: dict[str, Any]) -> dict[str, str | None]:
    others = ", ".join(f"--{choice}" for choice in call["answer"] if choice != "retry")
    fix = "fix what the error says (above), then " if "fix" in call else ""
    return _item(
        f"{fix}answer held call {call['call']} ({call['reason']}); or {others}",
        call["answer"]["retry"],
    )


def human(payload: dict[str, Any], *, all_calls: bool) -> str:
    """The human form of a status payload (see the module docstring)."""
    lines = _head(payload)
    calls = payload["calls"]
    if not calls:
        lines.append("  no calls yet")
    elif all_calls or len(calls) <= SUMMARY_OVER:
        lines += _table(calls)
    else:
        lines += _summary(calls, "run it again with --all")
    lines.append("  next:")
    for item in payload["todo"]:
        lines += _wrap(item["do"] + (":" if item["command"] else ""), "    ")
        if item["command"]:
            lines.append(f"      {item['command']}")
    return "\n".join(lines)


def _head(payload: dict[str, Any]) -> list[str]:
    outcome = payload["outcome"]
    head = f"run {payload['run']}: {payload['state']}"
    if payload["state"] == "ended":
        head += f" ({outcome['reason']})"
    lines = [head]
    elsewhere = payload.get("elsewhere")
    if elsewhere is not None:  # read from the database: its directory is on its machine
        until = elsewhere["lease_until"]
        lease = f", its writer's lease until {until}" if elsewhere["held"] else ""
        lines.append(
            f"  read from the database: it last ran on machine {elsewhere['machine'] or '-'}"
            f"{lease}; no run directory on this machine"
        )
    if payload["state"] == "crashed":
        lines += _wrap(
            f"its process is gone: no paused or ended row, its rows leave it "
            f"{payload['rows_state']}",
            "  ",
        )
    if payload["state"] == "paused":
        why = paused_why(outcome["reason"])
        lines.append(
            f"  paused {why}" if why.startswith("by ") else f"  paused: {outcome['reason']}"
        )
        waiter = payload.get("host_wait")
        if waiter is not None:
            lines.append(
                f"  waits for its host: process {waiter['pid']} until {when(waiter['until'])}; "
                "goes on by itself when the host answers"
            )
    if outcome["unfinished"]:
        ends = ", ".join(f"{node} {end}" for node, end in outcome["unfinished"].items())
        lines += _wrap(f"not completed: {ends}", "  ")
    holder = payload["holder_pid"]
    held = f"held by pid {holder}" if holder else "no process holds it"
    if payload["backend"]:
        lines.append(f"  {payload['backend']} backend, process {payload['processes']}; {held}")
    else:
        lines.append(f"  {held}")
    lines.append(f"  started {when(payload['started_at'])}, last row {when(payload['last_at'])}")
    lines.append(f"  calls: {calls_line(payload['progress'])}")
    nodes = payload["progress"]["nodes"]
    if nodes is not None:
        lines.append(f"  nodes: {nodes['completed']} of {nodes['total']} completed")
    lines.append(f"  tokens: {format_tokens(payload['tokens'])}")
    lines += rerun_lines(payload.get("rerun"), payload["calls"])
    lines += input_lines(payload.get("inputs"))
    failed = payload["launch_failed"]
    if failed and payload["state"] != "ended":
        what = (
            "its last process stopped" if failed.get("started") else "its last resume did not start"
        )
        lines += _wrap(f"{what}: {failed['reason']}", "  ")
    corrupt = payload["corrupt"]
    if corrupt:
        lines += [f"  {corrupt['damage']}", f"  {corrupt['fix']}"]
        lines.append("  the calls as the rows before the damage leave them:")
    return lines


def rerun_lines(rerun: dict[str, Any] | None, calls: list[dict[str, Any]]) -> list[str]:
    """A rerun's source: the run, the node it ran afresh from, the nodes it reused."""
    if not rerun:
        return []
    nodes = list(dict.fromkeys(str(call["node"]) for call in calls if call.get("reused")))
    taken = f" ({', '.join(nodes)} reused)" if nodes else ""
    return _wrap(f"rerun of {rerun.get('run')} from {rerun.get('node')}{taken}", "  ")


def input_lines(inputs: dict[str, Any] | None) -> list[str]:
    """The run's inputs, one a line: a value cut to the width, a file by path and digest."""
    if not inputs:
        return []
    out = ["  inputs:"]
    for name, value in inputs.items():
        if isinstance(value, dict):  # its path whole: a path cut short names no file
            out.append(f"    {name} = file {value.get('path')} ({str(value.get('digest'))[:19]})")
            continue
        line = f"    {name} = {json.dumps(value, ensure_ascii=False)}"
        out.append(line if len(line) <= WIDTH else line[: WIDTH - 4] + " ...")
    return out


def calls_line(progress: dict[str, Any]) -> str:
    """`7 of 7 done`, `3 of 5 done, 1 in flight, 1 held`: the calls as
    `crw.engine.views.counts` counts them."""
    line = f"{progress['done']} of {progress['total']} done"
    if progress["in_flight"]:
        line += f", {progress['in_flight']} in flight"
    if progress["held"]:
        line += f", {progress['held']} held"
    return line


def _wrap(text: str, indent: str) -> list[str]:
    """`text` folded at WIDTH; a word (a path, a command's argument) is never cut."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def _widths(calls: list[dict[str, Any]]) -> tuple[int, int]:
    """The widths of the call and role columns: the longest of each, the call's
    at most CALL_WIDTH (a longer call id is on a line of its own)."""
    return (
        min(CALL_WIDTH, max(4, *(len(call["call"]) for call in calls))),
        max(4, *(len(call["role"] or "-") for call in calls)),
    )


def _table(calls: list[dict[str, Any]]) -> list[str]:
    widths = _widths(calls)
    header = _row(widths, "call", "role", "state", "att", "turns", "tokens", "time")
    return [header] + [line for call in calls for line in _call_lines(call, widths)]


def _row(widths: tuple[int, int], *cells: str) -> str:
    """The row's line; a call id wider than its column goes on a line of its own
    above the row (never cut: it is what `answer` and `show --call` take)."""
    call, role, state, attempt, turns, tokens, time = cells
    above = ""
    if len(call) > widths[0]:
        above, call = f"  {call}\n", ""
    return (
        above
        + (
            f"  {call:<{widths[0]}} {role:<{widths[1]}} {state:<15} "
            f"{attempt:>3} {turns:>5} {tokens:>7} {time:>7}"
        ).rstrip()
    )


def _call_line(call: dict[str, Any], widths: tuple[int, int]) -> str:
    return _row(
        widths,
        call["call"],
        call["role"] or "-",
        "reused" if call.get("reused") else call["state"],
        str(call["attempts"]),
        str(call["turns"]),
        short_tokens(call["tokens"]["total"]),
        duration(call["seconds"]),
    )


def _call_lines(call: dict[str, Any], widths: tuple[int, int]) -> list[str]:
    """The call's line; under it why it did not complete and how to answer it, or
    the call that runs its node again; with --results its answer."""
    lines = [_call_line(call, widths)]
    if "review" in call:
        lines.append(f"    {review_line(call['review'])}")
    if "reused" in call:
        lines.append(f"    reused: the answer of {call['reused']}")
    if "by" in call:
        node = call["node"] or call["call"].rpartition(".")[0]
        lines.append(f"    restarted: node {node} runs again as {call['by']}")
    elif "fix" in call:
        lines += _wrap(f"held ({call['reason']}): {call['error']}", "    ")
        lines += _wrap(f"fix: {call['fix']}", "    ")
    elif "answer" in call:
        others = ", ".join(f"--{choice}" for choice in call["answer"] if choice != "retry")
        answer = f"{call['answer']['retry']} (or {others})"
        lines.append(f"    held ({call['reason']}): answer with {answer}")
    elif call["state"] == "held":  # of an ended run: nothing answers it
        lines.append(f"    held ({call['reason']}): the run has ended; it takes no answer")
    elif call["state"] == "null_model":
        lines += _why_null(call)
    elif call["state"] == "lost" and call["reason"]:
        lines.append(f"    {call['state']}: {call['reason']}")
    if "result" in call and call["state"] == "completed":
        text = json.dumps(call["result"], ensure_ascii=False)
        lines += textwrap.wrap(f"answer: {text}", WIDTH, initial_indent="    ",
                               subsequent_indent="      ")  # fmt: skip
    return lines


def call_notes(call: dict[str, Any]) -> str:
    """What status prints under a call's line, as one text: its review, why it
    did not complete and how to answer it, or the call that runs its node again."""
    lines = _call_lines({key: value for key, value in call.items() if key != "result"}, (0, 0))
    return " ".join(line.strip() for line in lines[1:])


def review_line(review: dict[str, Any]) -> str:
    """`review of build.1: reject (1 finding)`."""
    count = review["findings"] or 0
    return (
        f"review of {review['of']}: {review['verdict']} "
        f"({count} finding{'s' if count != 1 else ''})"
    )


def _why_null(call: dict[str, Any]) -> list[str]:
    """A null_model call's reason and its last answer's errors (the first
    ERRORS_SHOWN of them; --json has all)."""
    errors = call.get("errors") or []
    head = f"null_model ({call['reason']})" if call["reason"] else "null_model"
    if not errors:
        return [f"    {head}"]
    lines = [f"    {head}: {'the error' if len(errors) == 1 else 'the errors'} of its last answer:"]
    for error in errors[:ERRORS_SHOWN]:
        lines += _wrap(error, "      ")
    if len(errors) > ERRORS_SHOWN:
        lines.append(f"      ... and {len(errors) - ERRORS_SHOWN} more (--json lists them)")
    return lines


def _summary(calls: list[dict[str, Any]], every: str) -> list[str]:
    """Counts by state, the calls not completed, and the last calls."""
    counts = Counter(call["state"] for call in calls)
    by_state = ", ".join(f"{state} {n:,}" for state, n in counts.most_common())
    lines = [f"  {len(calls):,} calls: {by_state}"]
    pending = [call for call in calls if call["state"] != "completed"]
    widths = _widths(pending + calls[-SHOWN:])
    if pending:
        lines.append(f"  not completed ({len(pending):,}):")
        lines += [line for call in pending[:SHOWN] for line in _call_lines(call, widths)]
        if len(pending) > SHOWN:
            lines.append(f"  ... and {len(pending) - SHOWN:,} more")
    lines.append(f"  the last {SHOWN}:")
    lines += [_call_line(call, widths) for call in calls[-SHOWN:]]
    lines.append(f"  every call: {every} (or --json)")
    return lines
