"""What `crw flow next` read of the run (`NextRead`), and its decisions about the
run's process (pure): whether the run is starting, whether next resumes it, and
whether it can do anything at all.

See `crw.engine.owner.next_view` for what each reading means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.steps.step_file import CloseStep, StepFile
from crw.journal.replay import TERMINAL_ROWS, Row, RunState, replay

RESUMABLE_STATES = frozenset({"running", "waiting_session", "waiting_decision"})
"""States of a run that goes on: one no process holds is resumed (CMD-NEXT-18, -20)."""
STARTING_WINDOW_S = 15.0
"""How long next reads a starting run again, whatever --wait says (CMD-NEXT-28), and
how long a new holder has to bind the owner's line (CMD-NEXT-33)."""

StepKey = tuple[str, int, int]
"""A step's call, k and attempt."""


@dataclass(frozen=True)
class NextRead:
    """What `crw flow next` read of the run.

    `run_ref` is how the commands the answer names spell the run (default: its
    id), and `state_ref` the state directory they pass as `--state` (shell-quoted;
    empty: none, when the owner passed none). `held`: the run lock or the start
    lock is held; `process_tokens`: the process locks held; `holder_since`: when
    the newest started row's process took its lock (ns, wall clock), and `now`
    when this read was made. `owner` is the run's owner thread, `owner_line` its
    last line of the flow-bound file (None: none) and `owner_line_problem` why
    that file could not be read or trusted. `wait` is next's --wait.
    """

    run: str
    rows: Sequence[Row]
    steps: Sequence[StepFile] = ()
    closes: Sequence[CloseStep] = ()
    max_threads: int = 6
    held: bool = False
    store_pairs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    resumed_pid: int | None = None
    run_ref: str = ""
    state_ref: str = ""
    launching: bool = False
    process_tokens: Sequence[str] = ()
    holder_since: int | None = None
    now: int = 0
    step_times: Mapping[StepKey, int] = field(default_factory=dict)
    reported: frozenset[StepKey] = frozenset()
    ready_nodes: Sequence[str] | None = ()
    owner: str | None = None
    owner_line: Mapping[str, Any] | None = None
    owner_line_problem: str | None = None
    wait: float = 0.0
    host_waiter: tuple[int, str] | None = None
    """The process that waits for the host of a run paused host_unavailable, and
    until when (ISO 8601): the run goes on by itself when the host answers
    (`crw.engine.run.host_wait`); None: none waits."""
    launch_refused: str | None = None
    """Why no process could start for a run none holds (the resume next tried was
    refused, or its process, or the last launched, stopped before its started
    row): the fix it names comes first."""
    launch_held: bool = False
    """The last launch stopped before its started row and none of the files it
    could have stopped on changed since (`crw.engine.run.launch_record.holds_launch`):
    next launches nothing until they change or a resume is asked for."""
    replayed: RunState | None = None
    """The run's state when the reader replayed the journal itself (`rows` is then
    empty); else `rows` are replayed once, on demand."""

    @property
    def run_state(self) -> RunState:
        """The rows' state: replayed once per read, whoever asks."""
        if self.replayed is None:
            object.__setattr__(self, "replayed", replay(self.rows))
        assert self.replayed is not None
        return self.replayed

    def command(self, verb: str, rest: str = "") -> str:
        """`crw flow VERB RUN REST [--state S]`: a command about this run."""
        state = f"--state {self.state_ref}" if self.state_ref else ""
        words = ("crw flow", verb, self.run_ref or self.run, rest, state)
        return " ".join(word for word in words if word)


def should_resume(read: NextRead) -> bool:
    """A run no process holds and none is launched for, that goes on and has work
    (CMD-NEXT-18, CMD-NEXT-20, CMD-NEXT-30), and whose last launch did not stop
    before its started row on files as they are now (`NextRead.launch_held`)."""
    if read.held or read.launching or read.process_tokens or read.launch_held:
        return False
    return read.run_state.state in RESUMABLE_STATES and not can_do_nothing(read)


def is_starting(read: NextRead) -> bool:
    """Whether the run's process is coming up (CMD-NEXT-24..26), has not yet passed
    over the steps an earlier process left, or has not yet bound the owner's line
    (CMD-NEXT-33). A process lock held while no run lock is is a holder coming up
    before it holds the run (or going away after it let it go)."""
    run = read.run_state
    if run.state == "ended":
        return False
    if read.launching:
        return True
    if not read.held:
        return bool(read.process_tokens)
    if run.processes == 0:
        return True
    if run.process is None:
        return bool(read.process_tokens)
    if run.process not in read.process_tokens or stale_steps(read):
        return True
    return binding_pending(read)


def stale_steps(read: NextRead) -> list[StepKey]:
    """The step files the holder has not passed over: older than its process lock."""
    if read.holder_since is None:
        return []
    return [key for key, mtime in read.step_times.items() if mtime < read.holder_since]


def binds_owner(read: NextRead) -> bool:
    """Whether the run's process binds an owner thread: a session run with an owner
    (an app-server run opens its own threads and has no owner to bind)."""
    return bool(read.owner) and read.run_state.backend == "session"


def line_is_holders(read: NextRead) -> bool:
    """Whether the owner's last line is the holder's: the open line of this run
    under the digest of the holder's started row (any digest when it pinned none)."""
    line = read.owner_line
    if line is None or line.get("kind") != "orchestrator" or line.get("run_id") != read.run:
        return False
    digest = read.run_state.policy_digest
    return digest is None or line.get("policyDigest") == digest


def binding_pending(read: NextRead) -> bool:
    """A holder that took its process lock less than STARTING_WINDOW_S ago and has
    not bound the owner's line under its started row's digest yet (CMD-NEXT-33):
    it binds right after that row, so next reads again; after the window the line
    is reported as it is (CMD-NEXT-34).

    Read here: an owner with no line at all (no flow-bound file: no start or
    process ever bound it, as when the run's start could not) is reported at once.
    """
    if read.holder_since is None or not binds_owner(read) or line_is_holders(read):
        return False
    if read.owner_line is None and read.owner_line_problem is None:
        return False
    return read.now - read.holder_since < STARTING_WINDOW_S * 1e9


def open_calls(run: RunState) -> list[str]:
    """The calls the rows leave without a terminal row: a process goes on with them."""
    return [call.call for call in run.calls.values() if call.state not in TERMINAL_ROWS]


def needs_ready_nodes(run: RunState) -> bool:
    """Whether only the workflow can tell if the run has work: it waits on a
    decision and has no open call."""
    return run.state == "waiting_decision" and not open_calls(run)


def can_do_nothing(read: NextRead) -> bool:
    """A run waiting on a decision whose every call ended, held or not, with no node
    the gate would admit: a process for it would write its started row and exit."""
    return (
        needs_ready_nodes(read.run_state) and read.ready_nodes is not None and not read.ready_nodes
    )


def step_key(step: StepFile) -> StepKey:
    """A step's call, k and attempt."""
    return step.call, step.k, step.attempt
