"""One statement through psycopg's libpq wrapper alone (`psycopg.pq`), for the
commands that read runs cold: `list --db`, and `status` of a run in the database
(its read, and the snapshot it keeps).

`import psycopg` loads every module of the package (its connections sync and
async, cursors, adapters of every type, the copy and pipeline machinery): some
200 M of the 400 M instructions it costs, which a command that sends one query
and reads a few bytea, text and bigint columns does not need. `psycopg.pq` is
psycopg's own libpq binding (the binary package's C extension), importable
without the rest once the package's module is in place but not run: `_pq` puts
it there (`importlib`'s spec of the package, its `__init__` not run) and imports
`psycopg.pq` under it. The package's `__init__` runs as soon as anything asks
the package for a name it does not hold yet (`psycopg.connect`, `from psycopg
import Connection`): a later `import psycopg` in the process gets the whole
package, whose submodules are the ones already loaded. psycopg.pq still loads
asyncio (`psycopg.errors` imports its CancelledError) and typing_extensions.

The statement's parameters are sent as text, bytes as binary (the server infers
their types), and its columns come back in binary: bytea as its bytes, text as
UTF-8, bigint as eight bytes big-endian, boolean as one byte; NULL as None.
"""

from __future__ import annotations

import errno
import sys
import threading
from collections.abc import Sequence
from importlib.util import find_spec, module_from_spec
from types import ModuleType
from typing import Any

from crw.journal import pg_driver  # noqa: F401  (psycopg without importlib.metadata)
from crw.journal.store import StoreError

UNDEFINED_TABLE = b"42P01"
_COMMAND_OK = 1  # psycopg.pq.ExecStatus.COMMAND_OK
_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK
_CONNECTION_OK = 0  # psycopg.pq.ConnStatus.OK
_BINARY = 1
_lock = threading.RLock()
_pq_importer: int | None = None
"""The thread importing psycopg.pq under the package not run: a name the package
lacks, asked by it, is a submodule the import system is to load, not a reason to
run the package (another thread asking waits for the import, then runs it)."""


class UndefinedTable(Exception):
    """The query named a table the database does not have (no run wrote there yet)."""


def _lazy_package(name: str) -> ModuleType:
    """The package `name` in sys.modules, its `__init__` run on the first name asked
    of it that it does not hold."""
    spec = find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    package = module_from_spec(spec)
    loader = spec.loader

    def __getattr__(attr: str) -> Any:
        if _pq_importer == threading.get_ident():
            raise AttributeError(attr)
        with _lock:
            if "__getattr__" in package.__dict__:
                del package.__dict__["__getattr__"]
                loader.exec_module(package)
        return getattr(package, attr)

    package.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = package
    return package


def _pq() -> ModuleType:
    """psycopg.pq, the rest of psycopg loaded only if it was already."""
    global _pq_importer
    with _lock:
        if "psycopg" not in sys.modules:
            _lazy_package("psycopg")
        _pq_importer = threading.get_ident()
        try:
            import psycopg.pq
        finally:
            _pq_importer = None
    return psycopg.pq


def where(url: str) -> str:
    """The database `url` names, for a message: its host and name, never its password."""
    try:
        found = {o.keyword: o.val for o in _pq().Conninfo.parse(url.encode())}
    except Exception:
        return "a PostgreSQL database"
    name, user, host = (found.get(k) for k in (b"dbname", b"user", b"host"))
    shown = (name or user or b"?").decode(errors="replace")
    return f"PostgreSQL database {shown} on {(host or b'localhost').decode(errors='replace')}"


def query(
    url: str, sql: str, params: Sequence[str | bytes | None], what: str
) -> list[list[bytes | None]]:
    """The rows of `sql` (`$1`... its parameters: a str sent as text, bytes as a
    bytea's binary) on the database at `url`: each row's columns as the server
    sends them in binary (none for a statement that returns no row); `what` names
    the read or write in a message.

    Raises:
        UndefinedTable: a table it names is not there.
        OSError: the database cannot be reached or read.
    """
    pq = _pq()
    conn = pq.PGconn.connect(url.encode())
    try:
        if conn.status != _CONNECTION_OK:
            raise _error(url, "connect to", conn.error_message)
        values = [p.encode() if isinstance(p, str) else p for p in params]
        formats = [_BINARY if isinstance(p, bytes) else 0 for p in params]
        result = conn.exec_params(sql.encode(), values, None, formats, result_format=_BINARY)
        if result.status not in (_TUPLES_OK, _COMMAND_OK):
            if result.error_field(pq.DiagnosticField.SQLSTATE) == UNDEFINED_TABLE:
                raise UndefinedTable
            raise _error(url, what, result.error_message)
        columns = range(result.nfields)
        rows = [[result.get_value(r, c) for c in columns] for r in range(result.ntuples)]
        result.clear()
        return rows
    finally:
        conn.finish()


def _error(url: str, what: str, message: bytes) -> StoreError:
    text = message.decode(errors="replace").strip()
    first = text.splitlines()[0] if text else "no answer"
    return StoreError(
        errno.EIO,
        f"could not {what} the {where(url)}: {first}",
        "check that the database is up and reachable at its URL",
    )


def as_int(value: bytes | None) -> int | None:
    """A bigint column's value (None: NULL)."""
    return None if value is None else int.from_bytes(value, "big", signed=True)


def as_text(value: bytes | None) -> str | None:
    """A text column's value (None: NULL)."""
    return None if value is None else value.decode()


def as_bool(value: bytes | None) -> bool:
    """A boolean column's value (NULL: False)."""
    return value == b"\x01"
