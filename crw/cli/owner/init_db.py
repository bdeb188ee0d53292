"""`crw flow init --db URL`: the database a state directory's runs keep their
journals in, set up and recorded as the state's default.

The URL is checked (PostgreSQL's), the server asked (its version, the commit's
durability on the store's connections, fsync), the tables made where missing
(idempotent) and the role's rights on them checked; only then is the URL
recorded in `<state>/db.toml`, which `start` takes when neither --db nor $CRW_DB
is given. A failure is one line, what and where and the fix, and records nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crw.cli.default_db import write_default_db
from crw.errors import RefusedError
from crw.journal.stores import check_db_url


def check_database(url: str) -> dict[str, Any]:
    """Set the database at `url` up for journals; what `init` reports of it.

    Raises:
        InputError: not a PostgreSQL URL.
        RefusedError: the database is not ready (unreachable, too old, commits not
            durable, the role lacks a right).
    """
    check_db_url(url)
    from crw.journal.pg_setup import SetupError, set_up
    from crw.journal.postgres import TABLES

    try:
        server = set_up(url)
    except SetupError as err:
        raise RefusedError(f"{err}; {err.fix}, then run crw flow init --db again") from err
    return {
        "where": server.where,
        "server_version": server.version,
        "synchronous_commit": server.synchronous_commit,
        "fsync": server.fsync,
        "tables": list(TABLES),
    }


def record_database(state: Path, url: str, found: dict[str, Any]) -> dict[str, Any]:
    """Record `url` as `state`'s default database; the payload's `db` member."""
    return found | {"default": str(write_default_db(state, url))}


def database_lines(db: dict[str, Any]) -> list[str]:
    lines = [
        f"database: the {db['where']} (PostgreSQL {db['server_version']}, synchronous_commit "
        f"{db['synchronous_commit']}): tables {', '.join(db['tables'])} ready; new runs keep "
        f"their journals there (recorded in {db['default']})"
    ]
    if not db["fsync"]:
        lines.append(
            "  the server runs with fsync off: a row it acknowledged may be lost in a power "
            "loss; set fsync = on in its postgresql.conf"
        )
    return lines


def kept_store_line(path: Path) -> str:
    return f"kept the role store {path} (pass --force to write it anew)"
