"""Setting a database up for runs' journals (`crw flow init --db URL`): connect,
check the server, create the tables where missing, and check the role may use them.

Every failure is a `SetupError`: one line saying what failed where, and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crw.journal.postgres import TABLES, connect, create_schema, where

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]

MIN_VERSION = 130000
"""The oldest server taken (PostgreSQL 13): every statement the store sends runs there."""
_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


class SetupError(Exception):
    """The database is not ready for journals: `str()` what and where, `fix` what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Server:
    """What the set-up found: the server's version, the commit's durability on the
    store's connections, whether the server flushes to disk at all."""

    where: str
    version: str
    synchronous_commit: str
    fsync: bool


def set_up(url: str) -> Server:
    """Check the server at `url` and create the journal's tables where missing
    (idempotent).

    Raises:
        SetupError: the database cannot be reached, is too old, commits without
            waiting for the disk, or the role may not create or use the tables.
    """
    import psycopg

    here = where(url)
    try:
        conn = connect(url)
    except OSError as err:
        raise SetupError(
            str(err.strerror), "start the database, or fix the URL (user, host, port, database)"
        ) from err
    with conn:
        try:
            version_num = int(_show(conn, "server_version_num"))
            version = _show(conn, "server_version")
            durability = _show(conn, "synchronous_commit")
            fsync = _show(conn, "fsync") == "on"
        except psycopg.Error as err:
            raise SetupError(f"could not ask the {here} its settings: {err}", "check it") from err
        if version_num < MIN_VERSION:
            raise SetupError(
                f"the {here} is PostgreSQL {version}, older than 13",
                "use PostgreSQL 13 or later",
            )
        if durability == "off":
            raise SetupError(
                f"the {here} keeps synchronous_commit {durability} on the journal's connections "
                "(a pooler that drops the connection's options?)",
                "connect to the server itself, or set synchronous_commit = on for the role",
            )
        try:
            create_schema(conn)
        except psycopg.errors.InsufficientPrivilege as err:
            raise SetupError(
                f"the role of the URL may not create the journal's tables in the {here}: "
                f"{_first(err)}",
                "have the database's owner run crw flow init --db once, or GRANT CREATE ON "
                "SCHEMA public to the role",
            ) from err
        except psycopg.Error as err:
            raise SetupError(
                f"could not create the tables in the {here}: {_first(err)}", "check it"
            ) from err
        missing = [table for table in TABLES if not _may_use(conn, table)]
        if missing:
            raise SetupError(
                f"the role of the URL may not use {', '.join(missing)} in the {here}",
                f"GRANT {', '.join(_PRIVILEGES)} ON {', '.join(missing)} TO the role",
            )
    return Server(here, version, durability, fsync)


def _show(conn: Conn, name: str) -> str:
    found = conn.execute(f"SHOW {name}".encode()).fetchone()
    return str(found[0]) if found is not None else ""


def _may_use(conn: Conn, table: str) -> bool:
    found = conn.execute(
        b"SELECT bool_and(has_table_privilege(current_user, %s, p)) FROM unnest(%s::text[]) AS p",
        (table, list(_PRIVILEGES)),
    ).fetchone()
    return found is not None and bool(found[0])


def _first(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
