"""When a step that cannot be written is recorded: the step_unwritten cadence.

A step whose packet or step file cannot be written was sent to nobody (STEP-30);
the run writes it again at each poll until it can or the turn ends (STEP-32). Its
record (STEP-34..36):

- the warning step_unwritten at the 1st, 10th, 100th, ... failure and at no other,
  with failures, first_at and last_at;
- after a warning, a closing step_unwritten with written: true when the step is
  finally written, or written: false when the turn ends with it unwritten.

The first failure always warns, so a step that failed even once gets a closing row.
This module only decides; the caller writes the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crw.engine.steps.markers import marker
from crw.journal.rows import StepAction, StepUnwritten


def is_warning_count(failures: int) -> bool:
    """Whether the `failures`-th failure writes a warning: 1, 10, 100, ... (STEP-34)."""
    if failures < 1:
        return False
    while failures % 10 == 0:
        failures //= 10
    return failures == 1


@dataclass
class UnwrittenTracker:
    """The failures to write one step, `call`/t`k`-a`attempt`; fed each failure and
    the step's end (written, or its turn over), it answers the row to write, if any.

    After a closing row it starts afresh: a later failure of the same step counts
    from 1 again.
    """

    call: str
    k: int
    attempt: int
    action: StepAction
    failures: int = field(default=0, init=False)
    first_at: str | None = field(default=None, init=False)
    last_at: str | None = field(default=None, init=False)
    error: str | None = field(default=None, init=False)

    def failed(self, at: str, error: str) -> StepUnwritten | None:
        """One more failure at `at`; the warning to write at the 1st, 10th, 100th, ..."""
        self.failures += 1
        self.first_at = self.first_at or at
        self.last_at = at
        self.error = error
        return self._row(None) if is_warning_count(self.failures) else None

    def written(self) -> StepUnwritten | None:
        """The step was written: the closing row (written: true) after any failure."""
        return self._close(written=True)

    def turn_ended(self) -> StepUnwritten | None:
        """The turn ended with the step unwritten: the closing row (written: false)
        after any failure."""
        return self._close(written=False)

    def _close(self, *, written: bool) -> StepUnwritten | None:
        if self.failures == 0:
            return None
        row = self._row(written)
        self.failures, self.first_at, self.last_at, self.error = 0, None, None, None
        return row

    def _row(self, written: bool | None) -> StepUnwritten:
        return StepUnwritten(
            call=self.call,
            marker=marker(self.call, self.k, self.attempt),
            k=self.k,
            attempt=self.attempt,
            action=self.action,
            input_state="not_delivered",
            error=self.error,
            failures=self.failures,
            first_at=self.first_at,
            last_at=self.last_at,
            written=written,
        )
