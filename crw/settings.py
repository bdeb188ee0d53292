"""Every duration and limit of a run, in one settings object.

Durations are seconds on Trio's clock, so a test under
`trio.testing.MockClock(autojump_threshold=0)` passes them in milliseconds. A
workflow sets any of them in its `[settings]` table (`crw.engine.config.settings_table`,
docs/timers.md); the start records them all in run.json, and every process of the
run uses what it recorded (`RunSpec.run_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass


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


DEFAULT_SETTINGS = Settings()
