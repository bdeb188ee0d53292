"""The state directory's default database, recorded by `crw flow init --db URL`.

`<state>/db.toml` holds `journal_db = "postgresql://..."`. A new run keeps its
journal in `--db`, else $CRW_DB, else this default, else its journal file; a
resume looks a run it has no directory of up in the same database.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path

from crw.errors import InputError
from crw.private import make_dirs, write_atomic

DEFAULT_DB = "db.toml"
MEMBER = "journal_db"


def default_db_path(state: Path) -> Path:
    return state / DEFAULT_DB


def read_default_db(state: Path) -> str | None:
    """The database `crw flow init --db` recorded for `state` (None: none).

    Raises:
        InputError: the file is there but holds no such URL.
    """
    path = default_db_path(state)
    try:
        found = tomllib.loads(path.read_text(encoding="utf-8")).get(MEMBER)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise InputError(
            f"{path} cannot be read ({err}); write it again with crw flow init --db URL"
        ) from err
    if not isinstance(found, str) or not found:
        raise InputError(
            f'{path} names no database ({MEMBER} = "postgresql://..."); '
            "write it again with crw flow init --db URL"
        )
    return found


def write_default_db(state: Path, url: str) -> Path:
    """Record `url` as `state`'s default database; the file written."""
    make_dirs(state)
    path = default_db_path(state)
    write_atomic(path, f"{MEMBER} = {json.dumps(url)}\n".encode())
    return path


def chosen_db(db: str | None, state: Path, environ: Mapping[str, str]) -> str | None:
    """The database of a new run: `db` (--db), else $CRW_DB, else `state`'s default."""
    return db or environ.get("CRW_DB") or read_default_db(state)
