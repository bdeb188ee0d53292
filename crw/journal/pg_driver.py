"""psycopg imported without `importlib.metadata`: imported, this module makes that so.

psycopg's `version` module and psycopg-binary's ask `importlib.metadata` for their
distribution's version when they are imported: that module and what it loads
(email, zipfile, csv, ...) are a tenth of `import psycopg`'s cost, paid by every
command that reads a run in the database (`list --db`, `status`). Before psycopg
is first imported, both modules are put in place holding the version their
distribution's `.dist-info` directory names, found beside the package, as
`importlib.metadata` would find it (`0.0.0.0` where none is, as psycopg says
then). Nothing in psycopg reads the version but for its messages.

Every module of the store that imports psycopg imports this one first
(`crw.journal.postgres` does, and the store's other modules import it).
"""

from __future__ import annotations

import os
import sys
import types
from importlib.util import find_spec

_VERSIONS = (("psycopg", "psycopg"), ("psycopg_binary", "psycopg_binary"))
"""Each package whose `version` module asks importlib.metadata, and its
distribution's name as its `.dist-info` directory spells it."""


def _dist_version(site: str, dist: str) -> str:
    """The version `<site>/<dist>-VERSION.dist-info` names (`0.0.0.0`: none)."""
    try:
        names = os.listdir(site)
    except OSError:
        return "0.0.0.0"
    for name in names:
        if name.startswith(f"{dist}-") and name.endswith(".dist-info"):
            return name[len(dist) + 1 : -len(".dist-info")]
    return "0.0.0.0"


def _put_versions() -> None:
    if "psycopg" in sys.modules:
        return  # imported already: its version modules are there
    for package, dist in _VERSIONS:
        name = f"{package}.version"
        spec = find_spec(package) if name not in sys.modules else None
        if spec is None or spec.origin is None:
            continue  # not installed: its import fails as it would
        module = types.ModuleType(name)
        site = os.path.dirname(os.path.dirname(spec.origin))
        module.__version__ = _dist_version(site, dist)  # type: ignore[attr-defined]
        sys.modules[name] = module


_put_versions()
