"""The task name a spawn step gives its subagent on codex's multi-agent v2.

On v2 the owner names each child (`spawn_agent(task_name, message, ...)`) and
codex addresses it by path, `/root/<task_name>`; the task reaches the child as no
user message, so its marker cannot be read on the host (docs/host.md, "Multi-agent
v2"). The name carries the step instead: `crw_<h>_<marker tail>`, where `<h>` is
the first 12 hex digits of sha256 over the run and the marker, and the tail is the
marker lowercased with every character outside `[a-z0-9]` written `_`, cut to 40
characters. It is a pure function of the step's row, so the run, a resumed process
and `next` compute the same one; the digest tells two runs on one owner (the same
markers) apart, and markers the tail would blur. Codex takes `[a-z0-9_]` only and
refuses a second child of a name its tree holds (`agent path ... already exists`).
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "crw_"
DIGEST_HEX = 12
TAIL_MAX = 40
ROOT = "/root/"
"""The owner's path; a child of it is `/root/<task_name>`."""

_OUTSIDE = re.compile(r"[^a-z0-9]")
_NAME = re.compile(rf"{PREFIX}[0-9a-f]{{{DIGEST_HEX}}}_[a-z0-9_]{{1,{TAIL_MAX}}}")


def task_name(run: str, marker: str) -> str:
    """The v2 task name of the step `marker` (`<call>/t<k>-a<n>`) of `run`."""
    digest = hashlib.sha256(f"{run}\n{marker}".encode()).hexdigest()[:DIGEST_HEX]
    tail = _OUTSIDE.sub("_", marker.lower())[:TAIL_MAX]
    return f"{PREFIX}{digest}_{tail}"


def agent_path(name: str) -> str:
    """The path codex gives the owner's child `name`: `/root/<name>`."""
    return f"{ROOT}{name}"


def name_of_path(path: str | None) -> str | None:
    """The task name of an owner's child path `/root/<name>` that is a crw name, else None."""
    if path is None or not path.startswith(ROOT):
        return None
    name = path[len(ROOT) :]
    return name if _NAME.fullmatch(name) else None
