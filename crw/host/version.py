"""Which host a run talks to, in words the start preview shows: `codex 0.169.0`, or
the simulated host. Read off what the host says of itself (its `initialize`
answer's `userAgent`) or, for a private `codex` child not yet started, what its
binary says (`codex --version`). See docs/host.md, "codex versions".
"""

from __future__ import annotations

import subprocess

SIM_AGENT = "crw-sim"
"""The product name the simulated host's userAgent begins with."""
VERSION_TIMEOUT = 5.0
"""Seconds `codex --version` may take (it prints at once; a hung binary costs this)."""


def host_version(user_agent: object) -> str | None:
    """The host named from its `userAgent`: codex's is `<client>/<codex version>
    (<os>; <arch>) …` (the client's name, then the version of the codex that
    answers), the simulated host's `crw-sim/<the codex it mirrors>`. None: there is
    none; an agent of another shape is named as it is."""
    if not isinstance(user_agent, str) or not user_agent.strip():
        return None
    product = user_agent.split()[0]
    name, _, version = product.partition("/")
    if name == SIM_AGENT:
        return f"the simulated host (crw host sim, as codex {version})"
    return f"codex {version}" if version else " ".join(user_agent.split())


def binary_version(binary: str) -> str | None:
    """`codex 0.169.0` from `<binary> --version` (`codex-cli 0.169.0`); None when it
    cannot be run or says something else."""
    try:
        done = subprocess.run(
            [binary, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2 or not words[0].startswith("codex"):
        return None
    return f"codex {words[1]}"
