"""The keys of a `sim/script` behaviour, each with one line of what it does.

Plain data, imported by the command tree for `crw host sim script --help` and by
`crw.host.sim.behaviour`, which reads and checks a behaviour by them.
"""

from __future__ import annotations

BEHAVIOURS: dict[str, str] = {
    "answer": "the JSON value the turn answers (default: a valid instance of its schema)",
    "text": "the raw text the turn answers, JSON or not",
    "prose": "text put before the JSON answer",
    "phase": 'the answer\'s phase: "final_answer" (default), "commentary" or null',
    "invalidFirst": "true: the call's first answer breaks its schema, so the run repairs it",
    "reject": "true, a finding or a list of findings: a review call rejects (a fix round)",
    "hang": "true: the turn never ends until it is interrupted",
    "fail": 'a codexErrorInfo ("usageLimitExceeded", {"httpConnectionFailed": {}}): the turn fails',
    "lateEnd": "seconds: the turn reads interrupted, no error, so long before it ends",
    "lateStart": "seconds: once started, the turn reads interrupted, no error, so long, then runs",
    "vanish": '"notLoaded" or "systemError": the subagent vanishes, its attempt is lost',
    "unreachable": "true: the model cannot be reached; the turn retries without end",
    "seconds": "how long the turn takes, in seconds (default 1)",
    "responses": "how many model responses the turn streams (default 1)",
    "tokens": "{input, cachedInput, output, reasoningOutput}: what the turn counts",
    "writes": "{path: text or null}: files written (or removed) in the workspace first",
    "commit": "a commit message: after the writes, everything in the workspace is committed",
    "slowStop": "{reads?, seconds?}: once interrupted, the turn winds down before it stops",
    "emptyRollout": "reads: the thread's first reads refused, its rollout not yet written",
}
"""Every key `sim/script` takes in a behaviour, in the order `--help` lists them."""
