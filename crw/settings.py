"""Every duration and limit of a run, in one settings object.

Durations are seconds on Trio's clock, so a test under
`trio.testing.MockClock(autojump_threshold=0)` passes them in milliseconds. A
workflow sets any of them in its `[settings]` table (`crw.engine.config.settings_table`,
docs/timers.md); the start records them all in run.json, and every process of the
run uses what it recorded (`RunSpec.run_settings`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from crw.errors import InputError


@dataclass(frozen=True)
class Settings:
    """A run's timers and limits; the defaults are the spec's."""

    lost_after: float = 10 * 60
    """SessionConfig.LostAfter: an attempt unchanged this long on a dead thread is lost."""
    wake_after: float = 15 * 60
    """WakeAfter: the first renotification of waiting steps."""
    renotify_max: float = 60 * 60
    """RenotifyMax: renotification intervals double up to this."""
    unresponsive_after: float = 2 * 60 * 60
    """UnresponsiveAfter: the session_unresponsive escalation."""
    poll_interval: float = 2.0
    """How often a waiting call polls the host and rewrites an unwritten step."""
    host_poll_interval: float = 5.0
    """The HostReader's fallback poll of a waited thread; notifications wake it sooner."""
    host_timeout: float = 60.0
    """A host request unanswered this long makes the host HostUnavailable."""
    host_wait: float = 60 * 60
    """How long a run process that paused the run host_unavailable waits for the
    host to answer again, then goes on with it (`crw.actors.host_back`); 0: no wait."""
    unreachable_after: float = 60.0
    """A turn the host keeps retrying (`error {willRetry: true}`) this long with no
    model response is a host failure: the call is held (`crw.engine.answers.unreachable`)."""
    inbox_poll: float = 0.01
    """How often the run reads its inbox for dispatch reports (a directory listing)."""
    start_wait: float = 15.0
    """How long `start` waits for the run process to hold the run lock."""
    max_attempts: int = 3
    """The gate's attempt budget; past it the call is held attempts_exhausted."""
    answer_max_bytes: int = 1024 * 1024
    """The largest answer a call may give, in UTF-8 bytes; a larger one ends the call
    null_model (answer_too_large), unparsed and with no repair (`crw.engine.answers.answer`)."""
    trace: bool = False
    """SessionConfig.Trace: digests of P, the owner's checkout and the run's shared
    state at each bind and harvest, and a flow warning when they differ
    (`crw.workspace.trace`, docs/workspaces.md)."""

    @property
    def interrupted_settle(self) -> float:
        """How long a turn that reads interrupted with no error, its end not
        announced, must read so before it is believed ended: host_poll_interval,
        and never less than INTERRUPTED_SETTLE_MIN."""
        return max(self.host_poll_interval, INTERRUPTED_SETTLE_MIN)


INTERRUPTED_SETTLE_MIN = 1.0
"""The least time a turn's interrupted read with no error must last before it is
believed ended (`Settings.interrupted_settle`). codex shows a turn it has just
started as interrupted, no error, on an idle thread, until it sets the turn
running (11-25 ms seen on a loaded machine), and a completing turn so just
before its `turn/completed` (5-6 ms). A host_poll_interval set lower does not
make either moment an end. An end codex announces (`turn/completed`) or an error it
sends for the turn is believed at once; this waits only on a read alone."""


DEFAULT_SETTINGS = Settings()


MAX_FILE_BYTES_ENV = "CRW_MAX_FILE_BYTES"
"""The environment variable that raises (or lowers) the largest file crw reads."""
MAX_FILE_BYTES = 1 << 20
"""The largest workflow, role store, schema or input file read by default (1 MiB):
a guard against reading a wrong path's gigabytes, not a limit of the design (a
100,000-node workflow is some 8 MB)."""


_RECORDED_LIMIT: ContextVar[int | None] = ContextVar("crw_max_file_bytes", default=None)
"""The limit a started run records (run.json's max_file_bytes), while `file_limit` holds."""


def max_file_bytes(environ: Mapping[str, str]) -> int:
    """The largest file crw reads: the run's recorded limit inside `file_limit`,
    else `$CRW_MAX_FILE_BYTES` (bytes) when set, else MAX_FILE_BYTES. It is not a
    workflow's `[settings]` key, as the limit guards the read of the workflow itself.

    Raises:
        InputError: the variable is set to anything but a whole number of bytes
            of at least 1.
    """
    recorded = _RECORDED_LIMIT.get()
    if recorded is not None:
        return recorded
    given = environ.get(MAX_FILE_BYTES_ENV)
    if given is None or given == "":
        return MAX_FILE_BYTES
    try:
        value = int(given.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(
            f"{MAX_FILE_BYTES_ENV}={given!r} is not a number of bytes; "
            f"set it to a whole number such as {8 * MAX_FILE_BYTES}, or unset it"
        )
    return value


@contextlib.contextmanager
def file_limit(limit: int | None) -> Iterator[None]:
    """Read files up to `limit` bytes inside (None: as the environment says): a
    started run's processes read its files with the limit its start recorded,
    whatever shell they run in. Trio's tasks and worker threads started inside
    inherit it."""
    token = _RECORDED_LIMIT.set(limit)
    try:
        yield
    finally:
        _RECORDED_LIMIT.reset(token)
