"""What starting a simulated host costs before it serves: the modules it imports."""

from __future__ import annotations

import subprocess
import sys


def test_serving_imports_neither_pytest_nor_pygit2_nor_jsonschema() -> None:
    """pytest (through trio.testing, for in-memory tests) and pygit2 (for a script's
    commit) cost a fresh host a fifth of a second of CPU before its first request;
    jsonschema (for a script's invalid first answer) another 0.07 s."""
    code = (
        "import sys, crw.host.sim.serve; "
        "print(sorted({'pytest', 'pygit2', 'jsonschema'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
