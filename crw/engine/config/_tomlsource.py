"""Where a key sits in a TOML text, and how its parse errors read as one line.

The parser (tomli: TOML 1.1, compiled; a 10,000-node workflow in a third of the
standard library tomllib's time) gives a line only for syntax errors; a value
that parses and is wrong (an unknown role, a cycle in needs) has none.
`TomlSource` scans the text once and maps each key path to the line that writes
it, the way pydantic names a location: `("node", 2, "needs")` is the `needs =`
line of the third `[[node]]` table. The scan follows strings (single- and
multi-line), comments and multi-line arrays and inline tables, so a `[` inside a
value is never read as a header; keys inside an inline table share the line of
the key that opens it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli
from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from crw.errors import InputError
from crw.settings import MAX_FILE_BYTES_ENV, max_file_bytes

Loc = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def one_line(file: str, line: int | None, what: str, fix: str) -> InputError:
    """The error a user meets: `<file>:<line>: <what>; <fix>` (no line when none)."""
    shown = json.dumps(file) if any(ord(c) < 32 or c == "\x7f" for c in file) else file
    where = shown if line is None else f"{shown}:{line}"
    return InputError(f"{where}: {what}; {fix}")


_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
"""crw's examples, installed with its modules (package data)."""


def _missing_fix(path: Path) -> str:
    """How to find a file not there: `crw/examples/…` the docs name is a copy away."""
    if path.parts[:2] == ("crw", "examples") and _EXAMPLES.joinpath(*path.parts[2:]).is_file():
        return (
            "copy crw's examples here first (they are installed with crw, not in this "
            f"directory): mkdir -p crw && cp -r {shlex.quote(str(_EXAMPLES))} crw/"
        )
    return "check the path"


def read_toml(path: Path, what: str) -> tuple[bytes, str, dict[str, Any]]:
    """Read a TOML file: its bytes, its text and its table.

    Raises:
        InputError: the file cannot be read, is not UTF-8 or is not valid TOML;
            a syntax error keeps the parser's line and column.
    """
    file = str(path)
    try:
        data = read_regular_file(path, what)
    except FileNotFoundError:
        raise one_line(file, None, f"no {what} file here", _missing_fix(path)) from None
    except UnreadableFile as err:
        raise one_line(file, None, err.what, err.fix) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise one_line(
            file, line, f"not UTF-8 text (byte {err.start})", "save it as UTF-8"
        ) from None
    try:
        table = tomli.loads(text)
    except tomli.TOMLDecodeError as err:
        raise _syntax_error(file, text, err) from None
    except RecursionError:
        raise one_line(
            file, None, "invalid TOML: nested too deeply", "flatten the values"
        ) from None
    return data, text, table


class UnreadableFile(Exception):
    """A file that is not read: `what` went wrong, `fix` is what to do."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.what = what
        self.fix = fix


def read_regular_file(path: Path, what: str) -> bytes:
    """The bytes of the regular file at `path` (a `what`), at most `max_file_bytes`
    (1 MiB unless `$CRW_MAX_FILE_BYTES` says otherwise).

    The file is opened without blocking and checked before it is read, so a FIFO,
    a device such as /dev/zero or a directory is refused at once, not read forever.

    Raises:
        FileNotFoundError: there is no file at `path`.
        UnreadableFile: not a regular file, too large, or unreadable.
        InputError: `$CRW_MAX_FILE_BYTES` is not a number of bytes.
    """
    limit = max_file_bytes(os.environ)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        raise UnreadableFile(f"cannot read the {what}: {reason}", "check the path") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise UnreadableFile(f"the {what} is not a regular file", "give a file's path")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise UnreadableFile(f"cannot read the {what}: {err.strerror}", "check the path") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnreadableFile(
            f"the {what} is larger than {limit} bytes",
            f"make it smaller, or set {MAX_FILE_BYTES_ENV}={max(status.st_size, len(data))}"
            " (bytes) or more",
        )
    return data


def _syntax_error(file: str, text: str, err: tomli.TOMLDecodeError) -> InputError:
    message = str(err).splitlines()[0] if str(err) else "cannot parse"
    found = _TOML_POSITION.search(message)
    if found is None:
        line = text.count("\n") + 1
        fix = "fix the TOML syntax near the end of the file"
    else:
        line, column = int(found.group(1)), int(found.group(2))
        message = message[: found.start()]
        fix = f"fix the TOML syntax at line {line}, column {column}"
    return one_line(file, line, f"invalid TOML: {message}", fix)


class TomlSource:
    """The line of each key and table header of a TOML text (1-based)."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Loc, int] = {}
        self._counts: dict[Loc, int] = {}
        self._multiline: str | None = None
        self._depth = 0
        table: Loc = ()
        for number, line in enumerate(text.split("\n"), 1):
            if self._multiline is not None or self._depth > 0:
                self._scan_value(line, 0)
                continue
            stripped = line.lstrip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("["):
                is_array = stripped.startswith("[[")
                parts, _ = _parse_key(stripped, 2 if is_array else 1)
                table = self._open_table(parts, is_array, number)
                continue
            parts, end = _parse_key(stripped, 0)
            if parts and stripped[end : end + 1] == "=":
                for n in range(1, len(parts) + 1):
                    self._note((*table, *parts[:n]), number)
                self._scan_value(stripped, end + 1)

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        """The line of `loc`, else of its nearest enclosing key, else None."""
        for n in range(len(loc), 0, -1):
            line = self._lines.get(tuple(loc[:n]))
            if line is not None:
                return line
        return None

    def _note(self, loc: Loc, line: int) -> None:
        self._lines.setdefault(loc, line)

    def _open_table(self, parts: list[str], is_array: bool, line: int) -> Loc:
        where: Loc = ()
        for i, part in enumerate(parts):
            where = (*where, part)
            if is_array and i == len(parts) - 1:
                index = self._counts.get(where, 0)
                self._counts[where] = index + 1
                self._note(where, line)
                where = (*where, index)
            elif where in self._counts:
                where = (*where, self._counts[where] - 1)
            self._note(where, line)
        return where

    def _scan_value(self, line: str, i: int) -> None:
        """Follow one line of a value: strings, comments, bracket depth."""
        n = len(line)
        while i < n:
            if self._multiline is not None:
                i = self._scan_multiline(line, i)
                continue
            char = line[i]
            if char == "#":
                return
            if line.startswith('"""', i) or line.startswith("'''", i):
                self._multiline = line[i : i + 3]
                i += 3
            elif char == '"':
                i = _skip_basic(line, i + 1)
            elif char == "'":
                end = line.find("'", i + 1)
                i = n if end < 0 else end + 1
            else:
                if char in "[{":
                    self._depth += 1
                elif char in "]}":
                    self._depth = max(0, self._depth - 1)
                i += 1

    def _scan_multiline(self, line: str, i: int) -> int:
        assert self._multiline is not None
        delimiter = self._multiline
        while i < len(line):
            if delimiter == '"""' and line[i] == "\\":
                i += 2
            elif line.startswith(delimiter, i):
                i += 3
                while i < len(line) and line[i] == delimiter[0]:
                    i += 1
                self._multiline = None
                return i
            else:
                i += 1
        return i


