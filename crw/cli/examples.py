"""The examples crw ships in its package, `crw/examples`: the demo's workflows, the
workflow the docs walk through, a sample role store and the schemas they name.

They are package data, found through importlib.resources, so a checkout and an
installed wheel find them alike (the demo runs from any directory).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from crw.errors import InputError


def example(name: str) -> Path:
    """The file `name` (e.g. "demo.toml") of crw's examples, on the file system."""
    found = resources.files("crw") / "examples" / name
    if not isinstance(found, Path) or not found.is_file():
        raise InputError(
            f"crw's example {name} is missing ({found}); reinstall crw: "
            "pip install --force-reinstall crw-flow"
        )
    return found
