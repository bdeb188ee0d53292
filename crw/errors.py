"""The exceptions a user can meet. Each carries one line: what, where, what to do.

The CLI maps `InputError` to exit 2 and `RefusedError` to exit 1.
"""

from __future__ import annotations


class CrwError(Exception):
    """Base of crw's own errors; `str(err)` is the one line shown to the user."""


class InputError(CrwError):
    """Bad input from the user (a malformed file, an unknown run): exit 2."""


class RefusedError(CrwError):
    """The request was understood and refused, or failed: exit 1."""
