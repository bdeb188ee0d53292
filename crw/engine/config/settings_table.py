"""The workflow file's `[settings]` table: a run's timers and limits, validated.

    [settings]
    lost_after = 30        # seconds
    max_attempts = 5

Every key is a field of `crw.settings.Settings`; a key left out keeps its
default. A duration is a positive number of seconds (`host_wait` 0 or more: 0
turns the wait off), `max_attempts` and
`answer_max_bytes` positive whole numbers, `trace` (SessionConfig.Trace) true or
false. A refusal is the workflow's one line (`<file>:<line>: [settings]: <what>; <fix>`).
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from crw.engine.config._tomlsource import crw_error
from crw.settings import Settings

KEYS = tuple(field.name for field in fields(Settings))
"""The keys `[settings]` knows, in the order docs/timers.md lists them."""
_WHOLE = {"max_attempts": 3, "answer_max_bytes": 1048576}
"""The keys that are whole numbers, each with the example its refusal gives."""
_ZERO_OFF = {"host_wait": 3600}
"""The durations 0 turns off, each with the example its refusal gives."""


class SettingsTable(BaseModel):
    """`[settings]`: each key optional, each value positive."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lost_after: float | None = None
    wake_after: float | None = None
    renotify_max: float | None = None
    unresponsive_after: float | None = None
    poll_interval: float | None = None
    host_poll_interval: float | None = None
    host_timeout: float | None = None
    host_wait: float | None = None
    unreachable_after: float | None = None
    inbox_poll: float | None = None
    start_wait: float | None = None
    max_attempts: int | None = None
    answer_max_bytes: int | None = None
    trace: bool | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: Any) -> Any:
        key = info.field_name
        if key == "trace":
            if not isinstance(value, bool):
                shown = json.dumps(value, default=str)
                raise crw_error(f"trace = {shown} is not true or false", "write it as trace = true")
            return value
        whole = key in _WHOLE
        kind = "a whole number" if whole else "a number of seconds"
        example = f"{key} = {_WHOLE[key]}" if whole else f"{key} = 30"
        if isinstance(value, bool) or not isinstance(value, int | float):
            shown = json.dumps(value, default=str)
            raise crw_error(f"{key} = {shown} is not {kind}", f"write it as {example}")
        if whole and not isinstance(value, int):
            raise crw_error(f"{key} = {value} is not {kind}", f"write it as {example}")
        if key in _ZERO_OFF:
            if value < 0:
                raise crw_error(
                    f"{key} = {value} is negative",
                    f"give it 0 (no wait) or above, as {key} = {_ZERO_OFF[key]}",
                )
            return value
        if value <= 0:
            raise crw_error(f"{key} = {value} is not positive", f"give it above 0, as {example}")
        return value

    def settings(self) -> Settings:
        """The run's settings: the defaults, with the keys the table sets."""
        return Settings(**self.model_dump(exclude_none=True))
