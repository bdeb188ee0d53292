"""Which database `crw flow list` lists the runs of, besides the state directory's.

`--db URL` names it; `--db` alone takes the database a new run would keep its
journal in (`$CRW_DB`, else the state directory's default from `crw flow init
--db`), as start, import and resume do; no `--db`: `$CRW_DB` when set, else none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from crw.cli.default_db import chosen_db
from crw.errors import InputError


def bare_db(tokens: Sequence[str]) -> list[str]:
    """`crw flow list`'s command line with a `--db` that no URL follows (the last
    token, or an option next) as `--db=`: its value the database chosen for it."""
    out = list(tokens)
    if out[:2] != ["flow", "list"]:
        return out
    for at, token in enumerate(out):
        if token == "--":
            break
        if token == "--db" and (at + 1 == len(out) or out[at + 1].startswith("-")):
            out[at] = "--db="
    return out


def listed_db(db: str | None, state: Path, environ: Mapping[str, str]) -> str | None:
    """The database whose runs list shows: `db` (--db's URL; "" for `--db` alone:
    $CRW_DB, else `state`'s default), else $CRW_DB; None: none.

    Raises:
        InputError: `--db` alone, and no database is named anywhere.
    """
    if db is None:
        return environ.get("CRW_DB") or None
    url = chosen_db(db or None, state, environ)
    if url is None:
        raise InputError(
            "crw flow list --db names no database: give it one (--db postgresql://USER@HOST/DB), "
            "set CRW_DB, or record the state directory's with crw flow init --db URL"
        )
    return url
