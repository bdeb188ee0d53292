"""The exceptions a user can meet. Each carries one line: what, where, what to do.

The CLI maps `InputError` to exit 2 and `RefusedError` to exit 1.
"""

from __future__ import annotations

from typing import Any


class CrwError(Exception):
    """Base of crw's own errors; `str(err)` is the one line shown to the user."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.members: dict[str, Any] = {}
        """What the error's JSON object (`--json`) carries besides `error` and
        `fix`: what a script needs to act on it (the entry to add by hand)."""


class InputError(CrwError):
    """Bad input from the user (a malformed file, an unknown run): exit 2."""


class RefusedError(CrwError):
    """The request was understood and refused, or failed: exit 1."""
