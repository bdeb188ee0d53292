"""This machine's name in the runs table and the lease its writers take: the two
settings of a run kept in a database that the machine, not the run, decides."""

from __future__ import annotations

import os
import socket

LEASE_SECONDS = 60.0
"""How long a writer's lease lasts past its last commit or renewal, by default:
another machine may take the run once it lapsed (the writer's machine takes it
back at once). $CRW_LEASE_SECONDS sets another (`lease_seconds`)."""


def machine_id() -> str:
    """This machine's name in the runs table: $CRW_MACHINE, else the host name."""
    return os.environ.get("CRW_MACHINE") or socket.gethostname()


def lease_seconds() -> float:
    """The lease a writer takes and renews: $CRW_LEASE_SECONDS (a positive number of
    seconds), else LEASE_SECONDS; a value that is no such number is LEASE_SECONDS."""
    given = os.environ.get("CRW_LEASE_SECONDS", "")
    try:
        seconds = float(given)
    except ValueError:
        return LEASE_SECONDS
    return seconds if 0 < seconds < float("inf") else LEASE_SECONDS