def _skip_basic(line: str, i: int) -> int:
    while i < len(line):
        if line[i] == "\\":
            i += 2
        elif line[i] == '"':
            return i + 1
        else:
            i += 1
    return i


def _parse_key(text: str, i: int) -> tuple[list[str], int]:
    """A dotted key from `text[i:]`: its parts and the index after it and its spaces."""
    parts: list[str] = []
    while True:
        while i < len(text) and text[i] in " \t":
            i += 1
        if text.startswith('"', i):
            end = _skip_basic(text, i + 1)
            parts.append(text[i + 1 : end - 1])
            i = end
        elif text.startswith("'", i):
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            parts.append(text[i + 1 : end])
            i = end + 1
        else:
            bare = _BARE_KEY.match(text, i)
            if bare is None:
                return parts, i
            parts.append(bare.group())
            i = bare.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if not text.startswith(".", i):
            return parts, i
        i += 1


def crw_error(what: str, fix: str) -> PydanticCustomError:
    """A validator's refusal that keeps its own what and fix through pydantic."""
    return PydanticCustomError("crw", "{what}; {fix}", {"what": what, "fix": fix})


_TYPE_NAMES = {
    "int_type": "an integer",
    "string_type": "a string",
    "list_type": "an array",
    "tuple_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def validation_error(
    file: str,
    source: TomlSource,
    err: ValidationError,
    context: Callable[[Loc], tuple[str, Sequence[str]]],
    prefix: Loc = (),
    missing: Mapping[str, tuple[str, str]] | None = None,
) -> InputError:
    """The error pydantic found first in the file, as one line at the line of its key.

    An error's location is `prefix` + pydantic's; of several, the one on the
    earliest line is told, a missing key (which has no line of its own) last.
    `context(loc)` names the table that holds the key ("node 'build'", "" for
    the top level) and the keys that table knows; `missing` gives the what and
    fix for a missing key.
    """
    located = [((*prefix, *error["loc"]), error) for error in err.errors()]
    lines = [source.line_of(loc) for loc, _ in located]
    best = min(
        range(len(located)),
        key=lambda i: (located[i][1]["type"] == "missing", lines[i] is None, lines[i] or 0),
    )
    loc, error = located[best]
    where, known = context(loc)
    key = next((part for part in reversed(loc) if isinstance(part, str)), "")
    if error["type"] == "missing" and missing and key in missing:
        what, fix = missing[key]
    else:
        what, fix = _describe(error, key, known)
    return one_line(file, lines[best], f"{where}: {what}" if where else what, fix)


def _describe(error: ErrorDetails, key: str, known: Sequence[str]) -> tuple[str, str]:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    shown = f"{key} = {_show(error['input'])}"
    if kind == "crw":
        return str(ctx["what"]), str(ctx["fix"])
    if kind == "extra_forbidden":
        return f"unknown key '{key}'", f"remove it or use one of: {', '.join(known)}"
    if kind == "missing":
        return f"no {key}", f"add {key} = ..."
    if kind == "literal_error":
        return f"{shown} is unknown", f"use one of {ctx['expected']}"
    if kind in _TYPE_NAMES:
        return f"{shown} is not {_TYPE_NAMES[kind]}", f"write {key} as {_TYPE_NAMES[kind]}"
    if kind == "greater_than_equal":
        return f"{shown} is below {ctx['ge']}", f"use {ctx['ge']} or more"
    message = error["msg"][:1].lower() + error["msg"][1:]
    return f"{shown}: {message}", f"fix {key}"


def _show(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
